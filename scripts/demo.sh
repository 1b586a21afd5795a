#!/usr/bin/env bash
# scripts/demo.sh [BUILD_DIR] — the end-to-end antidoom demo run by `./bonsai.sh demo` (issue #8).
# On the shipped small looping model data/bonsai-loop-f16.gguf (scripts/make-model.sh):
#   1. loop rate of the base model (greedy, held-out prompts);
#   2. bonsai-mine-pairs on the train prompts, primed (ANTIDOOM.md §3) and sampled (antidoom),
#      regularised; the same on the held-out prompts for held-out pairs (split "heldout");
#   3. bonsai-ftpo-train: LoRA with FTPO, early stop on the running chosen_win;
#   4. merge into FP16; bonsai-quantize to Q1_0 and Q2_0;
#   5. evaluation of base and antidoom models: greedy loop rate on the held-out prompts, chosen_win on
#      the held-out pairs, held-out perplexity, mean/median completion length — one table;
#   6. the bonsai-serve command.
# Deterministic (fixed seeds). Knobs (environment): BONSAI_DEMO_DIR (out/demo), DEMO_THREADS (2),
# DEMO_TRAIN_PROMPTS (all), DEMO_HELD_PROMPTS (all), DEMO_NPREDICT (256), DEMO_EPOCHS, DEMO_LR, DEMO_STOP.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
B=${1:-build}
T="$B/tools"
out=${BONSAI_DEMO_DIR:-out/demo}
model=${DEMO_MODEL:-$root/data/bonsai-loop-f16.gguf}
ptrain=$root/data/prompts/train.jsonl
pheld=$root/data/prompts/heldout.jsonl
heldtxt=$root/data/heldout.txt
th=${DEMO_THREADS:-2}
ntrain=${DEMO_TRAIN_PROMPTS:-0}
nheld=${DEMO_HELD_PROMPTS:-0}
npred=${DEMO_NPREDICT:-256}
epochs=${DEMO_EPOCHS:-12}
lr=${DEMO_LR:-1e-3}
stop=${DEMO_STOP:-0.4}
export OPENBLAS_NUM_THREADS=$th
mkdir -p "$out"
rm -f "$out"/*.jsonl "$out"/*.json
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
maxp() { [ "$1" -gt 0 ] && echo "--max-prompts $1" || true; }
t0=$(date +%s)

# evaluation settings shared by every model: greedy, plain ChatML (the model's training format)
gen=(--thinking -1 -t "$th" --ctx 2048)
evaluate() {  # evaluate LABEL MODEL: loop rate JSON + perplexity
    local label=$1 m=$2
    "$T/bonsai-eval-loops" -m "$m" -p "$pheld" $(maxp "$nheld") "${gen[@]}" --temp 0 --n-predict "$npred" \
        --label "$label" --json "$out/eval-$label.json" --gen-log "$out/gen-$label.jsonl" > /dev/null
    "$T/bonsai-perplexity" -m "$m" -f "$heldtxt" -c 128 -t "$th" > "$out/ppl-$label.txt" 2>&1
    echo "$label: $(grep -E 'Final estimate' "$out/ppl-$label.txt" | tail -1)"
}

step "1/6 base model: $(basename "$model") — greedy loop rate on held-out prompts"
evaluate base-f16 "$model"

step "2/6 mine pairs: primed + sampled contexts on the train prompts, then the held-out prompts"
mine=(-m "$model" "${gen[@]}" --n-predict "$npred" --n-probs 20 --chosen-require-alnum)
"$T/bonsai-mine-pairs" "${mine[@]}" -p "$ptrain" $(maxp "$ntrain") -o "$out/pairs-prime.jsonl" --split train \
    --mode prime --phrase-from-prefix --prime-repeats 3 --prime-prefix-tokens 24 --temp 0.1 --seed 1 | tail -2
"$T/bonsai-mine-pairs" "${mine[@]}" -p "$ptrain" $(maxp "$ntrain") -o "$out/pairs-sample.jsonl" --split train \
    --mode sample --temps 0.1,0.5,0.8 --seed 1001 | tail -2
cat "$out/pairs-prime.jsonl" "$out/pairs-sample.jsonl" > "$out/pairs-train-raw.jsonl"
"$T/bonsai-mine-pairs" --regularise "$out/pairs-train-raw.jsonl" -o "$out/pairs-train.jsonl" --headroom 1 --top 5 |
    tail -6
"$T/bonsai-mine-pairs" "${mine[@]}" -p "$pheld" $(maxp "$nheld") -o "$out/pairs-heldout-prime.jsonl" --split heldout \
    --mode prime --phrase-from-prefix --prime-repeats 3 --prime-prefix-tokens 24 --temp 0.1 --seed 2 | tail -1
"$T/bonsai-mine-pairs" "${mine[@]}" -p "$pheld" $(maxp "$nheld") -o "$out/pairs-heldout-sample.jsonl" --split heldout \
    --mode sample --temps 0.1,0.5,0.8 --seed 2001 | tail -1
cat "$out/pairs-heldout-prime.jsonl" "$out/pairs-heldout-sample.jsonl" > "$out/pairs-heldout.jsonl"
cat "$out/pairs-train.jsonl" "$out/pairs-heldout.jsonl" > "$out/pairs-all.jsonl"
echo "pairs: $(wc -l < "$out/pairs-train.jsonl") train, $(wc -l < "$out/pairs-heldout.jsonl") held out"

step "3/6 FTPO LoRA training (early stop at running chosen_win >= $stop)"
"$T/bonsai-ftpo-train" -m "$model" -p "$out/pairs-all.jsonl" -o "$out/adapter.gguf" --rank 16 --alpha 16 \
    --targets all --epochs "$epochs" --lr "$lr" --batch 4 --grad-accum 1 --early-stop "$stop" --seed 3407 \
    -t "$th" --log "$out/ftpo-log.jsonl" 2>&1 | grep -vE '^step ' | tail -20

step "4/6 merge into FP16, re-quantize to Q1_0 and Q2_0 (the base model too, for reference)"
"$T/bonsai-ftpo-train" -m "$model" --merge "$out/adapter.gguf" -o "$out/antidoom-f16.gguf" --merge-type f16 | tail -3
for q in Q1_0 Q2_0; do
    echo "antidoom $q: $("$T/bonsai-quantize" "$out/antidoom-f16.gguf" "$out/antidoom-$q.gguf" "$q" --threads "$th" | tail -1)"
    echo "base $q:     $("$T/bonsai-quantize" "$model" "$out/base-$q.gguf" "$q" --threads "$th" | tail -1)"
done

step "5/6 evaluate (greedy loop rate, held-out chosen_win, perplexity)"
for label in antidoom-f16 antidoom-Q1_0 antidoom-Q2_0 base-Q1_0 base-Q2_0; do evaluate "$label" "$out/$label.gguf"; done
# chosen_win on the held-out pairs: the "base" row of --eval with each model as -m
cw() {
    "$T/bonsai-ftpo-train" -m "$1" -p "$out/pairs-heldout.jsonl" --eval "$out/adapter.gguf" -t "$th" 2>/dev/null |
        awk '$1 == "base" && $2 == "heldout" { print $4 }'
}
for label in base-f16 antidoom-f16 antidoom-Q1_0 antidoom-Q2_0 base-Q1_0 base-Q2_0; do
    m=$out/$label.gguf; [ "$label" = base-f16 ] && m=$model
    echo "${label} $(cw "$m")" >> "$out/chosen_win.txt.tmp"
done
mv "$out/chosen_win.txt.tmp" "$out/chosen_win.txt"

step "6/6 results ($(( $(date +%s) - t0 )) s)"
{
    echo "| model | loop rate (greedy, held-out) | chosen_win (held-out pairs) | perplexity (held-out) | mean len | median len |"
    echo "|---|---|---|---|---|---|"
    for label in base-f16 antidoom-f16 antidoom-Q1_0 antidoom-Q2_0 base-Q1_0 base-Q2_0; do
        row=$(jq -r '"\(.loop_rate * 1000 | round / 10)% (\(.loops)/\(.n)) | \(.mean_length * 10 | round / 10) | \(.median_length)"' \
              "$out/eval-$label.json")
        ppl=$(sed -n 's/^Final estimate: PPL = \([0-9.]*\).*/\1/p' "$out/ppl-$label.txt")
        cwin=$(awk -v l="$label" '$1 == l { print $2 }' "$out/chosen_win.txt")
        IFS='|' read -r lr mean med <<< "$row"
        echo "| $label | ${lr% } | ${cwin:-n/a} | ${ppl:-n/a} | ${mean// /} | ${med// /} |"
    done
} | tee "$out/table.md"

echo
echo "serve the antidoom model (llama-server compatible; Q2_0 — at 3M parameters Q1_0 costs ~4x perplexity):"
echo "  $T/bonsai-serve -m $out/antidoom-Q2_0.gguf --port 8080 -c 2048 -np 2"
echo "  (or the unquantized result: $T/bonsai-serve -m $out/antidoom-f16.gguf --port 8080 -c 2048 -np 2)"
echo "  curl -s localhost:8080/completion -d '{\"prompt\":\"<|im_start|>user\\nA day for firm<|im_end|>\\n<|im_start|>assistant\\n\",\"n_predict\":64}'"
