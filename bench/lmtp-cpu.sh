#!/usr/bin/env bash
# CPU per LMTP delivery, counted in instructions (docs/performance.md, "LMTP").
#
#   bench/lmtp-cpu.sh [BUILD_DIR ...]     default: build-release of this tree
#
# Wall-clock rates (bench/lmtp.sh) move with whatever else the machine runs;
# instruction counts do not. For each build directory given (each holds a
# petreld; give an older tree's build as well to compare), this script:
#
#   1. starts an auth petreld and, under `valgrind --tool=callgrind`, an
#      lmtp petreld (mail.fsync: CPU_FSYNC, lmtp.delivery_threads:
#      CPU_THREADS) on an empty mail directory;
#   2. delivers one warm-up message to each of CPU_USERS users, so every
#      INBOX and its index exist (folder creation is not what is measured);
#   3. zeroes callgrind's counters, delivers CPU_MESSAGES messages of
#      CPU_SIZE bytes over one LMTP connection (Python smtplib.LMTP), message
#      n to user (n mod CPU_USERS) + 1, the same bytes on every run, and
#      dumps the counters after the last 250: the count is the deliveries'
#      alone (not start-up, warm-up or shutdown);
#   4. prints instructions per delivery for each build, with the change
#      against the first build.
#
# The builds should use the same compiler flags (both release builds, or
# both `--buildtype=release -Ddebug=true` for callgrind_annotate's names).
# For an older commit:
#   git archive <commit> | tar -x -C /tmp/old && cd /tmp/old &&
#   meson setup build --buildtype=release && ninja -C build petreld
#
# Knobs: CPU_MESSAGES=300  CPU_USERS=10  CPU_SIZE=4096  CPU_FSYNC=never
#        CPU_THREADS=1  CPU_KEEP=1 (keep the work directory and the
#        callgrind files)
# Runtime: about 20 s of valgrind per build at the defaults.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MESSAGES="${CPU_MESSAGES:-300}"
USERS="${CPU_USERS:-10}"
SIZE="${CPU_SIZE:-4096}"
FSYNC="${CPU_FSYNC:-never}"
THREADS="${CPU_THREADS:-1}"
PYTHON="${PYTHON:-/usr/bin/python3}"
BUILDS=("$@")
[ ${#BUILDS[@]} -eq 0 ] && BUILDS=("$ROOT/build-release")

cd "$ROOT"
if [ "${BUILDS[0]}" = "$ROOT/build-release" ]; then
  [ -f build-release/build.ninja ] || meson setup build-release --buildtype=release >/dev/null
  ninja -C build-release petreld >/dev/null
fi
command -v valgrind >/dev/null || { echo "lmtp-cpu: valgrind is needed" >&2; exit 2; }

work="$(mktemp -d /tmp/petrel-lmtp-cpu.XXXXXX)"
pids=()
WAIT_TRIES=1200
# shellcheck source=lib-daemon.sh
. "$ROOT/bench/lib-daemon.sh"

for i in $(seq 1 "$USERS"); do printf 'user%d:{PLAIN}pw:1000:1000\n' "$i"; done >"$work/passwd"

# deliver PORT FIRST COUNT: messages FIRST..FIRST+COUNT-1 over one connection
deliver() {
  "$PYTHON" - "$1" "$2" "$3" "$USERS" "$SIZE" <<'PY'
import smtplib, sys
port, first, count, users, size = map(int, sys.argv[1:])
line = b"The quick brown fox jumps over the lazy dog 0123456789 .,;:!?\r\n"
c = smtplib.LMTP("127.0.0.1", port)
for n in range(first, first + count):
    rcpt = f"user{n % users + 1}@example.org"
    head = (f"From: bench@example.org\r\nTo: {rcpt}\r\nSubject: cpu {n}\r\n"
            f"Message-ID: <cpu-{n}@example.org>\r\n"
            f"Date: Sun, 22 Nov 2026 10:00:00 +0000\r\n\r\n").encode()
    body = (line * (size // len(line) + 1))[: max(0, size - len(head) - 2)]
    c.sendmail("bench@example.org", [rcpt], head + body + b"\r\n")
c.quit()
PY
}

declare -A IR
for b in "${BUILDS[@]}"; do
  [ -x "$b/petreld" ] || { echo "lmtp-cpu: no petreld in $b" >&2; exit 2; }
  tag="$(basename "$(dirname "$b")")-$(basename "$b")"
  auth_port="$(free_port)"
  cat >"$work/$tag-auth.yaml" <<YAML
allow_root: true
log_level: warn
components: [auth]
telemetry: {listen: "127.0.0.1:$(free_port)"}
auth:
  listen: ["127.0.0.1:$auth_port"]
  passdb: {driver: passwd-file, path: "$work/passwd"}
YAML
  "$b/petreld" -c "$work/$tag-auth.yaml" 2>>"$work/$tag-auth.log" &
  auth_pid=$!
  pids+=("$auth_pid")
  wait_port "$auth_port" "$auth_pid" "$work/$tag-auth.log"

  port="$(free_port)"
  rm -rf "$work/mail"
  cat >"$work/$tag-lmtp.yaml" <<YAML
allow_root: true
log_level: warn
components: [lmtp]
telemetry: {listen: "127.0.0.1:$(free_port)"}
mail: {home: "$work/mail/%u", fsync: $FSYNC}
lmtp:
  listen: ["127.0.0.1:$port"]
  auth_addr: "127.0.0.1:$auth_port"
  username_format: "%n"
  delivery_threads: $THREADS
YAML
  out="$work/$tag.callgrind"
  valgrind --tool=callgrind --callgrind-out-file="$out" -q \
    "$b/petreld" -c "$work/$tag-lmtp.yaml" 2>>"$work/$tag-lmtp.log" &
  vpid=$!
  pids+=("$vpid")
  wait_port "$port" "$vpid" "$work/$tag-lmtp.log"
  deliver "$port" 0 "$USERS"
  callgrind_control -z "$vpid" >/dev/null 2>&1
  deliver "$port" "$USERS" "$MESSAGES"
  callgrind_control --dump=window "$vpid" >/dev/null 2>&1
  stop "$vpid"
  stop "$auth_pid"
  stored="$(find "$work/mail" -path '*/Maildir/cur/*' -type f | wc -l)"
  if [ "$stored" -ne $((USERS + MESSAGES)) ]; then
    echo "lmtp-cpu: $tag stored $stored messages, expected $((USERS + MESSAGES))" >&2
    exit 1
  fi
  dump="$(ls "$out".* 2>/dev/null | head -1)"
  [ -n "$dump" ] || { echo "lmtp-cpu: no callgrind dump for $tag" >&2; exit 1; }
  IR["$tag"]="$(sed -n 's/^summary: *\([0-9]*\).*/\1/p; s/^totals: *\([0-9]*\).*/\1/p' "$dump" | head -1)"
done

echo "lmtp-cpu: instructions per delivery (callgrind Ir), $MESSAGES messages of $SIZE bytes" \
  "to $USERS users, mail.fsync: $FSYNC, delivery_threads: $THREADS, $(date -u +%Y-%m-%d)"
first=""
for b in "${BUILDS[@]}"; do
  tag="$(basename "$(dirname "$b")")-$(basename "$b")"
  per="$(awk -v i="${IR[$tag]}" -v n="$MESSAGES" 'BEGIN { printf "%.0f", i / n }')"
  if [ -z "$first" ]; then
    first="$per"
    printf '%-40s %12s\n' "$b" "$per"
  else
    printf '%-40s %12s (%+.1f %%)\n' "$b" "$per" \
      "$(awk -v a="$per" -v f="$first" 'BEGIN { print 100 * (a - f) / f }')"
  fi
done
