#!/usr/bin/env bash
# scripts/make-drafter.sh [BUILD_DIR [1bit|f16]] — trains data/bonsai-loop-<model>-drafter.gguf, the DSpark drafter
# of a shipped model (docs/dspark.md §11; default 1bit): bonsai-train-drafter on the model's own greedy continuations
# of data/prompts/train.jsonl (teacher-forced acceptance on data/prompts/heldout.jsonl printed before and after),
# then bench/drafter-accept.sh measures it with bonsai-speculative. The drafter borrows the model's token_embd and
# output, so each model needs its own (bonsai-loop-f16.gguf is the 1-bit model's F16 parent, not its unpack): the
# f16 drafter starts from the 1-bit one (--init-drafter) and trains fewer epochs. Matrices are stored Q8_0 (0.85 MB;
# F16 would be 1.6 MB). Env: THREADS (2), EPOCHS (6 for 1bit, 3 for f16), SEED (1); MEASURE=0 skips the measurement.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
M=${2:-1bit}
THREADS=${THREADS:-2}
SEED=${SEED:-1}
MODEL=data/bonsai-loop-$M.gguf
OUT=data/bonsai-loop-$M-drafter.gguf
case $M in
    1bit) EPOCHS=${EPOCHS:-6}; INIT=() ;;
    f16) EPOCHS=${EPOCHS:-3}; INIT=(--init-drafter data/bonsai-loop-1bit-drafter.gguf) ;;
    *) echo "scripts/make-drafter.sh: model 1bit or f16, not '$M'"; exit 1 ;;
esac
"$B/tools/bonsai-train-drafter" -m "$MODEL" -o "$OUT" "${INIT[@]}" \
    --prompts data/prompts/train.jsonl --heldout data/prompts/heldout.jsonl \
    --draft-layers 2 --draft-ff 128 --markov-rank 32 --block-size 4 \
    --n-gen 128 --epochs "$EPOCHS" -b 4 --anchors 48 --lr 2e-3 -s "$SEED" -t "$THREADS" --type Q8_0
ls -l "$OUT"
if [ "${MEASURE:-1}" != 0 ]; then
    MODEL="$MODEL" DRAFTER="$OUT" bench/drafter-accept.sh "$B"
fi
