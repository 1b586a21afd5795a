#!/usr/bin/env bash
# bench/engine.sh — our CPU engine vs llama.cpp's llama-bench, side by side.
#   bench/engine.sh [BUILD_DIR]        (default: build; env THREADS=2 REPS=3 PP=512 TG=128 SIZES="tiny mid")
# 1. builds llama-bench from third_party/llama.cpp (scripts/build-llamacpp.sh) and our tools (ninja);
# 2. generates qwen35 models with bonsai-mkmodel (tiny, and mid = Qwen3.5-0.8B shapes, ~0.75B params)
#    and converts them with bonsai-quantize --pure to Q1_0 and Q2_0 (group 64);
# 3. runs bonsai-bench and llama-bench (-p PP -n TG -t THREADS -r REPS) under /usr/bin/time -v;
# 4. prints one table: t/s of both, the ratio ours/llama.cpp and each process's peak RSS.
# Models are cached in build-bench-models/ (git-ignored; MODELS= overrides; delete to regenerate).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
case "$build" in /*) ;; *) build="$top/$build" ;; esac
THREADS=${THREADS:-2}
REPS=${REPS:-3}
PP=${PP:-512}
TG=${TG:-128}
SIZES=${SIZES:-"tiny mid"}
TYPES=${TYPES:-"Q1_0 Q2_0"}
models=${MODELS:-"$top/build-bench-models"}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
mkdir -p "$models"

die() { echo "engine.sh: $*" >&2; exit 1; }

# --- 1. tools -------------------------------------------------------------------------------
"$top/scripts/build-llamacpp.sh" llama-bench || die "cannot build llama-bench"
llama_bench="$top/third_party/llama.cpp/build/bin/llama-bench"
[ -d "$build" ] || meson setup "$build" "$top" >/dev/null
ninja -C "$build" -j2 tools/bonsai-bench tools/bonsai-mkmodel tools/bonsai-quantize >/dev/null || die "ninja failed in $build"
bbench="$build/tools/bonsai-bench"
mkmodel="$build/tools/bonsai-mkmodel"
quantize="$build/tools/bonsai-quantize"

# --- 2. models ------------------------------------------------------------------------------
for size in $SIZES; do
  src="$models/qwen35-$size-f.gguf"
  if [ ! -f "$src" ]; then
    echo "engine.sh: generating $size" >&2
    "$mkmodel" "$src" --preset "$size" --seed 7 >/dev/null || die "bonsai-mkmodel $size failed"
  fi
  for t in $TYPES; do
    out="$models/qwen35-$size-$t.gguf"
    if [ ! -f "$out" ]; then
      "$quantize" "$src" "$out" "$t" --pure >/dev/null || die "bonsai-quantize $size $t failed"
    fi
  done
done

# --- 3. runs --------------------------------------------------------------------------------
# run_one NAME CMD...: runs CMD under /usr/bin/time -v; stdout in $logs/NAME.out, peak RSS (KiB) in $logs/NAME.rss
run_one() {
  local name=$1; shift
  /usr/bin/time -v "$@" >"$logs/$name.out" 2>"$logs/$name.err" || { cat "$logs/$name.err" >&2; die "$name failed"; }
  sed -n 's/.*Maximum resident set size (kbytes): *//p' "$logs/$name.err" >"$logs/$name.rss"
}
# ts_of FILE TEST: the "mean ± sd" cell of the markdown row whose test column is TEST
ts_of() { awk -F'|' -v t="$2" '{ g=$7; gsub(/ /, "", g); if (g == t) { s=$8; gsub(/^ +| +$/, "", s); print s } }' "$1"; }

printf '\n| model | test | bonsai t/s | llama.cpp t/s | ratio | bonsai peak RSS | llama.cpp peak RSS |\n'
printf '| --- | --- | ---: | ---: | ---: | ---: | ---: |\n'
for size in $SIZES; do
  for t in $TYPES; do
    m="$models/qwen35-$size-$t.gguf"
    name="$size-$t"
    run_one "ours-$name" "$bbench" -m "$m" -p "$PP" -n "$TG" -t "$THREADS" -r "$REPS"
    run_one "llama-$name" "$llama_bench" -m "$m" -p "$PP" -n "$TG" -t "$THREADS" -r "$REPS"
    for test in "pp$PP" "tg$TG"; do
      ours=$(ts_of "$logs/ours-$name.out" "$test")
      theirs=$(ts_of "$logs/llama-$name.out" "$test")
      ratio=$(awk -v a="${ours%% *}" -v b="${theirs%% *}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "?" }')
      rss_o=$(awk '{ printf "%.1f MiB", $1 / 1024 }' "$logs/ours-$name.rss")
      rss_l=$(awk '{ printf "%.1f MiB", $1 / 1024 }' "$logs/llama-$name.rss")
      printf '| qwen35 %s %s | %s | %s | %s | %s | %s | %s |\n' "$size" "$t" "$test" "$ours" "$theirs" "$ratio" "$rss_o" "$rss_l"
    done
  done
done
echo
echo "threads $THREADS, reps $REPS; peak RSS is per process (both runs pp$PP and tg$TG); ratio = bonsai / llama.cpp"
for size in $SIZES; do for t in $TYPES; do
  echo; echo "--- raw: $size $t (bonsai-bench, then llama-bench)"
  cat "$logs/ours-$size-$t.out" "$logs/llama-$size-$t.out"
done; done
