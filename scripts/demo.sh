#!/usr/bin/env bash
# scripts/demo.sh [BUILD_DIR] — the end-to-end antidoom demo run by `./bonsai.sh demo`: bonsai-antidoom (the whole
# recipe in one resumable run, docs/antidoom.md §18) on the shipped looping model, data/bonsai-loop-1bit.gguf
# (natively 1-bit, stored as Q1_0 like the real Bonsai models). It evaluates the base, mines its loops, trains
# candidates, picks on validation data (data/val/, never the held-out prompts), runs an on-policy round, writes the
# output, evaluates it on the held-out prompts and prints the report (OUT/report.md; the plots are in
# OUT/report.html). Then the bonsai-serve command for it.
# By default the output is bonsai-antidoom's default kind: a LoRA adapter for the untouched Q1_0 file (about 6 min on
# 2 idle cores). DEMO_FULL=1 is the study: every output kind (adapter, f16, q1_0, q2_0) with bonsai-antidoom --full,
# the larger budget (all 1 835 mining prompts, 3 rounds, 2 seeds per tether: several times longer, not timed).
# Knobs (environment): BONSAI_DEMO_DIR (out/demo; rerunning reuses every finished stage), DEMO_SEED (1),
# DEMO_KINDS (adapter; with DEMO_FULL=1 adapter,f16,q1_0,q2_0), DEMO_THREADS (2), DEMO_FULL (0),
# DEMO_ARGS (more bonsai-antidoom options, e.g. "--rounds 3"), DEMO_DRAFTER (0; 1: then a DSpark drafter for the
# adapter output, the shipped one re-tuned on the de-looped model's continuations, scripts/make-drafter.sh, ~2 min,
# and the serve command uses it; on a CPU DSpark is slower than plain decoding, docs/dspark.md §11.4).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
B=${1:-build}
case $B in /*) ;; *) B=$root/$B ;; esac
out=${BONSAI_DEMO_DIR:-out/demo}
case $out in /*) ;; *) out=$root/$out ;; esac
kinds=${DEMO_KINDS:-adapter}
full=()
if [ "${DEMO_FULL:-0}" = 1 ]; then full=(--full); kinds=${DEMO_KINDS:-adapter,f16,q1_0,q2_0}; fi
cd "$root" # the data paths of bonsai-antidoom's defaults are the checkout's data/
# shellcheck disable=SC2086 # DEMO_ARGS is a list of options
"$B/tools/bonsai-antidoom" -m data/bonsai-loop-1bit.gguf --out "$out" --kind "$kinds" -s "${DEMO_SEED:-1}" \
    -t "${DEMO_THREADS:-2}" "${full[@]}" ${DEMO_ARGS:-}
echo
M=data/bonsai-loop-1bit.gguf
md=()
if [ "${DEMO_DRAFTER:-0}" = 1 ] && [ -f "$out/antidoom-adapter.gguf" ]; then
    D=$out/antidoom-adapter-drafter.gguf
    ADAPTER=$out/antidoom-adapter.gguf OUT_DRAFTER=$D THREADS=${DEMO_THREADS:-2} scripts/make-drafter.sh "$B"
    md=(-md "$D")
    echo
fi
if [ -f "$out/antidoom-adapter.gguf" ]; then
    echo "serve the untouched Q1_0 file with the adapter, applied unmerged (llama-server compatible):"
    echo "  $B/tools/bonsai-serve -m $M --lora $out/antidoom-adapter.gguf ${md[*]} --port 8080 -c 2048 -np 2"
elif [ -f "$out/antidoom-q1_0.gguf" ]; then
    echo "serve the Q1_0 output (llama-server compatible):"
    echo "  $B/tools/bonsai-serve -m $out/antidoom-q1_0.gguf --port 8080 -c 2048 -np 2"
fi
echo "  curl -s localhost:8080/v1/chat/completions -d '{\"messages\":[{\"role\":\"user\",\"content\":\"A day for firm\"}],\"max_tokens\":64}'"
