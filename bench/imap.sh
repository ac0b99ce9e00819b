#!/usr/bin/env bash
# IMAP server benchmark (docs/performance.md, "IMAP").
#
#   bench/imap.sh [scenario ...]        scenarios: load idle (default: both)
#
# Builds a release build (build-release/), writes a passwd-file with {PLAIN}
# passwords (so the auth cache is never the bottleneck) for BENCH_CLIENTS
# users bench1..benchN and BENCH_IDLE_SESSIONS users idle1..idleN, and starts
# two petreld processes pinned to the same core: one with the auth component,
# one with the imap component (so the IMAP process's RSS and CPU are IMAP's
# alone). The load generator, bench/imap-bench.c, runs on the other core.
#
#   load   each benchN gets BENCH_MESSAGES generated messages (mixed sizes,
#          0.3-820 KB, ~20 KB mean) through IMAP APPEND while petreld runs with
#          mail.fsync: never; petreld is then restarted with mail.fsync:
#          BENCH_FSYNC and BENCH_CLIENTS connections (one per user) log in,
#          SELECT INBOX and run the command mix for BENCH_DURATION seconds
#          (one command in flight per connection). Prints commands/s,
#          per-command p50/p99 and petreld's CPU time per command.
#   idle   each idleN gets BENCH_IDLE_MESSAGES small messages; a fresh imap
#          petreld; BENCH_IDLE_SESSIONS connections LOGIN and SELECT INBOX
#          and stay; petreld's VmRSS before and after gives KiB per session.
#
# Exit 0 when every run finished with no error (any NO/BAD, unexpected BYE,
# closed connection or mismatching response is an error); targets are
# reported, not enforced.
#
# Knobs: BENCH_DURATION=30  BENCH_CLIENTS=50  BENCH_MESSAGES=200
#        BENCH_FSYNC=always (always|optimized|never, for the load run)
#        BENCH_IDLE_SESSIONS=2000  BENCH_IDLE_MESSAGES=10
#        BENCH_SERVER_CPU=0  BENCH_CLIENT_CPU=1  BENCH_BUILD_DIR=build-release
#        (a CPU list such as BENCH_SERVER_CPU=0,1 lets petreld use both cores)
#        BENCH_WORKERS=N (imap.workers: session loops on N threads; default:
#                      petreld's own default)
#        BENCH_NO_BUILD=1  BENCH_KEEP=1 (keep the work directory)
#        BENCH_PERF=1 (perf record -g the imap petreld during the load run;
#                      report in the work directory, implies BENCH_KEEP)
#        BENCH_MAIL_FS=ext4|xfs (root: the mail lives on a file system of
#                      that kind made in a 4 GiB image file in the work
#                      directory and loop-mounted; ext4 gets mkfs's default
#                      journal. Default: the work directory's own file
#                      system, which on this project's VMs is ext4 made
#                      without a journal)
#        BENCH_STRACE=1 (strace -c -f the imap petreld during the load run and
#                      print system calls per command; strace slows petreld,
#                      so the rates of that run are not comparable)
#        BENCH_STRACE_CALLS=newfstatat,flock (with BENCH_STRACE=1: log those
#                      calls with their arguments and count them per command
#                      by argument pattern, to see where they come from;
#                      BENCH_STRACE_STACKS=1 adds each call's stack to the
#                      logs in the work directory: use with BENCH_KEEP=1)
#        BENCH_SYSCOUNT=1 (count the imap petreld's system calls by kind with
#                      perf's tracepoints during the load run: cheap enough
#                      that the run's rate stays comparable; also the block
#                      I/O it submits (bios, requests, sectors written),
#                      page faults and context switches, and the bytes of
#                      /proc/PID/io, per command: the kernel work behind
#                      calls whose count did not change)
#        BENCH_MIX="noop=1,headers=2" (replaces the command mix; names: noop
#                      headers body seen unseen flags append expunge idle select)
#        BENCH_NICE=-10 (root: run in a session of its own whose scheduler
#                      autogroup gets this nice level, as bench/http-health.sh
#                      does, so other sessions' fuzzers skew less)
#
# Targets: >= 20,000 commands/s with 50 clients; <= 64 KiB RSS per idle
# authenticated session.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DURATION="${BENCH_DURATION:-30}"
CLIENTS="${BENCH_CLIENTS:-50}"
MESSAGES="${BENCH_MESSAGES:-200}"
FSYNC="${BENCH_FSYNC:-always}"
IDLE_SESSIONS="${BENCH_IDLE_SESSIONS:-2000}"
IDLE_MESSAGES="${BENCH_IDLE_MESSAGES:-10}"
SERVER_CPU="${BENCH_SERVER_CPU:-0}"
WORKERS="${BENCH_WORKERS:-}"
CLIENT_CPU="${BENCH_CLIENT_CPU:-1}"
BUILD_DIR="${BENCH_BUILD_DIR:-build-release}"
PERF="${BENCH_PERF:-}"
KEEP="${BENCH_KEEP:-$PERF}"
NICE="${BENCH_NICE:-0}"
SCENARIOS=("$@")
[ ${#SCENARIOS[@]} -eq 0 ] && SCENARIOS=(load idle)
if [ "$NICE" != 0 ] && [ -z "${BENCH_OWN_SESSION:-}" ]; then
  # With autogroup scheduling, nice only ranks processes within their session.
  export BENCH_OWN_SESSION=1
  exec setsid --wait "$0" "$@"
fi
if [ "$NICE" != 0 ] && [ -w /proc/self/autogroup ]; then
  echo "$NICE" >/proc/self/autogroup 2>/dev/null || true
fi
[ -n "${BENCH_MIX:-}" ] && export IMAP_BENCH_MIX="$BENCH_MIX"

cd "$ROOT"
if [ -z "${BENCH_NO_BUILD:-}" ]; then
  [ -f "$BUILD_DIR/build.ninja" ] || meson setup "$BUILD_DIR" --buildtype=release >/dev/null
  ninja -C "$BUILD_DIR" petreld bench/imap-bench >/dev/null
fi
PETRELD="$ROOT/$BUILD_DIR/petreld"
CLIENT="$ROOT/$BUILD_DIR/bench/imap-bench"

# Both sides hold one descriptor per session, plus the store's files.
need_fds=$((IDLE_SESSIONS * 2 + 1024))
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$need_fds" ]; then
  ulimit -n "$need_fds" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
fi

work="$(mktemp -d /tmp/petrel-imap-bench.XXXXXX)"
auth_pid=""
imap_pid=""
mail_mount=""
cleanup() {
  [ -n "$imap_pid" ] && kill "$imap_pid" 2>/dev/null && wait "$imap_pid" 2>/dev/null || true
  [ -n "$auth_pid" ] && kill "$auth_pid" 2>/dev/null && wait "$auth_pid" 2>/dev/null || true
  if [ -n "$mail_mount" ]; then
    umount "$mail_mount" 2>/dev/null || umount -l "$mail_mount" 2>/dev/null || true
    rm -f "$work/mail.img"
  fi
  if [ -n "$KEEP" ]; then echo "work directory kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

MAIL_FS="${BENCH_MAIL_FS:-}"
mkdir -p "$work/mail"
if [ -n "$MAIL_FS" ]; then
  case "$MAIL_FS" in
    ext4) mkfs_cmd=(mkfs.ext4 -q -F) ;;
    xfs) mkfs_cmd=(mkfs.xfs -q -f) ;;
    *) echo "BENCH_MAIL_FS: ext4 or xfs, not $MAIL_FS" >&2; exit 2 ;;
  esac
  truncate -s 4G "$work/mail.img"
  "${mkfs_cmd[@]}" "$work/mail.img" >/dev/null
  mount -o loop "$work/mail.img" "$work/mail"
  mail_mount="$work/mail"
fi

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_port() { # port pid log
  for _ in $(seq 200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    kill -0 "$2" 2>/dev/null || break
    sleep 0.05
  done
  echo "petreld did not start:" >&2
  cat "$3" >&2
  exit 1
}

cpu_ticks() { # utime + stime of a process, in clock ticks
  awk '{print $14 + $15}' "/proc/$1/stat"
}

# Users: benchN for the load, idleN for the idle sessions; PLAIN passwords.
: >"$work/passwd"
: >"$work/load.users"
: >"$work/idle.users"
for i in $(seq 1 "$CLIENTS"); do
  printf 'bench%d:{PLAIN}pw-%d:%d:%d\n' "$i" "$i" "$((10000 + i))" "$((10000 + i))" >>"$work/passwd"
  printf 'bench%d\tpw-%d\n' "$i" "$i" >>"$work/load.users"
done
for i in $(seq 1 "$IDLE_SESSIONS"); do
  printf 'idle%d:{PLAIN}ipw-%d:%d:%d\n' "$i" "$i" "$((20000 + i))" "$((20000 + i))" >>"$work/passwd"
  printf 'idle%d\tipw-%d\n' "$i" "$i" >>"$work/idle.users"
done

auth_port="$(free_port)"
cat >"$work/auth.yaml" <<YAML
allow_root: true
log_level: warn
components: [auth]
telemetry: {listen: "127.0.0.1:$(free_port)"}
auth:
  listen: ["127.0.0.1:$auth_port"]
  passdb: {driver: passwd-file, path: "$work/passwd"}
YAML
nice -n "$NICE" taskset -c "$SERVER_CPU" "$PETRELD" -c "$work/auth.yaml" 2>"$work/auth.log" &
auth_pid=$!
wait_port "$auth_port" "$auth_pid" "$work/auth.log"

start_imap() { # fsync
  local port
  port="$(free_port)"
  cat >"$work/imap.yaml" <<YAML
allow_root: true
log_level: warn
components: [imap]
telemetry: {listen: "127.0.0.1:$(free_port)"}
mail:
  home: "$work/mail/%u"
  fsync: $1
imap:
  listen: ["127.0.0.1:$port"]
  auth_addr: "127.0.0.1:$auth_port"
  max_connections: $((IDLE_SESSIONS + 1000))
YAML
  # every client is 127.0.0.1 here (older trees, measured with this script, lack the key)
  grep -q max_connections_per_ip "$PETRELD" && echo "  max_connections_per_ip: 0" >>"$work/imap.yaml"
  [ -n "$WORKERS" ] && echo "  workers: $WORKERS" >>"$work/imap.yaml"
  nice -n "$NICE" taskset -c "$SERVER_CPU" "$PETRELD" -c "$work/imap.yaml" 2>>"$work/imap.log" &
  imap_pid=$!
  ADDR="127.0.0.1:$port"
  wait_port "$port" "$imap_pid" "$work/imap.log"
}

stop_imap() {
  kill "$imap_pid"
  wait "$imap_pid" || true
  imap_pid=""
}

client() {
  nice -n "$NICE" taskset -c "$CLIENT_CPU" "$CLIENT" "$@"
}

echo "imap benchmark: $(nproc) CPUs, $(uname -r), $(date -u +%Y-%m-%dT%H:%MZ), nice $NICE, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "petreld on CPU $SERVER_CPU, client on CPU $CLIENT_CPU, imap.workers: ${WORKERS:-default}"
echo "mail on: $(df -T "$work/mail" | awk 'NR == 2 {print $2}')${MAIL_FS:+ (loop-mounted image)}$(
  [ -d /proc/fs/jbd2 ] && [ -z "$(ls /proc/fs/jbd2 2>/dev/null)" ] && [ -z "$MAIL_FS" ] && echo ', no jbd2 journal running')"
[ -n "${IMAP_BENCH_MIX:-}" ] && echo "command mix: $IMAP_BENCH_MIX"
others="$(pgrep -af 'fuzz-|pytest|ninja|petreld' | grep -v "$work" | cut -c1-100 || true)"
[ -n "$others" ] && printf 'also running:\n%s\n' "$others"
status=0
for sc in "${SCENARIOS[@]}"; do
  case "$sc" in
    load)
      start_imap never
      client setup "$ADDR" "$work/load.users" "$MESSAGES" mixed || { status=1; stop_imap; continue; }
      stop_imap
      sync
      start_imap "$FSYNC"
      echo "load: $CLIENTS clients, $MESSAGES messages each ($(du -sh "$work/mail" | cut -f1) of mail), ${DURATION}s, mail.fsync: $FSYNC"
      perf_pid=""
      if [ -n "$PERF" ]; then
        perf record -g -o "$work/perf.data" -p "$imap_pid" 2>"$work/perf.log" &
        perf_pid=$!
      fi
      strace_pid=""
      if [ -n "${BENCH_STRACE:-}" ]; then
        if [ -n "${BENCH_STRACE_CALLS:-}" ]; then
          # every call of the named system calls, with their arguments, to see where they come from
          strace -ff -qq ${BENCH_STRACE_STACKS:+-k} -e trace="$BENCH_STRACE_CALLS" -o "$work/strace.log" -p "$imap_pid" 2>/dev/null &
        else
          strace -c -f -o "$work/strace.txt" -p "$imap_pid" 2>/dev/null &
        fi
        strace_pid=$!
        sleep 0.5
      fi
      syscount_pid=""
      if [ -n "${BENCH_SYSCOUNT:-}" ]; then
        io0="$(cat "/proc/$imap_pid/io" 2>/dev/null || true)"
        perf stat -x, -e 'syscalls:sys_enter_*' -e block:block_bio_queue -e block:block_rq_issue \
          -e page-faults -e context-switches -o "$work/syscount.txt" -p "$imap_pid" \
          2>/dev/null &
        syscount_pid=$!
        sleep 0.5
      fi
      t0="$(cpu_ticks "$imap_pid")"
      a0="$(cpu_ticks "$auth_pid")"
      if out="$(client load "$ADDR" "$work/load.users" "$MESSAGES" "$DURATION" "$CLIENTS")"; then
        echo "$out"
      else
        echo "$out"
        echo "load: FAILED"
        status=1
      fi
      t1="$(cpu_ticks "$imap_pid")"
      a1="$(cpu_ticks "$auth_pid")"
      if [ -n "$perf_pid" ]; then
        kill -INT "$perf_pid"
        wait "$perf_pid" || true
        perf report -i "$work/perf.data" --no-children --sort dso,symbol --stdio \
          >"$work/perf.txt" 2>/dev/null || true
        echo "perf report: $work/perf.txt"
      fi
      cmds="$(sed -n 's/.* commands=\([0-9]*\) .*/\1/p' <<<"$out")"
      if [ -n "$syscount_pid" ]; then
        kill -INT "$syscount_pid"
        wait "$syscount_pid" || true
        io1="$(cat "/proc/$imap_pid/io" 2>/dev/null || true)"
        awk -F, -v n="${cmds:-0}" 'n > 0 && $1 ~ /^[0-9]+$/ && $1 > 0 && $3 !~ /^syscalls:/ {
            printf "  %-24s %9.3f per command\n", $3, $1 / n }' "$work/syscount.txt"
        # bytes through read/write calls and to/from the block layer (write_bytes:
        # what this process dirtied in the page cache, written now or later)
        printf '%s\n--\n%s\n' "$io0" "$io1" | awk -v n="${cmds:-0}" '
          $0 == "--" { after = 1; next }
          { sub(/:$/, "", $1); if (after) d[$1] += $2; else d[$1] -= $2 }
          END { if (n > 0) for (k in d) if (k ~ /bytes|char/) printf "  io %-20s %9.1f per command\n", k, d[k] / n }' | sort
        awk -F, -v n="${cmds:-0}" 'n > 0 && $1 ~ /^[0-9]+$/ && $1 > 0 && $3 ~ /^syscalls:/ {
            sub(/syscalls:sys_enter_/, "", $3); all += $1
            if ($1 / n >= 0.005) printf "  %-16s %7.3f per command\n", $3, $1 / n }
          END { if (n > 0) printf "  %-16s %7.3f per command\n", "all", all / n }' \
          "$work/syscount.txt" | sort -k2 -rn | head -25
      fi
      if [ -n "$strace_pid" ]; then
        kill -INT "$strace_pid"
        wait "$strace_pid" || true
        if [ -n "${BENCH_STRACE_CALLS:-}" ]; then
          # per call and argument pattern (numbers and user names folded), per command
          cat "$work"/strace.log.* | sed -E 's/[0-9]+/N/g; s/user[A-Za-z_N]*/USER/g; s/"[^"]*(Maildir|\/mail\/)/"MAIL/' |
            sed -E 's/\) += .*$/)/' | sort | uniq -c | sort -rn | head -30 |
            awk -v n="${cmds:-0}" 'n > 0 { c = $1; $1 = ""; printf "  %7.3f per command %s\n", c / n, $0 }'
          echo "strace logs: $work/strace.log.*"
        fi
        [ -f "$work/strace.txt" ] && awk -v n="${cmds:-0}" 'n > 0 && $NF != "total" && $4 ~ /^[0-9]+$/ {
            if ($4 / n >= 0.005) printf "  %-16s %7.2f per command\n", $NF, $4 / n }
          n > 0 && $NF == "total" { printf "  %-16s %7.2f per command\n", "all", $4 / n }' \
          "$work/strace.txt" | sort -k2 -rn | head -25
      fi
      hz="$(getconf CLK_TCK)"
      awk -v t="$((t1 - t0))" -v a="$((a1 - a0))" -v hz="$hz" -v n="${cmds:-0}" -v d="$DURATION" \
        'BEGIN { printf "petreld imap CPU %.1f s (%.0f %% of one core), %.1f us per command; auth CPU %.2f s\n",
                 t / hz, 100 * t / hz / d, (n > 0 ? 1e6 * t / hz / n : 0), a / hz }'
      stop_imap
      ;;
    idle)
      start_imap never
      client setup "$ADDR" "$work/idle.users" "$IDLE_MESSAGES" small || { status=1; stop_imap; continue; }
      stop_imap
      start_imap "$FSYNC"
      echo "idle: $IDLE_SESSIONS sessions (LOGIN + SELECT INBOX of $IDLE_MESSAGES messages), fd limit $(ulimit -n)"
      if ! client idle "$ADDR" "$work/idle.users" "$IDLE_SESSIONS" "$imap_pid"; then
        echo "idle: FAILED"
        status=1
      fi
      stop_imap
      ;;
    *) echo "unknown scenario $sc" >&2; exit 1 ;;
  esac
done
if grep -qiE 'error|crit|fatal|sanitizer' "$work/imap.log" "$work/auth.log" 2>/dev/null; then
  echo "petreld logged problems:"
  grep -iE 'error|crit|fatal|sanitizer' "$work/imap.log" "$work/auth.log" | head -20
fi
exit $status
