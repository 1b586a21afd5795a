#!/usr/bin/env bash
# tests/asan-run.sh PROGRAM [ARGS...] — runs a test built on the sanitized library (meson.build's libbonsai-san) with
# ASan + UBSan set to fail the test on any report, leaks included. Where LeakSanitizer cannot run at all (it stops
# the process's threads with ptrace, which some containers forbid) the run is repeated without leak checking and
# says so; where the ASan runtime cannot start at all on this kernel (its shadow memory does not fit the address space
# layout) the test is skipped (exit 77) with the runtime's message; every other report fails the test.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} "$@" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
if [ "$rc" != 0 ] && grep -qE 'Shadow memory range interleaves|ASan runtime does not come first' "$out"; then
    echo "asan-run: the AddressSanitizer runtime cannot start here; skipped"
    exit 77
fi
if [ "$rc" != 0 ] && grep -q 'LeakSanitizer has encountered a fatal error' "$out"; then
    echo "asan-run: LeakSanitizer cannot run here; again without leak checking"
    ASAN_OPTIONS=detect_leaks=0 "$@"
    rc=$?
fi
exit "$rc"
