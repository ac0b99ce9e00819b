#!/usr/bin/env bash
# Before/after benchmark of an architecture step (docs/performance.md,
# "Architecture step"): the six "must show" measurements for two builds side
# by side, in one run on one machine.
#
#   bench/arch-step.sh BEFORE_BUILD_DIR AFTER_BUILD_DIR
#
# Each build directory holds a petreld (both release builds). A busy machine
# moves wall-clock rates by far more than the 3 % a step may cost, so the
# comparison is in instructions, which it does not move:
#
#   1. health, dict, auth, director: for each build, petreld runs under
#      `valgrind --tool=callgrind` with that one component, and
#      bench/arch-step.py sends WARMUP requests, zeroes callgrind's counters,
#      sends ARCH_COUNT requests one at a time over one connection (the same
#      requests on every run) and dumps the counters: instructions per
#      request is the dump's total over ARCH_COUNT. The least of ARCH_REPEAT
#      runs is kept (runs differ by malloc's free lists, ~1 %).
#   2. IMAP mix and LMTP: bench/imap-cpu.sh (CPU_MIXES=mix) and
#      bench/lmtp-cpu.sh with the two builds: instructions per command and
#      per delivery, counted the same way (see those scripts).
#   3. For the record, wall-clock rates of the four of step 1 without
#      valgrind: ARCH_PAIRS pairs, the two builds alternated (before-after,
#      then after-before, ...) so that a change in the machine's load hits
#      both alike; each run is ARCH_WALL_COUNT requests over one connection.
#
# Knobs: ARCH_COUNT=2000  ARCH_REPEAT=2  ARCH_PAIRS=3  ARCH_WALL_COUNT=5000
#        ARCH_SCENARIOS="health dict auth director"  ARCH_MAIL=1 (0: skip
#        IMAP and LMTP)  CPU_KEEP=1 (keep the work directory)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -eq 2 ] || { echo "usage: bench/arch-step.sh BEFORE_BUILD_DIR AFTER_BUILD_DIR" >&2; exit 2; }
BUILDS=("$(cd "$1" && pwd)" "$(cd "$2" && pwd)")
COUNT="${ARCH_COUNT:-2000}"
REPEAT="${ARCH_REPEAT:-2}"
PAIRS="${ARCH_PAIRS:-3}"
WALL_COUNT="${ARCH_WALL_COUNT:-5000}"
read -r -a SCENARIOS <<<"${ARCH_SCENARIOS:-health dict auth director}"
MAIL="${ARCH_MAIL:-1}"

work="$(mktemp -d /tmp/petrel-arch-step.XXXXXX)"
pids=()
# shellcheck source=bench/lib-daemon.sh
source "$ROOT/bench/lib-daemon.sh"
DRIVER=("$PYTHON" "$ROOT/bench/arch-step.py")

for b in "${BUILDS[@]}"; do
  [ -x "$b/petreld" ] || { echo "arch-step: no petreld in $b" >&2; exit 2; }
done
for i in $(seq 1 100); do
  printf 'p%d:{PLAIN}pw-%d:%d:%d\n' "$i" "$i" "$((10000 + i))" "$((10000 + i))"
done >"$work/passwd"

# config SCENARIO PORT: petrel.yaml for one scenario on PORT.
config() {
  cat <<YAML
allow_root: true
log_level: warn
telemetry: {listen: "127.0.0.1:$(free_port)"}
YAML
  case "$1" in
    health | dict)
      echo "components: [backend-api]"
      echo "backend_api: {listen: \"127.0.0.1:$2\", allowed_nets: [127.0.0.0/8]}"
      [ "$1" = dict ] && echo "dicts: {d: {driver: memory}}"
      ;;
    auth)
      echo "components: [auth]"
      echo "auth: {listen: [\"127.0.0.1:$2\"], passdb: {driver: passwd-file, path: \"$work/passwd\"}}"
      ;;
    director)
      echo "components: [director]"
      echo "director:"
      echo "  api: {listen: \"127.0.0.1:$(free_port)\"}"
      echo "  ring: {listen: \"127.0.0.1:$2\", allow_unauthenticated: true}"
      echo "  backends:"
      for i in $(seq 1 10); do echo "    - {ip: 10.0.0.$i, port: 143, vhosts: 100}"; done
      ;;
  esac
  return 0
}

# start BUILD SCENARIO [valgrind args...]: sets PORT and SPID.
start() {
  local b="$1" sc="$2"
  shift 2
  PORT="$(free_port)"
  config "$sc" "$PORT" >"$work/$sc.yaml"
  "$@" "$b/petreld" -c "$work/$sc.yaml" 2>>"$work/$sc.log" &
  SPID=$!
  pids+=("$SPID")
  wait_port "$PORT" "$SPID" "$work/$sc.log"
}

tag_of() { echo "$(basename "$(dirname "$1")")-$(basename "$1")"; }

declare -A IR
for sc in "${SCENARIOS[@]}"; do
  for b in "${BUILDS[@]}"; do
    best=""
    for r in $(seq 1 "$REPEAT"); do
      out="$work/$sc-$(tag_of "$b")-$r.callgrind"
      start "$b" "$sc" valgrind --tool=callgrind --callgrind-out-file="$out" -q
      "${DRIVER[@]}" "$sc" "127.0.0.1:$PORT" "$COUNT" --zero "$SPID" --dump "$SPID" >/dev/null
      stop "$SPID"
      dump="$(ls "$out".* 2>/dev/null | head -1)"
      [ -n "$dump" ] || { echo "arch-step: no callgrind dump for $sc $b" >&2; exit 1; }
      ir="$(sed -n 's/^summary: *\([0-9]*\).*/\1/p; s/^totals: *\([0-9]*\).*/\1/p' "$dump" | head -1)"
      if [ -z "$best" ] || [ "$ir" -lt "$best" ]; then best="$ir"; fi
    done
    IR["$sc,$b"]="$best"
  done
done

declare -A RATE
for p in $(seq 1 "$PAIRS"); do
  order=("${BUILDS[@]}")
  [ $((p % 2)) -eq 0 ] && order=("${BUILDS[1]}" "${BUILDS[0]}")
  for sc in "${SCENARIOS[@]}"; do
    for b in "${order[@]}"; do
      start "$b" "$sc"
      rate="$("${DRIVER[@]}" "$sc" "127.0.0.1:$PORT" "$WALL_COUNT" | sed -n 's/.*rate=\([0-9]*\).*/\1/p')"
      stop "$SPID"
      RATE["$sc,$b"]="${RATE["$sc,$b"]:-} $rate"
    done
  done
done

echo "arch-step: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $(uname -r)," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "instructions per request (callgrind Ir, least of $REPEAT runs of $COUNT requests);" \
  "requests/s over one connection, one request at a time ($PAIRS alternated pairs of $WALL_COUNT)"
printf '%-10s %14s %14s %8s   %-24s %-24s\n' scenario "Ir before" "Ir after" change \
  "req/s before" "req/s after"
for sc in "${SCENARIOS[@]}"; do
  ra="${RATE["$sc,${BUILDS[0]}"]:-}" # ARCH_PAIRS=0: no rates
  rz="${RATE["$sc,${BUILDS[1]}"]:-}"
  a="${IR["$sc,${BUILDS[0]}"]}"
  z="${IR["$sc,${BUILDS[1]}"]}"
  printf '%-10s %14.0f %14.0f %+7.1f%%   %-24s %-24s\n' "$sc" \
    "$(awk -v i="$a" -v n="$COUNT" 'BEGIN { print i / n }')" \
    "$(awk -v i="$z" -v n="$COUNT" 'BEGIN { print i / n }')" \
    "$(awk -v a="$a" -v z="$z" 'BEGIN { print 100 * (z - a) / a }')" \
    "${ra# }" "${rz# }"
done

if [ "$MAIL" = 1 ]; then
  echo
  CPU_MIXES=mix CPU_DIFF_MIX=none CPU_REPEAT="$REPEAT" "$ROOT/bench/imap-cpu.sh" "${BUILDS[@]}"
  echo
  "$ROOT/bench/lmtp-cpu.sh" "${BUILDS[@]}"
fi
