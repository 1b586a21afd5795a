#!/usr/bin/env bash
# scripts/penalty-comparison.sh [BUILD] — where FTPO has to beat decoding-time penalties (docs/antidoom.md §18), in
# one run on one model: bonsai-antidoom's outputs (base + adapter, F16 merge, merged Q1_0, merged Q2_0) beside
# the base, each plain and under llama.cpp's penalties (repeat 1.1, frequency 0.5, presence 0.5, DRY 0.8; llama-server's
# defaults otherwise). Columns: verbatim and frame-loop rate on the held-out chat prompts (greedy, 95 % CI),
# seq-rep-4, the first-line exact match of every task file (the tasks where repetition belongs, 95 % CI), held-out
# perplexity (teacher-forced: n/a under a penalty) and decode tok/s.
#   COMPARE_MODEL (data/bonsai-skills-f16.gguf: it copies and loops)  COMPARE_DIR (out/compare; rerunning reuses
#   every finished file)  COMPARE_SEED (1)  COMPARE_THREADS (2)
#   COMPARE_KINDS (adapter,f16; the merged q1_0 / q2_0 kinds requantize the base, which only a QAT-trained file such as
#   data/bonsai-skills-1bit.gguf survives)
#   COMPARE_SETTINGS ("plain repeat=1.1 frequency=0.5 presence=0.5 dry=0.8"; keys: scripts/penalty-flags.sh)
#   COMPARE_TASKS (every data/tasks/*.jsonl)  COMPARE_TEXT (data/skills/heldout.txt)  COMPARE_ARGS (more antidoom flags)
# Writes COMPARE_DIR/comparison.md (atomically) and prints it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
B=${1:-$root/build}
case $B in /*) ;; *) B=$root/$B ;; esac
T=$B/tools
cd "$root"
M=${COMPARE_MODEL:-data/bonsai-skills-f16.gguf}
out=${COMPARE_DIR:-out/compare}
th=${COMPARE_THREADS:-2}
kinds=${COMPARE_KINDS:-adapter,f16}
settings=${COMPARE_SETTINGS:-"plain repeat=1.1 frequency=0.5 presence=0.5 dry=0.8"}
text=${COMPARE_TEXT:-data/skills/heldout.txt}
read -ra tasks <<< "${COMPARE_TASKS:-$(echo data/tasks/*.jsonl)}"
pheld=data/prompts/heldout.jsonl
for x in "$T/bonsai-antidoom" "$T/bonsai-eval-loops" "$T/bonsai-eval-tasks" "$M" "$text" "$pheld" "${tasks[@]}"; do
    [ -e "$x" ] || { echo "penalty-comparison: $x is missing" >&2; exit 1; }
done
command -v jq > /dev/null || { echo "penalty-comparison: jq missing (./bonsai.sh deps)" >&2; exit 1; }
. scripts/penalty-flags.sh
for s in $settings; do penalty_flags "$s" > /dev/null || exit 1; done
mkdir -p "$out"
say() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# 1. the FTPO outputs (resumable: bonsai-antidoom reuses its finished stages)
say "bonsai-antidoom -m $M --kind $kinds -> $out/antidoom"
# shellcheck disable=SC2086 # COMPARE_ARGS is a list of options
"$T/bonsai-antidoom" -m "$M" --out "$out/antidoom" --kind "$kinds" -s "${COMPARE_SEED:-1}" -t "$th" \
    --no-progress ${COMPARE_ARGS:-} > "$out/antidoom.log" 2>&1 || { tail -20 "$out/antidoom.log"; exit 1; }

# the models: NAME FILE [ADAPTER]
models=("base|$M|")
IFS=',' read -ra ks <<< "$kinds"
for k in "${ks[@]}"; do
    case $k in
        adapter) models+=("base+adapter|$M|$out/antidoom/antidoom-adapter.gguf") ;;
        *) models+=("$k|$out/antidoom/antidoom-$k.gguf|") ;;
    esac
done

# once FILE CMD...: runs CMD (which writes FILE atomically) unless FILE exists; its output goes to FILE.log
once() { local f=$1; shift; [ -s "$f" ] || "$@" > "$f.log" 2>&1 || { tail -5 "$f.log" >&2; exit 1; }; }

pct() { jq -r "$1 | \"\\((.${2}_rate * 1000 | round) / 10)% (\\((.${2}_rate_ci95[0] * 1000 | round) / 10)-\\((.${2}_rate_ci95[1] * 1000 | round) / 10))\"" "$3"; }

table=$(mktemp)
trap 'rm -f "$table"' EXIT
{
    printf '| model | decoding | loop rate (CI) | frame-loop rate (CI) | seq-rep-4 |'
    for t in "${tasks[@]}"; do printf ' %s exact (CI) |' "$(basename "$t" .jsonl)"; done
    printf ' perplexity | decode tok/s |\n|---|---|---|---|---|'
    for t in "${tasks[@]}"; do printf -- '---|'; done
    printf -- '---|---|\n'
} > "$table"

for entry in "${models[@]}"; do
    IFS='|' read -r name file adapter <<< "$entry"
    [ -f "$file" ] || { echo "penalty-comparison: $file missing (did bonsai-antidoom write kind $name?)" >&2; exit 1; }
    lora=()
    [ -n "$adapter" ] && lora=(--lora "$adapter")
    if [ ! -s "$out/ppl-$name.txt" ]; then
        "$T/bonsai-perplexity" -m "$file" "${lora[@]}" -f "$text" -c 128 -t "$th" > "$out/ppl-$name.log" 2>&1 ||
            { tail -5 "$out/ppl-$name.log" >&2; exit 1; }
        grep -o 'PPL = [0-9.]*' "$out/ppl-$name.log" | tail -1 | cut -d' ' -f3 > "$out/ppl-$name.txt"
    fi
    ppl=$(cat "$out/ppl-$name.txt")
    if [ ! -s "$out/bench-$name.json" ]; then
        "$T/bonsai-bench" -m "$file" "${lora[@]}" -p 0 -n 128 -r 5 -t "$th" -o json > "$out/bench-$name.tmp" \
            2> "$out/bench-$name.log" && mv "$out/bench-$name.tmp" "$out/bench-$name.json" ||
            { tail -5 "$out/bench-$name.log" >&2; exit 1; }
    fi
    tps=$(jq -r '.[0].samples_ts | sort | .[length / 2 | floor] | . * 10 | round / 10' "$out/bench-$name.json")
    for s in $settings; do
        mapfile -t f < <(penalty_flags "$s")
        tag=$name-${s//[=,]/_}
        say "$name, $s"
        once "$out/loops-$tag.json" "$T/bonsai-eval-loops" -m "$file" "${lora[@]}" -p "$pheld" --thinking -1 -t "$th" \
            --ctx 2048 --temp 0 --n-predict 256 "${f[@]}" --label "$name $s" --json "$out/loops-$tag.json"
        row="| $name | $s | $(pct . loop "$out/loops-$tag.json") | $(pct . frame_loop "$out/loops-$tag.json") |"
        row+=" $(jq -r '.seq_rep4 * 1000 | round / 1000' "$out/loops-$tag.json") |"
        for t in "${tasks[@]}"; do
            tj=$out/tasks-$tag-$(basename "$t" .jsonl).json
            once "$tj" "$T/bonsai-eval-tasks" -m "$file" "${lora[@]}" --tasks "$t" -t "$th" "${f[@]}" \
                --label "$name $s" -o "$tj"
            row+=" $(pct .overall exact "$tj") |"
        done
        [ "$s" = plain ] && row+=" $ppl | $tps |" || row+=" n/a | $tps |"
        echo "$row" >> "$table"
    done
done
cp "$table" "$out/comparison.md.tmp" && mv "$out/comparison.md.tmp" "$out/comparison.md"
cat "$out/comparison.md"
