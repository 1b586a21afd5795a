#!/usr/bin/env bash
# bench/serve-spec.sh [BUILD_DIR [BASE_BUILD_DIR]] — bonsai-serve with speculative slots under load: 4 concurrent
# greedy streams (-np 4, NPRED tokens each, a context of NPRED + 64 per slot, ignore_eos; total generated tokens /
# wall time, each of 3 rounds) on a plain server, a DSpark server with a random drafter and the adaptive cost model
# (it soon stops drafting: one-token passes), and the same always drafting 3 (verify passes of 4 tokens, all
# rejected). With BASE_BUILD_DIR (e.g. a
# build of an older commit) the same rows for its bonsai-serve, side by side. Env: PRESET (small), TYPE (Q1_0),
# THREADS (2), NPRED (128). With MODEL and DRAFTER (e.g. data/bonsai-loop-1bit.gguf and the drafter trained for it,
# data/bonsai-loop-1bit-drafter.gguf) the target is MODEL, the streams are chat prompts (the first four held-out
# openings in ChatML) and the DSpark rows use DRAFTER.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
BASE=${2:-}
PRESET=${PRESET:-small}
TYPE=${TYPE:-Q1_0}
THREADS=${THREADS:-2}
NPRED=${NPRED:-128}
command -v curl >/dev/null || { echo "bench/serve-spec.sh needs curl"; exit 1; }
dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT

MODEL=${MODEL:-} DRAFTER=${DRAFTER:-}
if [ -n "$MODEL" ]; then
    [ -n "$DRAFTER" ] || { echo "bench/serve-spec.sh: MODEL needs DRAFTER"; exit 1; }
    ln -s "$(realpath "$MODEL")" "$dir/m.gguf"
    ln -s "$(realpath "$DRAFTER")" "$dir/d.gguf"
    kind="trained drafter" fixture="$MODEL"
else
    . bench/spec-fixture.sh
    spec_fixture "$B" "$PRESET" "$TYPE" "$THREADS" "$dir/m.gguf" "$dir/d.gguf"
    kind="random drafter" fixture="$PRESET preset, $TYPE"
fi
# prompt_of C: stream C's prompt, JSON-escaped
prompt_of() {
    if [ -n "$MODEL" ]; then
        local p
        p=$(sed -n "${1}p" data/prompts/heldout.jsonl | sed 's/.*"prompt": *"\([^"]*\)".*/\1/')
        printf '<|im_start|>user\\n%s<|im_end|>\\n<|im_start|>assistant\\n' "$p"
    else
        printf 'Once upon a time %s' "$1"
    fi
}

. bench/serve-lib.sh
# streams BUILD ARGS...: starts its bonsai-serve with ARGS, prints the best total tok/s of 3 rounds of 4 streams
streams() {
    local bin=$1 port best=0
    shift
    port=$(free_port)
    "$bin/tools/bonsai-serve" -m "$dir/m.gguf" --port "$port" -t "$THREADS" -c $((4 * (NPRED + 64))) -np 4 "$@" 2>"$dir/serve.log" &
    pid=$!
    for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
    for _ in 1 2 3; do
        local t0 t1 rate
        t0=$(date +%s.%N)
        for c in 1 2 3 4; do
            curl -s "http://127.0.0.1:$port/completion" -d "{\"prompt\":\"$(prompt_of $c)\",\"n_predict\":$NPRED,\"temperature\":0,\"ignore_eos\":true,\"cache_prompt\":false}" >/dev/null &
        done
        wait $(jobs -p | grep -v "^$pid$")
        t1=$(date +%s.%N)
        rate=$(echo "4 * $NPRED / ($t1 - $t0)" | bc -l)
        best=$(echo "if ($rate > $best) $rate else $best" | bc -l)
    done
    kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
    printf '%.1f' "$best"
}
printf '\nmodel: %s, %s threads, 4 streams x %s greedy tokens (best of 3 rounds)\n\n' "$fixture" "$THREADS" "$NPRED"
if [ -n "$BASE" ]; then
    printf '| server | %s total tok/s | %s total tok/s | ratio |\n|---|---:|---:|---:|\n' "$B" "$BASE"
else
    printf '| server | total tok/s |\n|---|---:|\n'
fi
row() { # name ARGS...
    local name=$1 a b
    shift
    a=$(streams "$B" "$@")
    if [ -n "$BASE" ]; then
        b=$(streams "$BASE" "$@")
        printf '| %s | %s | %s | %.2fx |\n' "$name" "$a" "$b" "$(echo "$a / $b" | bc -l)"
    else
        printf '| %s | %s |\n' "$name" "$a"
    fi
}
row "plain"
row "DSpark $kind, adaptive" -md "$dir/d.gguf" --spec-type draft-dspark
row "DSpark $kind, always 3 drafts" -md "$dir/d.gguf" --spec-type draft-dspark --spec-draft-n-max 3 \
    --no-spec-adaptive
