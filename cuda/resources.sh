#!/usr/bin/env bash
# cuda/resources.sh — static resource report of every CUDA kernel for sm_90, without a GPU: compiles
# each cuda/*.cu with `nvcc -cubin -Xptxas -v` and prints per kernel the registers, stack frame,
# spill stores/loads, static shared memory, the block size it is launched with (table below) and the
# occupancy that implies on an H100/H200 SM (65536 registers, 2048 threads, 32 blocks, 228 KiB shared
# memory of which 1 KiB is reserved per block, registers allocated per warp in units of 256).
# Flags (exit 1 with --check):
#   SPILL  spill stores or loads (registers moved to local memory: slow on the GPU)
#   SMEM   static shared memory > 48 KiB (the launch would fail)
#   REGS   more than 128 registers at a 256-thread (or larger) block: fewer than 2 blocks fit per SM
#   BLOCK  the kernel's block size exceeds its __launch_bounds__-capped register budget (no fit)
#   PDL    a source line that breaks programmatic dependent launch's rules (cuda/common.cuh): a kernel whose
#          first statement is not bn_cu_grid_begin(), a __restrict__, or an __ldg outside bn_ldg_weight
#          (checked first, without nvcc)
# Notes (never fail): STACK (a stack frame without spills: a local array indexed at run time).
# Usage: cuda/resources.sh [--check] [--jobs N] [FILE.cu ...]   (default: every cuda/*.cu)
# Skips (exit 77) when nvcc is not found. Compiles in a temporary directory; ~20 s on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
CHECK=0 JOBS=2
while [ $# -gt 0 ]; do
    case "$1" in
    --check) CHECK=1; shift ;;
    --jobs) JOBS=$2; shift 2 ;;
    *) break ;;
    esac
done

# pdl_rules: prints "PDL file:line: why" for each line of cuda/*.cu, *.cuh that breaks a rule; returns 1 if any
pdl_rules() {
    local out
    out=$({
        awk '
            function check(s) {
                if (s !~ /^[[:space:]]*bn_cu_grid_begin\(\);/)
                    printf "PDL %s:%d: the kernel'\''s first statement is not bn_cu_grid_begin();\n", FILENAME, FNR
                want = 0
            }
            FNR == 1 { want = 0 }
            /^[[:space:]]*(\/\/|#)/ { next }
            /__global__/ { want = 1 }
            want == 1 && /;/ && !/\{/ { want = 0; next }
            want == 1 && /\{/ {
                rest = substr($0, index($0, "{") + 1)
                if (rest ~ /[^[:space:]]/ && rest !~ /^[[:space:]]*\/\//) check(rest); else want = 2
                next
            }
            want == 2 && /[^[:space:]]/ { check($0) }
        ' cuda/*.cu cuda/*.cuh
        grep -n -E '__restrict__|__ldg\(' cuda/*.cu cuda/*.cuh | grep -v -E '^cuda/common\.cuh:|^[^:]*:[0-9]+:[[:space:]]*//' |
            sed 's/^/PDL /; s/$/   (__restrict__, or __ldg outside bn_ldg_weight)/'
    })
    [ -z "$out" ] && return 0
    echo "$out"
    return 1
}
pdl_ok=1
pdl_rules || pdl_ok=0
if [ "$pdl_ok" = 1 ]; then echo "PDL rules (cuda/common.cuh): every kernel begins with bn_cu_grid_begin(); no __restrict__; __ldg only for weights"; fi
[ "$CHECK" = 1 ] && [ "$pdl_ok" = 0 ] && { echo "cuda/resources.sh: PDL rules broken"; exit 1; }

NVCC=${NVCC:-$(command -v nvcc || true)}
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
if [ -z "$NVCC" ]; then
    echo "cuda/resources.sh: nvcc not found (set NVCC=...): skipped"
    exit 77
fi
FILES=("$@")
[ ${#FILES[@]} = 0 ] && FILES=(cuda/*.cu)

# Block size (threads) each kernel is launched with, the largest where it varies; by the name
# before the template arguments. Kernels not listed are assumed to run 256 threads (marked '*').
declare -A BLOCK=(
    [quantize_act]=256 [mmvq_q]=256 [mmvq_q_multi]=256 [mmv_f]=256 [repack_k]=256 [fill_bench_k]=256
    [mmq_tc]=128 [mma16_check_k]=32
    [get_rows_k]=256 [dequant_k]=256 [argmax_k]=1024 [topk_k]=256
    [rmsnorm_kernel]=256 [add_rmsnorm_kernel]=256 [add_kernel]=256 [add_bias_kernel]=256 [swiglu_kernel]=256
    [gated_rmsnorm_kernel]=128 [advance_pos_kernel]=32 [conv_norm_kernel]=256 [recurrence_kernel]=128
    [conv_tokens_kernel]=256 [norm_tokens_kernel]=256 [recurrence_norm_kernel]=1024
    [attn_prep_kernel]=128 [attn_split_kernel]=128 [attn_merge_kernel]=128 [attn_tiled_kernel]=256 [attn_mma_kernel]=128
    [tap_rows_kernel]=256
    [ds_add_snr_kernel]=256 [ds_block_attn_kernel]=128 [ds_markov_logits_kernel]=256 [ds_conf_kernel]=256
    [rmsnorm_bwd_kernel]=256 [l2norm_bwd_kernel]=256 [gated_rmsnorm_bwd_kernel]=256 [swiglu_bwd_kernel]=256
    [sigmoid_gate_bwd_kernel]=256 [sigmoid_bwd_kernel]=256 [gdn_gate_bwd_kernel]=256 [scale_bwd_kernel]=256
    [row_rho_kernel]=256 [norm_wgrad_kernel]=256 [rope_bwd_kernel]=256 [conv_fwd_kernel]=256 [conv_state_kernel]=256
    [conv_bwd_kernel]=256
    [col_softmax_kernel]=256 [col_dscore_kernel]=256
    [gdn_fwd_kernel]=128 [gdn_bwd_kernel]=640 [gdn_qk_reduce_kernel]=256
    [gdn_gate_add_kernel]=256
    [f16_to_f32_kernel]=256 [mul_kernel]=256 [add_mul_kernel]=256
    [l2norm_kernel]=256 [sigmoid_gate_kernel]=256 [gdn_gates_kernel]=256 [rope_fwd_kernel]=256
    [ftpo_row_sq_kernel]=256 [ftpo_batch_kernel]=1 [ftpo_tether_grad_kernel]=256 [ftpo_target_grad_kernel]=32
    [adamw_kernel]=256 [norm_partial_kernel]=256 [norm_final_kernel]=256 [grad_clip_kernel]=256 [grad_scale_kernel]=256
)

W=$(mktemp -d "${TMPDIR:-/tmp}/bn-cuda-res.XXXXXX")
trap 'rm -rf "$W"' EXIT
compile() { # compile FILE: ptxas's report into $W/<stem>.log; exit status of nvcc
    local f=$1 stem
    stem=$(basename "$f" .cu)
    "$NVCC" -I. -std=c++17 -gencode=arch=compute_90,code=sm_90 -O3 -Xptxas -v -cubin -o "$W/$stem.cubin" "$f" \
        >"$W/$stem.log" 2>&1
}
export -f compile
export NVCC W
if ! printf '%s\n' "${FILES[@]}" | xargs -P "$JOBS" -I{} bash -c 'compile "$@"' _ {}; then
    for f in "${FILES[@]}"; do
        stem=$(basename "$f" .cu)
        grep -q "error" "$W/$stem.log" 2>/dev/null && { echo "nvcc failed on $f:"; tail -20 "$W/$stem.log"; }
    done
    exit 1
fi

# one line per kernel: file mangled regs stack spill_st spill_ld smem
for f in "${FILES[@]}"; do
    stem=$(basename "$f" .cu)
    awk -v file="$stem.cu" '
        /Compiling entry function/ { name = $0; sub(/.*entry function .\047?/, "", name); sub(/\047 for.*/, "", name);
                                     stack = st = ld = regs = smem = 0; next }
        /bytes stack frame/ { stack = $1; st = $5; ld = $9 }
        /Used [0-9]+ registers/ { for (i = 1; i <= NF; i++) { if ($i == "registers,") regs = $(i - 1);
                                  if ($i == "smem") smem = $(i - 2) }
                                  if (name != "") print file, name, regs, stack, st, ld, smem; name = "" }
    ' "$W/$stem.log"
done >"$W/kernels.txt"
[ -s "$W/kernels.txt" ] || { echo "cuda/resources.sh: no kernels found in the ptxas reports"; exit 1; }

printf '| %-12s | %-58s | %4s | %5s | %9s | %6s | %6s | %-10s | %s\n' file kernel regs stack "spill st/ld" smem \
    threads "blocks/SM" flags
bad=0
while read -r file mangled regs stack st ld smem; do
    pretty=$(echo "$mangled" | c++filt 2>/dev/null || echo "$mangled")
    base=${pretty%%(*}
    base=${base%%<*}
    base=${base##* }
    threads=${BLOCK[$base]:-256}
    mark=$([ -n "${BLOCK[$base]:-}" ] && echo "" || echo "*")
    warps=$(( (threads + 31) / 32 ))
    per_warp=$(( (regs * 32 + 255) / 256 * 256 ))
    [ "$per_warp" = 0 ] && per_warp=256
    by_regs=$(( 65536 / per_warp / warps ))
    by_threads=$(( 2048 / (warps * 32) ))
    by_smem=$(( 233472 / (smem + 1024) ))
    blocks=$by_regs
    [ "$by_threads" -lt "$blocks" ] && blocks=$by_threads
    [ "$by_smem" -lt "$blocks" ] && blocks=$by_smem
    [ 32 -lt "$blocks" ] && blocks=32
    occ=$(( 100 * blocks * warps / 64 ))
    flags=""
    [ "$st" != 0 ] || [ "$ld" != 0 ] && flags+="SPILL "
    [ "$smem" -gt 49152 ] && flags+="SMEM "
    [ "$threads" -ge 256 ] && [ "$regs" -gt 128 ] && flags+="REGS "
    [ "$blocks" -lt 1 ] && flags+="BLOCK "
    [ -n "$flags" ] && bad=$((bad + 1))
    [ "$stack" != 0 ] && [ "$st" = 0 ] && [ "$ld" = 0 ] && flags+="(STACK) "
    short=$(echo "$pretty" | sed 's/(.*//')
    printf '| %-12s | %-58.58s | %4s | %5s | %4s/%-4s | %6s | %5s%-1s | %2d (%3d%%) | %s\n' "$file" "$short" "$regs" \
        "$stack" "$st" "$ld" "$smem" "$threads" "$mark" "$blocks" "$occ" "$flags"
done <"$W/kernels.txt"
n=$(wc -l <"$W/kernels.txt")
echo "$n kernels; $bad flagged (SPILL/SMEM/REGS/BLOCK); * = block size not in the table, 256 assumed"
[ "$pdl_ok" = 0 ] && echo "PDL rules broken (lines above)"
if [ "$CHECK" = 1 ] && [ "$bad" -gt 0 ]; then exit 1; fi
exit 0
