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
# loopback address; SHA512-CRYPT passwords, auth caches on) and measures,
# directly against backend a and through proxy a to it, with the same users:
#
#   throughput  imap-bench load, a read mix (NOOP, FETCH headers/bodies/flags,
#               SELECT), then whole-message FETCHes only (bytes/s);
#               direct/proxy/proxy/direct; ratio of the means (target >= 90 %)
#               and the proxy's CPU per relayed command
#   logins      connect + LOGIN + LOGOUT cycles per second with every user
#               already in the auth caches (target >= 2,000/s via the proxy)
#   memory      VmRSS growth of the proxy per idle proxied session after
#               LOGIN + SELECT (target <= 16 KiB)
#
# Prints the numbers and ratios; writes nothing outside its work directory.
# Exit 0 when every run finished without a client error; targets are
# reported, not enforced.
#
# Knobs: BENCH_DURATION=10 (s per throughput run)  BENCH_CLIENTS=20
#        BENCH_MESSAGES=50 (per load user)  BENCH_USERS=200
#        BENCH_MIX="noop=16,headers=14,body=14,flags=8,select=4"
#        BENCH_BULK_MIX="body=1"
#        BENCH_LOGIN_SECONDS=5  BENCH_LOGIN_PROCS=2  BENCH_LOGIN_CONCURRENCY=32
#        BENCH_IDLE_SESSIONS=2000  BENCH_BUILD_DIR=build-release
#        BENCH_NO_BUILD=1  BENCH_KEEP=1 (keep the work directory and its logs)
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

"$PYTHON" "$ROOT/bench/login_proxy_bench.py" "$ROOT/$BUILD_DIR" "$work"
