# bench/spec-fixture.sh — sourced by bench/serve-spec.sh and bench/spec-rollback.sh: their target and drafter.

# spec_fixture BUILD PRESET TYPE THREADS MODEL DRAFTER: writes MODEL, the bonsai-mkmodel --seed 1 PRESET model
# quantized to TYPE, and DRAFTER, a random q8_0 DSpark drafter of its width and vocabulary tapping layers 1, L/2
# and L-2 (its drafts are all rejected)
spec_fixture() {
    local b=$1 preset=$2 type=$3 threads=$4 m=$5 d=$6 E V L
    "$b/tools/bonsai-mkmodel" "$m.f16.gguf" --preset "$preset" --type f16 --seed 1 >/dev/null
    "$b/tools/bonsai-quantize" "$m.f16.gguf" "$m" "$type" --threads "$threads" >/dev/null
    rm -f "$m.f16.gguf"
    read -r E V L < <("$b/tools/bonsai-gguf" show "$m" | awk '/\.embedding_length /{e=$NF} /\.block_count /{l=$NF}
        /tokenizer.ggml.tokens /{v=$3; sub(/^\[/, "", v)} END {print e, v, l}')
    "$b/tools/bonsai-mkdrafter" "$d" --n-embd "$E" --n-vocab "$V" --n-layer 1 --n-ff 1024 --n-head 8 --n-head-kv 2 \
        --head-dim 64 --n-rot 64 --target-layers "1,$((L / 2)),$((L - 2))" --type q8_0 --seed 3 >/dev/null ||
        { echo "spec_fixture: no drafter for the $preset model (n_embd $E, $L layers)" >&2; return 1; }
}
