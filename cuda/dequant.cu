// cuda/dequant.cu — whole-row dequantization: embedding lookup (bn_cu_get_rows, fp32, bit-identical
// to bn_dequantize), weight rows to fp32 (bn_cu_dequant_f32, the same bits), weight tiles to fp16 for the
// prefill GEMM (the activations' scaled fp16 conversion is in cuda/mm.cu), weight rows to bf16 for the trainer's
// 16-bit GEMMs (bn_cu_dequant_bf16: those fp32 values rounded to nearest even).
// One thread per output element (coalesced writes; the threads of a block share a weight block).
#include "cuda/mm_impl.cuh"

#define DEQ_THREADS 256

// get_rows_k: out[i*ne0 + k] = W[ids[i]][k], zeros for an id outside [0, ne1); grid (n, ceil(ne0 / DEQ_THREADS)).
template <int T>
__global__ void get_rows_k(const uint8_t *w, size_t row_bytes, int64_t ne0, int64_t ne1, const int32_t *ids,
                           float *out) {
    bn_cu_grid_begin();
    int64_t k = (int64_t)blockIdx.y * DEQ_THREADS + threadIdx.x;
    int64_t i = blockIdx.x;
    if (k >= ne0) return;
    const int64_t id = ids[i];
    out[i * ne0 + k] = id >= 0 && id < ne1 ? bn_deq_elem<T>(w + id * row_bytes, k, ne0) : 0.0f;
}

// deq_store: v as the output element: fp32 unchanged, fp16 rounded to nearest even.
static BN_DEVICE void deq_store(float *out, float v) { *out = v; }
static BN_DEVICE void deq_store(bn_half *out, float v) { *out = bn_f2h(v); }
static BN_DEVICE void deq_store(uint16_t *out, float v) { *out = bn_f2bf(v); } // bf16 bits

// dequant_k: out[r*ne0 + k] = W[r0 + r][k] as O (fp32, fp16, or bf16 bits as uint16_t); grid (nr, ceil(ne0 / DEQ_THREADS)).
template <int T, class O>
__global__ void dequant_k(const uint8_t *w, size_t row_bytes, int64_t ne0, int64_t r0, O *out) {
    bn_cu_grid_begin();
    int64_t k = (int64_t)blockIdx.y * DEQ_THREADS + threadIdx.x;
    int64_t r = blockIdx.x;
    if (k >= ne0) return;
    deq_store(out + r * ne0 + k, bn_deq_elem<T>(w + (r0 + r) * row_bytes, k, ne0));
}

struct get_rows_launch {
    const bn_cu_weight *w;
    const int32_t *ids;
    float *out;
    int n;
    cudaStream_t s;
    template <int T> cudaError_t operator()() const {
        dim3 grid((unsigned)n, (unsigned)((w->ne0 + DEQ_THREADS - 1) / DEQ_THREADS));
        void (*k)(const uint8_t *, size_t, int64_t, int64_t, const int32_t *, float *) = get_rows_k<T>;
        BN_LAUNCH(k, grid, dim3(DEQ_THREADS), 0, s, (const uint8_t *)w->data, w->row_bytes, w->ne0, w->ne1, ids, out);
        return cudaGetLastError();
    }
};

template <class O> struct dequant_launch {
    const bn_cu_weight *w;
    int64_t r0, nr;
    O *out;
    cudaStream_t s;
    template <int T> cudaError_t operator()() const {
        dim3 grid((unsigned)nr, (unsigned)((w->ne0 + DEQ_THREADS - 1) / DEQ_THREADS));
        void (*k)(const uint8_t *, size_t, int64_t, int64_t, O *) = dequant_k<T, O>;
        BN_LAUNCH(k, grid, dim3(DEQ_THREADS), 0, s, (const uint8_t *)w->data, w->row_bytes, w->ne0, r0, out);
        return cudaGetLastError();
    }
};

cudaError_t bn_cu_get_rows(const bn_cu_weight *w, const int32_t *ids, float *out, int n, cudaStream_t s) {
    if (n <= 0 || w->ne0 == 0) return cudaSuccess;
    return bn_cu_by_type(w->type, get_rows_launch{w, ids, out, n, s});
}

cudaError_t bn_cu_dequant_f16(const bn_cu_weight *w, int64_t r0, int64_t nr, bn_half *out, cudaStream_t s) {
    if (nr <= 0 || w->ne0 == 0) return cudaSuccess;
    return bn_cu_by_type(w->type, dequant_launch<bn_half>{w, r0, nr, out, s});
}

cudaError_t bn_cu_dequant_f32(const bn_cu_weight *w, int64_t r0, int64_t nr, float *out, cudaStream_t s) {
    if (nr <= 0 || w->ne0 == 0) return cudaSuccess;
    return bn_cu_by_type(w->type, dequant_launch<float>{w, r0, nr, out, s});
}

cudaError_t bn_cu_dequant_bf16(const bn_cu_weight *w, int64_t r0, int64_t nr, uint16_t *out, cudaStream_t s) {
    if (nr <= 0 || w->ne0 == 0) return cudaSuccess;
    return bn_cu_by_type(w->type, dequant_launch<uint16_t>{w, r0, nr, out, s});
}
