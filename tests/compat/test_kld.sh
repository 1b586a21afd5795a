#!/usr/bin/env bash
# tests/compat/test_kld.sh — bonsai-perplexity's KL-divergence mode (eval/kld.h) on the shipped model
# data/bonsai-loop-f16.gguf and data/heldout.txt (4 chunks of 128 tokens = 252 scored positions):
#   1. a model scored against its own saved log-probabilities: mean KLD ≤ 1e-5 (the 16-bit codes cost
#      ~1e-7), same top token ≥ 99 %, PPL(Q) = PPL(base) to 1e-3 relative, and PPL(Q) = the plain run's;
#   2. Q8_0 and Q1_0 requantizations: 0 < KLD(Q8_0) < 0.05 and KLD(Q1_0) > 10 × KLD(Q8_0);
#   3. llama.cpp interop, when third_party/llama.cpp/build/bin/llama-perplexity exists (built by
#      scripts/build-llamacpp.sh; otherwise this part is skipped with a message): our file read by
#      llama-perplexity and llama-perplexity's file read by us give mean KLD ≤ 2e-3 (the engines' logits
#      differ by ~1e-2 in log-prob on F16, see compat-tiny-f16);
#   4. refusals: a truncated file, a file of another vocabulary, --kl-divergence without a file.
set -euo pipefail
src=${BONSAI_SOURCE_ROOT:?}
bld=${BONSAI_BUILD_ROOT:?}
model=$src/data/bonsai-loop-f16.gguf
[ -f "$model" ] || { echo "SKIP: $model missing"; exit 77; }
T=$bld/tools
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
ppl=("$T/bonsai-perplexity" -c 128 --chunks 4 -t 2)
fails=0
check() {  # check "AWK CONDITION" "description"
    if awk "BEGIN { exit !($1) }"; then echo "ok   $2"; else echo "FAIL $2"; fails=$((fails + 1)); fi
}
field() { sed -n "s/^$1 *: *\([-0-9.e]*\).*/\1/p" "$2" | head -1; }

"${ppl[@]}" -m "$model" -f "$src/data/heldout.txt" --kl-divergence-base "$dir/base.kld" > "$dir/base.out" 2> "$dir/base.err"
plain=$(sed -n 's/^Final estimate: PPL = \([0-9.]*\).*/\1/p' "$dir/base.err")
"${ppl[@]}" -m "$model" --kl-divergence-base "$dir/base.kld" --kl-divergence > "$dir/self.out" 2> "$dir/self.err"
kself=$(field "Mean    KLD" "$dir/self.out")
check "$kself <= 1e-5" "self KLD $kself <= 1e-5"
top=$(sed -n 's/^Same top p: *\([0-9.]*\).*/\1/p' "$dir/self.out")
check "$top >= 99" "self same top $top % >= 99 %"
pq=$(field "Mean PPL(Q)" "$dir/self.out") pbase=$(field "Mean PPL(base)" "$dir/self.out")
check "($pq - $pbase)^2 <= (1e-3 * $pbase)^2" "PPL(Q) $pq = PPL(base) $pbase (1e-3 rel)"
check "($pq - $plain)^2 <= (1e-3 * $plain)^2" "PPL(Q) $pq = plain run $plain (1e-3 rel)"

for t in Q8_0 Q1_0; do
    "$T/bonsai-quantize" "$model" "$dir/m-$t.gguf" "$t" > /dev/null 2>&1
    "${ppl[@]}" -m "$dir/m-$t.gguf" --kl-divergence-base "$dir/base.kld" --kl-divergence > "$dir/$t.out" 2> /dev/null
done
k8=$(field "Mean    KLD" "$dir/Q8_0.out") k1=$(field "Mean    KLD" "$dir/Q1_0.out")
check "$k8 > 0 && $k8 < 0.05" "Q8_0 KLD $k8 in (0, 0.05)"
check "$k1 > 10 * $k8" "Q1_0 KLD $k1 > 10 x Q8_0"

lp=$src/third_party/llama.cpp/build/bin/llama-perplexity
if [ -x "$lp" ]; then
    lpa=(-c 128 --chunks 4 -t 2 -b 128)
    "$lp" -m "$model" "${lpa[@]}" --kl-divergence-base "$dir/base.kld" --kl-divergence > "$dir/lq.out" 2>&1
    kl=$(field "Mean    KLD" "$dir/lq.out")
    check "${kl:-1} <= 2e-3" "llama-perplexity reads our file: KLD ${kl:-none} <= 2e-3"
    "$lp" -m "$model" -f "$src/data/heldout.txt" "${lpa[@]}" --kl-divergence-base "$dir/llama.kld" > /dev/null 2>&1
    "${ppl[@]}" -m "$model" --kl-divergence-base "$dir/llama.kld" --kl-divergence > "$dir/ql.out" 2> /dev/null
    kq=$(field "Mean    KLD" "$dir/ql.out")
    check "${kq:-1} <= 2e-3" "we read llama-perplexity's file: KLD ${kq:-none} <= 2e-3"
    check "$(stat -c %s "$dir/llama.kld") == $(stat -c %s "$dir/base.kld")" "same file size as llama-perplexity's"
    cmp -n $((20 + 4 * 128 * 4)) "$dir/llama.kld" "$dir/base.kld" && echo "ok   same header and tokens" ||
        { echo "FAIL header/tokens differ from llama-perplexity's"; fails=$((fails + 1)); }
else
    echo "skip llama.cpp interop: $lp not built (scripts/build-llamacpp.sh)"
fi

head -c 5000 "$dir/base.kld" > "$dir/trunc.kld"
if "${ppl[@]}" -m "$model" --kl-divergence-base "$dir/trunc.kld" --kl-divergence > /dev/null 2> "$dir/trunc.err"; then
    echo "FAIL truncated file accepted"; fails=$((fails + 1))
else grep -q "truncated" "$dir/trunc.err" && echo "ok   truncated file refused: $(cat "$dir/trunc.err")" ||
    { echo "FAIL unclear message: $(cat "$dir/trunc.err")"; fails=$((fails + 1)); }
fi
printf '_logits_\x80\x00\x00\x00\x10\x00\x00\x00\x02\x00\x00\x00' > "$dir/vocab.kld"
head -c $((4 * 256 + 2 * 2 * 63 * 20)) /dev/zero >> "$dir/vocab.kld"
if "${ppl[@]}" -m "$model" --kl-divergence-base "$dir/vocab.kld" --kl-divergence > /dev/null 2> "$dir/vocab.err"; then
    echo "FAIL other vocabulary accepted"; fails=$((fails + 1))
else grep -q "vocabulary" "$dir/vocab.err" && echo "ok   other vocabulary refused: $(cat "$dir/vocab.err")" ||
    { echo "FAIL unclear message: $(cat "$dir/vocab.err")"; fails=$((fails + 1)); }
fi
if "${ppl[@]}" -m "$model" --kl-divergence > /dev/null 2>&1; then echo "FAIL --kl-divergence without a file"; fails=$((fails + 1)); fi
[ "$fails" -eq 0 ] && echo "PASS" || { echo "$fails failed"; exit 1; }
