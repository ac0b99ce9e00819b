#!/usr/bin/env bash
# Builds and runs Petrel's libFuzzer targets (docs/fuzzing.md).
#
#   scripts/fuzz.sh [target|all] [seconds]     fuzz for `seconds` (default 600) each
#                                              (target may be a comma list: config,cidr)
#   scripts/fuzz.sh <target> <file>...         replay inputs (a crash-* artifact, a corpus file)
#   scripts/fuzz.sh list                       list the targets
#
# Targets: `scripts/fuzz.sh list` (the fuzz_targets list in fuzz/meson.build); the "fuzz-" prefix may be left
# out: `scripts/fuzz.sh http-parser 60`.
#
# It configures build-fuzz/ with clang, ASan and UBSan (-Dfuzz=true
# -Db_sanitize=address,undefined -Db_lundef=false) when needed, builds, and runs each target
# as one process on one core (no -jobs/-workers fan-out), seeded from fuzz/corpus/<target>/.
# What the run finds goes under build-fuzz/ (ignored by git):
#   build-fuzz/corpus-run/<target>/   the growing corpus (reused by the next run)
#   build-fuzz/artifacts/<target>/    crash-*, leak-*, timeout-*, oom-* inputs
#   build-fuzz/logs/<target>.log      the full libFuzzer output
# and prints a summary line per target: seconds, execs, coverage (cov), features (ft),
# corpus size and findings. Exit status 1 when any target found something.
#
# Environment:
#   FUZZ_PARALLEL=N   with `all` or a list, run N targets at once (default 1; the project's shared
#                     machines allow at most 2)
#   FUZZ_BUILD_DIR    build directory (default build-fuzz)
#   FUZZ_ARGS         extra libFuzzer flags, e.g. FUZZ_ARGS="-only_ascii=1"
#   CC                compiler for a fresh build directory (default clang)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
# The targets are the list in fuzz/meson.build: one place to add a target.
mapfile -t TARGETS < <(grep -o "^  'fuzz-[a-z0-9-]*'" "$ROOT/fuzz/meson.build" | tr -d "' ")
[ "${#TARGETS[@]}" -gt 0 ] || { echo "no fuzz targets found in fuzz/meson.build" >&2; exit 2; }

usage() {
    sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 2
}

# Largest input per target: configs and bodies up to 16 KiB keep executions fast;
# the HTTP target reaches its head-size limits through a second, small limit.
max_len_of() {
    case "$1" in
    fuzz-config) echo 16384 ;;
    fuzz-json-request) echo 16384 ;;
    fuzz-http-parser) echo 16384 ;;
    fuzz-http-router) echo 1024 ;;
    fuzz-cidr) echo 256 ;;
    fuzz-dict-request) echo 16384 ;;
    fuzz-dict-file) echo 65536 ;;
    fuzz-uidlist) echo 16384 ;;
    fuzz-uidlist-append) echo 16384 ;;
    fuzz-fileindex) echo 1024 ;;
    fuzz-subscriptions) echo 8192 ;;
    fuzz-acl-file) echo 8192 ;;
    fuzz-metadata-entry) echo 2048 ;;
    fuzz-maildir-filename) echo 512 ;;
    fuzz-mailbox-name) echo 4096 ;;
    fuzz-passwd-file) echo 16384 ;;
    fuzz-auth-line) echo 16384 ;;
    fuzz-mime) echo 65536 ;;
    fuzz-imap-parser) echo 65536 ;;
    fuzz-imap-sort) echo 16384 ;;
    fuzz-lmtp-parser) echo 16384 ;;
    fuzz-pop3-parser) echo 16384 ;;
    fuzz-warden-line) echo 16384 ;;
    fuzz-ring-protocol) echo 4096 ;;
    fuzz-monitor-dialog) echo 16384 ;;
    fuzz-monitor-config) echo 16384 ;;
    fuzz-quota-rule) echo 4096 ;;
    fuzz-policy-request) echo 16384 ;;
    fuzz-mail-forward) echo 2048 ;;
    fuzz-proxy-login) echo 16384 ;;
    fuzz-pvt-seen) echo 4096 ;;
    fuzz-acl-list-index) echo 8192 ;;
    *) echo 16384 ;;
    esac
}

dict_of() {
    case "$1" in
    fuzz-config) echo "$ROOT/fuzz/dict/yaml.dict" ;;
    fuzz-json-request) echo "$ROOT/fuzz/dict/json.dict" ;;
    fuzz-http-parser) echo "$ROOT/fuzz/dict/http.dict" ;;
    fuzz-http-router) echo "$ROOT/fuzz/dict/http-router.dict" ;;
    fuzz-cidr) echo "$ROOT/fuzz/dict/cidr.dict" ;;
    fuzz-dict-request) echo "$ROOT/fuzz/dict/json.dict" ;;
    fuzz-dict-file) echo "$ROOT/fuzz/dict/dict-file.dict" ;;
    fuzz-uidlist) echo "$ROOT/fuzz/dict/uidlist.dict" ;;
    fuzz-uidlist-append) echo "$ROOT/fuzz/dict/uidlist.dict" ;;
    fuzz-fileindex) echo "$ROOT/fuzz/dict/fileindex.dict" ;;
    fuzz-subscriptions) echo "$ROOT/fuzz/dict/subscriptions.dict" ;;
    fuzz-acl-file) echo "$ROOT/fuzz/dict/acl.dict" ;;
    fuzz-metadata-entry) echo "$ROOT/fuzz/dict/metadata.dict" ;;
    fuzz-maildir-filename) echo "$ROOT/fuzz/dict/maildir-filename.dict" ;;
    fuzz-mailbox-name) echo "$ROOT/fuzz/dict/mutf7.dict" ;;
    fuzz-passwd-file) echo "$ROOT/fuzz/dict/passwd-file.dict" ;;
    fuzz-auth-line) echo "$ROOT/fuzz/dict/auth-line.dict" ;;
    fuzz-mime) echo "$ROOT/fuzz/dict/mime.dict" ;;
    fuzz-imap-parser) echo "$ROOT/fuzz/dict/imap.dict" ;;
    fuzz-imap-sort) echo "$ROOT/fuzz/dict/imap-sort.dict" ;;
    fuzz-lmtp-parser) echo "$ROOT/fuzz/dict/lmtp.dict" ;;
    fuzz-pop3-parser) echo "$ROOT/fuzz/dict/pop3.dict" ;;
    fuzz-warden-line) echo "$ROOT/fuzz/dict/warden-line.dict" ;;
    fuzz-ring-protocol) echo "$ROOT/fuzz/dict/ring-protocol.dict" ;;
    fuzz-monitor-dialog) echo "$ROOT/fuzz/dict/monitor-dialog.dict" ;;
    fuzz-monitor-config) echo "$ROOT/fuzz/dict/monitor-config.dict" ;;
    fuzz-quota-rule) echo "$ROOT/fuzz/dict/quota-rule.dict" ;;
    fuzz-policy-request) echo "$ROOT/fuzz/dict/policy-request.dict" ;;
    fuzz-mail-forward) echo "$ROOT/fuzz/dict/mail-forward.dict" ;;
    fuzz-acl-list-index) echo "$ROOT/fuzz/dict/acl.dict" ;;
    fuzz-imap-metadata) echo "$ROOT/fuzz/dict/imap.dict" ;;
    fuzz-lmtp-proxy-client) echo "$ROOT/fuzz/dict/lmtp.dict" ;;
    fuzz-proxy-login) echo "$ROOT/fuzz/dict/proxy-login.dict" ;;
    esac
}

normalise() {
    local t=$1
    [[ $t == fuzz-* ]] || t=fuzz-$t
    for known in "${TARGETS[@]}"; do
        if [[ $known == "$t" ]]; then
            echo "$t"
            return 0
        fi
    done
    echo "unknown target '$1' (targets: ${TARGETS[*]})" >&2
    return 1
}

build() {
    local out
    if [[ ! -f $BUILD/build.ninja ]]; then
        if ! out=$(CC=${CC:-clang} meson setup "$BUILD" "$ROOT" -Dfuzz=true \
            -Db_sanitize=address,undefined -Db_lundef=false --buildtype=debugoptimized 2>&1); then
            echo "$out" >&2
            echo "fuzz.sh: meson setup failed" >&2
            exit 1
        fi
    fi
    local exes=()
    for t in "$@"; do exes+=("fuzz/$t"); done
    # Another fuzz.sh may be building in the same directory: take turns.
    if ! out=$(flock "$BUILD/.fuzz-build.lock" ninja -C "$BUILD" "${exes[@]}" 2>&1); then
        echo "$out" >&2
        echo "fuzz.sh: build failed" >&2
        exit 1
    fi
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}

# Runs one target for $2 seconds and prints its summary line.
run_one() {
    local t=$1 secs=$2
    local corpus=$BUILD/corpus-run/$t artifacts=$BUILD/artifacts/$t log=$BUILD/logs/$t.log
    mkdir -p "$corpus" "$artifacts" "$BUILD/logs"
    local before
    before=$(find "$artifacts" -type f | wc -l)
    local rc=0 dict_args=()
    local dict
    dict=$(dict_of "$t")
    [ -n "$dict" ] && dict_args=(-dict="$dict") # a target without a dictionary runs without one
    # shellcheck disable=SC2086
    "$BUILD/fuzz/$t" -max_total_time="$secs" -max_len="$(max_len_of "$t")" -timeout=10 \
        -rss_limit_mb=2048 "${dict_args[@]}" -artifact_prefix="$artifacts/" \
        -print_final_stats=1 ${FUZZ_ARGS:-} "$corpus" "$ROOT/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
    local after execs secs_run last cov ft corp
    after=$(find "$artifacts" -type f | wc -l)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    secs_run=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
    last=$(grep -E '^#[0-9]+[[:space:]]' "$log" | tail -1 || true)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9A-Za-z]*\).*/\1/p' <<<"$last")
    local found=$((after - before)) status=ok
    if [[ $rc -ne 0 || $found -gt 0 ]]; then
        status="FOUND (exit $rc, $found new artifact(s) in ${artifacts#"$ROOT"/}/)"
        grep -m1 -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error|.*Assertion)' "$log" | sed 's/^/    /' || true
    fi
    printf '%-18s %6ss  execs %-10s cov %-6s ft %-7s corp %-12s %s\n' "$t" "${secs_run:-?}" \
        "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$status"
    [[ $status == ok ]]
}

[[ $# -ge 1 ]] || set -- all
if [[ $1 == -h || $1 == --help ]]; then usage; fi
if [[ $1 == list ]]; then
    printf '%s\n' "${TARGETS[@]}"
    exit 0
fi

# Replay mode: scripts/fuzz.sh <target> <file>...
if [[ $1 != all && $# -ge 2 && -e $2 ]]; then
    t=$(normalise "$1") || exit 2
    shift
    build "$t"
    exec "$BUILD/fuzz/$t" "$@"
fi

secs=${2:-600}
[[ $secs =~ ^[0-9]+$ ]] || usage
if [[ $1 == all ]]; then
    selected=("${TARGETS[@]}")
else
    selected=()
    IFS=, read -ra names <<<"$1"
    for n in "${names[@]}"; do
        t=$(normalise "$n") || exit 2
        selected+=("$t")
    done
fi
build "${selected[@]}"

parallel=${FUZZ_PARALLEL:-1}
echo "fuzzing ${selected[*]} for ${secs}s each (${parallel} at a time); logs in ${BUILD#"$ROOT"/}/logs/"
failed=0
if [[ $parallel -le 1 || ${#selected[@]} -le 1 ]]; then
    for t in "${selected[@]}"; do
        run_one "$t" "$secs" || failed=1
    done
else
    running=0
    for t in "${selected[@]}"; do
        if [[ $running -ge $parallel ]]; then
            wait -n || failed=1
            running=$((running - 1))
        fi
        run_one "$t" "$secs" &
        running=$((running + 1))
    done
    while [[ $running -gt 0 ]]; do
        wait -n || failed=1
        running=$((running - 1))
    done
fi
exit $failed
