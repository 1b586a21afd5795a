#!/usr/bin/env bash
# bench/serve.sh [BUILD_DIR] — bonsai-serve vs llama-server (built from the npm llama.cpp bundle)
# on the same GGUF with the same flags, side by side in one run:
#   single-stream decode tok/s (timings.predicted_per_second, greedy, 128 tokens, ignore_eos)
#   throughput at 4 concurrent streams (-np 4; total generated tokens / wall time)
# Prints a table with the ratios. Env: PRESET (default small), TYPE (default Q1_0), THREADS (2).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
PRESET=${PRESET:-small}
TYPE=${TYPE:-Q1_0}
THREADS=${THREADS:-2}
NPRED=${NPRED:-128}
command -v curl >/dev/null && command -v jq >/dev/null || { echo "bench/serve.sh needs curl and jq"; exit 1; }
./scripts/build-llamacpp.sh llama-server
LS=third_party/llama.cpp/build/bin/llama-server
dir=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$dir"' EXIT

"$B/tools/bonsai-mkmodel" "$dir/f16.gguf" --preset "$PRESET" --type f16 --seed 1 >/dev/null
"$B/tools/bonsai-quantize" "$dir/f16.gguf" "$dir/m.gguf" "$TYPE" --threads "$THREADS" >/dev/null

. bench/serve-lib.sh

start_servers() { # $1 = slots
  pb=$(free_port); pl=$(free_port)
  "$B/tools/bonsai-serve" -m "$dir/m.gguf" --port "$pb" -t "$THREADS" -c 1024 -np "$1" 2>"$dir/bonsai.log" & pids+=($!)
  "$LS" -m "$dir/m.gguf" --port "$pl" -t "$THREADS" -c $((1024 * $1)) -np "$1" --no-webui 2>"$dir/llama.log" >/dev/null & pids+=($!)
  wait_up "$pb" && wait_up "$pl" || { echo "a server did not start"; tail -5 "$dir"/*.log; exit 1; }
}
stop_servers() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null || true; pids=(); }

req() { # port seed → predicted_per_second
  curl -s "http://127.0.0.1:$1/completion" -d "{\"prompt\":\"Once upon a time $2\",\"n_predict\":$NPRED,\"temperature\":0,\"ignore_eos\":true,\"cache_prompt\":false}" |
    jq -r '.timings.predicted_per_second'
}
single() { local s=0; for r in 1 2 3; do s=$(echo "$s + $(req "$1" "$r")" | bc -l); done; echo "$s / 3" | bc -l; }
multi() { # port → total tok/s over 4 concurrent streams
  local t0 t1; t0=$(date +%s.%N)
  for c in 1 2 3 4; do req "$1" "$c" >/dev/null & done; wait
  t1=$(date +%s.%N); echo "4 * $NPRED / ($t1 - $t0)" | bc -l
}

start_servers 1
sb=$(single "$pb"); sl=$(single "$pl")
stop_servers
start_servers 4
mb=$(multi "$pb"); ml=$(multi "$pl")
stop_servers

printf '\nmodel: %s preset, %s, %s threads, %s generated tokens per request\n\n' "$PRESET" "$TYPE" "$THREADS" "$NPRED"
printf '| metric | bonsai-serve | llama-server | ratio |\n|---|---:|---:|---:|\n'
printf '| single-stream decode tok/s | %.1f | %.1f | %.2fx |\n' "$sb" "$sl" "$(echo "$sb / $sl" | bc -l)"
printf '| 4 concurrent streams, total tok/s | %.1f | %.1f | %.2fx |\n' "$mb" "$ml" "$(echo "$mb / $ml" | bc -l)"
