#!/usr/bin/env bash
# Builds Petrel with ThreadSanitizer and runs the threaded tests (docs/fuzzing.md#threadsanitizer).
#
#   scripts/tsan.sh            unit tests with threads, then the e2e files that drive threads
#   scripts/tsan.sh unit       the unit tests only
#   scripts/tsan.sh e2e        the e2e files only
#
# It configures build-tsan/ (-Db_sanitize=thread -Db_lundef=false, debugoptimized) when
# needed and builds. Every process writes its reports to build-tsan/tsan-logs/ (TSAN_OPTIONS
# log_path), so a race in a petreld started by an e2e test is seen as well as one in a unit
# test binary. Exit status 1 when any test failed or any report was written; the reports'
# first lines are printed. Not part of scripts/test.sh (a TSan build runs 5-15x slower).
#
# Environment:
#   TSAN_BUILD_DIR   build directory (default build-tsan)
#   TSAN_UNIT        unit tests to run (default below)
#   TSAN_E2E         e2e files to run (default below)
#   TSAN_E2E_FILTER  pytest -k expression for them (default: "not ten_thousand")
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${TSAN_BUILD_DIR:-$ROOT/build-tsan}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
WHAT=${1:-all}
case "$WHAT" in all | unit | e2e) ;; *) sed -n '2,7p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2 ;; esac

# The tests whose code runs on more than one thread: CRC-32C set-up from cold, the
# fileindex's fork and thread tests, the worker pool, the log level swap, the auth pool.
# (test-auth-cache is single-threaded and times its lookups: TSan's slowdown fails it.)
UNIT=${TSAN_UNIT:-"test-crc32c test-fileindex test-worker-pool test-log test-auth-db"}
# IMAP workers, LMTP delivery threads, auth threads in a real petreld.
# (the 10,000-message LMTP test is left out: minutes under TSan for no other code path)
E2E=${TSAN_E2E:-"tests/e2e/test_imap_workers.py tests/e2e/test_lmtp.py tests/e2e/test_lmtp_memory_at_rest.py tests/e2e/test_metadata.py"}
E2E_FILTER=${TSAN_E2E_FILTER:-"not ten_thousand"}

if [ ! -f "$BUILD/build.ninja" ]; then
    meson setup "$BUILD" "$ROOT" -Db_sanitize=thread -Db_lundef=false --buildtype=debugoptimized \
        >/dev/null
fi
meson compile -C "$BUILD" >/dev/null

LOGS=$BUILD/tsan-logs
rm -rf "$LOGS"
mkdir -p "$LOGS"
# halt_on_error=0: one run collects every report; second_deadlock_stack for lock-order reports.
export TSAN_OPTIONS="log_path=$LOGS/report halt_on_error=0 second_deadlock_stack=1 history_size=4"
status=0

if [ "$WHAT" != e2e ]; then
    # shellcheck disable=SC2086
    meson test -C "$BUILD" --suite unit --print-errorlogs --timeout-multiplier 10 $UNIT || status=1
fi
if [ "$WHAT" != unit ]; then
    # shellcheck disable=SC2086
    (cd "$ROOT" && PETREL_BUILD="$BUILD" /usr/bin/python3 -m pytest $E2E -q -p no:cacheprovider -k "$E2E_FILTER") ||
        status=1
fi

reports=$(find "$LOGS" -type f -name 'report*' | sort)
if [ -n "$reports" ]; then
    status=1
    echo "ThreadSanitizer reports ($(echo "$reports" | wc -l) files in $LOGS):"
    for f in $reports; do
        echo "== $f"
        grep -m 3 -E 'WARNING: ThreadSanitizer|#0 |#1 ' "$f" || head -5 "$f"
    done
else
    echo "no ThreadSanitizer report"
fi
exit $status
