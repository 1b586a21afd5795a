// cuda/mm_impl.cuh — device helpers shared by the matrix kernels (mmvq.cu, dequant.cu, mm.cu):
// the weight type table, unaligned loads, per-element dequantization (get_rows, F16 prefill tiles)
// and the per-32-element weight decode + integer dot against Q8 activations (mmvq).
// Block layouts: docs/formats.md §3.4 (read through byte pointers; blocks are only 2-byte aligned).
#ifndef BONSAI_CUDA_MM_IMPL_CUH
#define BONSAI_CUDA_MM_IMPL_CUH
#include "cuda/common.cuh"
#include "cuda/mm.cuh"
#include <string.h>

// Weight type ids: bn_type of quant/quant.h (that C header's bn_half clashes with the CUDA one), plus
// the planar layouts bn_cu_weight_repack makes (BN_CU_PLANAR + type): per row, the quantized payload
// of every block (bits / codes / int8s, in block order) and then every block's fp16 scale; same
// bytes per row; rows 16-byte aligned.
enum {
    BN_CU_F32 = 0, BN_CU_F16 = 1, BN_CU_Q4_0 = 2, BN_CU_Q4_1 = 3, BN_CU_Q8_0 = 8, BN_CU_Q4_K = 12, BN_CU_Q6_K = 14,
    BN_CU_BF16 = 30, BN_CU_Q1_0 = 41, BN_CU_Q2_0 = 42, BN_CU_PQ2_0 = 142,
    BN_CU_PLANAR = 1000,
    BN_CU_Q8_0_P = BN_CU_PLANAR + BN_CU_Q8_0, BN_CU_Q1_0_P = BN_CU_PLANAR + BN_CU_Q1_0,
    BN_CU_Q2_0_P = BN_CU_PLANAR + BN_CU_Q2_0, BN_CU_PQ2_0_P = BN_CU_PLANAR + BN_CU_PQ2_0,
};

#ifndef BN_HOST_DEVICE
#ifdef __CUDACC__
#define BN_HOST_DEVICE __host__ __device__
#else
#define BN_HOST_DEVICE
#endif
#endif

// ---- type table (host and device) -----------------------------------------------------------
// Elements and bytes per weight block; 0 for unsupported types.
BN_HOST_DEVICE constexpr int bn_cu_blck(int type) {
    if (type == BN_CU_Q8_0_P || type == BN_CU_Q1_0_P || type == BN_CU_Q2_0_P || type == BN_CU_PQ2_0_P)
        type -= BN_CU_PLANAR;
    switch (type) {
    case BN_CU_F32: case BN_CU_F16: case BN_CU_BF16: return 1;
    case BN_CU_Q8_0: case BN_CU_Q4_0: case BN_CU_Q4_1: return 32;
    case BN_CU_Q2_0: return 64;
    case BN_CU_Q1_0: case BN_CU_PQ2_0: return 128;
    case BN_CU_Q4_K: case BN_CU_Q6_K: return 256;
    default: return 0;
    }
}
BN_HOST_DEVICE constexpr int bn_cu_block_bytes(int type) {
    if (type == BN_CU_Q8_0_P || type == BN_CU_Q1_0_P || type == BN_CU_Q2_0_P || type == BN_CU_PQ2_0_P)
        type -= BN_CU_PLANAR;
    switch (type) {
    case BN_CU_F32: return 4;
    case BN_CU_F16: case BN_CU_BF16: return 2;
    case BN_CU_Q8_0: return 34;
    case BN_CU_Q4_0: return 18;
    case BN_CU_Q4_1: return 20;
    case BN_CU_Q2_0: return 18;
    case BN_CU_Q1_0: return 18;
    case BN_CU_PQ2_0: return 34;
    case BN_CU_Q4_K: return 144;
    case BN_CU_Q6_K: return 210;
    default: return 0;
    }
}
// True for types whose mmvq path uses Q8 activations (all but F32/F16/BF16).
BN_HOST_DEVICE inline bool bn_cu_is_quantized(int type) { return bn_cu_blck(type) >= 32; }
// The stored type of a planar id (the id itself otherwise).
BN_HOST_DEVICE constexpr int bn_cu_base_type(int type) { return type > BN_CU_PLANAR ? type - BN_CU_PLANAR : type; }
// The low-bit types (4-8 weight bytes per 32-element unit; both layouts): more rows per mmvq block, and the
// int8 tensor-core kernels (cuda/mmq_tc.cu).
BN_HOST_DEVICE constexpr bool bn_cu_low_bit(int type) {
    return bn_cu_base_type(type) == BN_CU_Q1_0 || bn_cu_base_type(type) == BN_CU_Q2_0 ||
           bn_cu_base_type(type) == BN_CU_PQ2_0;
}

// bn_cu_by_type: f.template operator()<T>() for a supported weight type id (planar ones included);
// cudaErrorInvalidValue otherwise.
template <class F> static cudaError_t bn_cu_by_type(int type, F &&f) {
    switch (type) {
    case BN_CU_Q1_0: return f.template operator()<BN_CU_Q1_0>();
    case BN_CU_Q2_0: return f.template operator()<BN_CU_Q2_0>();
    case BN_CU_PQ2_0: return f.template operator()<BN_CU_PQ2_0>();
    case BN_CU_Q8_0: return f.template operator()<BN_CU_Q8_0>();
    case BN_CU_Q1_0_P: return f.template operator()<BN_CU_Q1_0_P>();
    case BN_CU_Q2_0_P: return f.template operator()<BN_CU_Q2_0_P>();
    case BN_CU_PQ2_0_P: return f.template operator()<BN_CU_PQ2_0_P>();
    case BN_CU_Q8_0_P: return f.template operator()<BN_CU_Q8_0_P>();
    case BN_CU_Q4_0: return f.template operator()<BN_CU_Q4_0>();
    case BN_CU_Q4_1: return f.template operator()<BN_CU_Q4_1>();
    case BN_CU_Q4_K: return f.template operator()<BN_CU_Q4_K>();
    case BN_CU_Q6_K: return f.template operator()<BN_CU_Q6_K>();
    case BN_CU_F32: return f.template operator()<BN_CU_F32>();
    case BN_CU_F16: return f.template operator()<BN_CU_F16>();
    case BN_CU_BF16: return f.template operator()<BN_CU_BF16>();
    default: return cudaErrorInvalidValue;
    }
}

// ---- loads --------------------------------------------------------------------------------------
// 16/32-bit little-endian weight loads from 2-byte aligned addresses (GGUF blocks are only 2-aligned).
__device__ __forceinline__ uint32_t bn_ld16(const uint8_t *p) { return bn_ldg_weight((const uint16_t *)p); }
__device__ __forceinline__ uint32_t bn_ld32_a2(const uint8_t *p) {
    const uint16_t *h = (const uint16_t *)p;
    return (uint32_t)bn_ldg_weight(h) | (uint32_t)bn_ldg_weight(h + 1) << 16;
}
__device__ __forceinline__ float bn_ldh(const uint8_t *p) { return bn_h2f(bn_half_bits((uint16_t)bn_ld16(p))); }

// bn_mul_rn: a*b rounded once (no FMA contraction with a following add), as the C reference does.
__device__ __forceinline__ float bn_mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

// Q4_K 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
__device__ __forceinline__ void bn_q4k_scale_min(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// ---- per-element dequantization ----------------------------------------------------------------
// bn_deq_elem: element k of a weight row (ne0 elements) in type T as fp32, bit-identical to bn_dequantize.
template <int T>
__device__ __forceinline__ float bn_deq_elem(const uint8_t *row, int64_t k, int64_t ne0) {
    if (T == BN_CU_Q1_0_P) {
        float d = bn_ldh(row + ne0 / 8 + 2 * (k / 128));
        return ((row[k >> 3] >> (k & 7)) & 1) ? d : -d;
    }
    if (T == BN_CU_Q2_0_P || T == BN_CU_PQ2_0_P) {
        int code = (row[k >> 2] >> (2 * (k & 3))) & 3;
        return (float)(code - 1) * bn_ldh(row + ne0 / 4 + 2 * (k / bn_cu_blck(T)));
    }
    if (T == BN_CU_Q8_0_P) return (float)(int8_t)row[k] * bn_ldh(row + ne0 + 2 * (k / 32));
    if (T == BN_CU_F32) return ((const float *)row)[k];
    if (T == BN_CU_F16) return bn_h2f(bn_half_bits(((const uint16_t *)row)[k]));
    if (T == BN_CU_BF16) {
        uint32_t bits = (uint32_t)((const uint16_t *)row)[k] << 16;
        float f;
        memcpy(&f, &bits, 4);
        return f;
    }
    const int blck = bn_cu_blck(T);
    const uint8_t *b = row + (k / blck) * bn_cu_block_bytes(T);
    int j = (int)(k % blck);
    if (T == BN_CU_Q1_0) {
        float d = bn_ldh(b);
        return ((b[2 + (j >> 3)] >> (j & 7)) & 1) ? d : -d;
    }
    if (T == BN_CU_Q2_0 || T == BN_CU_PQ2_0) {
        int code = (b[2 + (j >> 2)] >> (2 * (j & 3))) & 3;
        return (float)(code - 1) * bn_ldh(b);
    }
    if (T == BN_CU_Q8_0) return (float)(int8_t)b[2 + j] * bn_ldh(b);
    if (T == BN_CU_Q4_0) {
        int q = j < 16 ? (b[2 + j] & 0xF) : (b[2 + j - 16] >> 4);
        return (float)(q - 8) * bn_ldh(b);
    }
    if (T == BN_CU_Q4_1) {
        int q = j < 16 ? (b[4 + j] & 0xF) : (b[4 + j - 16] >> 4);
        return bn_mul_rn((float)q, bn_ldh(b)) + bn_ldh(b + 2);
    }
    if (T == BN_CU_Q4_K) {
        int c = j / 64, l = j % 64, sc, mn;
        bn_q4k_scale_min(b + 4, 2 * c + (l >= 32), &sc, &mn);
        int q = l < 32 ? (b[16 + 32 * c + l] & 0xF) : (b[16 + 32 * c + l - 32] >> 4);
        float d1 = bn_mul_rn(bn_ldh(b), (float)sc), m1 = bn_mul_rn(bn_ldh(b + 2), (float)mn);
        return bn_mul_rn(d1, (float)q) - m1;
    }
    // Q6_K: ql[128] qh[64] scales[16] d
    int h = j / 128, p = (j % 128) / 32, l = j % 32;
    int lo = b[64 * h + l + 32 * (p & 1)];
    lo = (p >> 1) ? lo >> 4 : lo & 0xF;
    int hi = (b[128 + 32 * h + l] >> (2 * p)) & 3;
    int sc = (int8_t)b[192 + 8 * h + l / 16 + 2 * p];
    float dsc = bn_mul_rn(bn_ldh(b + 208), (float)sc);
    return bn_mul_rn(dsc, (float)((lo | hi << 4) - 32));
}

// ---- Q8 activations (mmvq) -----------------------------------------------------------------------
// Activations of one matmul in the mmvq path, per column c (nb columns) and 32-element unit u:
//   qs: int8 q = roundf(x/d) with d = amax/127 (ggml-cuda's rule), in the element order the weight
//   type's decode produces (bn_act_order); byte p (0..31) of unit u of column c sits at
//   c*ne0 + (p / 16)*(ne0 / 2) + 16u + p % 16 (two planes of 16-byte halves, so that a warp's loads
//   of one half are contiguous);
//   ds[c*nunits + u] = {fp16-rounded d (what ggml-cuda's half2 holds), Σq}.
// (bn_q8_ds, bn_q8_act and bn_q8_out are declared in cuda/mm.cuh.)
BN_HOST_DEVICE inline int64_t bn_act_byte(int64_t ne0, int64_t u, int p) {
    return (p >> 4) * (ne0 / 2) + 16 * u + (p & 15);
}

// Element order of a unit's 32 activation bytes: byte position of element e (0..31).
//   natural (Q8_0, Q4_0, Q4_1, Q4_K, Q6_K): e;
//   slice8 (Q1_0, one 32-bit word of sign bits → (w >> i) & 0x01010101): int i = {i, 8+i, 16+i, 24+i};
//   slice4 (Q2_0/PQ2_0, 2-bit codes, 16 per word → (w >> 2s) & 0x03030303): int 4h+s = 16h+{s,4+s,8+s,12+s}.
enum { BN_ORDER_NATURAL = 0, BN_ORDER_SLICE8 = 1, BN_ORDER_SLICE4 = 2 };
BN_HOST_DEVICE inline int bn_act_order(int type) {
    type = bn_cu_base_type(type);
    return type == BN_CU_Q1_0 ? BN_ORDER_SLICE8 : (type == BN_CU_Q2_0 || type == BN_CU_PQ2_0) ? BN_ORDER_SLICE4
                                                                                     : BN_ORDER_NATURAL;
}
BN_HOST_DEVICE inline int bn_act_pos(int order, int e) {
    if (order == BN_ORDER_SLICE8) return 4 * (e & 7) + (e >> 3);
    if (order == BN_ORDER_SLICE4) return 16 * (e >> 4) + 4 * (e & 3) + ((e & 15) >> 2);
    return e;
}

// bn_q8_store: the Q8 quantization of one 32-element unit (ggml-cuda's rule: d = amax/127, q = roundf(x/d),
// Σq; d kept fp16-rounded) by a whole warp whose lane l holds element e = 32k + l of the {q.ne0, nb}
// activations (every lane calls, 32 consecutive elements of one unit): writes q and, lane 0, the unit's
// {d, Σq} into q. The one implementation behind quantize_act and the producers that write Q8 activations
// (cuda/ops.cu), so both give the same bytes.
__device__ __forceinline__ void bn_q8_store(float v, int64_t e, const bn_q8_out &q) {
    const int lane = threadIdx.x % 32;
    const int64_t c = e / q.ne0, u = e % q.ne0 / 32;
    float amax = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = amax / 127.0f;
    const int qv = amax == 0.0f ? 0 : (int)roundf(v / d);
    int sum = qv;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    q.qs[c * q.ne0 + bn_act_byte(q.ne0, u, bn_act_pos(q.order, lane))] = (int8_t)qv;
    if (lane == 0) q.ds[c * (q.ne0 / 32) + u] = bn_q8_ds{bn_h2f(bn_f2h(d)), sum}; // the scale ggml-cuda's half holds
}

// ---- per-unit weight decode + integer dot (mmvq) -----------------------------------------------
// Exact int → float in two full-rate operations (an integer add, usually folded into a dp4a chain's
// initial value, and a float subtract) where a plain conversion runs at a quarter of that rate on
// sm_80/sm_90 and would be paid per (row, column, 32-element unit) in the mmvq kernels: v + BN_I2F_BIAS read
// as a float is 1.5·2^23 + v exactly for |v| < 2^22. bn_unbias_f: the float of v from v + BN_I2F_BIAS.
#define BN_I2F_BIAS 0x4B400000
__device__ __forceinline__ float bn_unbias_f(int biased) { return __int_as_float(biased) - 12582912.0f; }
// bn_dot8: Σ over 32 int8 pairs packed in 8 ints (exact).
__device__ __forceinline__ int bn_dot8(const int *q, const int *a) {
    int s = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) s = __dp4a(q[i], a[i], s);
    return s;
}
// bn_nibbles32: the 32 4-bit codes of 16 bytes (low nibbles = elements 0..15, high = 16..31) as 8 ints.
__device__ __forceinline__ void bn_nibbles32(const uint8_t *qs, int *q) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        uint32_t w = bn_ld32_a2(qs + 4 * i);
        q[i] = (int)(w & 0x0F0F0F0Fu);
        q[4 + i] = (int)((w >> 4) & 0x0F0F0F0Fu);
    }
}

// bn_wunit<T>: one 32-element unit of a weight row decoded once (q: 8 ints of 4 signed bytes in the
// type's activation order) plus its scales; dot() returns its fp32 contribution against one column's
// unit (a: 8 ints, sumq = Σq, dx = activation scale). Integer sums are exact; scales in fp32.
template <int T> struct bn_wunit;

// Q1_0: one 32-bit word of sign bits per unit, bit i of byte b = element 8b + i (the slice8 activation order).
// Decoded with one shift per two ints: q[k] = (w >> k) & 0x01010101 (bit k of each byte as 0/1) and
// q[4 + k] = (w >> k) & 0x10101010 (bit k + 4 as 0/16), so dot() sums Σ_{bit=1} q as lo + (hi >> 4), exact
// (hi is 16 times an integer): 3 shifts + 8 ANDs per unit instead of 7 + 8.
template <> struct bn_wunit<BN_CU_Q1_0> {
    int q[8];
    float d;
    __device__ __forceinline__ void decode(uint32_t w) {
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint32_t t = w >> k;
            q[k] = (int)(t & 0x01010101u), q[4 + k] = (int)(t & 0x10101010u);
        }
    }
    __device__ __forceinline__ void load(const uint8_t *row, int u, int64_t ne0) {
        const uint8_t *b = row + (u >> 2) * 18;
        d = bn_ldh(b);
        decode(bn_ld32_a2(b + 2 + 4 * (u & 3)));
    }
    // Σ ±q = 2·Σ_{bit=1} q − Σq (|·| <= 32·127): lo starts at BN_I2F_BIAS / 2, hi at −8·Σq (shared by the rows
    // of one column), so 2·lo + (hi >> 3) = BN_I2F_BIAS + 2·Σ_{bit=1} q − Σq without further adds.
    __device__ __forceinline__ float dot(const int *a, int sumq, float dx) const {
        int lo = BN_I2F_BIAS / 2, hi = -8 * sumq;
#pragma unroll
        for (int k = 0; k < 4; k++) lo = __dp4a(q[k], a[k], lo), hi = __dp4a(q[4 + k], a[4 + k], hi);
        return (d * dx) * bn_unbias_f(2 * lo + (hi >> 3));
    }
};

// Q2_0 (g64) and PQ2_0 (g128): codes 0..3 mean code − 1; a unit is two words of 16 codes, code s of byte b of
// word h = element 16h + 4b + s (the slice4 order). Decoded like Q1_0: q[4h + s] = (w >> 2s) & 0x03030303 and
// q[4h + 2 + s] = (w >> 2s) & 0x30303030 (codes s + 2 as 16·code) for s = 0, 1; dot() sums lo + (hi >> 4).
template <int BLCK, int BYTES> struct bn_wunit_q2 {
    int q[8];
    float d;
    __device__ __forceinline__ void decode(uint32_t w0, uint32_t w1) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint32_t w = h ? w1 : w0;
#pragma unroll
            for (int s = 0; s < 2; s++) {
                const uint32_t t = w >> (2 * s);
                q[4 * h + s] = (int)(t & 0x03030303u), q[4 * h + 2 + s] = (int)(t & 0x30303030u);
            }
        }
    }
    __device__ __forceinline__ void load(const uint8_t *row, int u, int64_t ne0) {
        const int per = BLCK / 32;
        const uint8_t *b = row + (u / per) * BYTES;
        d = bn_ldh(b);
        const uint8_t *qs = b + 2 + 8 * (u % per);
        decode(bn_ld32_a2(qs), bn_ld32_a2(qs + 4));
    }
    // Σ (code − 1)·q = Σ code·q − Σq (|·| <= 32·2·127): lo starts at BN_I2F_BIAS − Σq (shared by the rows of one
    // column), so lo + (hi >> 4) is the biased sum.
    __device__ __forceinline__ float dot(const int *a, int sumq, float dx) const {
        int lo = BN_I2F_BIAS - sumq, hi = 0;
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int s = 0; s < 2; s++)
                lo = __dp4a(q[4 * h + s], a[4 * h + s], lo), hi = __dp4a(q[4 * h + 2 + s], a[4 * h + 2 + s], hi);
        return (d * dx) * bn_unbias_f(lo + (hi >> 4));
    }
};
template <> struct bn_wunit<BN_CU_Q2_0> : bn_wunit_q2<64, 18> {};
template <> struct bn_wunit<BN_CU_PQ2_0> : bn_wunit_q2<128, 34> {};

template <> struct bn_wunit<BN_CU_Q8_0> {
    int q[8];
    float d;
    __device__ __forceinline__ void load(const uint8_t *row, int u, int64_t ne0) {
        const uint8_t *b = row + u * 34;
        d = bn_ldh(b);
#pragma unroll
        for (int i = 0; i < 8; i++) q[i] = (int)bn_ld32_a2(b + 2 + 4 * i);
    }
    __device__ __forceinline__ float dot(const int *a, int sumq, float dx) const {
        int s = bn_dot8(q, a);
        return (d * dx) * (float)s;
    }
};

template <> struct bn_wunit<BN_CU_Q4_0> {
    int q[8];
    float d;
    __device__ __forceinline__ void load(const uint8_t *row, int u, int64_t ne0) {
        const uint8_t *b = row + u * 18;
        d = bn_ldh(b);
        bn_nibbles32(b + 2, q);
    }
    __device__ __forceinline__ float dot(const int *a, int sumq, float dx) const {
        int s = bn_dot8(q, a);
        return (d * dx) * (float)(s - 8 * sumq);
    }
};

template <> struct bn_wunit<BN_CU_Q4_1> {
    int q[8];
    float d, m;
    __device__ __forceinline__ void load(const uint8_t *row, int u, int64_t ne0) {
        const uint8_t *b = row + u * 20;
        d = bn_ldh(b);
        m = bn_ldh(b + 2);
        bn_nibbles32(b + 4, q);
    }
    __device__ __forceinline__ float dot(const int *a, int sumq, float dx) const {
        int s = bn_dot8(q, a);
        return (d * dx) * (float)s + (m * dx) * (float)sumq;
    }
};

// Q4_K: unit u is sub-block u % 8 of super-block u / 8 (32 elements, one 6-bit scale and min).
template <> struct bn_wunit<BN_CU_Q4_K> {
    int q[8];
    float d, m;
    __device__ __forceinline__ void load(const uint8_t *row, int u, int64_t ne0) {
        const uint8_t *b = row + (u >> 3) * 144;
        int j = u & 7, sc, mn;
        bn_q4k_scale_min(b + 4, j, &sc, &mn);
        d = bn_ldh(b) * (float)sc;
        m = bn_ldh(b + 2) * (float)mn;
        const uint8_t *qs = b + 16 + 32 * (j >> 1);
        int shift = 4 * (j & 1);
#pragma unroll
        for (int i = 0; i < 8; i++) q[i] = (int)((bn_ld32_a2(qs + 4 * i) >> shift) & 0x0F0F0F0Fu);
    }
    __device__ __forceinline__ float dot(const int *a, int sumq, float dx) const {
        int s = bn_dot8(q, a);
        return (d * dx) * (float)s - (m * dx) * (float)sumq;
    }
};

// Q6_K: unit u is part p = u % 4 of half h = (u / 4) % 2 of super-block u / 8; two int8 scales (16 each).
template <> struct bn_wunit<BN_CU_Q6_K> {
    int q[8];
    int sc0, sc1;
    float d;
    __device__ __forceinline__ void load(const uint8_t *row, int u, int64_t ne0) {
        const uint8_t *b = row + (u >> 3) * 210;
        int h = (u >> 2) & 1, p = u & 3;
        const uint8_t *ql = b + 64 * h + 32 * (p & 1), *qh = b + 128 + 32 * h;
        int lshift = 4 * (p >> 1), hshift = 2 * p;
        sc0 = (int8_t)b[192 + 8 * h + 2 * p];
        sc1 = (int8_t)b[192 + 8 * h + 2 * p + 1];
        d = bn_ldh(b + 208);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            uint32_t lo = (bn_ld32_a2(ql + 4 * i) >> lshift) & 0x0F0F0F0Fu;
            uint32_t hi = ((bn_ld32_a2(qh + 4 * i) >> hshift) & 0x03030303u) << 4;
            uint32_t t = (lo | hi) ^ 0x20202020u;         // 6-bit two's complement of code − 32
            q[i] = (int)(t | ((t & 0x20202020u) * 6u)); // sign-extend each byte (0x20·6 = 0xC0)
        }
    }
    __device__ __forceinline__ float dot(const int *a, int sumq, float dx) const {
        int s0 = 0, s1 = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            s0 = __dp4a(q[i], a[i], s0);
            s1 = __dp4a(q[4 + i], a[4 + i], s1);
        }
        return (d * dx) * (float)(sc0 * s0 + sc1 * s1);
    }
};

// Planar layouts (bn_cu_weight_repack): aligned 4/8/16-byte payload loads, scales from the row's tail.
template <> struct bn_wunit<BN_CU_Q1_0_P> : bn_wunit<BN_CU_Q1_0> {
    __device__ __forceinline__ void load(const uint8_t *row, int u, int64_t ne0) {
        d = bn_ldh(row + ne0 / 8 + 2 * (u >> 2));
        decode(bn_ldg_weight((const uint32_t *)row + u));
    }
};
template <int BLCK, int BYTES> struct bn_wunit_q2p : bn_wunit_q2<BLCK, BYTES> {
    __device__ __forceinline__ void load(const uint8_t *row, int u, int64_t ne0) {
        this->d = bn_ldh(row + ne0 / 4 + 2 * (u / (BLCK / 32)));
        uint2 c = bn_ldg_weight((const uint2 *)row + u);
        this->decode(c.x, c.y);
    }
};
template <> struct bn_wunit<BN_CU_Q2_0_P> : bn_wunit_q2p<64, 18> {};
template <> struct bn_wunit<BN_CU_PQ2_0_P> : bn_wunit_q2p<128, 34> {};
template <> struct bn_wunit<BN_CU_Q8_0_P> : bn_wunit<BN_CU_Q8_0> {
    __device__ __forceinline__ void load(const uint8_t *row, int u, int64_t ne0) {
        d = bn_ldh(row + ne0 + 2 * u);
        int4 lo = bn_ldg_weight((const int4 *)row + 2 * u), hi = bn_ldg_weight((const int4 *)row + 2 * u + 1);
        q[0] = lo.x, q[1] = lo.y, q[2] = lo.z, q[3] = lo.w;
        q[4] = hi.x, q[5] = hi.y, q[6] = hi.z, q[7] = hi.w;
    }
};

// ---- the weights of one mmvq / MMA launch ----------------------------------------------------------------
// bn_mmvq_targets: the weights of one mmvq (or mmq_tc) launch (same type and ne0): block b works on weight i with
// first_block[i] <= b < first_block[i + 1], rows (b − first_block[i])·R ...
struct bn_mmvq_targets {
    const uint8_t *w[BN_CU_MATMUL_MULTI_MAX];
    float *y[BN_CU_MATMUL_MULTI_MAX];
    int64_t ne1[BN_CU_MATMUL_MULTI_MAX];
    size_t row_bytes[BN_CU_MATMUL_MULTI_MAX];
    unsigned first_block[BN_CU_MATMUL_MULTI_MAX + 1];
    int n;
};

// bn_mmvq_job: what one block works on.
struct bn_mmvq_job {
    const uint8_t *w; // the weight's rows
    float *y;         // its output {ne1, nb}
    int64_t ne1, row0;
    size_t row_bytes;
};

// bn_mmvq_target: this block's job (constant indices only, so the parameter arrays stay out of local memory).
template <int R> __device__ __forceinline__ bn_mmvq_job bn_mmvq_target(const bn_mmvq_targets &t) {
    unsigned b = blockIdx.x, first = t.first_block[0];
    bn_mmvq_job j = {t.w[0], t.y[0], t.ne1[0], 0, t.row_bytes[0]};
#pragma unroll
    for (int i = 1; i < BN_CU_MATMUL_MULTI_MAX; i++)
        if (i < t.n && b >= t.first_block[i])
            j = {t.w[i], t.y[i], t.ne1[i], 0, t.row_bytes[i]}, first = t.first_block[i];
    j.row0 = (int64_t)(b - first) * R;
    return j;
}

// bn_mmvq_make_targets: the launch description of n weights (one type and ne0) at R rows per block.
static inline bn_mmvq_targets bn_mmvq_make_targets(const bn_cu_weight *const *w, float *const *y, int n, int R) {
    bn_mmvq_targets t = {};
    t.n = n;
    for (int i = 0; i < n; i++) {
        t.w[i] = (const uint8_t *)w[i]->data, t.y[i] = y[i], t.ne1[i] = w[i]->ne1, t.row_bytes[i] = w[i]->row_bytes;
        t.first_block[i + 1] = t.first_block[i] + (unsigned)((w[i]->ne1 + R - 1) / R);
    }
    return t;
}

// ---- host-side RAII helpers (so BN_CUDA_TRY can return early without leaks) ----------------------
// dev_bufs: up to 16 device allocations of one call, freed when it returns.
struct dev_bufs {
    void *p[16] = {};
    int n = 0;
    cudaError_t alloc(void **out, size_t bytes) {
        if (n == 16) return cudaErrorMemoryAllocation;
        cudaError_t e = cudaMalloc(out, bytes ? bytes : 1);
        if (e == cudaSuccess) p[n++] = *out;
        return e;
    }
    ~dev_bufs() {
        for (int i = 0; i < n; i++) cudaFree(p[i]);
    }
};

// blas_handle: a cuBLAS handle destroyed on return.
struct blas_handle {
    cublasHandle_t h = nullptr;
    ~blas_handle() {
        if (h) cublasDestroy(h);
    }
};

// events: two timing events destroyed on return.
struct events {
    cudaEvent_t t0 = nullptr, t1 = nullptr;
    ~events() {
        if (t0) cudaEventDestroy(t0);
        if (t1) cudaEventDestroy(t1);
    }
};

// ---- internal launchers (enqueued on s; return the launch error) ----------------------------
// bn_cu_quantize_act: Q8 activations of x {ne0, nb} for weight type `type` (buffers of nb*ne0 bytes
// and nb*ne0/32 bn_q8_ds).
cudaError_t bn_cu_quantize_act(int type, const float *x, int64_t ne0, int nb, int8_t *qs, bn_q8_ds *ds,
                               cudaStream_t s);
// bn_cu_mmvq: y[i] {ne1_i, nb} = W[i] · x for i < n (n <= BN_CU_MATMUL_MULTI_MAX weights of one type and
// ne0) in one launch, nb <= BN_CU_MMVQ_KERNEL_MAX_NB; act from bn_cu_quantize_act (quantized types) or x itself
// (F32/F16/BF16).
cudaError_t bn_cu_mmvq(const bn_cu_weight *const *w, float *const *y, int n, const bn_q8_act *act, const float *x,
                       int nb, cudaStream_t s);
// bn_cu_mmq_tc_supports: true when the mmvq path sends this weight type at nb to bn_cu_mmq_tc (low-bit types,
// BN_CU_MMA on, BN_CU_MMA_MIN_NB <= nb <= BN_CU_MMVQ_KERNEL_MAX_NB, and the tensor cores enabled).
bool bn_cu_mmq_tc_supports(int type, int nb);
// bn_cu_mmq_tc_enable: routes the mmvq path's tensor-core cases to the tensor cores (true, the default) or to the
// dp4a kernels (false); set once by cuda/mma_check.cu before any graph capture. bn_cu_mmq_tc_enabled: the setting
// (false in builds with BN_CU_MMA=0).
void bn_cu_mmq_tc_enable(bool on);
bool bn_cu_mmq_tc_enabled(void);
// bn_cu_mmq_tc: bn_cu_mmvq on int8 tensor cores for the types and nb bn_cu_mmq_tc_supports names, whether or not
// enabled (the self-check runs it); cudaErrorInvalidValue for others.
cudaError_t bn_cu_mmq_tc(const bn_cu_weight *const *w, float *const *y, int n, const bn_q8_act *act, int nb,
                         cudaStream_t s);
// bn_cu_mmq_tc_chunks: bn_cu_mmq_tc for any nb >= 1 (prefill: nb beyond BN_CU_MMVQ_KERNEL_MAX_NB) as balanced column
// chunks of at most 32, one launch each (the weights stream again per chunk, from L2 where they fit); the act of
// all nb columns. cudaErrorInvalidValue for types bn_cu_mmq_tc does not take.
cudaError_t bn_cu_mmq_tc_chunks(const bn_cu_weight *const *w, float *const *y, int n, const bn_q8_act *act, int nb,
                                cudaStream_t s);
// bn_cu_mmq_prefill_enable: products of more than BN_CU_MMVQ_MAX_NB columns of low-bit weights on the int8 tensor
// cores (bn_cu_mmq_tc_chunks) instead of fp16 dequantization + cuBLAS (opt-in: env BONSAI_CUDA_MMQ_PREFILL=1 sets
// the default at the first query; bn_cu_mmq_prefill_enabled: the switch). bn_cu_mmq_prefill: whether a product of
// these n weights at nb takes that path (also needs the tensor cores enabled).
void bn_cu_mmq_prefill_enable(bool on);
bool bn_cu_mmq_prefill_enabled(void);
bool bn_cu_mmq_prefill(const bn_cu_weight *const *w, int n, int nb);
// bn_cu_dequant_f16: rows [r0, r0 + nr) of W dequantized to fp16 into out {ne0, nr}.
cudaError_t bn_cu_dequant_f16(const bn_cu_weight *w, int64_t r0, int64_t nr, bn_half *out, cudaStream_t s);
// bn_cu_dequant_f32: rows [r0, r0 + nr) of W dequantized to fp32 into out {ne0, nr}, bit-identical to bn_dequantize.
cudaError_t bn_cu_dequant_f32(const bn_cu_weight *w, int64_t r0, int64_t nr, float *out, cudaStream_t s);
// bn_cu_dequant_bf16: rows [r0, r0 + nr) of W as bf16 bits into out {ne0, nr}: bn_cu_dequant_f32's values rounded to
// nearest even (bn_f2bf).
cudaError_t bn_cu_dequant_bf16(const bn_cu_weight *w, int64_t r0, int64_t nr, uint16_t *out, cudaStream_t s);

#endif
