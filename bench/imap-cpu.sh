#!/usr/bin/env bash
# CPU per IMAP command, counted in instructions (docs/performance.md, "IMAP").
#
#   bench/imap-cpu.sh [BUILD_DIR ...]     default: build-cpu of this tree
#
# Wall-clock rates (bench/imap.sh) move with whatever else the machine runs;
# instruction counts do not. For each build directory given (each holds a
# petreld; give an older tree's build as well to compare), this script:
#
#   1. starts an auth petreld and an imap petreld (mail.fsync: never), and
#      fills one user's INBOX with CPU_MESSAGES generated messages through
#      bench/imap-bench's `setup` (the same bytes on every run); the
#      resulting maildir is kept as a template;
#   2. for each mix in CPU_MIXES: copies the template, starts the imap
#      petreld under `valgrind --tool=callgrind` (mail.fsync: CPU_FSYNC),
#      and runs one connection of `imap-bench load` with
#      IMAP_BENCH_COMMANDS=CPU_COMMANDS and IMAP_BENCH_MIX=<mix>: LOGIN,
#      SELECT INBOX, then exactly that many commands from the client's fixed
#      seed, so every run sends the same commands. The client zeroes
#      callgrind's counters once it is selected and dumps them after its
#      last answer, so the count is the measured commands' alone (not start,
#      login, logout or shutdown);
#   3. prints instructions per command for each mix and build, side by side,
#      with the change against the first build, and for the mix named
#      CPU_DIFF_MIX the functions whose self and inclusive instruction
#      counts per command changed the most (from callgrind_annotate).
#
# Mixes are bench/imap-bench.c's names: "mix" is the load run's own weights;
# "noop" is NOOP alone (so its count is one command's sync, dispatch and
# response); "expunge" cycles APPEND, UID STORE +FLAGS.SILENT (\Deleted)
# and EXPUNGE; "append" is APPENDs with a STORE \Deleted + EXPUNGE after
# every 64. The client only sees its own mailbox (one connection), so this
# counts one session's work per command, not the cost of other sessions'
# changes (bench/imap.sh's load run has those).
#
# The builds should use the same compiler flags: the default build-cpu is
# `meson setup build-cpu --buildtype=release -Ddebug=true` (bench/imap.sh's
# release flags plus debug information, which callgrind_annotate needs for
# function names; it does not change the code). For an older commit:
#   git archive <commit> | tar -x -C /tmp/old && cd /tmp/old &&
#   meson setup build-cpu --buildtype=release -Ddebug=true && ninja -C build-cpu petreld
# The load generator is this tree's (older trees' lack the knobs).
#
# Knobs: CPU_MIXES="mix noop headers body seen unseen flags append expunge idle select"
#        CPU_COMMANDS=400  CPU_MESSAGES=50  CPU_FSYNC=always  CPU_DIFF_MIX=mix
#        CPU_REPEAT=3 (runs per mix and build; the least count is reported:
#        runs of the same session differ only by the state of malloc's free
#        lists, a cache hit or miss now and then, up to ~4 % of a NOOP)
#        CPU_SYSCALLS=1 (also count system calls per command: one more run
#        of each mix without valgrind, `strace -f -c` attached for the window;
#        CPU_SYSCALLS= to skip)
#        CPU_TOP=25 (functions listed)  CPU_KEEP=1 (keep the work directory
#        with the callgrind files: callgrind_annotate them)
# Runtime: about 10 s of valgrind per mix, run and build at the defaults
# (three builds' worth of all mixes: some 15 minutes on a busy machine).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MIXES="${CPU_MIXES:-mix noop headers body seen unseen flags append expunge idle select}"
COMMANDS="${CPU_COMMANDS:-400}"
MESSAGES="${CPU_MESSAGES:-50}"
FSYNC="${CPU_FSYNC:-always}"
DIFF_MIX="${CPU_DIFF_MIX:-mix}"
REPEAT="${CPU_REPEAT:-3}"
SYSCALLS="${CPU_SYSCALLS-1}"
TOP="${CPU_TOP:-25}"
BUILDS=("$@")
[ ${#BUILDS[@]} -eq 0 ] && BUILDS=("$ROOT/build-cpu")

cd "$ROOT"
if [ ! -f build-cpu/build.ninja ]; then
  meson setup build-cpu --buildtype=release -Ddebug=true >/dev/null
fi
ninja -C build-cpu bench/imap-bench >/dev/null
[ "${BUILDS[0]}" = "$ROOT/build-cpu" ] && ninja -C build-cpu petreld >/dev/null
CLIENT="$ROOT/build-cpu/bench/imap-bench"
command -v valgrind >/dev/null || { echo "imap-cpu: valgrind is needed" >&2; exit 2; }

work="$(mktemp -d /tmp/petrel-imap-cpu.XXXXXX)"
pids=()
WAIT_TRIES=600
# shellcheck source=lib-daemon.sh
. "$ROOT/bench/lib-daemon.sh"

printf 'cpu1:{PLAIN}pw-1:%d:%d\n' 10001 10001 >"$work/passwd"
printf 'cpu1\tpw-1\n' >"$work/users"

# start_petreld BUILD NAME COMPONENT MAILDIR FSYNC [wrapper...]: sets PID and PORT
start_petreld() {
  local build="$1" name="$2" comp="$3" mail="$4" fsync="$5"
  shift 5
  PORT="$(free_port)"
  if [ "$comp" = auth ]; then
    cat >"$work/$name.yaml" <<YAML
allow_root: true
log_level: warn
components: [auth]
telemetry: {listen: "127.0.0.1:$(free_port)"}
auth:
  listen: ["127.0.0.1:$PORT"]
  passdb: {driver: passwd-file, path: "$work/passwd"}
YAML
  else
    cat >"$work/$name.yaml" <<YAML
allow_root: true
log_level: warn
components: [imap]
telemetry: {listen: "127.0.0.1:$(free_port)"}
mail:
  home: "$mail/%u"
  fsync: $fsync
imap:
  listen: ["127.0.0.1:$PORT"]
  auth_addr: "127.0.0.1:$AUTH_PORT"
YAML
  fi
  "$@" "$build/petreld" -c "$work/$name.yaml" 2>>"$work/$name.log" &
  PID=$!
  pids+=("$PID")
  wait_port "$PORT" "$PID" "$work/$name.log"
}

declare -A IR CMDS SYS SYSTOP
for b in "${BUILDS[@]}"; do
  [ -x "$b/petreld" ] || { echo "imap-cpu: no petreld in $b" >&2; exit 2; }
  tag="$(basename "$(dirname "$b")")-$(basename "$b")"
  start_petreld "$b" "$tag-auth" auth "" ""
  AUTH_PORT="$PORT"
  auth_pid="$PID"
  start_petreld "$b" "$tag-fill" imap "$work/$tag.template" never
  "$CLIENT" setup "127.0.0.1:$PORT" "$work/users" "$MESSAGES" mixed >/dev/null
  stop "$PID"
  for mix in $MIXES; do
    for run in $(seq "$REPEAT"); do
      rm -rf "$work/mail"
      cp -a "$work/$tag.template" "$work/mail"
      out="$work/$tag.$mix.callgrind"
      start_petreld "$b" "$tag-$mix" imap "$work/mail" "$FSYNC" \
        valgrind --tool=callgrind --callgrind-out-file="$out" -q
      vpid="$PID"
      m="$mix"
      [ "$mix" = mix ] && m=""
      # Zero at the start, dump at the end: the dump file ($out.1) holds the window.
      if ! res="$(IMAP_BENCH_MIX="$m" IMAP_BENCH_COMMANDS="$COMMANDS" \
        IMAP_BENCH_HOOK_START="callgrind_control -z $vpid >/dev/null 2>&1" \
        IMAP_BENCH_HOOK_STOP="callgrind_control --dump=window $vpid >/dev/null 2>&1" \
        "$CLIENT" load "127.0.0.1:$PORT" "$work/users" "$MESSAGES" 600 1)"; then
        echo "$res"
        echo "imap-cpu: $tag $mix: the client failed" >&2
        exit 1
      fi
      stop "$vpid"
      n="$(sed -n 's/.* commands=\([0-9]*\) .*/\1/p' <<<"$res")"
      dump="$(ls "$out".* 2>/dev/null | head -1)"
      [ -n "$dump" ] || { echo "imap-cpu: no callgrind dump for $tag $mix" >&2; exit 1; }
      ir="$(sed -n 's/^summary: *\([0-9]*\).*/\1/p; s/^totals: *\([0-9]*\).*/\1/p' "$dump" | head -1)"
      rm -f "$out"
      # the least count of the runs (see CPU_REPEAT), and its profile
      if [ -z "${IR[$tag/$mix]:-}" ] || [ "$ir" -lt "${IR[$tag/$mix]}" ]; then
        IR["$tag/$mix"]="$ir"
        CMDS["$tag/$mix"]="$n"
        mv "$dump" "$work/$tag.$mix.window"
      else
        rm -f "$dump"
      fi
      # what the mix was made of, once
      if [ "$b" = "${BUILDS[0]}" ]; then
        awk '/^command /{t=1; next} t && /^all \(mix\)/{exit} t {c=$NF; n=$(NF-5); $NF=$(NF-1)=$(NF-2)=$(NF-3)=$(NF-4)=$(NF-5)=""; sub(/ +$/,""); printf "%s%s %s", s, n, $0; s=", "} END {print ""}' \
          <<<"$res" >"$work/$mix.composition"
      fi
    done
    # System calls: the kernel's share, which callgrind does not see. One
    # run without valgrind, strace -c attached for the same window.
    if [ -n "$SYSCALLS" ]; then
      rm -rf "$work/mail"
      cp -a "$work/$tag.template" "$work/mail"
      start_petreld "$b" "$tag-$mix-sys" imap "$work/mail" "$FSYNC"
      spid="$PID"
      res="$(IMAP_BENCH_MIX="$m" IMAP_BENCH_COMMANDS="$COMMANDS" \
        IMAP_BENCH_HOOK_START="strace -f -c -o $work/$tag.$mix.strace -p $spid 2>/dev/null & echo \$! >$work/strace.pid; sleep 1" \
        IMAP_BENCH_HOOK_STOP="kill -INT \$(cat $work/strace.pid); while kill -0 \$(cat $work/strace.pid) 2>/dev/null; do sleep 0.1; done" \
        "$CLIENT" load "127.0.0.1:$PORT" "$work/users" "$MESSAGES" 600 1)" || true
      stop "$spid"
      n="$(sed -n 's/.* commands=\([0-9]*\) .*/\1/p' <<<"$res")"
      SYS["$tag/$mix"]="$(awk -v n="${n:-0}" '$NF == "total" && n > 0 { printf "%.2f", $4 / n }' "$work/$tag.$mix.strace")"
      SYSTOP["$tag/$mix"]="$(awk -v n="${n:-0}" 'n > 0 && $NF != "total" && $4 ~ /^[0-9]+$/ && $4 / n >= 0.05 {
          printf "%s %.2f\n", $NF, $4 / n }' "$work/$tag.$mix.strace" | sort -k2 -rn | head -8 | tr '\n' ' ')"
    fi
  done
  stop "$auth_pid"
done

echo "imap-cpu: instructions per command (callgrind Ir, least of $REPEAT runs), $COMMANDS commands per mix, $MESSAGES messages, mail.fsync: $FSYNC, $(date -u +%Y-%m-%d)"
printf '%-10s' mix
for b in "${BUILDS[@]}"; do printf ' %22s' "$(basename "$(dirname "$b")")/$(basename "$b")"; done
echo
for mix in $MIXES; do
  printf '%-10s' "$mix"
  first=""
  for b in "${BUILDS[@]}"; do
    tag="$(basename "$(dirname "$b")")-$(basename "$b")"
    per="$(awk -v i="${IR[$tag/$mix]}" -v n="${CMDS[$tag/$mix]}" 'BEGIN { printf "%.0f", (n > 0 ? i / n : 0) }')"
    if [ -z "$first" ]; then
      first="$per"
      printf ' %22s' "$per"
    else
      printf ' %13s (%+5.1f %%)' "$per" "$(awk -v a="$per" -v f="$first" 'BEGIN { print (f > 0 ? 100 * (a - f) / f : 0) }')"
    fi
  done
  echo "   [$(cat "$work/$mix.composition")]"
done

if [ -n "$SYSCALLS" ]; then
  echo
  echo "system calls per command (strace -c, one run without valgrind):"
  for mix in $MIXES; do
    printf '%-10s' "$mix"
    for b in "${BUILDS[@]}"; do
      tag="$(basename "$(dirname "$b")")-$(basename "$b")"
      printf ' %22s' "${SYS[$tag/$mix]:-?}"
    done
    echo
  done
  for b in "${BUILDS[@]}"; do
    tag="$(basename "$(dirname "$b")")-$(basename "$b")"
    echo "  $tag, mix: ${SYSTOP[$tag/mix]:-}"
  done
fi

# The functions whose cost per command changed most between the first and
# the last build, for CPU_DIFF_MIX.
if [ ${#BUILDS[@]} -ge 2 ] && [[ " $MIXES " == *" $DIFF_MIX "* ]]; then
  a="${BUILDS[0]}"
  z="${BUILDS[${#BUILDS[@]} - 1]}"
  ta="$(basename "$(dirname "$a")")-$(basename "$a")"
  tz="$(basename "$(dirname "$z")")-$(basename "$z")"
  for kind in no yes; do
    for t in "$ta" "$tz"; do
      callgrind_annotate --inclusive="$kind" --threshold=100 --auto=no \
        "$work/$t.$DIFF_MIX.window" >"$work/$t.$DIFF_MIX.annotate-$kind" 2>/dev/null
    done
    python3 - "$work/$ta.$DIFF_MIX.annotate-$kind" "${CMDS[$ta/$DIFF_MIX]}" \
      "$work/$tz.$DIFF_MIX.annotate-$kind" "${CMDS[$tz/$DIFF_MIX]}" "$kind" "$TOP" <<'PY'
import re, sys
def load(path, n):
    costs = {}
    for line in open(path, errors="replace"):
        m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*?)\s*$", line)
        if not m or ":" not in m.group(2):
            continue
        name = re.sub(r"^.*?:", "", m.group(2), count=1) if not m.group(2).startswith("???") else m.group(2)
        name = re.sub(r"\s+\[.*\]$", "", name)
        costs[name] = costs.get(name, 0) + int(m.group(1).replace(",", "")) / int(n)
    return costs
a = load(sys.argv[1], sys.argv[2]); z = load(sys.argv[3], sys.argv[4])
what = "inclusive" if sys.argv[5] == "yes" else "self"
top = int(sys.argv[6])
rows = sorted(set(a) | set(z), key=lambda k: -abs(z.get(k, 0) - a.get(k, 0)))[:top]
print(f"\n{what} instructions per command, first build -> last build, largest changes:")
for k in rows:
    print(f"  {a.get(k, 0):10.0f} {z.get(k, 0):10.0f} {z.get(k, 0) - a.get(k, 0):+10.0f}  {k[:110]}")
PY
  done
fi
