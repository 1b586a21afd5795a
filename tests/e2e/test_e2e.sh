#!/usr/bin/env bash
# tests/e2e/test_e2e.sh — the end-to-end antidoom pipeline on the shipped looping model,
# on a reduced budget: scripts/demo.sh with fewer prompts and shorter completions, fixed seeds.
# Asserts (antidoom FP16 vs base FP16, greedy, held-out prompts):
#   - the loop rate goes down by at least 25% relative (and the base model does loop: >= 25%);
#   - chosen_win on the held-out pairs goes up by at least 0.05;
#   - held-out perplexity stays within +10% of the base model's.
# and after Q1_0 requantization (the STE LoRA, bonsai-ftpo-train --ste-type Q1_0, merged with --merge-type q1_0):
#   - its held-out chosen_win is >= 90% of the FP16 antidoom value and >= 0.3 above the plain LoRA's merged
#     then requantized (which loses the effect);
#   - its held-out perplexity is within 2% of the Q1_0 base's.
# Loop rates after requantization are printed, not asserted: this F16 model's Q1_0 version is a different
# (ppl ~4x) model whose loops are mostly whitespace runs that pair mining skips (notes/e2e-results.md).
set -euo pipefail
src=${BONSAI_SOURCE_ROOT:?}
bld=${BONSAI_BUILD_ROOT:?}
if [ ! -f "$src/data/bonsai-loop-f16.gguf" ]; then echo "SKIP: data/bonsai-loop-f16.gguf missing"; exit 77; fi
command -v jq >/dev/null || { echo "SKIP: jq missing (installed by ./bonsai.sh deps)"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export BONSAI_DEMO_DIR=$dir DEMO_TRAIN_PROMPTS=${E2E_TRAIN_PROMPTS:-120} DEMO_HELD_PROMPTS=${E2E_HELD_PROMPTS:-40}
export DEMO_NPREDICT=${E2E_NPREDICT:-160} DEMO_THREADS=2 DEMO_MODEL=$src/data/bonsai-loop-f16.gguf DEMO_QTYPES=Q1_0
# no on-policy second STE round here (it doubles the mining; the full demo runs it on the 1-bit model)
export DEMO_QBASE=0 DEMO_STE_TARGETS=all DEMO_STE_ROUNDS=1 DEMO_STE_SEEDS=3407 DEMO_STE_TETHERS=1 DEMO_VAL_PROMPTS=${E2E_VAL_PROMPTS:-40}
"$src/scripts/demo.sh" "$bld" > "$dir/demo.log" 2>&1 || { tail -40 "$dir/demo.log"; echo "FAIL: demo.sh failed"; exit 1; }
tail -16 "$dir/demo.log"
# the numbers: loop rates from eval-*.json, chosen_win from chosen_win.txt, perplexity from ppl-*.txt
lr() { jq -r .loop_rate "$dir/eval-$1.json"; }
cw() { awk -v l="$1" '$1 == l { print $2 }' "$dir/chosen_win.txt"; }
ppl() { sed -n 's/^Final estimate: PPL = \([0-9.]*\).*/\1/p' "$dir/ppl-$1.txt"; }
fails=0
check() {  # check "AWK CONDITION" "description"
    if awk "BEGIN { exit !($1) }"; then echo "ok   $2"; else echo "FAIL $2"; fails=$((fails + 1)); fi
}
# number NAME VALUE: every figure must be a number (an empty one, or jq's null, would read as 0 in awk: "0.98 >= + 0.05")
number() {
    [[ $2 =~ ^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]] || { echo "FAIL $1 is not a number: '$2'"; fails=$((fails + 1)); }
}
lb=$(lr base-f16) la=$(lr antidoom-f16) cb=$(cw base-f16) ca=$(cw antidoom-f16) pb=$(ppl base-f16) pa=$(ppl antidoom-f16)
for v in lb la cb ca pb pa; do number "$v" "${!v}"; done
check "$lb >= 0.25" "base loop rate $lb >= 0.25"
check "$la <= 0.75 * $lb" "antidoom loop rate $la <= 0.75 x base $lb"
check "$ca >= $cb + 0.05" "held-out chosen_win $cb -> $ca (+0.05)"
check "$pa <= 1.10 * $pb" "held-out perplexity $pb -> $pa (<= +10%)"
cq=$(cw antidoom-Q1_0) cs=$(cw antidoom-Q1_0-ste) pq=$(ppl base-Q1_0) ps=$(ppl antidoom-Q1_0-ste)
for v in cq cs pq ps; do number "$v" "${!v}"; done
check "$cs >= 0.9 * $ca" "Q1_0 STE held-out chosen_win $cs >= 90% of FP16 antidoom $ca"
check "$cs >= $cq + 0.3" "Q1_0 STE chosen_win $cs >= plain LoRA requantized $cq + 0.3"
check "$ps <= 1.02 * $pq" "Q1_0 STE perplexity $ps within +2% of the Q1_0 base $pq"
[ "$fails" = 0 ]
