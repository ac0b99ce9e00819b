#!/usr/bin/env bash
# Auth service benchmark (docs/performance.md, "Auth").
#
#   bench/auth.sh [scenario ...]
#
# Builds a release build (build-release/), writes a passwd-file with
# BENCH_USERS users per scheme (PLAIN and SHA512-CRYPT from mkpasswd), starts
# petreld with the auth component on a free loopback port pinned to one
# core, and drives it with bench/auth-bench.c (one connection, pinned to
# the other core) for each scenario:
#
#   plain-cached     PLAIN passwords, cache on (every request after the first
#                    per user is answered from the cache on the event loop)
#   plain-uncached   PLAIN, cache_size 0: every request goes to a worker
#   sha512-cached    SHA512-CRYPT, cache on
#   sha512-uncached  SHA512-CRYPT, cache off: one crypt() per request
#   sqlite-cached    PLAIN passwords in an SQLite passdb (driver sql), cache on
#   sqlite-uncached  the same, cache off: every request is one SQL query on
#                    a worker (the sql layer's SQLite executor)
#
# Each scenario runs with BENCH_WINDOW requests in flight (pipelined) and
# with one at a time (window 1). Exit 0 when every run finished with no
# failed request; targets are reported, not enforced.
#
# Knobs: BENCH_DURATION=10 (seconds)  BENCH_WINDOW=64  BENCH_USERS=100
#        BENCH_SERVER_CPU=0  BENCH_CLIENT_CPU=1  BENCH_BUILD_DIR=build-release
#        BENCH_NO_BUILD=1  BENCH_WORKERS=2 (auth.worker_threads)
#
# Target: cached VERIFY >= 50,000/s over one connection.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DURATION="${BENCH_DURATION:-10}"
WINDOW="${BENCH_WINDOW:-64}"
USERS="${BENCH_USERS:-100}"
SERVER_CPU="${BENCH_SERVER_CPU:-0}"
CLIENT_CPU="${BENCH_CLIENT_CPU:-1}"
BUILD_DIR="${BENCH_BUILD_DIR:-build-release}"
WORKERS="${BENCH_WORKERS:-2}"
SCENARIOS=("$@")
[ ${#SCENARIOS[@]} -eq 0 ] && SCENARIOS=(plain-cached plain-uncached sha512-cached sha512-uncached sqlite-cached sqlite-uncached)

cd "$ROOT"
if [ -z "${BENCH_NO_BUILD:-}" ]; then
  [ -f "$BUILD_DIR/build.ninja" ] || meson setup "$BUILD_DIR" --buildtype=release >/dev/null
  ninja -C "$BUILD_DIR" petreld bench/auth-bench >/dev/null
fi
PETRELD="$ROOT/$BUILD_DIR/petreld"
CLIENT="$ROOT/$BUILD_DIR/bench/auth-bench"

work="$(mktemp -d /tmp/petrel-auth-bench.XXXXXX)"
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Users: pN with PLAIN passwords, sN with SHA512-CRYPT ones.
: >"$work/passwd"
: >"$work/plain.users"
: >"$work/sha512.users"
for i in $(seq 1 "$USERS"); do
  printf 'p%d:{PLAIN}pw-%d:%d:%d\n' "$i" "$i" "$((10000 + i))" "$((10000 + i))" >>"$work/passwd"
  printf 'p%d\tpw-%d\n' "$i" "$i" >>"$work/plain.users"
  printf 's%d:{SHA512-CRYPT}%s:%d:%d\n' "$i" "$(mkpasswd -m sha-512 "pw-$i")" \
    "$((20000 + i))" "$((20000 + i))" >>"$work/passwd"
  printf 's%d\tpw-%d\n' "$i" "$i" >>"$work/sha512.users"
done

# The PLAIN users again, in an SQLite passdb.
python3 - "$work/passwd" "$work/auth.sqlite" <<'EOF2'
import sqlite3, sys
db = sqlite3.connect(sys.argv[2])
db.execute("CREATE TABLE users (username TEXT PRIMARY KEY, password TEXT, uid INT, gid INT)")
for line in open(sys.argv[1]):
    name, pw, uid, gid = line.rstrip("\n").split(":")[:4]
    if name.startswith("p"):
        db.execute("INSERT INTO users VALUES (?, ?, ?, ?)", (name, pw, int(uid), int(gid)))
db.commit()
EOF2

passdb_yaml() { # driver kind
  if [ "$1" = sqlite ]; then
    printf '{driver: sql, engine: sqlite, connect: "%s", password_query: "SELECT password, uid, gid FROM users WHERE username = %%u"}' "$work/auth.sqlite"
  else
    printf '{driver: passwd-file, path: "%s"}' "$work/passwd"
  fi
}

start_petreld() { # cache_size [passdb kind]
  local port tport
  port="$(free_port)"
  tport="$(free_port)"
  cat >"$work/petrel.yaml" <<YAML
allow_root: true
log_level: warn
components: [auth]
telemetry: {listen: "127.0.0.1:$tport"}
auth:
  listen: ["127.0.0.1:$port"]
  worker_threads: $WORKERS
  cache_size: $1
  passdb: $(passdb_yaml "${2:-passwd-file}")
YAML
  taskset -c "$SERVER_CPU" "$PETRELD" -c "$work/petrel.yaml" 2>"$work/petreld.log" &
  pid=$!
  ADDR="127.0.0.1:$port"
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  echo "petreld did not start:" >&2
  cat "$work/petreld.log" >&2
  exit 1
}

stop_petreld() {
  kill "$pid"
  wait "$pid" || true
  pid=""
}

echo "auth benchmark: $(nproc) CPUs, $(uname -r), ${DURATION}s per run, workers=$WORKERS"
printf '%-16s %-7s %s\n' scenario window result
status=0
for sc in "${SCENARIOS[@]}"; do
  case "$sc" in
    plain-cached) users=plain.users cache=10485760 ;;
    plain-uncached) users=plain.users cache=0 ;;
    sha512-cached) users=sha512.users cache=10485760 ;;
    sha512-uncached) users=sha512.users cache=0 ;;
    sqlite-cached) users=plain.users cache=10485760 kind=sqlite ;;
    sqlite-uncached) users=plain.users cache=0 kind=sqlite ;;
    *) echo "unknown scenario $sc" >&2; exit 1 ;;
  esac
  start_petreld "$cache" "${kind:-passwd-file}"
  kind=""
  # Warm the cache (and the page cache) so cached runs measure hits only.
  timeout 60 taskset -c "$CLIENT_CPU" "$CLIENT" "$ADDR" 1 8 "$work/$users" >/dev/null || true
  for w in "$WINDOW" 1; do
    if out="$(timeout $((DURATION + 60)) taskset -c "$CLIENT_CPU" "$CLIENT" "$ADDR" \
              "$DURATION" "$w" "$work/$users")"; then
      printf '%-16s %-7s %s\n' "$sc" "$w" "$out"
    else
      printf '%-16s %-7s FAILED %s\n' "$sc" "$w" "$out"
      status=1
    fi
  done
  stop_petreld
done
exit $status
