#!/usr/bin/env bash
# bench/train-dp.sh [BUILD_DIR] — data-parallel FTPO training (bonsai-ftpo-train -dp N) against one process on the
# same threads: pairs mined (primed) from the shipped looping model, each row REPEAT times (a throughput measure: the
# rows' count matters, not their variety), then the same optimizer steps as one process × batch N·4 on THREADS
# threads and as N ranks × batch 4 on THREADS/N threads each, side by side; prints both runs' last loss (equal to
# rounding) and the speed ratio. Env: RANKS (2), THREADS (2), PROMPTS (160), REPEAT (4), EPOCHS (2), TARGETS
# (q,k,v,o,gate,up,down), MODEL (data/bonsai-loop-1bit.gguf).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
T="$B/tools"
model=${MODEL:-data/bonsai-loop-1bit.gguf}
R=${RANKS:-2} TH=${THREADS:-2} N=${PROMPTS:-160} REP=${REPEAT:-4} E=${EPOCHS:-2} TG=${TARGETS:-q,k,v,o,gate,up,down}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$T/bonsai-mine-pairs" -m "$model" -p data/prompts/train.jsonl --max-prompts "$N" -t "$TH" --n-predict 256 \
    --seed 1 --mode prime -o "$dir/mined.jsonl" > /dev/null 2>&1
for _ in $(seq "$REP"); do cat "$dir/mined.jsonl"; done > "$dir/pairs.jsonl"
rows=$(wc -l < "$dir/pairs.jsonl")
train() { # label, ranks, batch, threads → "seconds last_loss steps"
    local t0 t1; t0=$(date +%s.%N)
    "$T/bonsai-ftpo-train" -m "$model" -p "$dir/pairs.jsonl" -o "$dir/$1.gguf" --targets "$TG" --epochs "$E" \
        --early-stop 0 --no-eval --batch "$3" -dp "$2" -t "$4" -q > "$dir/$1.log" 2>&1
    t1=$(date +%s.%N)
    echo "$(echo "$t1 - $t0" | bc -l) $(sed -n 's|^ftpo-train: \([0-9]*\)/[0-9]* steps.*|\1|p' "$dir/$1.log")" \
         "$(sed -n 's/.*; loss [0-9.]* -> \([0-9.]*\);.*/\1/p' "$dir/$1.log")"
}
per=$(( TH / R > 0 ? TH / R : 1 ))
read -r s1 steps1 loss1 < <(train one 1 $((4 * R)) "$TH")
read -r sN stepsN lossN < <(train ranks "$R" 4 "$per")
printf '\n%s: %s pair rows (%s mined x %s), %s epochs, targets %s, %s threads in all\n\n' "$model" "$rows" "$(wc -l < "$dir/mined.jsonl")" "$REP" "$E" "$TG" "$TH"
printf '| run | batch | steps | seconds | steps/s | last loss |\n|---|---|---:|---:|---:|---:|\n'
printf '| one process, -t %s | %s | %s | %.1f | %.2f | %s |\n' "$TH" $((4 * R)) "$steps1" "$s1" \
    "$(echo "$steps1 / $s1" | bc -l)" "$loss1"
printf '| -dp %s, -t %s each | %s x %s | %s | %.1f | %.2f | %s |\n' "$R" "$per" "$R" 4 "$stepsN" "$sN" \
    "$(echo "$stepsN / $sN" | bc -l)" "$lossN"
printf 'speed ratio -dp %s / one process: %.2f\n' "$R" "$(echo "$s1 / $sN" | bc -l)"
