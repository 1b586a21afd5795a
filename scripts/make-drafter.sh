#!/usr/bin/env bash
# scripts/make-drafter.sh [BUILD_DIR [1bit|f16]] — trains data/bonsai-loop-<model>-drafter.gguf, the DSpark drafter
# of a shipped model (docs/dspark.md §11; default 1bit): bonsai-train-drafter on the model's own greedy continuations
# of data/prompts/train.jsonl (teacher-forced acceptance on data/prompts/heldout.jsonl printed before and after),
# then bench/drafter-accept.sh measures it with bonsai-speculative. The drafter borrows the model's token_embd and
# output, so each model needs its own (bonsai-loop-f16.gguf is the 1-bit model's F16 parent, not its unpack): the
# f16 drafter starts from the 1-bit one (--init-drafter) and trains fewer epochs. Matrices are stored Q8_0 (0.85 MB;
# F16 would be 1.6 MB). Env: THREADS (2), EPOCHS (6 for 1bit, 3 for f16), SEED (1); MEASURE=0 skips the measurement.
# ADAPTER=FILE [OUT=FILE]: a drafter for the model with that LoRA adapter applied (a bonsai-antidoom output), fine-
# tuned from the model's shipped drafter on the adapted model's own continuations for 3 epochs, written to
# OUT_DRAFTER (default: the adapter's path with -drafter.gguf); nothing in data/ changes.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
M=${2:-1bit}
THREADS=${THREADS:-2}
SEED=${SEED:-1}
MODEL=data/bonsai-loop-$M.gguf
OUT=data/bonsai-loop-$M-drafter.gguf
epochs_env=${EPOCHS:-}
case $M in
    1bit) EPOCHS=${EPOCHS:-6}; INIT=() ;;
    f16) EPOCHS=${EPOCHS:-3}; INIT=(--init-drafter data/bonsai-loop-1bit-drafter.gguf) ;;
    *) echo "scripts/make-drafter.sh: model 1bit or f16, not '$M'"; exit 1 ;;
esac
LORA=()
if [ -n "${ADAPTER:-}" ]; then
    [ -f "$ADAPTER" ] || { echo "scripts/make-drafter.sh: no adapter '$ADAPTER'"; exit 1; }
    LORA=(--lora "$ADAPTER")
    INIT=(--init-drafter "$OUT")
    EPOCHS=${epochs_env:-3}
    OUT=${OUT_DRAFTER:-${ADAPTER%.gguf}-drafter.gguf}
fi
"$B/tools/bonsai-train-drafter" -m "$MODEL" "${LORA[@]}" -o "$OUT" "${INIT[@]}" \
    --prompts data/prompts/train.jsonl --heldout data/prompts/heldout.jsonl \
    --draft-layers 2 --draft-ff 128 --markov-rank 32 --block-size 4 \
    --n-gen 128 --epochs "$EPOCHS" -b 4 --anchors 48 --lr 2e-3 -s "$SEED" -t "$THREADS" --type Q8_0
ls -l "$OUT"
if [ "${MEASURE:-1}" != 0 ]; then
    MODEL="$MODEL" DRAFTER="$OUT" ARGS="${LORA[*]}" bench/drafter-accept.sh "$B"
fi
