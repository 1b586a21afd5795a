#!/usr/bin/env bash
# scripts/sanitize.sh — the whole suite on an AddressSanitizer + UndefinedBehaviorSanitizer build: a memory error,
# a leak or undefined behaviour (signed overflow, misaligned access, bad shift, ...) fails the test that hits it,
# and test_server_fuzz's random requests then go to an instrumented bonsai-serve. Not part of CI (~20 min on
# 2 cores: the build 2.5 min, the emulator tests run 2-4x slower); run it after changes to parsers, buffers or
# the server, and before a release.
#   scripts/sanitize.sh [BUILD_DIR]      (default build-asan; BONSAI_TEST_JOBS as in tests/run-tests.sh)
# Last line as tests/run-tests.sh: "N passed, N failed, N skipped"; exits non-zero when any test failed.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
build=${1:-build-asan}
if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debugoptimized >/dev/null
fi
ninja -C "$build" -j"${BONSAI_JOBS:-2}" | tail -1
# verify_asan_link_order=0: cuda/check.sh's steps run under stdbuf, whose LD_PRELOAD comes before the ASan runtime
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:verify_asan_link_order=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
BONSAI_TEST_TIMEOUT_MULT=${BONSAI_TEST_TIMEOUT_MULT:-4} exec tests/run-tests.sh "$build"
