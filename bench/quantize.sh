#!/usr/bin/env bash
# bench/quantize.sh — bonsai-quantize vs llama-quantize throughput on the same F16 model.
#   usage: bench/quantize.sh [preset]      (default: mid = Qwen3.5-0.8B shapes, ~1.5 GB F16)
# Env: BUILD (bonsai build dir, default build), THREADS (2), RUNS (best of, 2), WORK (scratch dir).
# Both tools quantize to Q1_0 and Q2_0 (g64) with --pure and the same thread count; the table shows
# wall seconds, input MB/s (F16 file size / time) and the speed ratio; it also says whether the two
# output files are byte-identical. Builds llama-quantize via scripts/build-llamacpp.sh if needed.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
preset="${1:-mid}"
build="${BUILD:-$top/build}"
threads="${THREADS:-2}"
runs="${RUNS:-2}"
work="${WORK:-${TMPDIR:-/tmp}/bonsai-bench-quantize}"
bq="$build/tools/bonsai-quantize"
bm="$build/tools/bonsai-mkmodel"
lq="$top/third_party/llama.cpp/build/bin/llama-quantize"

for exe in "$bq" "$bm"; do
  [ -x "$exe" ] || { echo "bench/quantize: $exe not built (meson setup $build && ninja -C $build)" >&2; exit 1; }
done
[ -x "$lq" ] || "$top/scripts/build-llamacpp.sh" llama-quantize
mkdir -p "$work"
src="$work/$preset-f16.gguf"
if [ ! -f "$src" ]; then
  echo "bench/quantize: generating $preset F16 model (once) → $src"
  "$bm" "$src" --preset "$preset" --type f16 >/dev/null
fi
cat "$src" > /dev/null # warm the page cache so both tools read from memory
size=$(stat -c %s "$src")

# best_time CMD...: best wall seconds over $runs runs
best_time() {
  local best="" t0 t1 t
  for _ in $(seq "$runs"); do
    t0=$(date +%s.%N)
    "$@" > "$work/last.log" 2>&1 || { echo "bench/quantize: failed: $*" >&2; tail -5 "$work/last.log" >&2; exit 1; }
    t1=$(date +%s.%N)
    t=$(echo "$t1 - $t0" | bc -l)
    if [ -z "$best" ] || [ "$(echo "$t < $best" | bc -l)" = 1 ]; then best=$t; fi
  done
  echo "$best"
}

printf '\nbench/quantize: preset %s, %s F16 (%.1f MB), %s threads, best of %s, %s\n' "$preset" "$(basename "$src")" \
  "$(echo "$size / 1000000" | bc -l)" "$threads" "$runs" "$(date -u +%FT%TZ)"
printf '%-6s %12s %12s %12s %12s %8s %10s\n' type bonsai_s bonsai_MB/s llama_s llama_MB/s ratio identical
for type in Q1_0 Q2_0; do
  ours="$work/$preset-$type.bonsai.gguf"
  theirs="$work/$preset-$type.llama.gguf"
  tb=$(best_time "$bq" "$src" "$ours" "$type" --pure --threads "$threads" -q)
  tl=$(best_time "$lq" --pure "$src" "$theirs" "$type" "$threads")
  same=no
  cmp -s "$ours" "$theirs" && same=yes
  printf '%-6s %12.2f %12.1f %12.2f %12.1f %7.2fx %10s\n' "$type" "$tb" "$(echo "$size / 1000000 / $tb" | bc -l)" \
    "$tl" "$(echo "$size / 1000000 / $tl" | bc -l)" "$(echo "$tl / $tb" | bc -l)" "$same"
  rm -f "$ours" "$theirs"
done
