#!/usr/bin/env bash
# Storage benchmark: one Maildir++ folder of 100,000 messages through the
# whole store (maildir driver, fileindex, dovecot-uidlist), release build.
#
#   bench/storage.sh                 # COUNT=100000, files under a temp dir
#   COUNT=20000 KEEP=1 BENCH_DIR=/var/tmp/sb bench/storage.sh
#
# 1. bench/storage-bench populate: the message files are written straight
#    into cur/ with Dovecot-style names (S=/W=), no index.
# 2. bench/storage-bench run: first open (index built from the files), index
#    rebuild (target < 3 s), open + folder info on the fresh index (target
#    < 50 ms), open + every record, sync of 10 % flag changes made by another
#    program, expunge of those 10 %, opens afterwards.
# 3. bench/storage-bench mem: RSS growth of a fresh process opening the
#    folder, per message (target < 64 bytes).
# 4. A release petreld on the same home: POST /api/backend/folder/info timed
#    with curl (first request, then the median of 15 on the warm daemon) and
#    index/rebuild's own duration_ms.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${PETREL_BUILD:-$ROOT/build-release}"
COUNT="${COUNT:-100000}"
FSYNC="${FSYNC:-always}"

if [ ! -d "$BUILD" ]; then
  meson setup "$BUILD" --buildtype=release >/dev/null
fi
ninja -C "$BUILD" petreld bench/storage-bench >/dev/null

DIR="${BENCH_DIR:-$(mktemp -d /tmp/petrel-storage-bench-XXXXXX)}"
PID=""
cleanup() {
  if [ -n "$PID" ]; then
    kill "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
  fi
  if [ "${KEEP:-0}" != 1 ]; then
    rm -rf "$DIR"
  fi
}
trap cleanup EXIT

echo "== machine"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') x $(nproc)"
echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
echo "kernel: $(uname -sr); filesystem of $DIR: $(stat -f -c %T "$DIR")"
echo "build: $BUILD ($(meson introspect --buildoptions "$BUILD" 2>/dev/null |
  python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="buildtype"))' 2>/dev/null || echo '?'))"
echo

echo "== populate"
rm -rf "$DIR/home"
"$BUILD/bench/storage-bench" populate --dir "$DIR" --count "$COUNT"
sync
echo

echo "== storage API (C, in process)"
"$BUILD/bench/storage-bench" run --dir "$DIR" --fsync "$FSYNC"
echo
"$BUILD/bench/storage-bench" mem --dir "$DIR"
echo

echo "== petreld (release) over HTTP"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
API_PORT=$(port)
TEL_PORT=$(port)
cat >"$DIR/petreld.yaml" <<EOF
allow_root: true
log_level: warn
telemetry:
  listen: 127.0.0.1:$TEL_PORT
backend_api:
  listen: 127.0.0.1:$API_PORT
mail:
  home: $DIR/home/%u
  fsync: $FSYNC
  namespaces:
    - name: inbox
      type: personal
      prefix: ""
      separator: /
      location: maildir:%h/Maildir
      subscriptions: true
EOF
env -u BACKEND_API_TOKEN "$BUILD/petreld" -c "$DIR/petreld.yaml" 2>"$DIR/petreld.log" &
PID=$!
for _ in $(seq 100); do
  curl -fs "http://127.0.0.1:$TEL_PORT/healthz" >/dev/null 2>&1 && break
  sleep 0.05
done
info() {
  curl -s -o "$DIR/info.json" -w '%{time_total}\n' -X POST \
    -H 'Content-Type: application/json' \
    -d '{"user":"u1","folder":"Bench"}' "http://127.0.0.1:$API_PORT/api/backend/folder/info"
}
first=$(info)
echo "folder/info first request: $(python3 -c "print(f'{$first*1000:.1f} ms')") ($(cat "$DIR/info.json"))"
times=()
for _ in $(seq 15); do times+=("$(info)"); done
python3 - "${times[@]}" <<'EOF'
import statistics, sys
t = sorted(float(x) * 1000 for x in sys.argv[1:])
print(f"folder/info on the warm daemon: median {statistics.median(t):.1f} ms, "
      f"best {t[0]:.1f} ms, worst {t[-1]:.1f} ms (curl time_total, {len(t)} requests; "
      f"target < 50 ms)")
EOF
curl -s -o "$DIR/rebuild.json" -X POST -H 'Content-Type: application/json' \
  -d '{"user":"u1","folder":"Bench"}' "http://127.0.0.1:$API_PORT/api/backend/index/rebuild"
python3 - "$DIR/rebuild.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"index/rebuild: {r['duration_ms']} ms (scanned {r['scanned']}, preserved "
      f"{r['uids_preserved']}, assigned {r['uids_assigned']}; target < 3000 ms)")
EOF
kill "$PID"
wait "$PID" || true
PID=""
