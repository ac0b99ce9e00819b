#!/usr/bin/env bash
# The login proxy against direct access, in one run (docs/performance.md,
# "Login proxy"; issue 26).
#
#   bench/login-proxy.sh
#
# Builds a release build (build-release/: petreld, petrelctl,
# bench/imap-bench), then bench/login_proxy_bench.py starts the fleet of
# tests/e2e/fleet.py from it (two backends, two directors, the monitor, the
# proxies' auth service, two login proxies, each its own petreld on its own
# loopback address; SHA512-CRYPT passwords, auth caches on) and Dovecot 2.3
# as an IMAP proxy in front of the same backend a (bench/dovecot_proxy.py),
# and measures, with the same users, directly against backend a, through
# Petrel's proxy a and through Dovecot's proxy, in each CPU placement
# (bench/cpu_placement.py):
#
#   shared      every process on every CPU (the proxy's CPU is taken from
#               the client and the backend)
#   split       the proxies alone on CPU 1, everything else on CPU 0, for the
#               direct and the proxied runs alike (a proxy on its own host)
#   backend     the servers alone on CPU 0, the load generator and the
#               proxies on CPU 1 (a backend on its own host)
#
#   throughput  imap-bench load, a read mix (NOOP, FETCH headers/bodies/flags,
#               SELECT), then whole-message FETCHes only;
#               direct/petrel/dovecot/dovecot/petrel/direct; ratio of the
#               means to direct (target >= 90 %), CPU per command of each
#               proxy, of the backend and of the load generator, p50 latency,
#               and the CPU the rest of the (shared) machine used meanwhile
#   logins      connect + LOGIN + LOGOUT cycles per second with every user
#               already in the auth caches (target >= 2,000/s via the proxy),
#               direct, via Petrel, via Dovecot (same hashes) and via a
#               Dovecot with {PLAIN} passwords
#   memory      VmRSS growth of Petrel's proxy per idle proxied session after
#               LOGIN + SELECT (target <= 16 KiB), once; then, with
#               bench/login-proxy-tls-idle.py, per kind of client connection
#               (plain, implicit TLS, STARTTLS; 500 sessions each)
#
# Prints the numbers, a summary table and the ratios; writes nothing outside
# its work directory. Exit 0 when every run finished without a client error;
# targets are reported, not enforced. About 9 minutes with the defaults on
# a quiet machine.
#
# Knobs: BENCH_PLACEMENT=both (shared|split|both)  BENCH_DOVECOT=1 (0: leave
#        Dovecot out)  BENCH_DOVECOT_LOGIN_PROCS=1 (imap-login processes)
#        BENCH_DURATION=8 (s per throughput run)  BENCH_ROUNDS=2 (runs of
#        each target per load, interleaved)  BENCH_CLIENTS=20
#        BENCH_MESSAGES=50 (per load user)  BENCH_USERS=200
#        BENCH_MIX="noop=16,headers=14,body=14,flags=8,select=4"
#        BENCH_BULK_MIX="body=1"
#        BENCH_LOGIN_SECONDS=4  BENCH_LOGIN_CONCURRENCY=64
#        BENCH_IDLE_SESSIONS=2000  BENCH_QUIET_WAIT=5 (s to wait before each
#        run for the rest of the machine to use < BENCH_QUIET_OTHER=25 % of a
#        CPU)  BENCH_NICE= (opt-in, e.g. -10: every bench process at that
#        nice value, to be skewed less by other work on a shared machine)
#        BENCH_BUILD_DIR=build-release  BENCH_NO_BUILD=1  BENCH_NO_TLS_IDLE=1
#        BENCH_KEEP=1 (keep the work directory and its logs)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BENCH_BUILD_DIR:-build-release}"
PYTHON="${PYTHON:-/usr/bin/python3}"
IDLE_SESSIONS="${BENCH_IDLE_SESSIONS:-2000}"

cd "$ROOT"
if [ -z "${BENCH_NO_BUILD:-}" ]; then
  [ -f "$BUILD_DIR/build.ninja" ] || meson setup "$BUILD_DIR" --buildtype=release >/dev/null
  ninja -C "$BUILD_DIR" petreld petrelctl bench/imap-bench >/dev/null
fi

# The proxy holds two descriptors per session, the client one.
need_fds=$((IDLE_SESSIONS * 3 + 4096))
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$need_fds" ]; then
  ulimit -n "$need_fds" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
fi

work="$(mktemp -d /tmp/petrel-login-proxy-bench.XXXXXX)"
cleanup() {
  if [ -n "${BENCH_KEEP:-}" ]; then echo "work directory kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

rc=0
"$PYTHON" "$ROOT/bench/login_proxy_bench.py" "$ROOT/$BUILD_DIR" "$work" || rc=$?
# Idle memory per session by kind of client connection (plain, implicit
# TLS, STARTTLS), each on a freshly started proxy.
if [ -z "${BENCH_NO_TLS_IDLE:-}" ]; then
  "$PYTHON" "$ROOT/bench/login-proxy-tls-idle.py" "$ROOT/$BUILD_DIR" || rc=$?
fi
exit "$rc"
