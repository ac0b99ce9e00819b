#!/usr/bin/env bash
# Memory soak: mixed IMAP + LMTP load on one petreld, then idle (docs/performance.md, "Soak").
#
#   bench/soak.sh
#
# Starts one release petreld (auth, imap, lmtp components) on loopback, fills
# SOAK_IMAP_USERS mailboxes through IMAP APPEND (bench/imap-bench.c setup), then for
# SOAK_SECONDS runs at the same time
#   - two IMAP load generators (bench/imap-bench.c load, half the users each: the
#     FETCH/STORE/APPEND/EXPUNGE/IDLE/SELECT mix of bench/imap.sh), restarted when one
#     finishes early;
#   - LMTP deliveries (bench/lmtp-client.py) of SOAK_LMTP_SIZE-byte messages to random
#     users among user1..userSOAK_LMTP_USERS, in batches, at most SOAK_LMTP_RATE msg/s;
# then leaves the server idle for SOAK_IDLE_SECONDS. Every SOAK_SAMPLE seconds petreld's
# VmRSS, open descriptors (/proc/PID/fd) and threads go into a CSV
# (time_s,phase,rss_kb,fds,threads). At the end it prints the RSS slope over the last
# 30 minutes of load (least squares; the last half when the load ran for less than an
# hour), RSS at start / end of load / after idle, and descriptors at the same points.
#
# Everything listens on 127.0.0.1; every loop is bounded by the durations; the script
# stops petreld and the clients when it ends (also on Ctrl-C).
#
# Knobs: SOAK_SECONDS=3600  SOAK_IDLE_SECONDS=300  SOAK_SAMPLE=10
#        SOAK_IMAP_USERS=40 (split between the two generators)  SOAK_IMAP_MESSAGES=100
#        SOAK_LMTP_USERS=100  SOAK_LMTP_CONNECTIONS=4  SOAK_LMTP_RATE=100  SOAK_LMTP_SIZE=4096
#        SOAK_LMTP_BATCH=500  SOAK_FSYNC=never
#        SOAK_BUILD_DIR=build (a release build; another tree's, e.g. /work/wt/base/build,
#                              to compare; the bench tools come from the same directory)
#        SOAK_NO_BUILD=1  SOAK_KEEP=1 (keep the work directory)
#        SOAK_CSV=<path> (default: soak.csv in the work directory, printed at the end)
#        SOAK_ENV="MALLOC_ARENA_MAX=2" (extra environment for petreld, for comparisons)
#        SOAK_CONFIG_EXTRA=<file> (YAML appended to petreld's configuration)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_LOAD="${SOAK_SECONDS:-3600}"
SECONDS_IDLE="${SOAK_IDLE_SECONDS:-300}"
SAMPLE="${SOAK_SAMPLE:-10}"
IMAP_USERS="${SOAK_IMAP_USERS:-40}"
IMAP_MESSAGES="${SOAK_IMAP_MESSAGES:-100}"
LMTP_USERS="${SOAK_LMTP_USERS:-100}"
LMTP_CONNECTIONS="${SOAK_LMTP_CONNECTIONS:-4}"
LMTP_RATE="${SOAK_LMTP_RATE:-100}"
LMTP_SIZE="${SOAK_LMTP_SIZE:-4096}"
LMTP_BATCH="${SOAK_LMTP_BATCH:-500}"
FSYNC="${SOAK_FSYNC:-never}"
BUILD_DIR="${SOAK_BUILD_DIR:-build}"
PYTHON="${PYTHON:-/usr/bin/python3}"
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$ROOT/$BUILD_DIR" ;; esac

if [ -z "${SOAK_NO_BUILD:-}" ]; then
  [ -f "$BUILD_DIR/build.ninja" ] || meson setup "$BUILD_DIR" "$ROOT" --buildtype=release >/dev/null
  ninja -C "$BUILD_DIR" petreld bench/imap-bench >/dev/null
fi
PETRELD="$BUILD_DIR/petreld"
IMAP_BENCH="$BUILD_DIR/bench/imap-bench"
LMTP_CLIENT="$ROOT/bench/lmtp-client.py"

WORK="$(mktemp -d /var/tmp/petrel-soak-XXXXXX)"
CSV="${SOAK_CSV:-$WORK/soak.csv}"
PID=""
CHILDREN=()
cleanup() {
  for c in "${CHILDREN[@]}"; do
    pkill -TERM -P "$c" 2>/dev/null || true # the generator the loop is running
    kill "$c" 2>/dev/null || true
  done
  for c in "${CHILDREN[@]}"; do
    wait "$c" 2>/dev/null || true
  done
  if [ -n "$PID" ]; then
    kill "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
  fi
  if [ -n "${SOAK_KEEP:-}" ]; then echo "work directory kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
wait_port() { # port
  for _ in $(seq 200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.05
  done
  echo "petreld did not start:" >&2
  cat "$WORK/petreld.log" >&2
  exit 1
}

# Users: benchN for the IMAP generators, userN for LMTP ({PLAIN}: auth is not the subject).
: >"$WORK/passwd"
: >"$WORK/imap-a.users"
: >"$WORK/imap-b.users"
for i in $(seq 1 "$IMAP_USERS"); do
  printf 'bench%d:{PLAIN}pw-%d:%d:%d\n' "$i" "$i" "$((10000 + i))" "$((10000 + i))" >>"$WORK/passwd"
  if [ $((i % 2)) -eq 0 ]; then f=imap-a; else f=imap-b; fi
  printf 'bench%d\tpw-%d\n' "$i" "$i" >>"$WORK/$f.users"
done
for i in $(seq 1 "$LMTP_USERS"); do
  printf 'user%d:{PLAIN}pw:%d:%d\n' "$i" "$((20000 + i))" "$((20000 + i))" >>"$WORK/passwd"
done

IMAP_PORT="$(free_port)"
LMTP_PORT="$(free_port)"
AUTH_PORT="$(free_port)"
cat >"$WORK/petrel.yaml" <<YAML
components: [auth, imap, lmtp]
allow_root: true
log_level: warn
telemetry: {listen: "127.0.0.1:$(free_port)"}
mail: {home: "$WORK/mail/%u", fsync: $FSYNC}
auth:
  listen: ["127.0.0.1:$AUTH_PORT"]
  passdb: {driver: passwd-file, path: "$WORK/passwd"}
imap:
  listen: ["127.0.0.1:$IMAP_PORT"]
  auth_addr: "127.0.0.1:$AUTH_PORT"
lmtp:
  listen: ["127.0.0.1:$LMTP_PORT"]
  auth_addr: "127.0.0.1:$AUTH_PORT"
  username_format: "%n"
YAML
[ -n "${SOAK_CONFIG_EXTRA:-}" ] && cat "$SOAK_CONFIG_EXTRA" >>"$WORK/petrel.yaml"

echo "soak: $(nproc) CPUs, $(uname -r), $(date -u +%Y-%m-%dT%H:%MZ), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "soak: petreld $PETRELD${SOAK_ENV:+ with $SOAK_ENV}; load ${SECONDS_LOAD}s, idle ${SECONDS_IDLE}s, sample every ${SAMPLE}s"
echo "soak: IMAP $IMAP_USERS users x $IMAP_MESSAGES messages, two generators; LMTP $LMTP_CONNECTIONS connections, <= $LMTP_RATE msg/s of $LMTP_SIZE bytes to $LMTP_USERS users; mail.fsync: $FSYNC"
# shellcheck disable=SC2086
env ${SOAK_ENV:-} "$PETRELD" -c "$WORK/petrel.yaml" >>"$WORK/petreld.log" 2>&1 &
PID=$!
wait_port "$IMAP_PORT"
wait_port "$LMTP_PORT"

sample() { # phase -> one CSV line
  local rss fds threads
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$PID/status" 2>/dev/null || echo 0)
  threads=$(awk '/^Threads:/ {print $2}' "/proc/$PID/status" 2>/dev/null || echo 0)
  fds=$(find "/proc/$PID/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
  echo "$(($(date +%s) - T0)),$1,$rss,$fds,$threads" >>"$CSV"
}

echo "soak: filling $IMAP_USERS IMAP mailboxes"
"$IMAP_BENCH" setup "127.0.0.1:$IMAP_PORT" "$WORK/imap-a.users" "$IMAP_MESSAGES" mixed >/dev/null
"$IMAP_BENCH" setup "127.0.0.1:$IMAP_PORT" "$WORK/imap-b.users" "$IMAP_MESSAGES" mixed >/dev/null

T0=$(date +%s)
echo "time_s,phase,rss_kb,fds,threads" >"$CSV"
sample start
END=$((T0 + SECONDS_LOAD))

imap_loop() { # users-file log
  local left
  while :; do
    left=$((END - $(date +%s)))
    [ "$left" -le 2 ] && break
    if ! "$IMAP_BENCH" load "127.0.0.1:$IMAP_PORT" "$1" "$IMAP_MESSAGES" "$left" >>"$2" 2>&1; then
      echo "imap-bench load failed (see $2)" >>"$WORK/errors"
      sleep 1
    fi
  done
}

lmtp_loop() {
  local sent=0 started batch_start elapsed want n=0
  started=$(date +%s)
  while [ "$(date +%s)" -lt "$END" ]; do
    batch_start=$(date +%s)
    n=$((n + 1))
    if ! "$PYTHON" "$LMTP_CLIENT" --port "$LMTP_PORT" --connections "$LMTP_CONNECTIONS" \
      --messages "$LMTP_BATCH" --users "$LMTP_USERS" --size "$LMTP_SIZE" --run "soak$n" \
      >>"$WORK/lmtp.log" 2>&1; then
      echo "lmtp batch $n had refusals (see $WORK/lmtp.log)" >>"$WORK/errors"
    fi
    sent=$((sent + LMTP_BATCH))
    # Ahead of SOAK_LMTP_RATE: wait (bounded by the end of the load).
    elapsed=$(($(date +%s) - started))
    want=$((sent / LMTP_RATE))
    while [ "$elapsed" -lt "$want" ] && [ "$(date +%s)" -lt "$END" ]; do
      sleep 1
      elapsed=$(($(date +%s) - started))
    done
    : "$batch_start"
  done
  echo "$sent" >"$WORK/lmtp.sent"
}

imap_loop "$WORK/imap-a.users" "$WORK/imap-a.log" &
CHILDREN+=($!)
imap_loop "$WORK/imap-b.users" "$WORK/imap-b.log" &
CHILDREN+=($!)
lmtp_loop &
CHILDREN+=($!)

while [ "$(date +%s)" -lt "$END" ]; do
  sleep "$SAMPLE"
  kill -0 "$PID" 2>/dev/null || { echo "petreld died" >&2; cat "$WORK/petreld.log" >&2; exit 1; }
  sample load
done
for c in "${CHILDREN[@]}"; do wait "$c" 2>/dev/null || true; done
CHILDREN=()
sample load_end
IDLE_END=$(($(date +%s) + SECONDS_IDLE))
while [ "$(date +%s)" -lt "$IDLE_END" ]; do
  sleep "$SAMPLE"
  sample idle
done
sample idle_end
# What the descriptors still open are (by file name, or socket/pipe/anon_inode).
fd_kinds="$(for f in /proc/"$PID"/fd/*; do readlink "$f" 2>/dev/null; done |
  sed -e 's|^/.*/||' -e 's|:.*||' | sort | uniq -c | sort -rn | head -8 |
  awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $2, $1}')"

delivered=$(grep -o 'messages=[0-9]*' "$WORK/lmtp.log" | awk -F= '{s += $2} END {print s + 0}')
imap_rates=$(grep -ho ' rate=[0-9.]*' "$WORK"/imap-?.log | cut -d= -f2 | awk '{s += $1; n++} END {if (n) printf "%.0f", s / n * 2; else print "?"}')
echo "soak: LMTP messages sent: $delivered; IMAP commands/s (both generators, mean of runs): $imap_rates"
[ -s "$WORK/errors" ] && { echo "soak: client errors:"; sort "$WORK/errors" | uniq -c | head; }

"$PYTHON" - "$CSV" "$SECONDS_LOAD" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
load_s = int(sys.argv[2])
for r in rows:
    r["t"] = int(r["time_s"]); r["rss"] = int(r["rss_kb"]); r["fds"] = int(r["fds"])
def at(phase):
    return [r for r in rows if r["phase"] == phase][-1]
start, lend, iend = at("start"), at("load_end"), at("idle_end")
window = min(1800, max(load_s // 2, 1))
pts = [(r["t"], r["rss"] / 1024) for r in rows
       if r["phase"] in ("load", "load_end") and r["t"] >= lend["t"] - window]
slope = float("nan")
if len(pts) >= 2:
    n = len(pts); mx = sum(p[0] for p in pts) / n; my = sum(p[1] for p in pts) / n
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    if sxx > 0:
        slope = sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx * 3600
peak = max(rows, key=lambda r: r["rss"])
peak_fds = max(r["fds"] for r in rows)
print(f"soak: RSS slope over the last {window // 60} min of load: {slope:+.1f} MB/hour ({len(pts)} samples)")
print(f"soak: RSS start {start['rss'] / 1024:.1f} MB, peak {peak['rss'] / 1024:.1f} MB, "
      f"end of load {lend['rss'] / 1024:.1f} MB, after idle {iend['rss'] / 1024:.1f} MB "
      f"(idle - start: {(iend['rss'] - start['rss']) / 1024:+.1f} MB)")
print(f"soak: descriptors start {start['fds']}, peak {peak_fds}, end of load {lend['fds']}, "
      f"after idle {iend['fds']}")
PY
echo "soak: descriptors after idle by kind: $fd_kinds"
echo "soak: samples in $CSV"
[ -z "${SOAK_CSV:-}" ] && [ -z "${SOAK_KEEP:-}" ] && cp "$CSV" "/tmp/petrel-soak-$(date +%s).csv" &&
  echo "soak: (copied to /tmp/petrel-soak-*.csv; the work directory goes)"
exit 0
