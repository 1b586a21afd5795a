#!/usr/bin/env bash
# tests/eval/test_eval_tasks_tool.sh — bonsai-eval-tasks on the shipped model (data/bonsai-loop-f16.gguf), against an
# independent computation and on the case the tool exists for:
#  - copy tasks built from the model's own greedy output (bonsai-run --temp 0): the prompt is the chat prompt plus the
#    first 4 lines of that output, the reference the next 2 lines of bonsai-run's greedy continuation of that prompt,
#    kept when its first line repeats a line of the prompt (the model loops). Plus control tasks whose reference is a
#    made-up line. For every task, the tool's first-line verdict must equal the one computed here from bonsai-run's
#    continuation of the same prompt; where that continuation starts with the whole reference, the tool's token
#    accuracy must be at least 90 % (not 1: the model's tokens may be cut otherwise than the reference's, e.g. a
#    reference that ends in "\n" where the model writes "\n\n" as one token); the made-up references never match.
#  - the same tasks under --repeat-penalty 1.5: the first-line exact rate and the token accuracy must drop below the
#    unpenalised ones (penalties cost where repetition belongs).
#  - the JSON has the loop-rate conventions (rates with [lo, hi] intervals), the model and the sampler echoed;
#  - --parallel 2 gives the same per-task results; a bad task file is refused with the file and line named.
B="${BONSAI_BUILD_ROOT:-build}/tools"
S="${BONSAI_SOURCE_ROOT:-.}"
M="$S/data/bonsai-loop-f16.gguf"
[ -x "$B/bonsai-eval-tasks" ] && [ -x "$B/bonsai-run" ] || { echo "SKIP: tools not built in $B"; exit 77; }
command -v jq > /dev/null || { echo "FAIL: jq is needed"; exit 1; }
T=$(mktemp -d /tmp/bonsai-test-eval-tasks-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail=0 checks=0
check() { checks=$((checks + 1)); if ! eval "$1"; then echo "FAIL: $2"; fail=$((fail + 1)); fi; }

first_line() { # the tool's rule (eval/tasks.h): leading newlines, then up to the next newline
    local s=$1 pre=""
    while [ "${s:0:1}" == $'\n' ]; do pre+=$'\n'; s=${s:1}; done
    printf '%s' "$pre${s%%$'\n'*}"
}
greedy() { # prompt, tokens -> bonsai-run's greedy continuation (its trailing newline dropped)
    "$B/bonsai-run" -m "$M" -p "$1" -n "$2" --temp 0 -t 1 2> /dev/null | head -c -1
}

: > "$T/tasks.jsonl"
i=0
for opening in "Never trust a man" "A fool and his" "The early bird gets" "You will be a" "Love is a" "Do not" \
               "It is better to" "Life is" "Every man" "Beware of" "When in doubt" "There is no" "A man who" \
               "If you want" "Nothing is" "All the world" "Be careful" "Money is" "Time flies" "The best way"; do
    chat=$'<|im_start|>user\n'"$opening"$'<|im_end|>\n<|im_start|>assistant\n'
    out=$(greedy "$chat" 120)
    mapfile -t lines <<< "$out"
    [ "${#lines[@]}" -ge 6 ] || continue
    printf -v head '%s\n' "${lines[@]:0:4}" # the first 4 lines (each with its newline) go into the prompt
    cont=$(greedy "$chat$head" 60; echo x) # the reference: the next 2 lines (first_line's) of the greedy
    cont=${cont%x}                          # continuation of that prompt, kept when its first one repeats a line
    l1=$(first_line "$cont")                # of the prompt (the model loops)
    rest=${cont:${#l1}+1}
    l2=$(first_line "$rest")
    ref="$l1"$'\n'"$l2"$'\n'
    [ "${#cont}" -gt $((${#ref} + 1)) ] && [ -n "${l1//$'\n'/}" ] && grep -qxF -- "${l1//$'\n'/}" <<< "$head" || continue
    i=$((i + 1))
    jq -cn --arg id "copy-$i" --arg p "$chat$head" --arg r "$ref" \
        '{id: $id, family: "copy", prompt: $p, reference: $r}' >> "$T/tasks.jsonl"
done
check '[ "$i" -ge 4 ]' "only $i copy tasks could be built"
for opening in "Life is" "Do not"; do # made-up references
    jq -cn --arg id "control-$opening" --arg p $'<|im_start|>user\n'"$opening"$'<|im_end|>\n<|im_start|>assistant\n' \
        --arg r $'Zebras quietly audit every parliament of owls.\n' \
        '{id: $id, family: "control", prompt: $p, reference: $r}' >> "$T/tasks.jsonl"
done
"$B/bonsai-eval-tasks" -m "$M" --tasks "$T/tasks.jsonl" -t 1 -o "$T/base.json" --no-progress > "$T/base.txt" 2> "$T/err"
st=$?
check '[ $st -eq 0 ]' "bonsai-eval-tasks exit $st: $(head -c 300 "$T/err")"
cat "$T/base.txt"
# independent: bonsai-run's continuation of each prompt, its first line against the reference's
n=0 agree=0
while IFS= read -r row; do
    id=$(jq -r .id <<< "$row")
    prompt=$(jq -j .prompt <<< "$row"; echo x) # (x: keep the trailing newlines)
    prompt=${prompt%x}
    ref=$(jq -j .reference <<< "$row"; echo x)
    ref=${ref%x}
    cont=$(greedy "$prompt" 60; echo x)
    cont=${cont%x}
    want=false
    [ "$(first_line "$cont")" == "$(first_line "$ref")" ] && want=true
    got=$(jq -r --arg id "$id" '.tasks[] | select(.id == $id) | .exact' "$T/base.json")
    n=$((n + 1))
    check '[ "$got" == "$want" ]' "$id: the tool says exact=$got, bonsai-run's continuation says $want"
    [ "$got" == "$want" ] && agree=$((agree + 1))
    if [ "${cont#"$ref"}" != "$cont" ]; then # the continuation starts with the whole reference
        acc=$(jq -r --arg id "$id" '.tasks[] | select(.id == $id) | "\(.token_correct) \(.tokens)"' "$T/base.json")
        # 90 %: the model's tokens may be cut otherwise than the reference's (its last "\n" against "\n\n")
        check '[ $((${acc% *} * 10)) -ge $((${acc#* } * 9)) ]' \
            "$id: the continuation holds the whole reference, token accuracy $acc"
    fi
done < "$T/tasks.jsonl"
echo "first-line verdicts agreeing with bonsai-run: $agree of $n"
check '[ "$(jq -r ".families[] | select(.family == \"control\") | .exact" "$T/base.json")" == 0 ]' \
    "made-up references matched"
base_exact=$(jq -r '.families[] | select(.family == "copy") | .exact_rate' "$T/base.json")
base_acc=$(jq -r '.families[] | select(.family == "copy") | .token_accuracy' "$T/base.json")
check 'jq -e "$base_exact == 1" <<< null > /dev/null' "copy tasks score only $base_exact exact without penalties"
# JSON conventions: rates with intervals, model and sampler echoed
check 'jq -e ".overall.exact_rate_ci95 | length == 2" "$T/base.json" > /dev/null' "overall interval"
check 'jq -e ".model == \"$M\" and .sampler.repeat_penalty == 1 and .n_tokens == 32" "$T/base.json" > /dev/null' \
    "model and sampler echo"
# --parallel 2: two states at once give the same completions
"$B/bonsai-eval-tasks" -m "$M" --tasks "$T/tasks.jsonl" -t 2 --parallel 2 -o "$T/par.json" --no-progress > /dev/null \
    2> "$T/err"
st=$?
check '[ $st -eq 0 ] && [ "$(jq -c .tasks "$T/par.json")" == "$(jq -c .tasks "$T/base.json")" ]' \
    "--parallel 2 differs from one state (exit $st)"
# a strong repeat penalty costs exactly where repetition belongs
"$B/bonsai-eval-tasks" -m "$M" --tasks "$T/tasks.jsonl" -t 1 -o "$T/pen.json" --repeat-penalty 1.5 --no-progress \
    > "$T/pen.txt" 2> "$T/err"
st=$?
check '[ $st -eq 0 ]' "penalised run exit $st: $(head -c 300 "$T/err")"
cat "$T/pen.txt"
pen_exact=$(jq -r '.families[] | select(.family == "copy") | .exact_rate' "$T/pen.json")
pen_acc=$(jq -r '.families[] | select(.family == "copy") | .token_accuracy' "$T/pen.json")
echo "copy tasks: exact $base_exact -> $pen_exact, token accuracy $base_acc -> $pen_acc under --repeat-penalty 1.5"
check 'jq -e ".sampler.repeat_penalty == 1.5" "$T/pen.json" > /dev/null' "penalty echoed"
check 'jq -e "$pen_exact < $base_exact and $pen_acc < $base_acc" <<< null > /dev/null' \
    "the penalty did not lower the copy scores ($base_exact/$base_acc -> $pen_exact/$pen_acc)"
# a bad task file ends the tool before any work, naming the file and the line
printf '%s\n' '{"id": "a", "family": "copy", "prompt": "p", "reference": "r\n"}' \
    '{"id": "a", "family": "copy", "prompt": "q", "reference": "s\n"}' > "$T/bad.jsonl"
"$B/bonsai-eval-tasks" -m "$M" --tasks "$T/bad.jsonl" > /dev/null 2> "$T/err"
st=$?
check '[ $st -eq 1 ] && grep -qF "bonsai-eval-tasks: $T/bad.jsonl:2: duplicate id \"a\" (first on line 1)" "$T/err"' \
    "bad task file: exit $st, $(head -c 300 "$T/err")"
echo "$checks checks, $fail failed"
[ "$fail" -eq 0 ]
