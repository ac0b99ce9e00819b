#!/usr/bin/env bash
# Dict benchmark through the backend-plane API (docs/performance.md, "Dict").
#
#   bench/dict.sh [scenario ...]
#
# Builds a release build (build-release/), starts a throwaway redis-server and
# petreld on free loopback ports, petreld (and redis-server) pinned to one
# core, the load generators to the other:
#
#   redis           anchor: redis-benchmark -t get,set -c 64 -n 200000 straight
#                   against the same redis-server (no petreld)
#   memory-lookup   POST /api/backend/dict/d/lookup, memory driver
#   memory-set      POST /api/backend/dict/d/set, memory driver
#   sqlite-lookup   the same with the sql driver on SQLite (file in /tmp)
#   sqlite-set
#   kvstore-lookup  the same with the kvstore driver on the redis-server above
#   kvstore-set
#
# Besides wrk's req/s and latencies, each HTTP row reports the CPU time
# petreld (plus redis-server for kvstore) spent per request, from
# /proc/<pid>/stat, and the req/s one dedicated core would give at that cost:
# a figure that other load on the machine skews far less than req/s.
#
# HTTP load is wrk with bench/dict.lua (POST bodies, -s), 64 connections, one
# thread. Lookups hit BENCH_KEYS prefilled keys (all found); sets write the
# same key space. With no arguments every scenario runs.
#
# Knobs (environment):
#   BENCH_DURATION=10s  BENCH_WARMUP=3s  BENCH_CONNECTIONS=64  BENCH_THREADS=1
#   BENCH_KEYS=10000    BENCH_REDIS_REQUESTS=200000
#   BENCH_SERVER_CPU=0  BENCH_CLIENT_CPU=1  BENCH_BUILD_DIR=build-release
#   BENCH_KEEP_LOGS=1   keep the temporary directory (configs, logs, wrk output)
#   BENCH_NO_BUILD=1    use the existing $BENCH_BUILD_DIR/petreld as is
#   BENCH_NICE=-10      run redis-server, petreld, wrk and redis-benchmark at this
#                       nice level (root only) in a session (scheduler autogroup)
#                       of their own given the same level, as bench/http-health.sh
#                       does, so other work on a busy machine skews them less
#   BENCH_QUIET_WAIT=0  seconds to wait for a quiet machine (no fuzz-/pytest/
#                       ninja processes) before measuring; measures anyway after
# Loopback only; every step is bounded by `timeout`. Exit status 0 when every
# scenario ran (targets are reported, not enforced), 1 on a failure.
#
# Targets: memory-driver lookups >= 25,000/s through HTTP; the kvstore driver's
# latency within 2x of what redis-benchmark shows for the same operation.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DURATION="${BENCH_DURATION:-10s}"
WARMUP="${BENCH_WARMUP:-3s}"
CONNECTIONS="${BENCH_CONNECTIONS:-64}"
THREADS="${BENCH_THREADS:-1}"
KEYS="${BENCH_KEYS:-10000}"
REDIS_REQUESTS="${BENCH_REDIS_REQUESTS:-200000}"
SERVER_CPU="${BENCH_SERVER_CPU:-0}"
CLIENT_CPU="${BENCH_CLIENT_CPU:-1}"
BUILD_DIR="${BENCH_BUILD_DIR:-build-release}"
QUIET_WAIT="${BENCH_QUIET_WAIT:-0}"
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
TARGET_MEMORY_LOOKUP_RPS=25000
TARGET_REDIS_LATENCY_FACTOR=2

ALL_SCENARIOS=(redis memory-lookup memory-set sqlite-lookup sqlite-set kvstore-lookup kvstore-set)
if [ $# -gt 0 ]; then
  SCENARIOS=("$@")
else
  SCENARIOS=("${ALL_SCENARIOS[@]}")
fi
for s in "${SCENARIOS[@]}"; do
  case "$s" in
    redis | memory-lookup | memory-set | sqlite-lookup | sqlite-set | kvstore-lookup | kvstore-set) ;;
    *)
      echo "usage: $0 [${ALL_SCENARIOS[*]}]" >&2
      exit 2
      ;;
  esac
done

for tool in wrk taskset curl python3 meson ninja timeout redis-server redis-cli redis-benchmark; do
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
case "$BUILD_DIR" in
  /*) PETRELD="$BUILD_DIR/petreld" ;;
  *) PETRELD="$ROOT/$BUILD_DIR/petreld" ;;
esac
if [ ! -x "$PETRELD" ]; then
  echo "bench: $PETRELD not found" >&2
  exit 1
fi

# ---------- environment ----------
WORK="$(mktemp -d /tmp/petrel-bench-dict.XXXXXX)"
PID=""
REDIS_PORT=""
cleanup() {
  if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$PID" 2>/dev/null || true
  fi
  if [ -n "$REDIS_PORT" ]; then
    timeout 10 redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
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

if [ "$QUIET_WAIT" -gt 0 ]; then
  waited=0
  while [ -n "$(concurrent)" ] && [ "$waited" -lt "$QUIET_WAIT" ]; do
    sleep 10
    waited=$((waited + 10))
  done
  if [ -n "$(concurrent)" ]; then
    echo "bench: machine still busy after ${QUIET_WAIT}s, measuring anyway" >&2
  fi
fi

start_redis() {
  REDIS_PORT="$(free_port)"
  mkdir -p "$WORK/redis"
  nice -n "$NICE" taskset -c "$SERVER_CPU" redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$WORK/redis" \
    --save '' --appendonly no --daemonize yes --pidfile "$WORK/redis/redis.pid" \
    --logfile "$WORK/redis/redis.log" >/dev/null
  for _ in $(seq 100); do
    if timeout 2 redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; then
      return 0
    fi
    sleep 0.1
  done
  echo "bench: redis-server did not come up" >&2
  exit 1
}

dict_config() { # $1 = driver kind
  case "$1" in
    memory) printf '    driver: memory\n' ;;
    sqlite) printf '    driver: sql\n    backend: sqlite\n    path: %s\n' "$WORK/dict.sqlite" ;;
    kvstore) printf '    driver: kvstore\n    address: 127.0.0.1:%s\n    prefix: "bench:"\n' "$REDIS_PORT" ;;
  esac
}

start_petreld() { # $1 = driver kind
  local api_port tel_port
  api_port="$(free_port)"
  tel_port="$(free_port)"
  rm -f "$WORK"/dict.sqlite*
  {
    cat <<EOF
components: [backend-api]
log_level: warn
allow_root: true
shutdown_timeout: 5s
telemetry:
  listen: 127.0.0.1:$tel_port
backend_api:
  listen: 127.0.0.1:$api_port
  allowed_nets: [127.0.0.0/8]
  token_env: PETREL_BENCH_TOKEN
dicts:
  d:
EOF
    dict_config "$1"
  } >"$WORK/petrel.yaml"
  PETREL_BENCH_TOKEN="" nice -n "$NICE" taskset -c "$SERVER_CPU" "$PETRELD" -c "$WORK/petrel.yaml" \
    >>"$WORK/petreld.log" 2>&1 &
  PID=$!
  API="http://127.0.0.1:$api_port"
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

# Writes shared/bench/0..KEYS-1 through commit-batch, checks one lookup.
prefill() {
  python3 - "$API" "$KEYS" <<'EOF'
import base64, http.client, json, sys
api, keys = sys.argv[1], int(sys.argv[2])
host, port = api.removeprefix("http://").rsplit(":", 1)
conn = http.client.HTTPConnection(host, int(port), timeout=60)
value = base64.b64encode(b"Petrel" * 11).decode()
for start in range(0, keys, 5000):
    ops = [{"kind": "set", "key": f"shared/bench/{i}", "value": value}
           for i in range(start, min(keys, start + 5000))]
    conn.request("POST", "/api/backend/dict/d/commit-batch", body=json.dumps({"ops": ops}),
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    body = r.read()
    if r.status != 200 or json.loads(body)["result"] != 1:
        sys.exit(f"prefill: {r.status} {body[:200]!r}")
conn.request("POST", "/api/backend/dict/d/lookup", body=json.dumps({"key": f"shared/bench/{keys - 1}"}))
r = conn.getresponse()
body = json.loads(r.read())
if r.status != 200 or not body["found"]:
    sys.exit(f"prefill: lookup after prefill: {r.status} {body}")
EOF
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

# utime + stime of a process, in clock ticks.
cpu_ticks() {
  awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0
}
redis_pid() {
  cat "$WORK/redis/redis.pid" 2>/dev/null || true
}
TICKS="$(getconf CLK_TCK)"

SECS="${DURATION%s}"
RESULTS=()
FAILED=0
declare -A P50 AVG RPS

note_concurrency() { # $1 = scenario, $2 = output of concurrent, $3 = load
  if [ -n "$2" ]; then
    echo "bench: $1: measured while other work was running (load $3):" >&2
    echo "$2" | sed 's/^/bench:   /' >&2
    RESULTS+=("|   ↳ concurrent: $(echo "$2" | wc -l) process(es) matching fuzz-/pytest/ninja, load $3 | | | | | | | | | |")
  fi
}

run_redis_anchor() {
  echo "== redis: redis-benchmark -t get,set -c $CONNECTIONS -n $REDIS_REQUESTS" >&2
  local busy load out rpid t0 t1
  busy="$(concurrent)"
  load="$(cut -d' ' -f1-3 /proc/loadavg)"
  rpid="$(redis_pid)"
  local op rps avg p50 p99 cpu_us projected name
  # One run per command so that redis-server's CPU time can be split.
  for op in SET GET; do
    out="$WORK/redis-benchmark-$op.csv"
    t0="$(cpu_ticks "$rpid")"
    # -r: random keys over the same key-space size as the HTTP scenarios.
    timeout 300 nice -n "$NICE" taskset -c "$CLIENT_CPU" redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" \
      -t "$(echo "$op" | tr 'A-Z' 'a-z')" -c "$CONNECTIONS" -n "$REDIS_REQUESTS" -r "$KEYS" \
      -d 66 --csv >"$out" 2>/dev/null
    t1="$(cpu_ticks "$rpid")"
    cat "$out" >&2
    # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    rps="$(awk -F'"' -v t="$op" '$2 == t {printf "%.0f", $4}' "$out")"
    avg="$(awk -F'"' -v t="$op" '$2 == t {print $6}' "$out")"
    p50="$(awk -F'"' -v t="$op" '$2 == t {print $10}' "$out")"
    p99="$(awk -F'"' -v t="$op" '$2 == t {print $14}' "$out")"
    cpu_us="$(awk -v d=$((t1 - t0)) -v n="$REDIS_REQUESTS" -v hz="$TICKS" 'BEGIN {printf "%.1f", d * 1e6 / hz / n}')"
    projected="$(awk -v c="$cpu_us" 'BEGIN {if (c > 0) printf "%.0f", 1e6 / c; else print "n/a"}')"
    name="redis-$(echo "$op" | tr 'A-Z' 'a-z')"
    P50[$name]="$p50"
    AVG[$name]="$avg"
    RPS[$name]="$rps"
    RESULTS+=("| $name | redis-benchmark $op (anchor) | $rps | $avg | $p50 | - | $p99 | $cpu_us | $projected | |")
  done
  note_concurrency redis "$busy" "$load"
}

run_http() { # $1 = scenario name
  local name="$1" kind="${1%-*}" op="${1##*-}"
  start_petreld "$kind"
  if ! prefill; then
    echo "bench: $name: prefill failed; petreld log:" >&2
    tail -20 "$WORK/petreld.log" >&2
    stop_petreld
    FAILED=1
    return
  fi
  echo "== $name: POST /api/backend/dict/d/$op ($kind driver), ${CONNECTIONS} connections, $DURATION" >&2
  export BENCH_OP="$op" BENCH_DICT=d BENCH_KEYS="$KEYS"
  timeout 120 nice -n "$NICE" taskset -c "$CLIENT_CPU" wrk -t"$THREADS" -c"$CONNECTIONS" -d"$WARMUP" \
    -s "$ROOT/bench/dict.lua" "$API" >/dev/null
  local busy load out="$WORK/wrk-$name.txt"
  busy="$(concurrent)"
  load="$(cut -d' ' -f1-3 /proc/loadavg)"
  # CPU time of petreld, plus redis-server's for the kvstore driver.
  local rpid="" t0 t1 r0=0 r1=0
  if [ "$kind" = kvstore ]; then rpid="$(redis_pid)"; fi
  t0="$(cpu_ticks "$PID")"
  if [ -n "$rpid" ]; then r0="$(cpu_ticks "$rpid")"; fi
  timeout $((${SECS%.*} + 60)) nice -n "$NICE" taskset -c "$CLIENT_CPU" wrk -t"$THREADS" -c"$CONNECTIONS" \
    -d"$DURATION" --latency -s "$ROOT/bench/dict.lua" "$API" >"$out"
  t1="$(cpu_ticks "$PID")"
  if [ -n "$rpid" ]; then r1="$(cpu_ticks "$rpid")"; fi
  t0=$((t0 + r0))
  t1=$((t1 + r1))
  if [ "$kind" = kvstore ]; then
    echo "bench: $name: redis keys after the run: $(redis-cli -p "$REDIS_PORT" dbsize)" >&2
  fi
  stop_petreld
  cat "$out" >&2

  local rps avg p50 p90 p99 non2xx errors requests cpu_us projected
  requests="$(awk '/requests in/ {print $1}' "$out")"
  cpu_us="$(awk -v d=$((t1 - t0)) -v n="$requests" -v hz="$TICKS" 'BEGIN {if (n > 0) printf "%.1f", d * 1e6 / hz / n; else print "n/a"}')"
  projected="$(awk -v c="$cpu_us" 'BEGIN {if (c > 0) printf "%.0f", 1e6 / c; else print "n/a"}')"
  rps="$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$out")"
  avg="$(to_ms "$(awk '$1 == "Latency" {print $2; exit}' "$out")")"
  p50="$(to_ms "$(awk '$1 == "50%" {print $2}' "$out")")"
  p90="$(to_ms "$(awk '$1 == "90%" {print $2}' "$out")")"
  p99="$(to_ms "$(awk '$1 == "99%" {print $2}' "$out")")"
  non2xx="$(awk '/Non-2xx or 3xx responses:/ {print $NF}' "$out")"
  errors="$(awk '/Socket errors:/ {sub(/.*Socket errors: /, ""); print}' "$out")"
  P50[$name]="$p50"
  AVG[$name]="$avg"
  RPS[$name]="$rps"
  local target=""
  if [ "$name" = memory-lookup ]; then
    if [ "$rps" -ge "$TARGET_MEMORY_LOOKUP_RPS" ]; then
      target="≥ $TARGET_MEMORY_LOOKUP_RPS/s: yes"
    else
      target="≥ $TARGET_MEMORY_LOOKUP_RPS/s: NO"
    fi
  fi
  if [ "$kind" = kvstore ]; then
    local anchor
    anchor="redis-$([ "$op" = lookup ] && echo get || echo set)"
    if [ -n "${P50[$anchor]:-}" ]; then
      local factor afactor
      factor="$(awk -v a="$p50" -v b="${P50[$anchor]}" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "n/a"}')"
      afactor="$(awk -v a="$avg" -v b="${AVG[$anchor]}" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "n/a"}')"
      if awk -v f="$factor" -v t="$TARGET_REDIS_LATENCY_FACTOR" 'BEGIN {exit !(f + 0 <= t)}'; then
        target="p50 ${factor}× $anchor: yes (avg ${afactor}×)"
      else
        target="p50 ${factor}× $anchor: NO (avg ${afactor}×)"
      fi
    fi
  fi
  if [ -n "$non2xx" ]; then
    echo "bench: $name: $non2xx responses were not 2xx" >&2
    target="$target (non-2xx: $non2xx)"
    FAILED=1
  fi
  if [ -n "$errors" ]; then
    echo "bench: $name: socket errors: $errors" >&2
  fi
  RESULTS+=("| $name | POST .../$op ($kind) | $rps | $avg | $p50 | $p90 | $p99 | $cpu_us | $projected | $target |")
  note_concurrency "$name" "$busy" "$load"
}

REV="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "bench: petreld $("$PETRELD" --version | cut -d' ' -f2) ($BUILD_DIR, tree $REV), server CPU $SERVER_CPU, load CPU $CLIENT_CPU, $(nproc) CPUs, nice $NICE" >&2
need_redis=0
for s in "${SCENARIOS[@]}"; do
  case "$s" in redis | kvstore-*) need_redis=1 ;; esac
done
if [ "$need_redis" = 1 ]; then
  start_redis
fi
# The anchor runs first so kvstore scenarios can be compared with it.
for s in "${SCENARIOS[@]}"; do
  if [ "$s" = redis ]; then
    run_redis_anchor
  fi
done
for s in "${SCENARIOS[@]}"; do
  case "$s" in
    redis) ;;
    *) run_http "$s" ;;
  esac
done

echo
echo "Targets: memory-driver lookups >= $TARGET_MEMORY_LOOKUP_RPS/s through HTTP; kvstore p50 within ${TARGET_REDIS_LATENCY_FACTOR}x of redis-benchmark's (same op, same connection count)."
echo "Tree $REV, $(date -u +%Y-%m-%dT%H:%MZ), nice $NICE. petreld and redis-server on CPU $SERVER_CPU, wrk / redis-benchmark on CPU $CLIENT_CPU; $CONNECTIONS connections; $KEYS keys."
echo
echo "| scenario | request | req/s | avg ms | p50 ms | p90 ms | p99 ms | server CPU µs/req | req/s per core at that cost | target |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"
for r in "${RESULTS[@]}"; do
  echo "$r"
done
exit "$FAILED"
