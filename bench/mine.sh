#!/usr/bin/env bash
# bench/mine.sh [BUILD_DIR] — pair-mining throughput (completion tokens/s) on the shipped looping
# model: bonsai-mine-pairs in-process vs through bonsai-serve on loopback (--server), same prompts,
# seeds and flags, side by side. Env: PROMPTS (64), NPRED (256), THREADS (2).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
T="$B/tools"
model=data/bonsai-loop-f16.gguf
N=${PROMPTS:-64} NPRED=${NPRED:-256} TH=${THREADS:-2}
dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
"$T/bonsai-serve" -m "$model" --port 0 --ready-file "$dir/ready" -c 2048 -t "$TH" 2>/dev/null &
pid=$!
for _ in $(seq 300); do [ -s "$dir/ready" ] && break; sleep 0.1; done
args=(-m "$model" -p data/prompts/train.jsonl --max-prompts "$N" --thinking -1 -t "$TH" --ctx 2048
      --n-predict "$NPRED" --n-probs 20 --mode sample --temp 0.1 --seed 1)
run() { # label, extra args → "tokens seconds"
    local t0 t1; t0=$(date +%s.%N)
    "$T/bonsai-mine-pairs" "${args[@]}" "${@:2}" -o "$dir/$1.jsonl" > /dev/null 2>&1
    t1=$(date +%s.%N)
    echo "$(jq -s 'map(.n_tokens) | add' "$dir/$1.generations.jsonl") $(echo "$t1 - $t0" | bc -l)"
}
read -r tl sl < <(run local)
read -r th sh < <(run http --server "http://$(cat "$dir/ready")")
printf '\n%s prompts x up to %s tokens, %s threads, %s\n\n' "$N" "$NPRED" "$TH" "$model"
printf '| backend | completion tokens | seconds | tokens/s |\n|---|---:|---:|---:|\n'
printf '| in-process | %s | %.1f | %.0f |\n' "$tl" "$sl" "$(echo "$tl / $sl" | bc -l)"
printf '| HTTP (bonsai-serve) | %s | %.1f | %.0f |\n' "$th" "$sh" "$(echo "$th / $sh" | bc -l)"
printf 'ratio HTTP / in-process: %.2f\n' "$(echo "($th / $sh) / ($tl / $sl)" | bc -l)"
