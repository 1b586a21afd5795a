#!/usr/bin/env bash
# tests/e2e/test_e2e.sh — bonsai-antidoom end to end on the shipped 1-bit model, on a reduced budget (120 mining
# prompts, 30 validation prompts, 128 tokens, one round, one candidate per kind; kinds adapter and q1_0). Asserts:
#   - the run finishes and writes report.md (a row per output, the goals) and report.html (inline SVG plots);
#   - the adapter output moves the model: chosen_win on the validation pairs at least 0.3 above the base's, and
#     the held-out loop rate at most 0.75 x the base's (the base loops on >= 80 % of them);
#   - the Q1_0 output, trained through the quantizer, keeps the effect after requantization: chosen_win at least 0.3
#     above the base's, perplexity within 2 % of the Q1_0 base's (the held-out text);
#   - a rerun with the same --out runs no stage again and writes the same report.md;
#   - a changed input (--unseen-prompts) reruns the stages that read it and says so, and reuses mining and training.
# Every figure must be a number. The recipe's goals themselves are measured in notes/antidoom-results.md (they need
# the default budget, minutes).
set -euo pipefail
src=${BONSAI_SOURCE_ROOT:?}
bld=${BONSAI_BUILD_ROOT:?}
if [ ! -f "$src/data/bonsai-loop-1bit.gguf" ]; then echo "SKIP: data/bonsai-loop-1bit.gguf missing"; exit 77; fi
command -v jq > /dev/null || { echo "SKIP: jq missing (installed by ./bonsai.sh deps)"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$src"
run=("$bld/tools/bonsai-antidoom" -m data/bonsai-loop-1bit.gguf --out "$dir/run" --kind adapter,q1_0 -t 2 -n 128
     --mine-max-prompts 120 --val-max-prompts 30 --rounds 1 --seeds 1 --tethers adapter=3 --tethers q1_0=10
     --no-progress)
"${run[@]}" > "$dir/out1.txt" 2> "$dir/log1.txt" || { tail -30 "$dir/log1.txt"; echo "FAIL: bonsai-antidoom failed"; exit 1; }
tail -25 "$dir/out1.txt"
fails=0
check() {  # check "AWK CONDITION" "description"
    if awk "BEGIN { exit !($1) }"; then echo "ok   $2"; else echo "FAIL $2"; fails=$((fails + 1)); fi
}
number() {  # number NAME VALUE: an empty figure or jq's null would read as 0 in awk
    [[ $2 =~ ^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]] || { echo "FAIL $1 is not a number: '$2'"; fails=$((fails + 1)); }
}
res() { jq -r ".stages[\"$1\"].result.$2" "$dir/run/manifest.json"; }
lb=$(res eval-base-f16 loop_rate) la=$(res out-adapter loop_rate) cb=$(res eval-base-f16 chosen_win)
ca=$(res out-adapter chosen_win) cq=$(res out-q1_0 chosen_win) pq=$(res eval-base-q1_0 ppl) pa=$(res out-q1_0 ppl)
for v in lb la cb ca cq pq pa; do number "$v" "${!v}"; done
check "$lb >= 0.8" "base loop rate $lb >= 0.8"
check "$la <= 0.75 * $lb" "adapter loop rate $la <= 0.75 x base $lb"
check "$ca >= $cb + 0.3" "adapter chosen_win $cb -> $ca (+0.3)"
check "$cq >= $cb + 0.3" "Q1_0 chosen_win $cb -> $cq (+0.3)"
check "$pa <= 1.02 * $pq" "Q1_0 perplexity $pa within +2% of the Q1_0 base $pq"
grep -q '^| antidoom-adapter ' "$dir/run/report.md" && grep -q '^| antidoom-q1_0 ' "$dir/run/report.md" ||
    { echo "FAIL report.md lacks an output row"; fails=$((fails + 1)); }
grep -q '<svg' "$dir/run/report.html" || { echo "FAIL report.html has no plot"; fails=$((fails + 1)); }
# a rerun: nothing runs again, the same report
cp "$dir/run/report.md" "$dir/report1.md"
"${run[@]}" > /dev/null 2> "$dir/log2.txt" || { tail "$dir/log2.txt"; echo "FAIL: the rerun failed"; exit 1; }
n_reused=$(grep -c 'done before, reused' "$dir/log2.txt" || true)
n_stages=$(jq '.stages | length' "$dir/run/manifest.json")
check "$n_reused == $n_stages" "rerun: $n_reused of $n_stages stages reused"
cmp -s "$dir/report1.md" "$dir/run/report.md" || { echo "FAIL the rerun's report.md differs"; fails=$((fails + 1)); }
# a changed input: the evaluations that read it run again, mining and training are reused
head -20 data/val/prompts-questions-unseen.jsonl > "$dir/unseen.jsonl"
"${run[@]}" --unseen-prompts "$dir/unseen.jsonl" > /dev/null 2> "$dir/log3.txt" ||
    { tail "$dir/log3.txt"; echo "FAIL: the changed run failed"; exit 1; }
grep -q 'stage out-q1_0: its settings or inputs changed' "$dir/log3.txt" &&
    grep -q 'stage mine-r1: done before, reused' "$dir/log3.txt" &&
    grep -q 'stage cand-q1_0-r1-s1-t10: done before, reused' "$dir/log3.txt" ||
    { echo "FAIL a changed --unseen-prompts did not rerun exactly the evaluations"; grep 'stage ' "$dir/log3.txt"; fails=$((fails + 1)); }
n=$(res out-q1_0 unseen_n)
check "$n == 20" "the changed run evaluated the 20 new unseen prompts ($n)"
[ "$fails" = 0 ]
