#!/usr/bin/env bash
# tests/e2e/test_cli_args.sh — the command-line layer of every tool (base/args.h):
#  - every numeric option refuses junk: a value with trailing junk or NaN ends the tool with exit 1 and a message that
#    names the option and the value ("OPT: 'VALUE' is not an integer (expected LO..HI)"), before any work; never a
#    crash or a silent 0 (atoi). (The parser's other refusals, "", "abc", infinities, overflow, a leading space, are
#    checked once in tests/base/test_args.c: every table entry goes through it.) Each option must appear in the tool's
#    --help (a renamed option shows up here), and given last without a value it is refused too;
#  - --help prints the usage on stdout and exits 0, --version prints "bonsai-<tool> version V (COMMIT)", an unknown
#    option is named; bonsai-bench's list options (-p 1,2,...) refuse junk;
#  - --help lists only the tool's own options (mining has no penalty options; they are bonsai-eval-loops');
#  - llama.cpp's habits: -ngl 99 without a GPU runs (on the CPU, with a warning); long and short spellings of an
#    option give the same output; a long run prints plain progress lines when stderr is not a terminal
#    (BONSAI_PROGRESS_INTERVAL=0 makes every update due), none with --no-progress.
B="${BONSAI_BUILD_ROOT:-build}/tools"
S="${BONSAI_SOURCE_ROOT:-.}"
[ -x "$B/bonsai-run" ] || { echo "SKIP: tools not built in $B"; exit 77; }
T=$(mktemp -d /tmp/bonsai-test-cli-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail=0 checks=0
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

JUNK=("12x" "nan")
MINE_OPTS="--max-prompts --thinking --prime-repeats --prime-prefix-tokens --max-prompt-tokens --temp --temps --top-k
  --top-p --min-p --seed -s --n-predict -n --n-probs --ctx -c -t --timeout --parallel --min-repeats --min-total-repeated
  --max-period --frame-min-repeats --frame-min-repeats-verbatim --frame-min-similarity --frame-max-period --chosen-min-p --chosen-max-tokens
  --chosen-min-decoded-chars -ngl"
PENALTY_OPTS="--repeat-penalty --repeat-last-n --frequency-penalty --presence-penalty --dry-multiplier --dry-base
  --dry-allowed-length --dry-penalty-last-n"
# tool | arguments before the option | numeric options
CASES=(
  "bonsai-run||-n --n-predict --temp --top-k --top-p --min-p --seed -s -t -c -ngl $PENALTY_OPTS"
  "bonsai-speculative||$PENALTY_OPTS --spec-draft-n-max --spec-draft-n-min --spec-draft-p-min --spec-snap-mem -n -c -t
    -ngl --temp --top-k --top-p --min-p --seed"
  "bonsai-serve||--port -c -np -t --queue --max-body -ngl --spec-draft-n-max --spec-draft-n-min --spec-draft-p-min
    --spec-snap-mem"
  "bonsai-perplexity||-c -b -t --chunks -ngl"
  "bonsai-bench||-r"
  "bonsai-quantize|in.gguf out.gguf Q1_0|--threads -t"
  "bonsai-mkmodel|$T/x.gguf|--n-embd --n-layer --n-ff --n-head --n-head-kv --head-dim --n-rot --rope-base --norm-eps
    --ctx --ssm-d-state --ssm-n-group --ssm-dt-rank --ssm-conv-kernel --full-attn-interval --n-vocab --seed
    --logit-scale -t --threads"
  "bonsai-mkdrafter|$T/x.gguf|--n-embd --n-layer --n-ff --n-head --n-head-kv --head-dim --n-rot --rope-base --norm-eps
    --ctx --n-vocab --block-size --mask-token --markov-rank --min-log-snr --max-log-snr --snr-feat --seed
    --logit-scale --markov-scale"
  "bonsai-train-lm||--steps --ctx --batch --lr --warmup-ratio --weight-decay --max-grad-norm --seed --val-frac
    --eval-every --eval-windows --save-every --max-steps --threads --train-vocab"
  "bonsai-ftpo-train||--rank --alpha --dropout --seed --epochs --lr --batch --grad-accum --warmup-ratio --weight-decay
    --max-grad-norm --early-stop --log-window --max-steps --max-seq --eps --lambda-nt --lambda-t --tau-t --lambda-agg
    --tau-agg --lambda-tether --tether-ctx --tether-batch --save-every -t -ngl --lora-scale"
  "bonsai-mine-pairs||--target-pairs --max-rows --headroom --rejected-strength --chosen-strength --max-rejected-share
    --top --heldout-share $MINE_OPTS"
  "bonsai-eval-loops||$MINE_OPTS $PENALTY_OPTS"
  "bonsai-eval-tasks||--n-tokens --n-predict -n --thinking --parallel -t -c -ngl $PENALTY_OPTS"
  "bonsai-prune-flips||--cw-drop --mu --ctx --max-text -t"
  "bonsai-antidoom||--mine-max-prompts --val-max-prompts -n --n-predict --thinking --rounds --seeds --lr --rank --epochs
    --early-stop --lambda-nt --goal-drift -s --seed -t -c -ngl"
  "bonsai-train-drafter||--n-gen --max-prompts --epochs -b --batch --anchors --lr --clip --weight-decay --warmup
    --draft-layers --draft-ff --draft-heads --draft-heads-kv --draft-head-dim --markov-rank --block-size --save-every
    -s --seed -t -c -ngl --temp --text-ctx"
)
TOOLS="antidoom bench convert eval-loops eval-tasks ftpo-train gguf mine-pairs mkdrafter mkmodel perplexity prune-flips
  quantize run serve speculative train-drafter train-lm"

for c in "${CASES[@]}"; do
  IFS='|' read -r -d '' tool pre opts <<< "$c" # -d '': the whole case, not its first line
  [ -x "$B/$tool" ] || { bad "$tool not built"; continue; }
  help=$("$B/$tool" --help 2>&1)
  for opt in $opts; do
    checks=$((checks + 1))
    # the option is documented (as a word: "--ctx N", "-t, --threads N", "--temp,")
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
    [ $st -eq 1 ] && grep -qF -- "'$opt' needs a value" "$T/err" ||
      bad "$tool $opt without a value: exit $st, $(head -c 200 "$T/err")"
  done
done
# --help: the usage on stdout and exit 0 (as llama.cpp's tools); --version; an unknown option: exit 1, named
for t in $TOOLS; do
  tool=bonsai-$t
  checks=$((checks + 3))
  "$B/$tool" --help > "$T/out" 2> "$T/err"
  st=$?
  [ $st -eq 0 ] && grep -q "^usage: $tool" "$T/out" && grep -q -- "--version" "$T/out" ||
    bad "$tool --help: exit $st, $(wc -l < "$T/out") lines on stdout"
  "$B/$tool" --version > "$T/out" 2> "$T/err"
  st=$?
  [ $st -eq 0 ] && grep -Eq "^$tool version [0-9]+\.[0-9]+\.[0-9]+ \(([0-9a-f]{7,}|unknown)\)$" "$T/out" ||
    bad "$tool --version: exit $st, '$(head -c 200 "$T/out")'"
  "$B/$tool" --no-such-option 1 > /dev/null 2> "$T/err"
  st=$?
  [ $st -ge 1 ] && grep -qF -- "unknown option '--no-such-option'" "$T/err" ||
    bad "$tool --no-such-option: exit $st, $(head -c 200 "$T/err")"
done
# bonsai-bench's lists
for opt in -p -n -t -ngl -npl -nv; do
  for v in "abc" "1,x" "1,,2" "99999999999999999999"; do
    checks=$((checks + 1))
    timeout 20 "$B/bonsai-bench" "$opt" "$v" > /dev/null 2> "$T/err"
    st=$?
    # refused as a list, not the usage every run without -m ends in
    [ $st -eq 1 ] && grep -qF -- "$opt: '$v'" "$T/err" ||
      bad "bonsai-bench $opt '$v': exit $st, $(head -c 200 "$T/err")"
  done
done
# --help lists a tool's own options only: mining's has no penalty options (bonsai-eval-loops'), eval-loops' has them,
# bonsai-run's has no mining option
checks=$((checks + 3))
"$B/bonsai-mine-pairs" --help > "$T/out"
grep -q -- "--repeat-penalty\|eval-loops only" "$T/out" && bad "bonsai-mine-pairs --help lists penalty options"
"$B/bonsai-eval-loops" --help > "$T/out"
grep -q -- "--dry-multiplier" "$T/out" || bad "bonsai-eval-loops --help lacks --dry-multiplier"
"$B/bonsai-run" --help > "$T/out"
grep -q -- "--prompts\|--regularise\|--spec-type" "$T/out" && bad "bonsai-run --help lists other tools' options"
# mining refuses repetition penalties (they are for bonsai-eval-loops) before it reads anything
checks=$((checks + 1))
"$B/bonsai-mine-pairs" -m "$T/none.gguf" -p "$T/none.jsonl" -o "$T/p.jsonl" --repeat-penalty 1.1 > /dev/null 2> "$T/err"
st=$?
[ $st -eq 1 ] && grep -qF "bonsai-eval-loops" "$T/err" || bad "bonsai-mine-pairs --repeat-penalty: exit $st, $(head -c 200 "$T/err")"

# -ngl 99 on a machine without a GPU: the run goes on, on the CPU (a one-line warning), as llama.cpp's tools do
M="$S/data/bonsai-loop-1bit.gguf"
checks=$((checks + 1))
"$B/bonsai-run" -m "$M" -p "The" -n 4 --temp 0 -ngl 99 > "$T/out" 2> "$T/err"
st=$?
[ $st -eq 0 ] && [ -s "$T/out" ] || bad "bonsai-run -ngl 99: exit $st, $(head -c 300 "$T/err")"
printf 'One two three four five six seven eight nine ten. %.0s' $(seq 40) > "$T/text.txt"
checks=$((checks + 1))
"$B/bonsai-perplexity" -m "$M" -f "$T/text.txt" -c 16 --chunks 2 -ngl 99 > "$T/out" 2> "$T/err"
st=$?
[ $st -eq 0 ] && grep -q "Final estimate: PPL" "$T/err" ||
  bad "bonsai-perplexity -ngl 99: exit $st, $(tail -c 300 "$T/err")"
checks=$((checks + 1))
"$B/bonsai-ftpo-train" -m "$M" --plan-only -ngl 99 > "$T/out" 2> "$T/err"
st=$?
[ $st -eq 0 ] && grep -q "memory plan" "$T/out" || bad "bonsai-ftpo-train -ngl 99 --plan-only: exit $st, $(head -c 200 "$T/err")"

# --lora / --lora-scaled (the engine options): listed by every tool that runs a model; a missing file, a model file
# given as an adapter, a scale that is not a number and a missing scale are refused, named
for t in run serve eval-loops eval-tasks mine-pairs perplexity bench speculative; do
  checks=$((checks + 1))
  "$B/bonsai-$t" --help > "$T/out" 2>&1
  grep -q -- "--lora FNAME" "$T/out" && grep -q -- "--lora-scaled FNAME SCALE" "$T/out" ||
    bad "bonsai-$t --help does not list --lora and --lora-scaled"
done
checks=$((checks + 4))
"$B/bonsai-run" -m "$M" -p "The" -n 2 --lora "$T/missing.gguf" > /dev/null 2> "$T/err"
st=$?
[ $st -eq 1 ] && grep -qF "$T/missing.gguf" "$T/err" || bad "bonsai-run --lora MISSING: exit $st, $(head -c 200 "$T/err")"
"$B/bonsai-run" -m "$M" -p "The" -n 2 --lora "$M" > /dev/null 2> "$T/err"
st=$?
[ $st -eq 1 ] && grep -qF "general.type is not 'adapter'" "$T/err" ||
  bad "bonsai-run --lora MODEL: exit $st, $(head -c 200 "$T/err")"
"$B/bonsai-run" -m "$M" -p "The" --lora-scaled "$T/a.gguf" abc > /dev/null 2> "$T/err"
st=$?
[ $st -eq 1 ] && grep -qF -- "--lora-scaled: 'abc' is not a number" "$T/err" ||
  bad "bonsai-run --lora-scaled F abc: exit $st, $(head -c 200 "$T/err")"
"$B/bonsai-run" -m "$M" -p "The" --lora-scaled "$T/a.gguf" > /dev/null 2> "$T/err"
st=$?
[ $st -eq 1 ] && grep -qF -- "--lora-scaled: needs FNAME SCALE" "$T/err" ||
  bad "bonsai-run --lora-scaled F (no scale): exit $st, $(head -c 200 "$T/err")"

# long and short spellings of an option give the same output
checks=$((checks + 2))
"$B/bonsai-run" -m "$M" -p "Once" -n 6 -s 7 --temp 0.9 -t 1 -c 64 > "$T/short" 2> /dev/null
"$B/bonsai-run" --model "$M" --prompt "Once" --n-predict 6 --seed 7 --temp 0.9 --threads 1 --ctx-size 64 \
  > "$T/long" 2> /dev/null
[ -s "$T/short" ] && cmp -s "$T/short" "$T/long" || bad "bonsai-run: short and long spellings differ"
printf 'Once' > "$T/prompt.txt"
"$B/bonsai-run" -m "$M" -f "$T/prompt.txt" -n 6 -s 7 --temp 0.9 -t 1 -c 64 > "$T/file" 2> /dev/null
cmp -s "$T/short" "$T/file" || bad "bonsai-run: -f FILE differs from -p with the same text"

# progress: plain lines when stderr is not a terminal (every update due with BONSAI_PROGRESS_INTERVAL=0), none with
# --no-progress or BONSAI_PROGRESS=0
checks=$((checks + 4))
BONSAI_PROGRESS_INTERVAL=0 "$B/bonsai-mkmodel" "$T/m.gguf" 2> "$T/err" > /dev/null
grep -Eq "^bonsai-mkmodel: [0-9.]+ [KMG]?i?B/[0-9.]+ [KMG]?i?B, [0-9]+ %, [0-9hms]+ elapsed" "$T/err" ||
  bad "bonsai-mkmodel: no plain progress line on a non-terminal stderr: $(head -c 300 "$T/err")"
BONSAI_PROGRESS_INTERVAL=0 "$B/bonsai-quantize" "$T/m.gguf" "$T/q.gguf" Q8_0 -q 2> "$T/err" > /dev/null
grep -Eq "^bonsai-quantize: [0-9]+/[0-9]+ weights, [0-9]+ %" "$T/err" ||
  bad "bonsai-quantize: no plain progress line: $(head -c 300 "$T/err")"
BONSAI_PROGRESS_INTERVAL=0 "$B/bonsai-quantize" "$T/m.gguf" "$T/q.gguf" Q8_0 -q --no-progress 2> "$T/err" > /dev/null
grep -q "weights, " "$T/err" && bad "bonsai-quantize --no-progress still prints progress: $(head -c 300 "$T/err")"
BONSAI_PROGRESS=0 BONSAI_PROGRESS_INTERVAL=0 "$B/bonsai-quantize" "$T/m.gguf" "$T/q.gguf" Q8_0 -q 2> "$T/err" > /dev/null
grep -q "weights, " "$T/err" && bad "bonsai-quantize with BONSAI_PROGRESS=0 still prints progress: $(head -c 300 "$T/err")"
echo "test_cli_args: $checks checks, $fail failed"
[ $fail -eq 0 ]
