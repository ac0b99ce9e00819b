#!/usr/bin/env bash
# Director benchmark (docs/performance.md, "Director").
#
#   bench/director.sh [scenario ...]
#
# Builds a release build (build-release/), starts petreld with only the
# director component (BENCH_BACKENDS backends of 100 vhosts, admin API with a
# bearer token) on free loopback ports pinned to one core, and drives it with
# bench/director-bench.c pinned to the other core:
#
#   ring-pipelined   one login connection on the ring port, BENCH_WINDOW LOOKUPs
#                    in flight (what a busy login proxy does)
#   ring-serial      the same, one LOOKUP at a time (round-trip latency)
#   http-map         GET /api/director/map?user=... over BENCH_CONNECTIONS
#                    keep-alive connections, one request in flight on each
#                    (allow-list + token + routing + JSON per request)
#   propagation      BENCH_DIRECTORS (5) directors on 127.0.0.1..5 forming a ring;
#                    BENCH_CHANGES (200) backend down/up changes, each made on the next
#                    director, timed from the admin request until a monitor on every other
#                    director has the RING-CHANGE (bench/director-propagation.py); not part
#                    of the default set
#
# Users are user0..user<BENCH_USERS-1>@bench.example, in turn: the first pass
# assigns (a new mapping per user), later passes are sticky.
#
# Knobs: BENCH_DURATION=10 (seconds)  BENCH_WINDOW=256  BENCH_CONNECTIONS=32
#        BENCH_USERS=100000  BENCH_BACKENDS=10  BENCH_SERVER_CPU=0  BENCH_CLIENT_CPU=1
#        BENCH_BUILD_DIR=build-release  BENCH_NO_BUILD=1
#        BENCH_NICE=-10  run petreld and the client at this nice level (root only), in a
#                        session (scheduler autogroup) of their own, as bench/http-health.sh does
#
# Besides requests/s each line gives the CPU time petreld used during the run and the
# requests per petreld CPU-second, which says more than requests/s on a busy machine.
#
# Targets (reported, not enforced): ring >= 100,000 lookups/s; http-map >= 20,000/s.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DURATION="${BENCH_DURATION:-10}"
WINDOW="${BENCH_WINDOW:-256}"
CONNECTIONS="${BENCH_CONNECTIONS:-32}"
USERS="${BENCH_USERS:-100000}"
BACKENDS="${BENCH_BACKENDS:-10}"
SERVER_CPU="${BENCH_SERVER_CPU:-0}"
CLIENT_CPU="${BENCH_CLIENT_CPU:-1}"
BUILD_DIR="${BENCH_BUILD_DIR:-build-release}"
TOKEN="bench-token-0123456789abcdef0123456789abcdef"
NICE="${BENCH_NICE:-0}"
if [ "$NICE" != 0 ] && [ -z "${BENCH_OWN_SESSION:-}" ]; then
  export BENCH_OWN_SESSION=1
  exec setsid --wait "$0" "$@"
fi
if [ "$NICE" != 0 ] && [ -w /proc/self/autogroup ]; then
  echo "$NICE" >/proc/self/autogroup 2>/dev/null || true
fi
DIRECTORS="${BENCH_DIRECTORS:-5}"
CHANGES="${BENCH_CHANGES:-200}"
SCENARIOS=("$@")
[ ${#SCENARIOS[@]} -eq 0 ] && SCENARIOS=(ring-pipelined ring-serial http-map)

cd "$ROOT"
if [ -z "${BENCH_NO_BUILD:-}" ]; then
  [ -f "$BUILD_DIR/build.ninja" ] || meson setup "$BUILD_DIR" --buildtype=release >/dev/null
  ninja -C "$BUILD_DIR" petreld bench/director-bench >/dev/null
fi
PETRELD="$ROOT/$BUILD_DIR/petreld"
CLIENT="$ROOT/$BUILD_DIR/bench/director-bench"

work="$(mktemp -d /tmp/petrel-director-bench.XXXXXX)"
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

start_petreld() {
  local tport
  tport="$(free_port)"
  RING_PORT="$(free_port)"
  API_PORT="$(free_port)"
  {
    echo "allow_root: true"
    echo "log_level: warn"
    echo "components: [director]"
    echo "telemetry: {listen: \"127.0.0.1:$tport\"}"
    echo "director:"
    echo "  api: {listen: \"127.0.0.1:$API_PORT\", max_connections: 4096}"
    # director-bench says HELLO without the ring secret: lookups are what is
    # measured, and the handshake is once per connection (loopback only).
    echo "  ring: {listen: \"127.0.0.1:$RING_PORT\", allow_unauthenticated: true}"
    echo "  limits: {max_users: 10000000}"
    echo "  backends:"
    for i in $(seq 1 "$BACKENDS"); do
      echo "    - {ip: 10.0.$((i / 250)).$((i % 250 + 1)), port: 143, vhosts: 100}"
    done
  } >"$work/petrel.yaml"
  DIRECTOR_API_TOKEN="$TOKEN" nice -n "$NICE" taskset -c "$SERVER_CPU" "$PETRELD" \
    -c "$work/petrel.yaml" 2>"$work/petreld.log" &
  pid=$!
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$API_PORT") 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  echo "petreld did not start:" >&2
  cat "$work/petreld.log" >&2
  exit 1
}

# utime + stime of petreld in clock ticks.
cpu_ticks() {
  awk '{print $14 + $15}' "/proc/$pid/stat"
}

stop_petreld() {
  kill "$pid"
  wait "$pid" || true
  pid=""
}

echo "director benchmark: $(nproc) CPUs, $(uname -r), ${DURATION}s per run, $BACKENDS backends," \
  "$USERS users"
printf '%-15s %s\n' scenario result
status=0
for sc in "${SCENARIOS[@]}"; do
  if [ "$sc" = propagation ]; then
    if out="$(timeout 300 python3 "$ROOT/bench/director-propagation.py" "$PETRELD" "$DIRECTORS" \
              "$CHANGES" "$work")"; then
      printf '%-15s %s\n' "$sc" "$out"
    else
      printf '%-15s FAILED %s\n' "$sc" "$out"
      status=1
    fi
    continue
  fi
  start_petreld
  case "$sc" in
    ring-pipelined) args=(ring "127.0.0.1:$RING_PORT" "$DURATION" "$WINDOW" "$USERS") ;;
    ring-serial) args=(ring "127.0.0.1:$RING_PORT" "$DURATION" 1 "$USERS") ;;
    http-map) args=(http "127.0.0.1:$API_PORT" "$DURATION" "$CONNECTIONS" "$USERS" "$TOKEN") ;;
    *) echo "unknown scenario $sc" >&2; exit 1 ;;
  esac
  cpu0="$(cpu_ticks)"
  if out="$(timeout $((DURATION + 60)) nice -n "$NICE" taskset -c "$CLIENT_CPU" "$CLIENT" \
            "${args[@]}")"; then
    cpu_s="$(echo "$(cpu_ticks) $cpu0 $(getconf CLK_TCK)" | awk '{printf "%.2f", ($1 - $2) / $3}')"
    requests="$(sed -n 's/.* requests=\([0-9]*\).*/\1/p' <<<"$out")"
    per_cpu="$(awk -v r="$requests" -v c="$cpu_s" 'BEGIN {printf "%.0f", (c > 0 ? r / c : 0)}')"
    printf '%-15s %s server_cpu_s=%s per_server_cpu_s=%s\n' "$sc" "$out" "$cpu_s" "$per_cpu"
  else
    printf '%-15s FAILED %s\n' "$sc" "$out"
    status=1
  fi
  rss="$(awk '/VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo '?')"
  printf '%-15s petreld peak RSS %s kB\n' "" "$rss"
  stop_petreld
done
exit $status
