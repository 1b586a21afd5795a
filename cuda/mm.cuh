// cuda/mm.cuh — the CUDA matrix kernels' internal interface (C++/CUDA only; include after
// "cuda/common.cuh"): weight × activation products for every weight type, embedding row lookup,
// argmax and top-k. Implemented in cuda/mm.cu (dispatch), cuda/mmvq.cu (decode), cuda/dequant.cu
// (get_rows, dequantize to F16), cuda/topk.cu (argmax/top-k).
//
// Types (bn_type ids of quant/quant.h): Q1_0, Q2_0 (g64), PQ2_0 (g128), Q8_0, Q4_0, Q4_1, Q6_K,
// Q4_K (quantized) and F16, BF16, F32 (float); plus the planar Q1_0/Q2_0/PQ2_0/Q8_0 layouts of
// bn_cu_weight_repack (wide aligned loads in the decode kernels).
//
// Precision:
//  - mmvq path (nb <= BN_CU_MMVQ_MAX_NB: decode, DSpark verify): quantized weights use int8 activations exactly
//    like ggml-cuda: x is quantized per 32 (d = amax/127 stored as fp16, q = roundf(x/d), Σq kept as an
//    integer for the formats with an offset or min), the per-32 dot is an exact integer (dp4a; int8 MMA for
//    Q1_0/Q2_0/PQ2_0 at nb >= BN_CU_MMA_MIN_NB, the same integers), the scales are applied in fp32.
//    F16/BF16/F32 weights: fp32 math on fp32 activations.
//  - GEMM path (nb > BN_CU_MMVQ_MAX_NB, prefill): the weight is dequantized to F16 in scratch (a tile of rows at
//    a time) and x converted to F16 with a power-of-two scale per column t: fp16(x[:, t]·2^-k_t); cublasGemmEx
//    with fp32 compute (CUBLAS_COMPUTE_32F), then y[:, t] *= 2^k_t. So prefill results equal an fp32 GEMM of
//    fp16(W)·fp16(x) with x's fp16 range moved per column: Q1_0/Q2_0/PQ2_0 weights (−d, 0, d, 2d) are exact in
//    fp16, multi-bit types round d·q to fp16 (~2^-11 relative), as does x. k_t = 0 (a plain conversion) when
//    max|x[:, t]| is in [2^-10, 2^15) or the column holds an inf/NaN (outputs stay non-finite); otherwise
//    the column's max lands in [2^14, 2^15): no inf from |x| >= 65520 (large SwiGLU products entering
//    ffn_down), no subnormal loss for tiny columns (cuda/mm.cu). F32 weights use cublasSgemm (fp32 inputs).
//  - Opt-in (BONSAI_CUDA_MMQ_PREFILL=1, bn_cu_mmq_prefill_enable): products beyond BN_CU_MMVQ_MAX_NB columns whose
//    weights are all Q1_0/Q2_0/PQ2_0 stay on the mmvq path's int8 tensor cores (bn_cu_mmq_tc_chunks: column chunks
//    of <= 32, Q8 activations as in decode; no fp16 dequantization pass), as llama.cpp's MMQ does for prefill.
#ifndef BONSAI_CUDA_MM_CUH
#define BONSAI_CUDA_MM_CUH
#include <stddef.h>
#include <stdint.h>

// nb up to this uses the mmvq (matvec) kernels in bn_cu_matmul(_multi); above it dequantize + cuBLAS GEMM.
// 32, not 8: DSpark's 17-token verify and the drafter's 16-row block passes stay on the int8
// kernels (Q8 activations, as decode and the CPU engine), not the fp16 GEMM that cost 20x a decode step on the
// H200; notes/cuda-mm.md, "Routing nb 9..32". Overridable at build time (-DBN_CU_MMVQ_MAX_NB=8, at most
// BN_CU_MMVQ_KERNEL_MAX_NB).
#ifndef BN_CU_MMVQ_MAX_NB
#define BN_CU_MMVQ_MAX_NB 32
#endif
// The mmvq kernels themselves handle nb up to this (nb > 8 as column groups: cuda/mmvq.cu), reached through
// bn_cu_matmul_multi_mmvq. An mmvq call costs ~nb dp4a dots per weight element, the GEMM path a fixed
// dequantize-to-fp16 pass (Q1_0 ffn_up: 285 us at nb 16 on an H200), so for the low-bit types mmvq is ahead
// up to 32 and beyond; routing nb 9..32 there changed their activation precision from the GEMM's fp16 to
// Q8 (what nb <= 8 and the CPU engine use): notes/cuda-mm.md, "Routing nb 9..32".
#define BN_CU_MMVQ_KERNEL_MAX_NB 32
// The mmvq path's low-bit weights (Q1_0, Q2_0, PQ2_0, both layouts) at nb BN_CU_MMA_MIN_NB..BN_CU_MMVQ_KERNEL_MAX_NB
// run on int8 tensor cores (cuda/mmq_tc.cu: mma.sync m16n8k32, sm_80+) instead of the dp4a kernels: the same
// Q8 activations and exact per-unit integers, only the fp32 summation order differs. -DBN_CU_MMA=0 keeps the
// dp4a kernels for every nb (to compare the two on a GPU); notes/cuda-mm.md, "Tensor cores".
#ifndef BN_CU_MMA
#define BN_CU_MMA 1
#endif
#ifndef BN_CU_MMA_MIN_NB
#define BN_CU_MMA_MIN_NB 8
#endif
static_assert(BN_CU_MMVQ_MAX_NB >= 1 && BN_CU_MMVQ_MAX_NB <= BN_CU_MMVQ_KERNEL_MAX_NB, "mmvq routing limit");

// bn_cu_matmul_uses_mmvq: true when bn_cu_matmul takes the mmvq path (Q8 activations) for this nb.
bool bn_cu_matmul_uses_mmvq(int type, int nb);

// A weight matrix in device memory: ne1 rows of ne0 elements, rows contiguous row_bytes apart
// (row_bytes >= bn_row_size(type, ne0)).
struct bn_cu_weight {
    const void *data; // device, {ne0, ne1} in `type`
    int type;         // bn_type id
    int64_t ne0, ne1;
    size_t row_bytes;
};

// Q8 activations of the mmvq path (layout in cuda/mm_impl.cuh, "Q8 activations"): int8 qs {ne0, nb} in the weight
// type's element order and per 32-element unit {fp16-rounded d, Σq}.
struct __align__(8) bn_q8_ds {
    float d;
    int sum;
};
struct bn_q8_act {
    const int8_t *qs;   // {ne0, nb}
    const bn_q8_ds *ds; // {ne0 / 32, nb}
};
// Where a producer kernel (cuda/fwd.cuh launchers with a q8 argument) writes the Q8 activations of its output for
// the matmul group that reads them: bn_cu_q8_fusable fills it with the group's scratch and element order.
struct bn_q8_out {
    int8_t *qs;   // {ne0, nb}
    bn_q8_ds *ds; // {ne0 / 32, nb}
    int order;    // element order (bn_act_order of the group's weights)
    int64_t ne0;  // elements per column
};

// bn_cu_type_supported: true for the weight types bn_cu_matmul / bn_cu_get_rows handle.
bool bn_cu_type_supported(int type);

// bn_cu_matmul_scratch_bytes: device scratch bytes bn_cu_matmul needs for this weight and nb.
size_t bn_cu_matmul_scratch_bytes(const bn_cu_weight *w, int nb);

// bn_cu_matmul: y {ne1, nb} = W {ne0, ne1} · x {ne0, nb} (x, y, scratch device fp32; column j of x is
// x + j*ne0, of y is y + j*ne1); enqueued on s (blas is used, and set to stream s, only on the GEMM
// path). Returns cudaSuccess or the first error (a cuBLAS failure reads as cudaErrorLaunchFailure).
// A scratch sized for nb also serves every smaller nb.
cudaError_t bn_cu_matmul(const bn_cu_weight *w, const float *x, float *y, int nb, void *scratch,
                         cublasHandle_t blas, cudaStream_t s);

// bn_cu_matmul_multi: y[i] {ne1_i, nb} = W[i] · x for i < n (1 <= n <= BN_CU_MATMUL_MULTI_MAX) weights with
// the same ne0 (e.g. q/k/v or gate/up of one input): on the mmvq path x is quantized once per element
// order and consecutive weights of one type share one launch (2 launches instead of 2n); on the GEMM
// path x is converted to fp16 once, then one GEMM per weight. Results are bit-identical to separate bn_cu_matmul calls. scratch: the
// largest bn_cu_matmul_scratch_bytes of the W[i]. Returns cudaSuccess or the first error.
#define BN_CU_MATMUL_MULTI_MAX 4
cudaError_t bn_cu_matmul_multi(const bn_cu_weight *const *w, int n, const float *x, float *const *y, int nb,
                               void *scratch, cublasHandle_t blas, cudaStream_t s);

// bn_cu_q8_fusable: true when bn_cu_matmul_multi would run W[0..n) at nb on the mmvq path with W[0] quantized:
// then *out says where in scratch (the group's bn_cu_matmul scratch) and in which element order (W[0]'s) a producer
// writes the Q8 activations of x for bn_cu_matmul_multi_q8.
bool bn_cu_q8_fusable(const bn_cu_weight *const *w, int n, int nb, void *scratch, bn_q8_out *out);
// bn_cu_matmul_multi_q8: bn_cu_matmul_multi with the Q8 activations of x in W[0]'s order already written where
// bn_cu_q8_fusable said (same scratch): no quantize launch for them; a later weight of another element order
// quantizes x itself, a float weight reads x, as in bn_cu_matmul_multi. Bit-identical results.
// cudaErrorInvalidValue when W is not fusable.
cudaError_t bn_cu_matmul_multi_q8(const bn_cu_weight *const *w, int n, const float *x, float *const *y, int nb,
                                  void *scratch, cudaStream_t s);

// bn_cu_matmul_multi_mmvq: bn_cu_matmul_multi on the mmvq path whatever nb (1 <= nb <=
// BN_CU_MMVQ_KERNEL_MAX_NB): Q8 activations for quantized weights, fp32 for float ones; bit-identical to
// bn_cu_matmul_multi where that takes the mmvq path. scratch: the largest bn_cu_mmvq_scratch_bytes of the W[i].
// Returns cudaSuccess or the first error.
cudaError_t bn_cu_matmul_multi_mmvq(const bn_cu_weight *const *w, int n, const float *x, float *const *y, int nb,
                                    void *scratch, cudaStream_t s);
// bn_cu_mmvq_scratch_bytes: device scratch bytes of the mmvq path for this weight and nb.
size_t bn_cu_mmvq_scratch_bytes(const bn_cu_weight *w, int nb);
// bn_cu_matmul_multi_gemm: bn_cu_matmul_multi on the prefill (fp16 GEMM) path whatever nb (benchmarks compare
// the two paths at the same nb). scratch: the largest bn_cu_gemm_scratch_bytes. Returns cudaSuccess or an error.
cudaError_t bn_cu_matmul_multi_gemm(const bn_cu_weight *const *w, int n, const float *x, float *const *y, int nb,
                                    void *scratch, cublasHandle_t blas, cudaStream_t s);
// bn_cu_gemm_scratch_bytes: device scratch bytes of the GEMM path for this weight and nb.
size_t bn_cu_gemm_scratch_bytes(const bn_cu_weight *w, int nb);

// bn_cu_weight_repack: rewrites W in place (enqueued on s) into the decode-friendly planar layout —
// per row, the quantized payload of every block, then every block's fp16 scale; same bytes — for
// Q1_0, Q2_0, PQ2_0 and Q8_0 whose rows are 16-byte aligned (row_bytes % 16 == 0: ne0 % 1024 for Q1_0
// and PQ2_0, % 512 for Q2_0, % 256 for Q8_0) and at most 48 KiB; sets w->type to the internal planar id
// (every function here accepts it; bn_cu_type_supported is true). Other weights are left as they are.
// Call once after upload; weights sharing device data (tied embedding/head) share the new type. Waits for s
// (the rows are final on return). Returns cudaSuccess or the launch error.
cudaError_t bn_cu_weight_repack(bn_cu_weight *w, cudaStream_t s);
// bn_cu_weight_repackable: true when bn_cu_weight_repack would change W's layout.
bool bn_cu_weight_repackable(const bn_cu_weight *w);

// bn_cu_get_rows: out {ne0, n} = rows ids[0..n) of W dequantized to fp32 (embedding lookup; ids device int32).
// An id outside [0, ne1) gives a row of zeros instead of a read outside W: inside a captured pass an id can come
// from the device argmax, which is -1 for an all-NaN row (the DSpark chain), and the host refuses it only after the
// pass. Returns cudaSuccess or the launch error.
cudaError_t bn_cu_get_rows(const bn_cu_weight *w, const int32_t *ids, float *out, int n, cudaStream_t s);

// bn_cu_argmax: *out (device int32) = index of the largest x[0..n) (first index on ties; NaN never
// wins; -1 if every element is NaN). Returns cudaSuccess or the launch error.
cudaError_t bn_cu_argmax(const float *x, int n, int32_t *out, cudaStream_t s);
// bn_cu_argmax_rows: out[r] (device int32) = bn_cu_argmax of row r of x (rows contiguous rows of n floats), one
// block per row. Returns cudaSuccess or the launch error.
cudaError_t bn_cu_argmax_rows(const float *x, int n, int rows, int32_t *out, cudaStream_t s);
// bn_cu_lse_rows: out[r] (device float) = ln Σ_i exp(x[r·n + i]) for each of rows contiguous rows of n floats
// (max-shifted; float partial sums per thread, tree-reduced: ~1e-6 relative to the double sum), one block per row.
cudaError_t bn_cu_lse_rows(const float *x, int n, int rows, float *out, cudaStream_t s);

// bn_cu_topk_scratch_bytes: device scratch bytes bn_cu_topk needs for n elements and k.
size_t bn_cu_topk_scratch_bytes(int n, int k);

// bn_cu_topk: the k (1 <= k <= 64, k <= n) largest of x[0..n): vals/idx (device, k each) sorted
// descending, ties broken by lower index first; NaN ranks below everything. Returns cudaSuccess or
// the error (cudaErrorInvalidValue for a bad k).
cudaError_t bn_cu_topk(const float *x, int n, int k, float *vals, int32_t *idx, void *scratch, cudaStream_t s);

#endif
