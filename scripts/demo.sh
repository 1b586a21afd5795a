#!/usr/bin/env bash
# scripts/demo.sh [BUILD_DIR] — the end-to-end antidoom demo run by `./bonsai.sh demo`: bonsai-antidoom (the whole
# recipe in one resumable run, docs/antidoom.md §18) on the shipped looping model, data/bonsai-loop-1bit.gguf
# (natively 1-bit, stored as Q1_0 like the real Bonsai models). It evaluates the base, mines its loops, trains
# candidates for each output kind, picks on validation data (data/val/, never the held-out prompts), runs on-policy
# rounds, writes the outputs, evaluates them on the held-out prompts and prints the report (OUT/report.md; the plots
# are in OUT/report.html). Then the bonsai-serve command for the Q1_0 output.
# Knobs (environment): BONSAI_DEMO_DIR (out/demo; rerunning reuses every finished stage), DEMO_SEED (1),
# DEMO_KINDS (adapter,f16,q1_0,q2_0), DEMO_THREADS (2), DEMO_FULL (0; 1: bonsai-antidoom --full, the larger budget),
# DEMO_ARGS (more bonsai-antidoom options, e.g. "--rounds 3").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
B=${1:-build}
case $B in /*) ;; *) B=$root/$B ;; esac
out=${BONSAI_DEMO_DIR:-out/demo}
case $out in /*) ;; *) out=$root/$out ;; esac
kinds=${DEMO_KINDS:-adapter,f16,q1_0,q2_0}
full=()
[ "${DEMO_FULL:-0}" = 1 ] && full=(--full)
cd "$root" # the data paths of bonsai-antidoom's defaults are the checkout's data/
# shellcheck disable=SC2086 # DEMO_ARGS is a list of options
"$B/tools/bonsai-antidoom" -m data/bonsai-loop-1bit.gguf --out "$out" --kind "$kinds" -s "${DEMO_SEED:-1}" \
    -t "${DEMO_THREADS:-2}" "${full[@]}" ${DEMO_ARGS:-}
echo
if [ -f "$out/antidoom-q1_0.gguf" ]; then
    echo "serve the Q1_0 output (llama-server compatible):"
    echo "  $B/tools/bonsai-serve -m $out/antidoom-q1_0.gguf --port 8080 -c 2048 -np 2"
    echo "  curl -s localhost:8080/completion -d '{\"prompt\":\"<|im_start|>user\\nA day for firm<|im_end|>\\n<|im_start|>assistant\\n\",\"n_predict\":64}'"
fi
