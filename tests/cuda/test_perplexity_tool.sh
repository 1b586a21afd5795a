#!/usr/bin/env bash
# tests/cuda/test_perplexity_tool.sh TOOL — bonsai-perplexity on the engine -ngl picks (TOOL: the tool linked with the
# CUDA emulator, or with CUDA): -ngl 99 (every layer on the device, fp16 KV cache) and -ngl 1 (CPU+device) give the
# CPU's PPL (-ngl 0) within 0.5 % (the fp16 cache and the device kernels' summation order; measured on the emulator:
# 7e-5 and 6e-5 relative), on data/bonsai-loop-1bit.gguf over data/heldout.txt, 4 chunks of 64 tokens.
TOOL="${BONSAI_BUILD_ROOT:-build}/$1"
S="${BONSAI_SOURCE_ROOT:-.}"
[ -x "$TOOL" ] || { echo "SKIP: $TOOL not built"; exit 77; }
fail=0
ppl() { "$TOOL" -m "$S/data/bonsai-loop-1bit.gguf" -f "$S/data/heldout.txt" -c 64 --chunks 4 -t 2 -ngl "$1" \
          2>&1 >/dev/null | sed -n 's/^Final estimate: PPL = \([0-9.]*\) .*/\1/p'; }
cpu=$(ppl 0)
[ -n "$cpu" ] || { echo "FAIL: no PPL on the CPU"; exit 1; }
for ngl in 99 1; do
  dev=$(ppl $ngl)
  rel=$(awk -v a="$cpu" -v b="$dev" 'BEGIN { if (b == "") print "none"; else { d = (a - b) / a; print (d < 0 ? -d : d) } }')
  echo "-ngl $ngl: PPL $dev vs CPU $cpu (relative difference $rel, bound 0.005)"
  awk -v r="$rel" 'BEGIN { exit !(r != "none" && r <= 0.005) }' || { echo "FAIL: -ngl $ngl"; fail=1; }
done
exit $fail
