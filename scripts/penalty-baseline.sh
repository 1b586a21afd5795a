#!/usr/bin/env bash
# scripts/penalty-baseline.sh — decoding-time repetition penalties as the baseline FTPO has to beat: the greedy loop
# rate on the held-out prompts of a demo run's base models with llama.cpp's penalties (bonsai-eval-loops
# --repeat-penalty / --frequency-penalty / --presence-penalty over --repeat-last-n tokens, and DRY), beside that run's own rows
# for the base and antidoom models (re-scored from their completions, OUT/gen-*.jsonl, with bonsai-eval-loops
# --from-log). Settings as scripts/demo.sh's evaluate(): greedy, plain ChatML, --ctx 2048, every held-out prompt,
# --n-predict $DEMO_NPREDICT (256). Besides the loop rate (the verbatim detector) each row has the frame-loop rate
# (docs/antidoom.md §16: one frame re-entered with changing slots) and seq-rep-4, the mean share of repeated word
# 4-grams (eval/stats.h), which also counts a phrase that comes back with changes.
#   scripts/penalty-baseline.sh OUT [BUILD]      OUT: a finished demo's output folder (default build: build)
#   PENALTIES="repeat=1.1 repeat=1.3,last=-1 ..."  the settings (each: comma-separated repeat= frequency= presence=
#                                                 last= and DRY's dry= drybase= dryallowed= drylast=; default below),
#                                                 PENALTY_THREADS (2)
# Writes OUT/penalty-baseline.md (the table, atomically), OUT/eval-pen-*.json and their completions
# (OUT/eval-pen-*.gen.jsonl); prints the table. Takes ~2.5 min on 2 cores for the default settings and 3 models.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: scripts/penalty-baseline.sh OUT [BUILD]}
T=${2:-$root/build}/tools
[ -x "$T/bonsai-eval-loops" ] || { echo "penalty-baseline: $T/bonsai-eval-loops not built" >&2; exit 1; }
command -v jq > /dev/null || { echo "penalty-baseline: jq missing (./bonsai.sh deps)" >&2; exit 1; }
pheld=$root/data/prompts/heldout.jsonl
npred=${DEMO_NPREDICT:-256}
th=${PENALTY_THREADS:-2}
settings=${PENALTIES:-"repeat=1.1 repeat=1.3 repeat=1.1,last=-1 frequency=0.5 presence=0.5 presence=2 dry=0.8 dry=0.8,drylast=-1 dry=2,drylast=-1"}

. "$root/scripts/penalty-flags.sh"

# row LABEL JSON: one table row from an eval-loops JSON
row() {
    jq -r --arg l "$1" '"| \($l) | \(.loop_rate * 1000 | round / 10)% (\(.loops)/\(.n)), CI \(.loop_rate_ci95[0] * 1000 | round / 10)-\(.loop_rate_ci95[1] * 1000 | round / 10)% | \(.frame_loop_rate * 1000 | round / 10)% (\(.frame_loops)/\(.n)), CI \(.frame_loop_rate_ci95[0] * 1000 | round / 10)-\(.frame_loop_rate_ci95[1] * 1000 | round / 10)% | \(.seq_rep4 * 1000 | round / 1000) | \(.mean_length * 10 | round / 10) |"' "$2"
}

# demo_row LABEL SHOWN: the demo's model LABEL re-scored from its completions (OUT/gen-LABEL.jsonl; frame loops over
# the tokens of the base model of the loop below, $q)
demo_row() {
    "$T/bonsai-eval-loops" --from-log "$out/gen-$1.jsonl" -m "$out/base-$q.gguf" --label "$1" \
        --json "$out/eval-rep-$1.json" > /dev/null 2>&1
    row "$2" "$out/eval-rep-$1.json"
}

models=()
for q in f16 q1_0 q2_0 Q1_0 Q2_0; do [ -f "$out/base-$q.gguf" ] && models+=("$q"); done # bonsai-antidoom writes lower case
[ ${#models[@]} -gt 0 ] || { echo "penalty-baseline: no base-*.gguf in $out (run ./bonsai.sh demo first)" >&2; exit 1; }
table=$(mktemp)
trap 'rm -f "$table"' EXIT
{
    echo "| model | decoding | loop rate (greedy, held-out; 95 % CI) | frame-loop rate (95 % CI) | seq-rep-4 | mean len |"
    echo "|---|---|---|---|---|---|"
} > "$table"
for q in "${models[@]}"; do
    [ -f "$out/gen-base-$q.jsonl" ] && demo_row "base-$q" "base-$q | plain" >> "$table"
    for s in $settings; do
        mapfile -t f < <(penalty_flags "$s")
        j=$out/eval-pen-$q-${s//[=,]/_}.json
        "$T/bonsai-eval-loops" -m "$out/base-$q.gguf" -p "$pheld" --thinking -1 -t "$th" --ctx 2048 --temp 0 \
            --n-predict "$npred" "${f[@]}" --label "base-$q $s" --json "$j" --gen-log "${j%.json}.gen.jsonl" > /dev/null
        row "base-$q | $s" "$j" >> "$table"
        echo "base-$q $s: $(jq -r .loop_rate "$j")" >&2
    done
    for label in $(cd "$out" && ls gen-antidoom-*.jsonl 2>/dev/null | sed 's/^gen-//; s/\.jsonl$//'); do
        sel=$([ "$(cat "$out/selected-$q.txt" 2>/dev/null)" = "$label" ] && echo " (selected on validation)" || true)
        case $label in *-"$q"|*-"$q"-*) demo_row "$label" "$label$sel | plain" >> "$table" ;; esac
    done
done
cp "$table" "$out/penalty-baseline.md.tmp" && mv "$out/penalty-baseline.md.tmp" "$out/penalty-baseline.md"
cat "$out/penalty-baseline.md"
