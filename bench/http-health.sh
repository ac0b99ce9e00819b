#!/usr/bin/env bash
# HTTP fast-path benchmark of the backend-plane API (docs/performance.md).
#
#   bench/http-health.sh [scenario ...]
#
# Builds a release build (build-release/), starts petreld on free loopback
# ports pinned to one core, and drives it with wrk pinned to another core:
#
#   health          GET /api/backend/health, no token configured
#   health-token    GET /api/backend/health, token configured and sent
#                   (/health is a public route: the token is NOT checked there)
#   version         GET /api/backend/version, no token (allow-list + JSON reply)
#   version-token   GET /api/backend/version with the bearer token checked on
#                   every request (allow-list + SHA-256 + JSON reply)
#
# With no arguments every scenario runs. Knobs (environment):
#   BENCH_DURATION=20s  BENCH_WARMUP=5s (whole seconds, "Ns")  BENCH_CONNECTIONS=64
#   BENCH_THREADS=1
#   BENCH_SERVER_CPU=0  BENCH_CLIENT_CPU=1  BENCH_BUILD_DIR=build-release
#   BENCH_KEEP_LOGS=1   keep the temporary directory (config, petreld log)
#   BENCH_NO_BUILD=1    use the existing $BENCH_BUILD_DIR/petreld as is
#   BENCH_NICE=-10      run petreld and wrk at this nice level (root only), in
#                       a session (scheduler autogroup) of their own given the
#                       same nice level, so other work on a busy machine skews
#                       the numbers less
# Loopback only; every step is bounded by `timeout`. Exit status 0 when all
# scenarios ran (the target is reported, not enforced), 1 on a failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DURATION="${BENCH_DURATION:-20s}"
WARMUP="${BENCH_WARMUP:-5s}"
CONNECTIONS="${BENCH_CONNECTIONS:-64}"
THREADS="${BENCH_THREADS:-1}"
SERVER_CPU="${BENCH_SERVER_CPU:-0}"
CLIENT_CPU="${BENCH_CLIENT_CPU:-1}"
BUILD_DIR="${BENCH_BUILD_DIR:-build-release}"
NICE="${BENCH_NICE:-0}"
if [ "$NICE" != 0 ] && [ -z "${BENCH_OWN_SESSION:-}" ]; then
  # With autogroup scheduling, nice only ranks processes within their session:
  # give the benchmark a session of its own and that session the nice level.
  export BENCH_OWN_SESSION=1
  exec setsid --wait "$0" "$@"
fi
if [ "$NICE" != 0 ] && [ -w /proc/self/autogroup ]; then
  echo "$NICE" >/proc/self/autogroup 2>/dev/null || true
fi
TARGET_RPS=30000
TARGET_P99_MS=5
TOKEN="bench-token-0123456789abcdef0123456789abcdef"

ALL_SCENARIOS=(health health-token version version-token)
if [ $# -gt 0 ]; then
  SCENARIOS=("$@")
else
  SCENARIOS=("${ALL_SCENARIOS[@]}")
fi
for s in "${SCENARIOS[@]}"; do
  case "$s" in
    health | health-token | version | version-token) ;;
    *)
      echo "usage: $0 [${ALL_SCENARIOS[*]}]" >&2
      exit 2
      ;;
  esac
done

for tool in wrk taskset curl python3 meson ninja timeout; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "bench: '$tool' is missing (scripts/setup.sh installs it)" >&2
    exit 1
  fi
done

# ---------- build ----------
cd "$ROOT"
if [ "${BENCH_NO_BUILD:-0}" != 1 ]; then
  if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    meson setup "$BUILD_DIR" --buildtype=release >/dev/null
  fi
  if ! timeout 600 ninja -C "$BUILD_DIR" >"/tmp/petrel-bench-build.$$.log" 2>&1; then
    tail -20 "/tmp/petrel-bench-build.$$.log" >&2
    rm -f "/tmp/petrel-bench-build.$$.log"
    echo "bench: release build failed" >&2
    exit 1
  fi
  rm -f "/tmp/petrel-bench-build.$$.log"
fi
PETRELD="$ROOT/$BUILD_DIR/petreld"
if [ ! -x "$PETRELD" ]; then
  echo "bench: $PETRELD not found" >&2
  exit 1
fi

# ---------- environment ----------
WORK="$(mktemp -d /tmp/petrel-bench.XXXXXX)"
PID=""
cleanup() {
  if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$PID" 2>/dev/null || true
  fi
  if [ "${BENCH_KEEP_LOGS:-0}" = 1 ]; then
    echo "bench: kept $WORK" >&2
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT INT TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# Other work on the machine skews the numbers: record what was running.
concurrent() {
  # The bracket keeps this pattern from matching its own command line.
  pgrep -af '[f]uzz-|[p]ytest|[n]inja' 2>/dev/null | grep -v "^$$ " | cut -c1-120 || true
}

start_petreld() { # $1 = token ("" for none)
  local api_port tel_port
  api_port="$(free_port)"
  tel_port="$(free_port)"
  cat >"$WORK/petrel.yaml" <<EOF
components: [backend-api]
log_level: warn
allow_root: true
shutdown_timeout: 5s
telemetry:
  listen: 127.0.0.1:$tel_port
backend_api:
  listen: 127.0.0.1:$api_port
  allowed_nets: [127.0.0.0/8]
  max_connections_per_ip: 0  # BENCH_CONNECTIONS may exceed the default 128 from 127.0.0.1
  token_env: PETREL_BENCH_TOKEN
EOF
  PETREL_BENCH_TOKEN="$1" nice -n "$NICE" taskset -c "$SERVER_CPU" "$PETRELD" -c "$WORK/petrel.yaml" \
    >>"$WORK/petreld.log" 2>&1 &
  PID=$!
  API="http://127.0.0.1:$api_port"
  TELEMETRY="http://127.0.0.1:$tel_port"
  for _ in $(seq 100); do
    if curl -fsS -o /dev/null --max-time 1 "http://127.0.0.1:$tel_port/healthz" 2>/dev/null; then
      return 0
    fi
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "bench: petreld did not come up; log:" >&2
  cat "$WORK/petreld.log" >&2
  exit 1
}

stop_petreld() {
  kill -TERM "$PID"
  for _ in $(seq 100); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$PID" 2>/dev/null; then
    echo "bench: petreld did not stop within 10 s" >&2
    kill -KILL "$PID" || true
  fi
  wait "$PID" 2>/dev/null || true
  PID=""
}

# wrk prints latencies as "123.45us", "1.23ms", "1.02s": normalise to ms.
to_ms() {
  awk -v v="$1" 'BEGIN {
    if (v ~ /us$/) { sub(/us$/, "", v); printf "%.3f", v / 1000 }
    else if (v ~ /ms$/) { sub(/ms$/, "", v); printf "%.3f", v }
    else if (v ~ /m$/) { sub(/m$/, "", v); printf "%.3f", v * 60000 }
    else if (v ~ /s$/) { sub(/s$/, "", v); printf "%.3f", v * 1000 }
    else printf "%s", v }'
}

SECS="${DURATION%s}"
CLK_TCK="$(getconf CLK_TCK)"
# utime + stime of a process, in clock ticks.
cpu_ticks() {
  awk '{sub(/.*\) /, ""); print $12 + $13}' "/proc/$1/stat"
}
# Times the process was preempted (involuntary context switches).
preempted() {
  awk '/^nonvoluntary_ctxt_switches/ {print $2}' "/proc/$1/status"
}
RESULTS=()
FAILED=0

run_scenario() {
  local name="$1" path token header=()
  case "$name" in
    health) path=/api/backend/health; token="" ;;
    health-token) path=/api/backend/health; token="$TOKEN" ;;
    version) path=/api/backend/version; token="" ;;
    version-token) path=/api/backend/version; token="$TOKEN" ;;
  esac
  local auth=off
  if [ -n "$token" ]; then
    header=(-H "Authorization: Bearer $token")
    auth=on
  fi
  start_petreld "$token"
  # The route must answer 200 before measuring (a 401 would be fast but wrong).
  local code
  code="$(curl -sS -o /dev/null -w '%{http_code}' --max-time 2 "${header[@]}" "$API$path")"
  if [ "$code" != 200 ]; then
    echo "bench: $name: $path answered $code, expected 200" >&2
    stop_petreld
    FAILED=1
    return
  fi
  echo "== $name: GET $path (token $auth), ${CONNECTIONS} connections, $DURATION" >&2
  timeout 120 nice -n "$NICE" taskset -c "$CLIENT_CPU" wrk -t"$THREADS" -c"$CONNECTIONS" -d"$WARMUP" \
    "${header[@]}" "$API$path" >/dev/null
  local busy
  busy="$(concurrent)"
  local load_before
  load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
  local out="$WORK/wrk-$name.txt"
  local cpu_before ctx_before
  cpu_before="$(cpu_ticks "$PID")"
  ctx_before="$(preempted "$PID")"
  local TIMEFORMAT='%U %S'
  { time timeout $((${SECS%.*} + 60)) nice -n "$NICE" taskset -c "$CLIENT_CPU" wrk -t"$THREADS" \
    -c"$CONNECTIONS" -d"$DURATION" --latency "${header[@]}" "$API$path" >"$out"; } \
    2>"$WORK/wrk-$name.time"
  local cpu_after ctx_after
  cpu_after="$(cpu_ticks "$PID")"
  ctx_after="$(preempted "$PID")"
  # Time inside petreld (complete request to reply queued), from its own
  # histogram: what is not queueing in the kernel or the client.
  curl -fsS --max-time 5 "$TELEMETRY/metrics" 2>/dev/null |
    awk -v route="route=\"$path\"" '
      index($0, "petrel_http_request_seconds_bucket{server=\"backend-api\"," route) == 1 &&
      /code="200"/ { split($0, a, "le=\""); split(a[2], b, "\""); n[b[1]] = $NF }
      END { if (n["+Inf"] > 0)
              printf "bench: inside petreld (warm-up included): %.2f%% of requests took <= 0.5 ms, %.2f%% <= 1 ms, %.3f%% > 5 ms\n",
                100 * n["0.0005"] / n["+Inf"], 100 * n["0.001"] / n["+Inf"],
                100 * (n["+Inf"] - n["0.005"]) / n["+Inf"] }' >&2 || true
  stop_petreld
  cat "$out" >&2

  local rps p50 p90 p99 non2xx errors
  rps="$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$out")"
  p50="$(to_ms "$(awk '$1 == "50%" {print $2}' "$out")")"
  p90="$(to_ms "$(awk '$1 == "90%" {print $2}' "$out")")"
  p99="$(to_ms "$(awk '$1 == "99%" {print $2}' "$out")")"
  non2xx="$(awk '/Non-2xx or 3xx responses:/ {print $NF}' "$out")"
  errors="$(awk '/Socket errors:/ {sub(/.*Socket errors: /, ""); print}' "$out")"
  # CPU time petreld actually got during the run, and the throughput per
  # second of that CPU time: what one core would serve if petreld had it to
  # itself (a rough estimate on loopback, where part of the TCP work of each
  # side is charged to the other).
  local total sec cpu_s per_cpu_s share
  total="$(awk '/requests in/ {print $1}' "$out")"
  sec="$(awk '/requests in/ {sub(/s,$/, "", $4); print $4}' "$out")"
  cpu_s="$(awk -v a="$cpu_before" -v b="$cpu_after" -v hz="$CLK_TCK" 'BEGIN {printf "%.2f", (b - a) / hz}')"
  per_cpu_s="$(awk -v n="$total" -v c="$cpu_s" 'BEGIN {if (c > 0) printf "%.0f", n / c; else print "-"}')"
  share="$(awk -v c="$cpu_s" -v s="$sec" 'BEGIN {if (s > 0) printf "%.0f%%", 100 * c / s; else print "-"}')"
  local wrk_share
  wrk_share="$(awk -v s="$sec" '{if (s > 0) printf "%.0f%%", 100 * ($1 + $2) / s; else print "-"}' "$WORK/wrk-$name.time")"
  echo "bench: $name: petreld used ${cpu_s}s CPU in ${sec}s ($share of its core," \
    "$((ctx_after - ctx_before)) involuntary context switches); wrk used $wrk_share of its core" >&2
  local met=yes
  if [ "$rps" -lt "$TARGET_RPS" ] || awk -v p="$p99" -v t="$TARGET_P99_MS" 'BEGIN {exit !(p >= t)}'; then
    met=no
  fi
  if [ -n "$non2xx" ]; then
    echo "bench: $name: $non2xx responses were not 2xx" >&2
    met="no (non-2xx: $non2xx)"
    FAILED=1
  fi
  if [ -n "$errors" ]; then
    echo "bench: $name: socket errors: $errors" >&2
  fi
  RESULTS+=("| $name | GET $path | $auth | $rps | $p50 | $p90 | $p99 | $share | $wrk_share | $per_cpu_s | $met |")
  if [ -n "$busy" ]; then
    echo "bench: $name: measured while other work was running (load $load_before):" >&2
    echo "$busy" | sed 's/^/bench:   /' >&2
    RESULTS+=("|   ↳ concurrent: $(echo "$busy" | wc -l) process(es) matching fuzz-/pytest/ninja, load $load_before | | | | | | | | | | |")
  fi
}

REV="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no -- src meson.build 2>/dev/null)" ]; then
  REV="$REV+local changes"
fi
echo "bench: petreld $("$PETRELD" --version | cut -d' ' -f2) ($BUILD_DIR, tree $REV), server CPU $SERVER_CPU, wrk CPU $CLIENT_CPU, nice $NICE" >&2
for s in "${SCENARIOS[@]}"; do
  run_scenario "$s"
done

echo
echo "Tree $REV, $(date -u +%Y-%m-%dT%H:%MZ). nice $NICE. Target: >= $TARGET_RPS requests/s with p99 < $TARGET_P99_MS ms (petreld on one core)."
echo
echo "| scenario | request | token | req/s | p50 ms | p90 ms | p99 ms | petreld CPU | wrk CPU | req per petreld CPU-s | target met |"
echo "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"
for r in "${RESULTS[@]}"; do
  echo "$r"
done
exit "$FAILED"
