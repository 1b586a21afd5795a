#!/usr/bin/env bash
# scripts/make-drafter.sh [BUILD_DIR] — trains data/bonsai-loop-1bit-drafter.gguf, the DSpark drafter of the
# shipped 1-bit model (docs/dspark.md §11): bonsai-train-drafter on the model's own greedy continuations of
# data/prompts/train.jsonl (held-out acceptance on data/prompts/heldout.jsonl printed before and after), then
# bench/drafter-accept.sh measures it with bonsai-speculative. The drafter reads the model's token_embd and output
# (borrowed), so it serves data/bonsai-loop-f16.gguf as well (the same weights unpacked). Env: THREADS (2), EPOCHS,
# SEED; MEASURE=0 skips the measurement. Matrices are stored Q8_0 (0.9 MB; F16 would be 1.6 MB).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
THREADS=${THREADS:-2}
EPOCHS=${EPOCHS:-6}
SEED=${SEED:-1}
OUT=data/bonsai-loop-1bit-drafter.gguf
"$B/tools/bonsai-train-drafter" -m data/bonsai-loop-1bit.gguf -o "$OUT" \
    --prompts data/prompts/train.jsonl --heldout data/prompts/heldout.jsonl \
    --draft-layers 2 --draft-ff 128 --markov-rank 32 --block-size 4 \
    --n-gen 128 --epochs "$EPOCHS" -b 4 --anchors 48 --lr 2e-3 -s "$SEED" -t "$THREADS" --type Q8_0
ls -l "$OUT"
if [ "${MEASURE:-1}" != 0 ]; then
    MODEL=data/bonsai-loop-1bit.gguf DRAFTER="$OUT" bench/drafter-accept.sh "$B"
fi
