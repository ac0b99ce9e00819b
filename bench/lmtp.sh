#!/usr/bin/env bash
# LMTP delivery benchmark (docs/performance.md, "LMTP").
#
#   bench/lmtp.sh
#
# Builds a release build, writes a passwd-file with BENCH_USERS users
# user1..userN ({PLAIN}, so the auth service is never the bottleneck) and
# starts one petreld with the auth and lmtp components. A warm-up delivers
# one message to every user with mail.fsync: never (each INBOX and its
# index exist before measuring). Then, for each mail.fsync policy in
# BENCH_FSYNC and each connection count in BENCH_CONNECTIONS:
#
#   1. bench/lmtp-fsync-rate measures the machine's fsync rate in the mail
#      directory (BENCH_RATE_SECONDS, one thread): fio-style (4 KiB written
#      in place + fsync), append (+ fdatasync) and new-file;
#   2. bench/lmtp-client.py (Python smtplib.LMTP, one process per
#      connection) sends BENCH_MESSAGES messages of BENCH_SIZE bytes, each
#      to one random user;
#   3. the fsync rate again (the disk's speed drifts: both are printed).
#
# Prints msg/s, latency p50/p99, petreld's CPU time per message and the
# ratio of msg/s to the fsync rates measured around the run. At the end
# the message files are counted: every message that got a 250 must be
# there (exit 1 otherwise, or when any delivery was refused).
#
# Knobs: BENCH_USERS=1000  BENCH_MESSAGES=4000  BENCH_SIZE=4096
#        BENCH_FSYNC="always never"  BENCH_CONNECTIONS="1 8"
#        BENCH_THREADS=8 (lmtp.delivery_threads)  BENCH_RATE_SECONDS=3
#        BENCH_BUILD_DIR=build-release  BENCH_NO_BUILD=1  BENCH_KEEP=1
#        BENCH_DIR=<work directory on the disk to measure> (default /var/tmp/...)
#        BENCH_NICE=-10 (root: a session of its own whose scheduler autogroup
#                        gets this nice level, as bench/imap.sh does)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
USERS="${BENCH_USERS:-1000}"
MESSAGES="${BENCH_MESSAGES:-4000}"
SIZE="${BENCH_SIZE:-4096}"
FSYNCS="${BENCH_FSYNC:-always never}"
CONNECTIONS="${BENCH_CONNECTIONS:-1 8}"
THREADS="${BENCH_THREADS:-8}"
RATE_SECONDS="${BENCH_RATE_SECONDS:-3}"
BUILD_DIR="${BENCH_BUILD_DIR:-build-release}"
NICE="${BENCH_NICE:-0}"
PYTHON="${PYTHON:-/usr/bin/python3}"

if [ "$NICE" != 0 ] && [ -z "${BENCH_OWN_SESSION:-}" ]; then
  # With autogroup scheduling, nice only ranks processes within their session.
  export BENCH_OWN_SESSION=1
  exec setsid --wait "$0" "$@"
fi
if [ "$NICE" != 0 ] && [ -w /proc/self/autogroup ]; then
  echo "$NICE" >/proc/self/autogroup 2>/dev/null || true
fi

cd "$ROOT"
if [ -z "${BENCH_NO_BUILD:-}" ]; then
  [ -f "$BUILD_DIR/build.ninja" ] || meson setup "$BUILD_DIR" --buildtype=release >/dev/null
  ninja -C "$BUILD_DIR" petreld bench/lmtp-fsync-rate >/dev/null
fi
PETRELD="$ROOT/$BUILD_DIR/petreld"
RATE="$ROOT/$BUILD_DIR/bench/lmtp-fsync-rate"
CLIENT="$ROOT/bench/lmtp-client.py"

WORK="${BENCH_DIR:-$(mktemp -d /var/tmp/petrel-lmtp-bench-XXXXXX)}"
mkdir -p "$WORK"
PID=""
cleanup() {
  if [ -n "$PID" ]; then
    kill "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
  fi
  if [ -z "${BENCH_KEEP:-}" ]; then
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT

free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

echo "== machine"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') x $(nproc)"
echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
echo "kernel: $(uname -sr); file system of $WORK: $(stat -f -c %T "$WORK")" \
  "($(findmnt -n -o SOURCE,OPTIONS -T "$WORK" 2>/dev/null | cut -c1-80))"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "python: $("$PYTHON" --version 2>&1)"
echo

"$PYTHON" -c "
import sys
with open(sys.argv[1], 'w') as f:
    for i in range(1, int(sys.argv[2]) + 1):
        f.write(f'user{i}:{{PLAIN}}pw:1000:1000\n')
" "$WORK/passwd" "$USERS"

LMTP_PORT=""
start() { # $1 = fsync policy
  LMTP_PORT=$(free_port)
  local auth_port tele_port
  auth_port=$(free_port)
  tele_port=$(free_port)
  cat >"$WORK/petrel.yaml" <<EOF
components: [auth, lmtp]
allow_root: true
log_level: warn
telemetry: {listen: "127.0.0.1:$tele_port"}
mail: {home: "$WORK/mail/%u", fsync: $1}
auth:
  listen: ["127.0.0.1:$auth_port"]
  passdb: {driver: passwd-file, path: "$WORK/passwd"}
lmtp:
  listen: ["127.0.0.1:$LMTP_PORT"]
  auth_addr: "127.0.0.1:$auth_port"
  username_format: "%n"
  delivery_threads: $THREADS
  max_connections: 1000
EOF
  "$PETRELD" -c "$WORK/petrel.yaml" >>"$WORK/petreld.log" 2>&1 &
  PID=$!
  for _ in $(seq 100); do
    if "$PYTHON" -c "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 0.2)" "$LMTP_PORT" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  echo "petreld did not start:" >&2
  cat "$WORK/petreld.log" >&2
  exit 1
}

stop() {
  kill "$PID"
  wait "$PID" || true
  PID=""
}

cpu_ticks() {
  awk '{print $14 + $15}' "/proc/$1/stat"
}

fsync_rates() { # prints "fio append new-file"
  "$RATE" "$WORK/mail" "$RATE_SECONDS" 1 | sed -n 's/.* rate=\([0-9]*\)/\1/p' | paste -sd' '
}

echo "== warm-up: one message to each of $USERS users (mail.fsync: never)"
mkdir -p "$WORK/mail"
start never
"$PYTHON" "$CLIENT" --port "$LMTP_PORT" --connections 8 --messages "$USERS" --users "$USERS" \
  --size "$SIZE" --run warmup --seed 7 >/dev/null
# The warm-up picks users at random: make sure every INBOX exists.
for i in $(seq 1 "$USERS"); do
  [ -d "$WORK/mail/user$i/Maildir/cur" ] || echo "user$i"
done >"$WORK/missing"
if [ -s "$WORK/missing" ]; then
  "$PYTHON" - "$LMTP_PORT" "$WORK/missing" <<'EOF'
import smtplib, sys
c = smtplib.LMTP("127.0.0.1", int(sys.argv[1]))
for u in open(sys.argv[2]).read().split():
    c.sendmail("warmup@example.net", [f"{u}@example.org"], b"Subject: warm-up\r\n\r\nx\r\n")
c.quit()
EOF
fi
stop
sync
echo

TICK=$(getconf CLK_TCK)
results=()
total_sent=0
failed=0
for fsync in $FSYNCS; do
  start "$fsync"
  for conns in $CONNECTIONS; do
    echo "== mail.fsync: $fsync, $conns connection(s), $MESSAGES messages of $SIZE bytes"
    read -r fio1 app1 new1 <<<"$(fsync_rates)"
    cpu0=$(cpu_ticks "$PID")
    out=$("$PYTHON" "$CLIENT" --port "$LMTP_PORT" --connections "$conns" --messages "$MESSAGES" \
      --users "$USERS" --size "$SIZE" --run "$fsync-$conns" --json) || failed=1
    cpu1=$(cpu_ticks "$PID")
    read -r fio2 app2 new2 <<<"$(fsync_rates)"
    echo "$out" | head -1
    json=$(echo "$out" | tail -1)
    rate=$("$PYTHON" -c 'import json,sys; print(json.loads(sys.argv[1])["rate"])' "$json")
    p50=$("$PYTHON" -c 'import json,sys; print(json.loads(sys.argv[1])["p50_ms"])' "$json")
    p99=$("$PYTHON" -c 'import json,sys; print(json.loads(sys.argv[1])["p99_ms"])' "$json")
    cpu_us=$(( (cpu1 - cpu0) * 1000000 / TICK / MESSAGES ))
    echo "fsync rate before: fio-style $fio1/s, append $app1/s, new-file $new1/s;" \
      "after: fio-style $fio2/s, append $app2/s, new-file $new2/s"
    ratio=$("$PYTHON" -c "
import sys
r, a1, a2, f1, f2 = map(float, sys.argv[1:])
print(f'{r / ((a1 + a2) / 2) * 100:.0f}% of append, {r / ((f1 + f2) / 2) * 100:.0f}% of fio-style')
" "$rate" "$app1" "$app2" "$fio1" "$fio2")
    echo "petreld CPU: $cpu_us us/message; msg/s = $ratio"
    results+=("$(printf '%-7s %5s  %8s  %7s %7s  %6s  %-22s %-22s %s' "$fsync" "$conns" "$rate" \
      "$p50" "$p99" "$cpu_us" "$fio1/$app1/$new1" "$fio2/$app2/$new2" "$ratio")")
    total_sent=$((total_sent + MESSAGES))
    echo
  done
  stop
done

echo "== summary (fsync rates: fio-style/append/new-file per second, 1 thread)"
printf '%-7s %5s  %8s  %7s %7s  %6s  %-22s %-22s %s\n' fsync conns "msg/s" "p50 ms" "p99 ms" \
  "cpu us" "fsync rate before" "after" "msg/s vs fsync rate"
for r in "${results[@]}"; do
  echo "$r"
done

expected=$((USERS + total_sent))
found=$(find "$WORK/mail" -path "$WORK/mail/*/cur/*" -type f | wc -l)
leftover=$(find "$WORK/mail" -path "$WORK/mail/*/tmp/*" -type f | wc -l)
echo
echo "messages on disk: $found (warm-up and every run: at least $expected expected), tmp/ files: $leftover"
if [ "$found" -lt "$expected" ] || [ "$leftover" -ne 0 ] || [ "$failed" -ne 0 ]; then
  echo "lmtp.sh: deliveries missing or refused" >&2
  exit 1
fi
