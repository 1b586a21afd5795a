#!/usr/bin/env bash
# bench/verify.sh — what a small batched forward (DSpark's verify of n tokens) costs against one token.
#   bench/verify.sh [BUILD_DIR]   (default: build; env THREADS=2 REPS=9 CTX=128 NS=1,2,4,8 SIZE=mid
#                                  TYPES="Q1_0 Q2_0 Q8_0 F16")
# Generates the qwen35 SIZE model like bench/engine.sh (bonsai-mkmodel --seed 7, bonsai-quantize --pure;
# cached in build-bench-models/), then per type runs bench_verify: CTX random tokens prefilled once, and
# per repetition bn_forward of n = NS tokens with all logits from that state (n interleaved per
# repetition). Prints median and min wall ms and the median's ratio to n = 1. The machine may be shared:
# the median of REPS repetitions is the number to read, the min shows the quiet-machine floor.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
case "$build" in /*) ;; *) build="$top/$build" ;; esac
THREADS=${THREADS:-2}
REPS=${REPS:-9}
CTX=${CTX:-128}
NS=${NS:-1,2,4,8}
SIZE=${SIZE:-mid}
TYPES=${TYPES:-"Q1_0 Q2_0 Q8_0 F16"}
models=${MODELS:-"$top/build-bench-models"}
mkdir -p "$models"

die() { echo "verify.sh: $*" >&2; exit 1; }

[ -d "$build" ] || meson setup "$build" "$top" >/dev/null
ninja -C "$build" -j2 bench/bench_verify tools/bonsai-mkmodel tools/bonsai-quantize >/dev/null || die "ninja failed in $build"

src="$models/qwen35-$SIZE-f.gguf"
if [ ! -f "$src" ]; then
  echo "verify.sh: generating $SIZE" >&2
  "$build/tools/bonsai-mkmodel" "$src" --preset "$SIZE" --seed 7 >/dev/null || die "bonsai-mkmodel $SIZE failed"
fi
first=1
for t in $TYPES; do
  m="$models/qwen35-$SIZE-$t.gguf"
  if [ ! -f "$m" ]; then
    "$build/tools/bonsai-quantize" "$src" "$m" "$t" --pure >/dev/null || die "bonsai-quantize $SIZE $t failed"
  fi
  out=$("$build/bench/bench_verify" -m "$m" -t "$THREADS" -c "$CTX" -n "$NS" -r "$REPS") || die "bench_verify $t failed"
  if [ $first = 1 ]; then echo "$out" | head -2; first=0; fi
  echo "$out" | sed -n '3,$p' | grep '^|'
  simd=$(echo "$out" | sed -n 's/^simd: //p')
done
echo
echo "threads $THREADS, $REPS repetitions (median; min = quiet-machine floor), simd $simd, load average $(cut -d' ' -f1-3 /proc/loadavg)"
