#!/usr/bin/env bash
# bench/engine-types.sh — our CPU engine vs llama.cpp's llama-bench for every weight type the project writes
# (F32 F16 BF16 Q8_0 Q4_0 Q1_0 Q2_0 PQ2_0), one small model with the real Qwen vocabulary, tg and pp.
#   bench/engine-types.sh [BUILD_DIR]   (default: build)
#   env: THREADS=2 RUNS=3 REPS=2 PP=128 TG=64 TYPES="..." RUN_TIMEOUT=60 (seconds per run; a run past it counts as failed)
#        BEFORE=DIR       a second build of ours (e.g. the one before a change): its column and ratio are added
#        LLAMA_BENCH=PATH default: scripts/build-llamacpp.sh's llama-bench (GGML_NATIVE). On a CPU with AMX that build
#                         runs Q8_0 / Q4_0 through ggml's AMX kernels, which crash on this model's 4-row tensors
#                         (n/a in the table): point LLAMA_BENCH at a build with -DGGML_NATIVE=OFF and the AVX-512 flags
#                         but no AMX for those rows.
#        MODELS=DIR       default build-bench-models/ (git-ignored; delete to regenerate)
# The model: bonsai-mkmodel --preset small --n-embd 256 with the vocabulary of third_party's ggml-vocab-qwen35.gguf
# (151,936 tokens, untied output head: 91 M parameters, 78 M of them the embedding and the head); F32/F16/BF16 written
# by bonsai-mkmodel, the quantized types by bonsai-quantize --pure from the F32 one.
# Each run is `-p PP -n TG -t THREADS -r REPS` and gives one sample (its mean); the tools alternate (ours, [before,]
# llama.cpp, llama.cpp with OMP_WAIT_POLICY=passive, then the next type, RUNS rounds). llama.cpp's OpenMP threads spin
# at their barriers by default, which collapses when the cores are shared with other work; passive waiting is slower
# on an idle machine: both are shown and the ratios are taken against the better one. The table gives the median of
# the samples with their min-max (the noise), and the hardware line. llama.cpp has no PQ2_0 (type 142): n/a.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
case "$build" in /*) ;; *) build="$top/$build" ;; esac
THREADS=${THREADS:-2}
RUNS=${RUNS:-3}
REPS=${REPS:-2}
PP=${PP:-128}
TG=${TG:-64}
RUN_TIMEOUT=${RUN_TIMEOUT:-60}
TYPES=${TYPES:-"F32 F16 BF16 Q8_0 Q4_0 Q1_0 Q2_0 PQ2_0"}
BEFORE=${BEFORE:-}
models=${MODELS:-"$top/build-bench-models"}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
mkdir -p "$models"

die() { echo "engine-types.sh: $*" >&2; exit 1; }

# --- tools ------------------------------------------------------------------------------------------------------
if [ -z "${LLAMA_BENCH:-}" ]; then
  "$top/scripts/build-llamacpp.sh" llama-bench >&2 || die "cannot build llama-bench"
  LLAMA_BENCH="$top/third_party/llama.cpp/build/bin/llama-bench"
fi
[ -x "$LLAMA_BENCH" ] || die "no llama-bench at $LLAMA_BENCH"
[ -d "$build" ] || meson setup "$build" "$top" --buildtype=release >/dev/null
ninja -C "$build" tools/bonsai-bench tools/bonsai-mkmodel tools/bonsai-quantize >/dev/null || die "ninja failed"
[ -z "$BEFORE" ] || [ -x "$BEFORE/tools/bonsai-bench" ] || die "no $BEFORE/tools/bonsai-bench"

# --- models -----------------------------------------------------------------------------------------------------
vocab="$top/third_party/llama.cpp/models/ggml-vocab-qwen35.gguf"
[ -f "$vocab" ] || die "$vocab is missing (scripts/fetch-llamacpp.sh)"
model_of() { echo "$models/qwen35-q256-$1.gguf"; }
for t in F32 $TYPES; do
  out=$(model_of "$t")
  [ -f "$out" ] && continue
  case "$t" in
    F32|F16|BF16)
      "$build/tools/bonsai-mkmodel" "$out" --preset small --n-embd 256 --vocab "$vocab" --seed 7 \
        --type "$(echo "$t" | tr 'A-Z' 'a-z')" >/dev/null || die "bonsai-mkmodel $t failed" ;;
    *) "$build/tools/bonsai-quantize" "$(model_of F32)" "$out" "$t" --pure >/dev/null || die "quantize $t failed" ;;
  esac
done

# --- runs -------------------------------------------------------------------------------------------------------
# ts_of FILE TEST: the mean t/s of the markdown row whose test column is TEST (bonsai-bench and llama-bench alike)
ts_of() {
  awk -F'|' -v t="$2" '{ g = $7; gsub(/ /, "", g); if (g == t) { split($8, a, " "); print a[1] } }' "$1"
}
# sample TOOL TYPE RUN CMD...: one run; its two means appended to $logs/TOOL-TYPE.{pp,tg} (nothing if it fails)
sample() {
  local tool=$1 t=$2 r=$3
  shift 3
  local out="$logs/$tool-$t-$r.out"
  local rc=0
  timeout "$RUN_TIMEOUT" "$@" -m "$(model_of "$t")" -p "$PP" -n "$TG" -t "$THREADS" -r "$REPS" >"$out" 2>"$out.err" ||
    rc=$?
  if [ $rc -ne 0 ]; then
    echo "engine-types.sh: $tool $t run $r failed (exit $rc$([ $rc -eq 124 ] && echo ", over ${RUN_TIMEOUT}s"))" >&2
    return 0
  fi
  ts_of "$out" "pp$PP" >>"$logs/$tool-$t.pp"
  ts_of "$out" "tg$TG" >>"$logs/$tool-$t.tg"
}
for r in $(seq 1 "$RUNS"); do
  for t in $TYPES; do
    echo "engine-types.sh: round $r/$RUNS $t" >&2
    sample ours "$t" "$r" "$build/tools/bonsai-bench"
    [ -z "$BEFORE" ] || sample before "$t" "$r" "$BEFORE/tools/bonsai-bench"
    [ "$t" = PQ2_0 ] && continue
    sample llama "$t" "$r" "$LLAMA_BENCH"
    sample llamap "$t" "$r" env OMP_WAIT_POLICY=passive "$LLAMA_BENCH"
  done
done

# --- table ------------------------------------------------------------------------------------------------------
# summary FILE: "median min max" of the numbers in FILE (nothing if none)
summary() {
  [ -s "$1" ] || return 0
  sort -g "$1" | awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
                                           printf "%.1f %.1f %.1f", m, v[1], v[NR] }'
}
cell() { if [ -n "$1" ]; then set -- $1; printf '%s (%s-%s)' "$1" "$2" "$3"; else printf 'n/a'; fi; }
best() { awk -v a="${1%% *}" -v b="${2%% *}" 'BEGIN { m = (a > b ? a : b); if (m > 0) print m }'; }
ratio() { awk -v a="${1%% *}" -v b="${2%% *}" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "n/a" }'; }
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
        grep -xE 'avx2|fma|f16c|avx512(f|bw|vl|dq|_vnni|_bf16|_fp16)|amx_(bf16|int8)' |
        tr '\n' ' ')
echo
echo "CPU: $cpu, $(nproc) cpus online, load average $(cut -d' ' -f1-3 /proc/loadavg); flags: $flags"
echo "threads $THREADS; $RUNS alternating runs per tool and type, each -r $REPS; t/s median (min-max of the runs)"
echo "llama.cpp: $LLAMA_BENCH (OMP default | OMP_WAIT_POLICY=passive); ratios against the better of the two"
echo
hdr='| type | test | bonsai t/s |'
[ -z "$BEFORE" ] || hdr="$hdr before t/s |"
hdr="$hdr llama.cpp t/s | llama.cpp passive t/s | bonsai / llama.cpp |"
[ -z "$BEFORE" ] || hdr="$hdr before / llama.cpp |"
echo "$hdr"
echo "$hdr" | sed 's/[^|]*|/ ---: |/g; s/^ ---: |/|/; s/---: | ---: |/--- | --- |/'
for t in $TYPES; do
  for k in tg pp; do
    test=$([ $k = tg ] && echo "tg$TG" || echo "pp$PP")
    o=$(summary "$logs/ours-$t.$k") l=$(summary "$logs/llama-$t.$k") p=$(summary "$logs/llamap-$t.$k")
    b=$(summary "$logs/before-$t.$k") ref=$(best "$l" "$p")
    row="| $t | $test | $(cell "$o") |"
    [ -z "$BEFORE" ] || row="$row $(cell "$b") |"
    row="$row $(cell "$l") | $(cell "$p") | $(ratio "$o" "$ref") |"
    [ -z "$BEFORE" ] || row="$row $(ratio "$b" "$ref") |"
    echo "$row"
  done
done
