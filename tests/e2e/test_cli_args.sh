#!/usr/bin/env bash
# tests/e2e/test_cli_args.sh — every numeric option of every tool refuses junk: a value that is not a number, has
# trailing junk, is NaN or infinite, or overflows a double must end the tool with exit 1 and a message that names the option
# and the value ("OPT: 'VALUE' is not an integer in LO..HI"), before any work; never a crash or a silent 0 (atoi).
# Each option must also appear in the tool's --help text (a renamed option shows up here). bonsai-bench's list
# options (-p 1,2,...) are checked to refuse junk too; --help and an unknown option are checked for every tool, and
# every numeric option given last without a value.
B="${BONSAI_BUILD_ROOT:-build}/tools"
[ -x "$B/bonsai-run" ] || { echo "SKIP: tools not built in $B"; exit 77; }
T=$(mktemp -d /tmp/bonsai-test-cli-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail=0 checks=0
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

JUNK=("abc" "" "12x" "nan" "1e400")
MINE_OPTS="--max-prompts --thinking --prime-repeats --prime-prefix-tokens --max-prompt-tokens --temp --temps --top-k
  --top-p --min-p --seed --n-predict --n-probs --ctx -t --timeout --parallel --min-repeats --min-total-repeated
  --max-period --chosen-min-p --chosen-max-tokens --chosen-min-decoded-chars -ngl --repeat-last-n --repeat-penalty
  --frequency-penalty --presence-penalty --dry-multiplier --dry-base --dry-allowed-length --dry-penalty-last-n"
# tool | arguments before the option | numeric options
CASES=(
  "bonsai-run||-n --temp --top-k --top-p --min-p --seed -t -c -ngl --repeat-penalty --repeat-last-n
    --frequency-penalty --presence-penalty --dry-multiplier --dry-base --dry-allowed-length --dry-penalty-last-n"
  "bonsai-speculative||--repeat-penalty --repeat-last-n --frequency-penalty --presence-penalty --dry-multiplier
    --dry-base --dry-allowed-length --dry-penalty-last-n
    --spec-draft-n-max --spec-draft-n-min --spec-draft-p-min --spec-snap-mem -n -c -t -ngl --temp
    --top-k --top-p --min-p --seed"
  "bonsai-serve||--port -c -np -t --queue --max-body -ngl --spec-draft-n-max --spec-draft-n-min --spec-draft-p-min
    --spec-snap-mem"
  "bonsai-perplexity||-c -b -t --chunks"
  "bonsai-bench||-r"
  "bonsai-quantize|in.gguf out.gguf Q1_0|--threads"
  "bonsai-mkmodel|$T/x.gguf|--n-embd --n-layer --n-ff --n-head --n-head-kv --head-dim --n-rot --rope-base --norm-eps
    --ctx --ssm-d-state --ssm-n-group --ssm-dt-rank --ssm-conv-kernel --full-attn-interval --n-vocab --seed
    --logit-scale"
  "bonsai-mkdrafter|$T/x.gguf|--n-embd --n-layer --n-ff --n-head --n-head-kv --head-dim --n-rot --rope-base --norm-eps
    --ctx --n-vocab --block-size --mask-token --markov-rank --min-log-snr --max-log-snr --snr-feat --seed
    --logit-scale --markov-scale"
  "bonsai-train-lm||--steps --ctx --batch --lr --warmup-ratio --weight-decay --max-grad-norm --seed --val-frac
    --eval-every --eval-windows --save-every --max-steps --threads"
  "bonsai-ftpo-train||--rank --alpha --dropout --seed --epochs --lr --batch --grad-accum --warmup-ratio --weight-decay
    --max-grad-norm --early-stop --log-window --max-steps --max-seq --eps --lambda-nt --lambda-t --tau-t --lambda-agg
    --tau-agg --lambda-tether --tether-ctx --tether-batch --save-every -t --lora-scale"
  "bonsai-mine-pairs||--target-pairs --max-rows --headroom --rejected-strength --chosen-strength --max-rejected-share
    --top --heldout-share $MINE_OPTS"
  "bonsai-eval-loops||$MINE_OPTS"
  "bonsai-prune-flips||--cw-drop --mu --ctx --max-text -t"
)

for c in "${CASES[@]}"; do
  IFS='|' read -r -d '' tool pre opts <<< "$c" # -d '': the whole case, not its first line
  [ -x "$B/$tool" ] || { bad "$tool not built"; continue; }
  help=$("$B/$tool" --help 2>&1)
  for opt in $opts; do
    checks=$((checks + 1))
    # the option is documented (as a word: "--ctx N", "-t N", "[--seed S]", "--temp,")
    grep -Eq -- "(^|[[ ,/])$opt([] ,=]|$)" <<< "$help" || bad "$tool: $opt is not in --help"
    for v in "${JUNK[@]}"; do
      checks=$((checks + 1))
      # shellcheck disable=SC2086
      timeout 20 "$B/$tool" $pre "$opt" "$v" > /dev/null 2> "$T/err"
      st=$?
      if [ $st -ne 1 ]; then
        bad "$tool $opt '$v': exit $st (expected 1: refused)$( [ $st -gt 128 ] && echo ", signal $((st - 128))")"
      elif ! grep -qF -- "$opt: '$v'" "$T/err"; then
        bad "$tool $opt '$v': the message does not name the option and the value: $(head -c 200 "$T/err")"
      fi
    done
    # the option given last, without its value: exit 1 and a message naming it (not a crash, not a default)
    checks=$((checks + 1))
    # shellcheck disable=SC2086
    timeout 20 "$B/$tool" $pre "$opt" > /dev/null 2> "$T/err"
    st=$?
    [ $st -eq 1 ] && grep -qF -- "'$opt'" "$T/err" || bad "$tool $opt without a value: exit $st, $(head -c 200 "$T/err")"
  done
done
# --help: the usage on stdout and exit 0 (as llama.cpp's tools); an unknown option: exit 1 and a message naming it
for tool in $(for c in "${CASES[@]}"; do echo "${c%%|*}"; done) bonsai-convert bonsai-gguf; do
  checks=$((checks + 1))
  "$B/$tool" --help > "$T/out" 2> "$T/err"
  st=$?
  [ $st -eq 0 ] && grep -q "usage" "$T/out" || bad "$tool --help: exit $st, $(wc -l < "$T/out") lines on stdout"
  [ "$tool" = bonsai-gguf ] && continue # subcommands: bonsai-gguf --bogus is a bad subcommand (its usage, exit 1)
  checks=$((checks + 1))
  "$B/$tool" --no-such-option 1 > /dev/null 2> "$T/err"
  st=$?
  [ $st -eq 1 ] && grep -qF -- "--no-such-option" "$T/err" || bad "$tool --no-such-option: exit $st, $(head -c 200 "$T/err")"
  checks=$((checks + 1))
  "$B/$tool" --no-such-option > /dev/null 2> "$T/err" # last: "unknown", not "needs a value"
  st=$?
  [ $st -eq 1 ] && grep -qF -- "unknown or incomplete option '--no-such-option'" "$T/err" ||
    bad "$tool --no-such-option (last): exit $st, $(head -c 200 "$T/err")"
done
# bonsai-bench's lists
for opt in -p -n -t -ngl -npl -nv; do
  for v in "abc" "1,x" "1,,2" "99999999999999999999"; do
    checks=$((checks + 1))
    timeout 20 "$B/bonsai-bench" "$opt" "$v" > /dev/null 2> "$T/err"
    st=$?
    # refused as a list, not the usage every run without -m ends in
    [ $st -eq 1 ] && grep -qF -- "'$v'" "$T/err" || bad "bonsai-bench $opt '$v': exit $st, $(head -c 200 "$T/err")"
  done
done
# mining refuses repetition penalties (they are for bonsai-eval-loops) before it reads anything
checks=$((checks + 1))
"$B/bonsai-mine-pairs" -m "$T/none.gguf" -p "$T/none.jsonl" -o "$T/p.jsonl" --repeat-penalty 1.1 > /dev/null 2> "$T/err"
st=$?
[ $st -eq 1 ] && grep -qF "bonsai-eval-loops" "$T/err" || bad "bonsai-mine-pairs --repeat-penalty: exit $st, $(head -c 200 "$T/err")"
echo "test_cli_args: $checks checks, $fail failed"
[ $fail -eq 0 ]
