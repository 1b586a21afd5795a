#!/usr/bin/env bash
# bench/train-dp.sh [BUILD_DIR] — data-parallel FTPO training (bonsai-ftpo-train -dp N) against one process on the
# same threads: pairs mined (primed) from the shipped looping model, each row REPEAT times (a throughput measure: the
# rows' count matters, not their variety), then the same optimizer steps as one process × batch N·4 on THREADS
# threads, as N ranks × batch 4 on THREADS/N threads each (-dp N: forked, the loopback transport), and as N separate
# processes under torchrun's variables (the tcp transport), side by side; prints every run's last loss (equal to
# rounding; the two rank runs to the bit) and the speed ratios. Env: RANKS (2), THREADS (2), PROMPTS (160), REPEAT (4), EPOCHS (2), TARGETS
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
ftpo() { # label, extra args...: one bonsai-ftpo-train process of the runs below (output into $dir/label.log)
    local label=$1; shift
    "$T/bonsai-ftpo-train" -m "$model" -p "$dir/pairs.jsonl" -o "$dir/$label.gguf" --targets "$TG" --epochs "$E" \
        --early-stop 0 --no-eval "$@" -q > "$dir/$label.log" 2>&1
}
launched() { # label, ranks, batch, threads: the ranks as separate processes under torchrun's variables (tcp)
    local r pids=()
    for r in $(seq 0 $(($2 - 1))); do
        RANK=$r LOCAL_RANK=$r WORLD_SIZE=$2 LOCAL_WORLD_SIZE=$2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((29600 + $$ % 1000)) \
            ftpo "$1$([ "$r" = 0 ] || echo ".$r")" --batch "$3" -t "$4" &
        pids+=($!)
    done
    for r in "${pids[@]}"; do wait "$r"; done
}
train() { # label, ranks, batch, threads → "seconds last_loss steps" (label "launched": separate processes)
    local t0 t1; t0=$(date +%s.%N)
    if [ "$1" = launched ]; then launched "$@"; else ftpo "$1" --batch "$3" -dp "$2" -t "$4"; fi
    t1=$(date +%s.%N)
    echo "$(echo "$t1 - $t0" | bc -l) $(sed -n 's|^ftpo-train: \([0-9]*\)/[0-9]* steps.*|\1|p' "$dir/$1.log")" \
         "$(sed -n 's/.*; loss [0-9.]* -> \([0-9.]*\);.*/\1/p' "$dir/$1.log")"
}
per=$(( TH / R > 0 ? TH / R : 1 ))
read -r s1 steps1 loss1 < <(train one 1 $((4 * R)) "$TH")
read -r sN stepsN lossN < <(train ranks "$R" 4 "$per")
read -r sL stepsL lossL < <(train launched "$R" 4 "$per")
printf '\n%s: %s pair rows (%s mined x %s), %s epochs, targets %s, %s threads in all\n\n' "$model" "$rows" "$(wc -l < "$dir/mined.jsonl")" "$REP" "$E" "$TG" "$TH"
printf '| run | batch | steps | seconds | steps/s | last loss |\n|---|---|---:|---:|---:|---:|\n'
printf '| one process, -t %s | %s | %s | %.1f | %.2f | %s |\n' "$TH" $((4 * R)) "$steps1" "$s1" \
    "$(echo "$steps1 / $s1" | bc -l)" "$loss1"
printf '| -dp %s, -t %s each | %s x %s | %s | %.1f | %.2f | %s |\n' "$R" "$per" "$R" 4 "$stepsN" "$sN" \
    "$(echo "$stepsN / $sN" | bc -l)" "$lossN"
printf '| %s launched ranks (tcp), -t %s each | %s x %s | %s | %.1f | %.2f | %s |\n' "$R" "$per" "$R" 4 "$stepsL" "$sL" \
    "$(echo "$stepsL / $sL" | bc -l)" "$lossL"
printf 'speed ratio -dp %s / one process: %.2f; launched ranks / one process: %.2f\n' "$R" "$(echo "$s1 / $sN" | bc -l)" \
    "$(echo "$s1 / $sL" | bc -l)"
