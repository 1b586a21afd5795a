#!/usr/bin/env bash
# tests/e2e/test_mine_backends.sh — bonsai-mine-pairs on the shipped looping model gives the SAME
# pairs in-process and through bonsai-serve on loopback (--server), for the same seeds: primed and
# sampled modes, 32 prompts each. Rows are compared on the ids that training uses (context_ids,
# rejected_id, chosen_ids); logprobs must agree to 1e-3 (the server runs the same engine; the prompt
# is prefilled in a different batch split, which changes float order only).
set -euo pipefail
src=${BONSAI_SOURCE_ROOT:?}
T=${BONSAI_BUILD_ROOT:?}/tools
model="$src/data/bonsai-loop-f16.gguf"
[ -f "$model" ] || { echo "SKIP: data/bonsai-loop-f16.gguf missing"; exit 77; }
command -v jq >/dev/null || { echo "SKIP: jq missing"; exit 77; }
dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
"$T/bonsai-serve" -m "$model" --port 0 --ready-file "$dir/ready" -c 2048 -t 2 2>"$dir/serve.log" &
pid=$!
for _ in $(seq 300); do [ -s "$dir/ready" ] && break; sleep 0.1; done
[ -s "$dir/ready" ] || { cat "$dir/serve.log"; echo "FAIL: server did not start"; exit 1; }
url="http://$(cat "$dir/ready")"
common=(-m "$model" -p "$src/data/prompts/train.jsonl" --max-prompts 32 --thinking -1 -t 2 --ctx 2048
        --n-predict 256 --n-probs 20 --chosen-require-alnum)
fails=0
for mode in prime sample; do
    if [ $mode = prime ]; then extra=(--mode prime --phrase-from-prefix --prime-repeats 3 --prime-prefix-tokens 24 --temp 0.1 --seed 1)
    else extra=(--mode sample --temps 0.1,0.5 --seed 1001); fi
    "$T/bonsai-mine-pairs" "${common[@]}" "${extra[@]}" -o "$dir/$mode-local.jsonl" > /dev/null
    "$T/bonsai-mine-pairs" "${common[@]}" "${extra[@]}" --server "$url" -o "$dir/$mode-http.jsonl" > /dev/null
    key='[.context_ids, .rejected_id, .chosen_ids]'
    nl=$(wc -l < "$dir/$mode-local.jsonl"); nh=$(wc -l < "$dir/$mode-http.jsonl")
    if [ "$nl" -gt 0 ] && cmp -s <(jq -c "$key" "$dir/$mode-local.jsonl") <(jq -c "$key" "$dir/$mode-http.jsonl"); then
        echo "ok   $mode: $nl pairs, identical ids in-process and over HTTP"
    else
        echo "FAIL $mode: $nl in-process vs $nh HTTP pairs, or different ids"; fails=$((fails + 1))
    fi
    d=$(paste <(jq '.rejected_logprob' "$dir/$mode-local.jsonl") <(jq '.rejected_logprob' "$dir/$mode-http.jsonl") |
        awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d } END { print m + 0 }')
    if awk "BEGIN { exit !($d <= 1e-3) }"; then echo "ok   $mode: rejected logprobs agree (max diff $d)"
    else echo "FAIL $mode: rejected logprobs differ by $d"; fails=$((fails + 1)); fi
done
[ "$fails" = 0 ]
