#!/usr/bin/env bash
# scripts/make-skills-model.sh [BUILD_DIR [1bit|eval]] — regenerates data/bonsai-skills-f16.gguf and the natively
# 1-bit data/bonsai-skills-1bit.gguf: a small real qwen35 with skills where repetition belongs (control stanzas,
# copying a list, recalling a field) that still loops in open chat; its held-out text data/skills/heldout.txt and
# the task files data/tasks/*.jsonl. `1bit` runs only the QAT stage (from the committed F16 model and the work files
# of an earlier full run); `eval` only measures the committed models. data/README.md has the figures.
#
# Pipeline (the project's own tools, deterministic seeds; text from Debian packages only):
#   1. sources: data/corpus/fortunes.txt (scripts/make-corpus.sh, fortunes-min); the Packages index of the
#      configured Debian release (apt's lists, `apt-get update` when there are none; read with apt-helper
#      cat-file); libc6-dev's /usr/include and netbase's /etc/services (task set of a source never trained on);
#   2. scripts/make-chat-data.py (the fortunes chat, the same split as scripts/make-model.sh: the held-out chat
#      prompts are data/prompts/heldout.jsonl) and scripts/make-skills-data.py (control stanzas, copy and recall
#      documents from the training packages; held-out text and task files from held-out packages);
#   3. byte-level BPE vocabulary (1024 tokens) from the fortunes and training stanzas; tokens (the 0x01/0x02
#      marker bytes → <|im_start|>/<|im_end|>, as make-model.sh);
#   4. bonsai-mkmodel: a qwen35 $EMBD wide (env BONSAI_SKILLS_EMBD; 128, the shipped model: n_ff 256, 4 heads × 32,
#      4 KV heads, ssm state 32, untied head; another width E: n_ff 2E, 4 heads × E/4 and so on; 256: make-model.sh's
#      shape, n_ff 512, 4 heads × 64, 2 KV heads, ssm state 64) with $LAYERS layers, every $ATTN-th full attention
#      (DeltaNet, attention, DeltaNet, attention: the pattern that can form an induction circuit), RoPE on $NROT
#      dimensions of each head at base $ROPE_BASE (32 and 1e4: the whole head; env BONSAI_SKILLS_NROT,
#      BONSAI_SKILLS_ROPE_BASE);
#   5. bonsai-train-lm: a copy curriculum (env BONSAI_SKILLS_CURRICULUM_STEPS = C; 1000; 0: none), each stage from the
#      last: 2C steps × 16 × 64 on scripts/copy-curriculum.py's blocks of 64 random learned tokens between
#      "list:" and "again:" (only an induction circuit predicts the second copy), C steps on blocks of all 761
#      learned tokens, C steps × 8 × $CTX on copy documents of training package names (scripts/copy-probe.py
#      names); data/README.md has why each stage. Then
#      full-parameter training on the mix, $STEPS steps × 8 windows × $CTX tokens, lr $LR, seed 1;
#   6. F16; perplexity on data/skills/heldout.txt and data/heldout.txt; greedy chat loop rate on
#      data/prompts/heldout.jsonl; task scores (bonsai-eval-tasks);
#   7. the 1-bit model: QAT Q1_0 from the F16 model ($QAT_STEPS steps, lr 2e-3, same data), the same figures, and
#      the task scores of the 1-bit model under --repeat-penalty 1.1 and --dry-multiplier 0.8.
#      (skipped, with no 1-bit figures, when $EMBD is not a multiple of 128: Q1_0's block).
# Work files go to ${BONSAI_SKILLS_WORK:-out/make-skills}; the models to ${BONSAI_SKILLS_OUT:-data}.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
B=${1:-$root/build}
T="$B/tools"
W=${BONSAI_SKILLS_WORK:-$root/out/make-skills}
STEPS=${BONSAI_SKILLS_STEPS:-300}
CUR_STEPS=${BONSAI_SKILLS_CURRICULUM_STEPS:-1000}
EMBD=${BONSAI_SKILLS_EMBD:-128}
QAT_STEPS=${BONSAI_SKILLS_QAT_STEPS:-1000}
LAYERS=${BONSAI_SKILLS_LAYERS:-4}
ATTN=${BONSAI_SKILLS_ATTN:-2}
CTX=${BONSAI_SKILLS_CTX:-128}
LR=${BONSAI_SKILLS_LR:-3e-3}
NROT=${BONSAI_SKILLS_NROT:-32}
ROPE_BASE=${BONSAI_SKILLS_ROPE_BASE:-10000}
ONLY=${2:-all}
case "$ONLY" in all|1bit|eval) ;; *) echo "make-skills-model: second argument must be '1bit' or 'eval'"; exit 1;; esac
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-2}
OUT=${BONSAI_SKILLS_OUT:-$root/data}
F16="$OUT/bonsai-skills-f16.gguf"
Q1="$OUT/bonsai-skills-1bit.gguf"
mkdir -p "$OUT"
LOWBIT=1 # Q1_0 holds rows of a multiple of 128 values: a narrower model gets no 1-bit twin
[ $((EMBD % 128)) = 0 ] || LOWBIT=0
mkdir -p "$W" "$root/data/skills" "$root/data/tasks"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

packages_index() {
    # the main component's binary Packages index of the base release (not -updates / -security)
    local f
    f=$(ls /var/lib/apt/lists/*_dists_*_main_binary-amd64_Packages* 2>/dev/null | grep -v -e '-updates_' \
        -e '-security_' -e '-backports_' | head -1 || true)
    if [ -z "$f" ]; then
        [ "$(id -u)" = 0 ] || { echo "make-skills-model: no Packages index; run apt-get update as root" >&2; exit 1; }
        apt-get update -qq >&2
        f=$(ls /var/lib/apt/lists/*_dists_*_main_binary-amd64_Packages* | grep -v -e '-updates_' -e '-security_' \
            -e '-backports_' | head -1)
    fi
    echo "$f"
}

figures() {  # figures MODEL LABEL
    printf '%s perplexity data/skills/heldout.txt: ' "$2"
    "$T/bonsai-perplexity" -m "$1" -f "$root/data/skills/heldout.txt" -c 128 -t 2 2>&1 | grep "Final estimate"
    printf '%s perplexity data/heldout.txt (fortunes): ' "$2"
    "$T/bonsai-perplexity" -m "$1" -f "$root/data/heldout.txt" -c 128 -t 2 2>&1 | grep "Final estimate"
    "$T/bonsai-eval-loops" -m "$1" -p "$root/data/prompts/heldout.jsonl" --thinking -1 --temp 0 --n-predict 256 \
        -t 2 --label "$2" --no-progress | tail -8
    tasks "$1" "$root"/data/tasks/*.jsonl
}

tasks() {  # tasks MODEL FILE... [-- PENALTIES]: bonsai-eval-tasks per file, its summary line
    local m=$1 f files=() pen=()
    shift
    while [ $# -gt 0 ] && [ "$1" != -- ]; do files+=("$1"); shift; done
    [ $# -gt 0 ] && { shift; pen=("$@"); }
    for f in "${files[@]}"; do
        "$T/bonsai-eval-tasks" -m "$m" --tasks "$f" -t 2 --no-progress "${pen[@]}" | sed -n 2p
    done
}

if [ "$ONLY" = all ]; then
step "1/7 sources"
for p in netbase libc6-dev; do dpkg -s "$p" >/dev/null 2>&1 || { echo "make-skills-model: $p missing"; exit 1; }; done
idx=$(packages_index)
/usr/lib/apt/apt-helper cat-file "$idx" > "$W/Packages"
echo "Packages index: $(basename "$idx"), $(grep -c '^Package:' "$W/Packages") stanzas, sha256 $(sha256sum \
    "$W/Packages" | cut -c1-16)"
cp "$root/data/corpus/fortunes.txt" "$W/corpus-fortunes.txt"

step "2/7 chat, stanzas, copy / recall documents, held-out text and task files"
python3 "$root/scripts/make-chat-data.py" "$root/data/corpus/fortunes.txt" "$W" 0.1 4
cmp "$W/prompts-heldout.jsonl" "$root/data/prompts/heldout.jsonl" \
    || { echo "make-skills-model: chat split differs from data/prompts/heldout.jsonl"; exit 1; }
python3 "$root/scripts/make-skills-data.py" "$W" "$W/Packages" /usr/include /etc/services "$root/data/tasks"
cp "$W/heldout-skills.txt" "$root/data/skills/heldout.txt"
cp "$W/prompts-train-skills.jsonl" "$root/data/skills/prompts-train.jsonl"

step "3/7 BPE vocabulary (1024 tokens) and tokens"
"$T/bonsai-train-lm" --train-vocab 1024 "$W/vocab.txt" -o "$W/vocab.gguf"
"$T/bonsai-train-lm" --tokenize "$W/skills.txt" -m "$W/vocab.gguf" -o "$W/skills-raw.bin"
python3 "$root/scripts/chat-markers.py" "$W/skills-raw.bin" "$W/skills.bin"

step "4/7 initial model (qwen35, $EMBD wide, $LAYERS layers, every ${ATTN}-th full attention)"
if [ "$EMBD" = 256 ]; then
    shape=(--n-embd 256 --n-ff 512 --n-head 4 --head-dim 64 --n-head-kv 2 --ssm-d-state 64 --ssm-dt-rank 4 \
        --ssm-n-group 2)
else
    shape=(--n-embd "$EMBD" --n-ff $((2 * EMBD)) --n-head 4 --head-dim $((EMBD / 4)) --n-head-kv 4 \
        --ssm-d-state $((EMBD / 4)) --untied)
fi
"$T/bonsai-mkmodel" "$W/init.gguf" --preset tiny --n-layer "$LAYERS" --full-attn-interval "$ATTN" "${shape[@]}" \
    --vocab "$W/vocab.gguf" --logit-scale 0.5 --seed 42 --name bonsai-skills --n-rot "$NROT" --rope-base "$ROPE_BASE"

# train STAGE INIT DATA STEPS CTX BATCH VAL_FRAC: bonsai-train-lm into $W/STAGE.gguf, its log in $W/STAGE.log
train() {
    "$T/bonsai-train-lm" -m "$2" --data "$3" -o "$W/$1.gguf" --steps "$4" --ctx "$5" --batch "$6" --lr "$LR" \
        --threads 2 --eval-every 250 --val-frac "$7" --seed 1 2>&1 | tee "$W/$1.log" | grep -v '^step '
}

step "5/7 copy curriculum (2 × $CUR_STEPS + $CUR_STEPS + $CUR_STEPS steps), then the mix ($STEPS steps × 8 × $CTX tokens)"
t0=$(date +%s)
start="$W/init.gguf"
if [ "$CUR_STEPS" -gt 0 ]; then
    printf 'list:\n' > "$W/list.txt"
    printf 'again:\n' > "$W/again.txt"
    for x in list again; do "$T/bonsai-train-lm" --tokenize "$W/$x.txt" -m "$W/vocab.gguf" -o "$W/$x.bin"; done
    python3 "$root/scripts/copy-curriculum.py" "$W/blocks-64.bin" "$W/list.bin" "$W/again.bin" 1024 64
    python3 "$root/scripts/copy-curriculum.py" "$W/blocks-all.bin" "$W/list.bin" "$W/again.bin" 1024 0
    python3 "$root/scripts/copy-probe.py" names "$W/names.txt" "$W/Packages"
    "$T/bonsai-train-lm" --tokenize "$W/names.txt" -m "$W/vocab.gguf" -o "$W/names.bin"
    train curriculum-64 "$W/init.gguf" "$W/blocks-64.bin" "$((2 * CUR_STEPS))" 64 16 0.01
    train curriculum-all "$W/curriculum-64.gguf" "$W/blocks-all.bin" "$CUR_STEPS" 64 16 0.01
    train curriculum-names "$W/curriculum-all.gguf" "$W/names.bin" "$CUR_STEPS" "$CTX" 8 0.01
    tasks "$W/curriculum-names.gguf" "$root"/data/tasks/{copy,hcopy}.jsonl
    start="$W/curriculum-names.gguf"
fi
"$T/bonsai-train-lm" -m "$start" --data "$W/skills.bin" -o "$W/model-f32.gguf" --steps "$STEPS" --ctx "$CTX" \
    --batch 8 --lr "$LR" --threads 2 --eval-every 100 --val-frac "$(cat "$W/val-frac")" --seed 1 2>&1 \
    | tee "$W/train.log" | grep -v '^step '
echo "training time: $(( $(date +%s) - t0 )) s"
"$T/bonsai-quantize" "$W/model-f32.gguf" "$F16" F16 --threads 2 -q | tail -1
fi

if [ "$ONLY" != eval ] && [ "$LOWBIT" = 0 ]; then
    step "6/7 no 1-bit model: Q1_0 needs rows of a multiple of 128 values (the model is $EMBD wide)"
elif [ "$ONLY" != eval ]; then
step "6/7 the natively 1-bit model: QAT Q1_0 from the F16 model ($QAT_STEPS steps)"
[ -f "$W/skills.bin" ] || { echo "make-skills-model: $W/skills.bin missing (run the full script once)"; exit 1; }
t0=$(date +%s)
"$T/bonsai-train-lm" -m "$F16" --data "$W/skills.bin" -o "$Q1" --qat-type Q1_0 --steps "$QAT_STEPS" --ctx "$CTX" \
    --batch 8 --lr 2e-3 --threads 2 --eval-every 50 --val-frac "$(cat "$W/val-frac")" --seed 1 2>&1 | tee "$W/qat.log" \
    | grep -v '^step '
echo "QAT time: $(( $(date +%s) - t0 )) s"
fi

step "7/7 figures"
total=$(( $(stat -c %s "$root"/data/bonsai-*.gguf | paste -sd+) ))
echo "shipped models: $total bytes"
[ "$total" -le 20000000 ] || { echo "make-skills-model: the shipped models are $total bytes (> 20 MB)"; exit 1; }
grep -h "params in" "$W/train.log" 2>/dev/null || true
figures "$F16" skills-f16
last=$F16 label=skills-f16
if [ "$LOWBIT" = 1 ]; then figures "$Q1" skills-1bit; last=$Q1 label=skills-1bit; fi
# what decoding-time penalties cost on the families the model scores on (the 1-bit model: the demo's kind)
for pen in "--repeat-penalty 1.1" "--dry-multiplier 0.8"; do
    echo "$label $pen:"
    # shellcheck disable=SC2086
    tasks "$last" "$root"/data/tasks/{fields,control,recall,copy,hcopy}.jsonl -- $pen
done
