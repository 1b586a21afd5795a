#!/usr/bin/env bash
# scripts/demo-round2.sh [BUILD_DIR] — a second, on-policy antidoom round after ./bonsai.sh demo (issue #8
# experiment, notes/e2e-results.md): mines new pairs with the demo's STE Q1_0 model itself, regularises
# them together with round 1's, retrains the STE adapter (the demo's STE knobs) from the 1-bit base,
# merges to Q1_0 and prints loop rate, perplexity and held-out chosen_win (round 1's held-out pairs).
# Needs the demo's outputs in BONSAI_DEMO_DIR (out/demo). Writes BONSAI_DEMO_DIR/round2/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
B=${1:-build}
T="$B/tools"
out=${BONSAI_DEMO_DIR:-out/demo}
r="$out/round2"
th=${DEMO_THREADS:-2}
model=${DEMO_MODEL:-$root/data/bonsai-loop-1bit.gguf}
[ -f "$out/antidoom-Q1_0-ste.gguf" ] || { echo "demo-round2: run ./bonsai.sh demo first ($out/antidoom-Q1_0-ste.gguf missing)" >&2; exit 1; }
mkdir -p "$r"
gen=(--thinking -1 -t "$th" --ctx 2048)
mine=(-m "$out/antidoom-Q1_0-ste.gguf" "${gen[@]}" --n-predict 256 --n-probs 20 --chosen-require-alnum)
"$T/bonsai-mine-pairs" "${mine[@]}" -p "$root/data/prompts/train.jsonl" -o "$r/pairs-prime.jsonl" --split train \
    --mode prime --phrase-from-prefix --prime-repeats 3 --prime-prefix-tokens 24 --temp 0.1 --seed 11 | tail -1
"$T/bonsai-mine-pairs" "${mine[@]}" -p "$root/data/prompts/train.jsonl" -o "$r/pairs-sample.jsonl" --split train \
    --mode sample --temps 0.1,0.5,0.8 --seed 1011 | tail -1
cat "$out/pairs-prime.jsonl" "$out/pairs-sample.jsonl" "$r/pairs-prime.jsonl" "$r/pairs-sample.jsonl" > "$r/pairs-raw.jsonl"
"$T/bonsai-mine-pairs" --regularise "$r/pairs-raw.jsonl" -o "$r/pairs-train.jsonl" --headroom 1 --top 5 | tail -1
cat "$r/pairs-train.jsonl" "$out/pairs-heldout.jsonl" > "$r/pairs-all.jsonl"
"$T/bonsai-ftpo-train" -m "$model" -p "$r/pairs-all.jsonl" --rank 16 --alpha 16 --epochs 12 --lr 1e-3 --batch 4 \
    --grad-accum 1 --seed 3407 -t "$th" -o "$r/adapter.gguf" --early-stop 0.8 --ste-type Q1_0 --targets lm_head \
    --lambda-nt 1 2>&1 | grep -E '^(ftpo-train: [0-9]+/|early stop)' | tail -2
"$T/bonsai-ftpo-train" -m "$out/base-f16.gguf" --merge "$r/adapter.gguf" -o "$r/antidoom-Q1_0-round2.gguf" \
    --merge-type q1_0 > /dev/null
"$T/bonsai-eval-loops" -m "$r/antidoom-Q1_0-round2.gguf" -p "$root/data/prompts/heldout.jsonl" "${gen[@]}" --temp 0 \
    --n-predict 256 --label round2 --json "$r/eval.json" | tail -1
"$T/bonsai-perplexity" -m "$r/antidoom-Q1_0-round2.gguf" -f "$root/data/heldout.txt" -c 128 -t "$th" 2>&1 | grep Final
echo "held-out chosen_win: $("$T/bonsai-ftpo-train" -m "$r/antidoom-Q1_0-round2.gguf" -p "$out/pairs-heldout.jsonl" \
    --eval "$out/adapter.gguf" -t "$th" 2>/dev/null | awk '$1 == "base" && $2 == "heldout" { print $4 }')"
