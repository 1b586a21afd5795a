#!/usr/bin/env bash
# Runs the whole suite (meson test) and prints "N passed, N failed[, N skipped]" as its last line.
# Exits non-zero when any test failed. Env: BONSAI_TEST_JOBS (default 2), BONSAI_TEST_TIMEOUT_MULT (default 1).
set -u
build=${1:-build}
log=$(mktemp)
meson test -C "$build" --print-errorlogs --num-processes "${BONSAI_TEST_JOBS:-2}" -t "${BONSAI_TEST_TIMEOUT_MULT:-1}" 2>&1 |
    tee "$log"
ok=$(sed -n 's/^Ok: *\([0-9]*\).*/\1/p' "$log" | tail -1)
exp=$(sed -n 's/^Expected Fail: *\([0-9]*\).*/\1/p' "$log" | tail -1)
fail=$(sed -n 's/^Fail: *\([0-9]*\).*/\1/p' "$log" | tail -1)
unexp=$(sed -n 's/^Unexpected Pass: *\([0-9]*\).*/\1/p' "$log" | tail -1)
to=$(sed -n 's/^Timeout: *\([0-9]*\).*/\1/p' "$log" | tail -1)
skip=$(sed -n 's/^Skipped: *\([0-9]*\).*/\1/p' "$log" | tail -1)
rm -f "$log"
passed=$(( ${ok:-0} + ${exp:-0} ))
failed=$(( ${fail:-0} + ${unexp:-0} + ${to:-0} ))
if [ -z "$ok" ]; then failed=$((failed + 1)); fi   # meson itself failed
echo
echo "$passed passed, $failed failed, ${skip:-0} skipped"
[ "$failed" = 0 ]
