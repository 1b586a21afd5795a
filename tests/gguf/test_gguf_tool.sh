#!/bin/sh
# tests/gguf/test_gguf_tool.sh — bonsai-gguf show/diff and bonsai-mkmodel CLI behaviour (exit codes, output lines).
B="${BONSAI_BUILD_ROOT:-build}/tools"
S="${BONSAI_SOURCE_ROOT:-.}"
[ -x "$B/bonsai-gguf" ] && [ -x "$B/bonsai-mkmodel" ] || { echo "SKIP: tools not built in $B"; exit 77; }
T=$(mktemp -d /tmp/bonsai-test-gguf-tool-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail=0; checks=0
check() { st=$?; checks=$((checks + 1)); if ! eval "$1"; then echo "FAIL: $2"; fail=$((fail + 1)); fi; }

"$B/bonsai-mkmodel" "$T/a.gguf" 2>/dev/null;                 check '[ $st -eq 0 ]' "mkmodel tiny"
"$B/bonsai-mkmodel" "$T/b.gguf" 2>/dev/null;                 check '[ $st -eq 0 ]' "mkmodel tiny again"
"$B/bonsai-mkmodel" "$T/c.gguf" --seed 7 --n-vocab 600 2>/dev/null; check '[ $st -eq 0 ]' "mkmodel other seed/vocab"
"$B/bonsai-mkmodel" "$T/x.gguf" --n-head-kv 3 2>"$T/err";    check '[ $st -eq 1 ]' "mkmodel bad shape exits 1"
check 'grep -q "n_head_kv" "$T/err"' "mkmodel error names the field"
check '[ ! -e "$T/x.gguf" ]' "no file after a refused mkmodel"
"$B/bonsai-mkmodel" --help >/dev/null;                       check '[ $st -eq 0 ]' "mkmodel --help"

"$B/bonsai-gguf" show "$T/a.gguf" > "$T/show";               check '[ $st -eq 0 ]' "show exits 0"
check 'grep -q "^56 tensors:" "$T/show"' "show: tensor count line"
check 'grep -q "tokenizer.ggml.tokens .*\[512 strings: \"Ā\", \"ā\", \"Ă\", \"ă\", \"Ą\", \.\.\.\]" "$T/show"' "show: abbreviated string array"
check 'grep -q "qwen35.rope.dimension_sections .*\[4 i32: 2, 2, 0, 0\]" "$T/show"' "show: short numeric array in full"
check 'grep -Eq "blk.3.attn_q.weight +f32 +\{128, 256\}" "$T/show"' "show: tensor row with type and ne"
check 'grep -Eq "^  all +56 tensors +793912 elements +3175648 bytes +32.0000 bpw" "$T/show"' "show: totals"
"$B/bonsai-gguf" show "$T/a.gguf" --all > "$T/showall"
check 'grep -q "\"<|im_end|>\", \"\[PAD\]*" "$T/showall" || grep -q "\"<|im_start|>\", \"<|im_end|>\"\]" "$T/showall"' "show --all: whole token array"
"$B/bonsai-gguf" show "$S/tests/gguf/corpus/bad_kv_bad_bool.gguf" 2>"$T/err"; check '[ $st -eq 1 ]' "show on a broken file exits 1"
check 'grep -q "bool" "$T/err"' "show: broken-file message"

"$B/bonsai-gguf" show "$S/tests/gguf/corpus/ok_sample_pq2_42.gguf" > "$T/s42"
check 'grep -q "^type 42: .*group 128 (legacy" "$T/s42"' "show: type-42 g128 note"
check 'grep -q "pq2_0(42)" "$T/s42"' "show: resolved type with the stored id"
"$B/bonsai-gguf" show "$S/tests/gguf/corpus/ok_gap_between_tensors.gguf" > "$T/sgap"
check 'grep -q "^layout: .*tensor .b. is not where ggml expects it" "$T/sgap"' "show: ggml order note"
check '! grep -q "^layout:" "$T/show"' "show: no layout note for a regular file"
"$B/bonsai-gguf" diff "$T/a.gguf" "$T/b.gguf" > "$T/d0";     check '[ $st -eq 0 ]' "diff identical exits 0"
check 'grep -q "^identical: 0 differences; 56 common tensors byte-identical" "$T/d0"' "diff identical summary"
"$B/bonsai-gguf" diff "$T/a.gguf" "$T/c.gguf" > "$T/d1";     check '[ $st -eq 1 ]' "diff different exits 1"
check 'grep -q "~ tensor token_embd.weight: shape {128, 512} -> {128, 600}" "$T/d1"' "diff: shape change"
check 'grep -q "~ kv tokenizer.ggml.eos_token_id: u32 509 -> u32 597" "$T/d1"' "diff: kv change"
check 'grep -q "~ tensor blk.0.ffn_up.weight (f32): data differs" "$T/d1"' "diff: data change"
"$B/bonsai-gguf" diff "$T/a.gguf" "$T/missing.gguf" 2>/dev/null; check '[ $st -eq 2 ]' "diff with a missing file exits 2"

echo "test_gguf_tool: $checks checks, $fail failed"
[ $fail -eq 0 ]
