#!/usr/bin/env bash
# The test command: unit tests (cmocka, through meson) and end-to-end tests
# (pytest against real petreld/petrelctl processes on loopback), both on an
# ASan+UBSan build in build-asan/. Ends with one line "N passed, N failed"
# and exits non-zero if anything failed.
set -euo pipefail
cd "$(dirname "$0")/.."

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

BUILD=build-asan
PY=/usr/bin/python3 # Debian's python3 with python3-pytest, not a pyenv/venv python on PATH
started=$(date +%s)

scripts/setup.sh

opts=(-Db_sanitize=address,undefined -Db_lundef=false --buildtype=debug -Dwerror=true)
if [ -f "$BUILD/build.ninja" ]; then
  meson setup --reconfigure "$BUILD" "${opts[@]}" >/dev/null
else
  meson setup "$BUILD" "${opts[@]}" >/dev/null
fi
meson compile -C "$BUILD"

# ---- unit tests ----
unit_log="$BUILD/meson-logs/testlog.json"
rm -f "$unit_log"
unit_rc=0
meson test -C "$BUILD" --suite unit --print-errorlogs || unit_rc=$?
read -r unit_pass unit_fail < <("$PY" - "$unit_log" "$unit_rc" <<'EOF'
import json, os, sys
path, rc = sys.argv[1], int(sys.argv[2])
ok = bad = 0
if os.path.exists(path):
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        result = json.loads(line).get("result")
        if result in ("OK", "EXPECTEDFAIL"):
            ok += 1
        elif result != "SKIP":
            bad += 1
if rc != 0 and bad == 0:
    bad = 1  # meson failed without a per-test verdict (build error, no suite...)
print(ok, bad)
EOF
)

# ---- end-to-end tests ----
junit="$BUILD/e2e-junit.xml"
rm -f "$junit"
e2e_rc=0
# The whole command must end within 20 minutes on 2 cores; set-up, build and the
# unit tests take about 90 s of them, so the end-to-end run is cut at 1,090 s.
PETREL_BUILD="$BUILD" timeout --signal=TERM 1090 \
  "$PY" -m pytest tests/e2e -q -p no:cacheprovider --junitxml="$junit" || e2e_rc=$?
read -r e2e_pass e2e_fail e2e_skip < <("$PY" - "$junit" "$e2e_rc" <<'EOF'
import os, sys
import xml.etree.ElementTree as ET
path, rc = sys.argv[1], int(sys.argv[2])
ok = bad = skipped = 0
if os.path.exists(path):
    for case in ET.parse(path).getroot().iter("testcase"):
        tags = {child.tag for child in case}
        if tags & {"failure", "error"}:
            bad += 1
        elif "skipped" in tags:
            skipped += 1
        else:
            ok += 1
if rc != 0 and bad == 0:
    bad = 1  # pytest failed outside any test (collection error, timeout...)
print(ok, bad, skipped)
EOF
)

elapsed=$(( $(date +%s) - started ))
echo "unit: ${unit_pass} passed, ${unit_fail} failed; e2e: ${e2e_pass} passed, ${e2e_fail} failed, ${e2e_skip} skipped; ${elapsed}s"
passed=$(( unit_pass + e2e_pass ))
failed=$(( unit_fail + e2e_fail ))
echo "${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
