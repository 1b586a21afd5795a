#!/usr/bin/env bash
# tests/e2e/test_full_disk.sh — the tools on a full disk, simulated with a file-size limit (ulimit -f, SIGXFSZ
# ignored, so a write past it fails with EFBIG as a write to a full disk fails with ENOSPC): each tool must exit
# non-zero with a message naming the file, leave the previous output untouched and no temporary file behind;
# a mining run and a training run stopped that way continue with --resume to the outputs of runs that never
# stopped.
set -u
top=${BONSAI_SOURCE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
B=${BONSAI_BUILD_ROOT:-$top/build}
T=$B/tools
pass=0 failn=0
check() { # check DESCRIPTION COMMAND...: runs the command, counts a failure when it fails
    local what=$1
    shift
    if "$@"; then pass=$((pass + 1)); else failn=$((failn + 1)); echo "FAIL: $what"; fi
}
for t in bonsai-mkmodel bonsai-quantize bonsai-mine-pairs; do
    [ -x "$T/$t" ] || { echo "SKIP: $T/$t not built"; exit 77; }
done
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

# limited KIB CMD...: CMD with files limited to KIB KiB; its stderr in $W/err; returns CMD's status
limited() {
    local kib=$1
    shift
    (trap '' XFSZ; ulimit -f "$kib"; exec "$@") 2>"$W/err"
}
# refused_cleanly WHAT OUT SUM: the last command failed with a message naming OUT, OUT still has checksum SUM,
# and no OUT.tmp.* is left
refused_cleanly() {
    local what=$1 out=$2 sum=$3
    check "$what: the error names the file and the reason ($(tail -n 1 "$W/err"))" \
        grep -Eq "cannot write [^ ]*$(basename "$out")[^ ]*: (File too large|No space left)" "$W/err"
    check "$what: the previous $(basename "$out") is untouched" [ "$(sha256sum <"$out")" = "$sum" ]
    check "$what: no temporary file is left" [ -z "$(ls "$out".tmp.* 2>/dev/null)" ]
}

# 1. a model file (the GGUF writer): the old file survives a write that cannot finish
"$T/bonsai-mkmodel" "$W/m.gguf" --preset tiny --type f16 --seed 1 >/dev/null 2>&1 || { echo "FAIL: mkmodel"; exit 1; }
cp "$W/m.gguf" "$W/out.gguf"
sum=$(sha256sum <"$W/out.gguf")
if limited 64 "$T/bonsai-mkmodel" "$W/out.gguf" --preset tiny --seed 2 >/dev/null; then
    failn=$((failn + 1)); echo "FAIL: bonsai-mkmodel succeeded with files limited to 64 KiB"
else
    pass=$((pass + 1)); refused_cleanly bonsai-mkmodel "$W/out.gguf" "$sum"
fi

# 2. a quantized file (bonsai-quantize)
if limited 64 "$T/bonsai-quantize" "$W/m.gguf" "$W/out.gguf" Q1_0 >/dev/null; then
    failn=$((failn + 1)); echo "FAIL: bonsai-quantize succeeded with files limited to 64 KiB"
else
    pass=$((pass + 1)); refused_cleanly bonsai-quantize "$W/out.gguf" "$sum"
fi

# 3. mining: appended pairs and log, flushed per prompt; the run stops with an error and --resume finishes it
# (the shipped looping model on its held-out prompts, in its own plain ChatML: 6 of 16 loop and give a pair)
common=(-m "$top/data/bonsai-loop-1bit.gguf" -p "$top/data/prompts/heldout.jsonl" --max-prompts 16 --temp 0
    --n-predict 96 --ctx 512 -t 1)
"$T/bonsai-mine-pairs" "${common[@]}" -o "$W/ref-pairs.jsonl" --gen-log "$W/ref-log.jsonl" >/dev/null 2>&1 ||
    { echo "FAIL: the reference mining run"; exit 1; }
ref_lines=$(wc -l <"$W/ref-log.jsonl")
ref_bytes=$(wc -c <"$W/ref-log.jsonl")
kib=$(((ref_bytes / 1024) / 2 + 1)) # about half the log: the run stops in the middle
if limited "$kib" "$T/bonsai-mine-pairs" "${common[@]}" -o "$W/pairs.jsonl" --gen-log "$W/log.jsonl" >/dev/null; then
    failn=$((failn + 1)); echo "FAIL: mining succeeded with files limited to $kib KiB (log $ref_bytes bytes)"
else
    pass=$((pass + 1))
    check "mining on a full disk says what failed ($(grep cannot "$W/err"))" \
        grep -Eq 'cannot write [^ ]*(pairs|log)\.jsonl: (File too large|No space left)' "$W/err"
    check "mining stopped before the end ($(wc -l <"$W/log.jsonl") of $ref_lines log lines)" \
        [ "$(wc -l <"$W/log.jsonl")" -lt "$ref_lines" ]
fi
"$T/bonsai-mine-pairs" "${common[@]}" -o "$W/pairs.jsonl" --gen-log "$W/log.jsonl" --resume >/dev/null 2>"$W/err"
rc=$? # (before the message's $(tail ...), which sets $? itself)
check "--resume after the full disk finishes ($(tail -n 1 "$W/err"))" [ "$rc" = 0 ]
check "the resumed log has every prompt ($(wc -l <"$W/log.jsonl") of $ref_lines)" \
    [ "$(wc -l <"$W/log.jsonl")" = "$ref_lines" ]
check "the resumed pairs equal the uninterrupted run's" cmp -s "$W/pairs.jsonl" "$W/ref-pairs.jsonl"

# 4. a gzip output (regularised pairs through the .gz line writer)
cp "$W/ref-pairs.jsonl" "$W/train.jsonl.gz"
sum=$(sha256sum <"$W/train.jsonl.gz")
big=$W/big-pairs.jsonl
for _ in $(seq 200); do cat "$W/ref-pairs.jsonl"; done >"$big"
if [ -s "$W/ref-pairs.jsonl" ]; then
    if limited 4 "$T/bonsai-mine-pairs" --regularise "$big" -o "$W/train.jsonl.gz" --no-dedupe >/dev/null; then
        failn=$((failn + 1)); echo "FAIL: regularise to .gz succeeded with files limited to 4 KiB"
    else
        pass=$((pass + 1)); refused_cleanly "regularise to .gz" "$W/train.jsonl.gz" "$sum"
    fi
else
    failn=$((failn + 1)); echo "FAIL: the reference run mined no pairs"
fi

# 5. training: a checkpoint that cannot be written stops the run with an error, the last good checkpoint and the
# adapter stay, and --resume from it ends with the adapter of a run that never stopped
if [ -x "$T/bonsai-ftpo-train" ] && [ -s "$W/ref-pairs.jsonl" ]; then
    train=("$T/bonsai-ftpo-train" -m "$top/data/bonsai-loop-f16.gguf" -p "$W/ref-pairs.jsonl" --epochs 3 -t 1 --no-eval)
    "${train[@]}" -o "$W/ref-adapter.gguf" >/dev/null 2>&1 || { echo "FAIL: the reference training run"; exit 1; }
    "${train[@]}" -o "$W/adapter.gguf" --checkpoint "$W/ck.bin" --max-steps 1 >/dev/null 2>&1 ||
        { echo "FAIL: the first training step"; exit 1; }
    ck_sum=$(sha256sum <"$W/ck.bin")
    ad_sum=$(sha256sum <"$W/adapter.gguf")
    kib=$(($(wc -c <"$W/ck.bin") / 1024 / 2)) # the adapter fits, the checkpoint does not
    if limited "$kib" "${train[@]}" -o "$W/adapter.gguf" --checkpoint "$W/ck.bin" --save-every 1 --resume "$W/ck.bin" \
        >/dev/null; then
        failn=$((failn + 1)); echo "FAIL: training succeeded with files limited to $kib KiB"
    else
        pass=$((pass + 1)); refused_cleanly "training checkpoint" "$W/ck.bin" "$ck_sum"
        check "the adapter is untouched" [ "$(sha256sum <"$W/adapter.gguf")" = "$ad_sum" ]
    fi
    "${train[@]}" -o "$W/adapter.gguf" --checkpoint "$W/ck.bin" --resume "$W/ck.bin" >/dev/null 2>"$W/err"
    rc=$?
    check "training resumes after the full disk ($(tail -n 1 "$W/err"))" [ "$rc" = 0 ]
    check "the resumed adapter equals the uninterrupted run's" cmp -s "$W/adapter.gguf" "$W/ref-adapter.gguf"
fi

echo "test_full_disk: $((pass + failn)) checks, $failn failed"
[ "$failn" = 0 ]
