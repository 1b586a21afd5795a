// quant/quant.h — ggml tensor types: ids, block layouts, reference quantize/dequantize and
// dot products. Bit-exact with llama.cpp's reference quantizers (docs/formats.md §3).
//
// Type ids are ggml's, with one exception that resolves the id-42 trap (docs/formats.md §3.9):
//   BN_Q2_0   (42)  = mainline Q2_0, group 64, 18 B/block
//   BN_PQ2_0  (142) = legacy fork Q2_0 / PQ2_0, group 128, 34 B/block
// A GGUF tensor stored with id 42 is resolved to one of the two by its byte span when read;
// the writer stores whichever id the caller asks for (42 for legacy g128 files, 142 for v7+).
#ifndef BONSAI_QUANT_H
#define BONSAI_QUANT_H
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>

enum bn_type {
    BN_F32 = 0,
    BN_F16 = 1,
    BN_Q4_0 = 2,
    BN_Q4_1 = 3,
    BN_Q5_0 = 6,
    BN_Q5_1 = 7,
    BN_Q8_0 = 8,
    BN_Q8_1 = 9,   // activations only
    BN_Q4_K = 12,
    BN_Q5_K = 13,
    BN_Q6_K = 14,
    BN_Q8_K = 15,  // activations only
    BN_I32 = 26,
    BN_BF16 = 30,
    BN_TQ1_0 = 34,
    BN_TQ2_0 = 35,
    BN_Q1_0 = 41,
    BN_Q2_0 = 42,   // g64 (mainline)
    BN_PQ2_0 = 142, // g128 (legacy fork Q2_0 = PQ2_0)
    BN_PTQ1_0 = 143,
    BN_TYPE_MAX = 144,
};

// ---- block layouts (docs/formats.md §3.4); bn_half = fp16 bits --------------------------------------
typedef uint16_t bn_half;
#define BN_QK_K 256
typedef struct { bn_half d; uint8_t qs[16]; } bn_block_q1_0;                      // 128 elems, 1 bit LSB-first
typedef struct { bn_half d; uint8_t qs[16]; } bn_block_q2_0;                      // 64 elems, 2-bit codes (g64)
typedef struct { bn_half d; uint8_t qs[32]; } bn_block_pq2_0;                     // 128 elems, 2-bit codes (g128)
typedef struct { uint8_t qs[24]; uint8_t qh[2]; bn_half d; } bn_block_ptq1_0;     // 128 elems, base-3
typedef struct { bn_half d; uint8_t qs[16]; } bn_block_q4_0;                      // 32 elems
typedef struct { bn_half d, m; uint8_t qs[16]; } bn_block_q4_1;                   // 32 elems
typedef struct { bn_half d; uint8_t qh[4]; uint8_t qs[16]; } bn_block_q5_0;        // 32 elems, 5th bits in qh
typedef struct { bn_half d, m; uint8_t qh[4]; uint8_t qs[16]; } bn_block_q5_1;     // 32 elems
typedef struct { bn_half d; int8_t qs[32]; } bn_block_q8_0;                       // 32 elems
typedef struct { bn_half d, s; int8_t qs[32]; } bn_block_q8_1;                    // 32 elems, s = d*sum(qs)
typedef struct { bn_half d, dmin; uint8_t scales[12]; uint8_t qs[128]; } bn_block_q4_K;   // 256 elems
typedef struct { bn_half d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; } bn_block_q5_K; // 256 elems
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; bn_half d; } bn_block_q6_K; // 256
typedef struct { float d; int8_t qs[256]; int16_t bsums[16]; } bn_block_q8_K;     // 256 elems, fp32 d
typedef struct { uint8_t qs[48]; uint8_t qh[4]; bn_half d; } bn_block_tq1_0;      // 256 elems, base-3
typedef struct { uint8_t qs[64]; bn_half d; } bn_block_tq2_0;                     // 256 elems, 2-bit codes

// Per-type traits. Functions are NULL where a type does not support the operation.
typedef struct {
    const char *name;     // ggml name, lower case ("q1_0", "q6_K"); "pq2_0" for BN_PQ2_0 (also parsed: "q2_0_g128")
    int blck;             // elements per block (0 = unknown/removed id)
    int type_size;        // bytes per block
    bool is_quantized;
    // to_float: dequantize n elements (n % blck == 0).
    void (*to_float)(const void *src, float *dst, int64_t n);
    // from_float_ref: reference quantizer, bit-exact with ggml's quantize_row_*_ref.
    void (*from_float_ref)(const float *src, void *dst, int64_t n);
    // vec_dot_type: the activation type this weight is dotted with (BN_Q8_0, BN_Q8_1, BN_Q8_K, BN_F32...).
    int vec_dot_type;
    // vec_dot: *s = dot(x (this type), y (vec_dot_type)) over n elements; best available SIMD.
    void (*vec_dot)(int n, float *s, const void *x, const void *y);
} bn_type_traits;

// bn_type_traits_of: traits for a type id; NULL if the id is unknown or unsupported.
const bn_type_traits *bn_type_traits_of(int type);
// bn_type_name: ggml name of a type, or "?" if unknown.
const char *bn_type_name(int type);
// bn_type_from_name: parses a type name (case-insensitive: "q1_0", "Q2_0", "pq2_0", "q2_0_g128",
// "f16", "bf16", "q6_k"...); returns the id or -1.
int bn_type_from_name(const char *name);
// bn_row_size: bytes of ne0 elements of a type (ne0 must be a multiple of the block size).
size_t bn_row_size(int type, int64_t ne0);
// bn_type_blck / bn_type_size: block elements / bytes (0 if unknown).
int bn_type_blck(int type);
int bn_type_size(int type);

// bn_cpu_has_avx2: true when this CPU has AVX2 + FMA + F16C and BONSAI_SIMD does not force the
// scalar code (decided once at start-up; the one CPU-feature check every SIMD path uses).
bool bn_cpu_has_avx2(void);
// bn_cpu_has_avx512: true when the float-weight kernels use AVX-512 (AVX512F/BW/VL/DQ, BONSAI_SIMD unset).
bool bn_cpu_has_avx512(void);

// ---- fp16 / bf16 (docs/formats.md §3.1–3.2), bit-exact ------------------------------------------
// bn_fp32_to_fp16: fp16 bits of f, round to nearest even (|f| >= 65520 -> inf, NaN -> 0x7E00 | sign).
uint16_t bn_fp32_to_fp16(float f);
// bn_fp16_to_fp32: the exact fp32 value of fp16 bits h (NaN made quiet, as ggml and F16C do).
float bn_fp16_to_fp32(uint16_t h);
// bn_fp32_to_bf16: bf16 bits of f, round to nearest even, NaN forced quiet, no subnormal flush.
uint16_t bn_fp32_to_bf16(float f);
// bn_bf16_to_fp32: bits << 16.
float bn_bf16_to_fp32(uint16_t h);

// ---- activation quantization for dot products -----------------------------------------------
// bn_quantize_row_q8_0 / q8_1 / q8_K: quantize n activations (n % 32 or % 256 == 0) into y; the bytes
// equal ggml's quantize_row_*_ref (Q8_0/Q8_1: d = amax/127, q = roundf(x * (1/d)); Q8_K: iscale =
// -127/max, nearest-even, d = 1/iscale). SIMD where available, bit-identical to the reference. Note:
// ggml's own CPU SIMD Q8_0 path rounds ties to even with 127/amax, so its bytes can differ in ties.
void bn_quantize_row_q8_0(const float *x, void *y, int64_t n);
void bn_quantize_row_q8_1(const float *x, void *y, int64_t n);
void bn_quantize_row_q8_K(const float *x, void *y, int64_t n);

// bn_quantize_activations: quantize n activations into vec_dot_type (BN_Q8_0/Q8_1/Q8_K via the functions
// above, BN_F16/BN_BF16 converted, BN_F32 copied); returns bytes written or 0 for an unsupported type.
size_t bn_quantize_activations(int vec_dot_type, const float *x, void *y, int64_t n);

// bn_quantize_act_q8_0 / q8_1 / q8_K: quantize n activations as llama.cpp's CPU backend does (ggml-cpu
// quantize_row_q8_*: d = amax/127, q = nearest-even(x * (127/amax)); Q8_1 s = fp16(d * sum(q)); Q8_K is
// the reference there). Scalar and AVX2 bit-identical. The engine (core/matmul.c) uses these.
void bn_quantize_act_q8_0(const float *x, void *y, int64_t n);
void bn_quantize_act_q8_1(const float *x, void *y, int64_t n);
void bn_quantize_act_q8_K(const float *x, void *y, int64_t n);
// bn_quantize_activations_cpu: as bn_quantize_activations but with the ggml-CPU quantizers above for
// BN_Q8_0/Q8_1/Q8_K; returns bytes written or 0 for an unsupported type.
size_t bn_quantize_activations_cpu(int vec_dot_type, const float *x, void *y, int64_t n);

// ---- row conversions (F16C where available; bit-identical to the scalar functions) -----------
// bn_{fp16,bf16}_to_fp32_row / bn_fp32_to_{fp16,bf16}_row: n conversions as the scalar functions above.
void bn_fp16_to_fp32_row(const uint16_t *x, float *y, int64_t n);
void bn_fp32_to_fp16_row(const float *x, uint16_t *y, int64_t n);
void bn_bf16_to_fp32_row(const uint16_t *x, float *y, int64_t n);
void bn_fp32_to_bf16_row(const float *x, uint16_t *y, int64_t n);

// ---- dot products ---------------------------------------------------------------------------
// A vec_dot computes *s = dot(x, y) over n elements, x of the weight type, y of its vec_dot_type
// (n a multiple of the weight block size). Pairings (docs/formats.md §2.3): Q1_0/Q2_0/PQ2_0/PTQ1_0/Q4_0/
// Q8_0 · Q8_0, Q4_1 · Q8_1, Q4_K/Q6_K/TQ1_0/TQ2_0 · Q8_K, F32 · F32, F16 · F16 and BF16 · BF16 (both
// converted to fp32, fp32 accumulation). Integer-exact within a block; block sums in fp32.
typedef void (*bn_vec_dot_fn)(int n, float *s, const void *x, const void *y);
// bn_vec_dot_ref: the scalar reference vec_dot of a weight type; NULL if none.
bn_vec_dot_fn bn_vec_dot_ref(int type);
// bn_vec_dot_best: the vec_dot the runtime dispatch chose (AVX2 kernel or the scalar one); NULL if none.
bn_vec_dot_fn bn_vec_dot_best(int type);
// bn_vec_dot_rows: s[r] = dot(row r of w, y) for r < nrows; rows are w_row_stride bytes apart, y is one
// row of the type's vec_dot_type. The decode hot path (mat-vec); fastest kernel available.
void bn_vec_dot_rows(int type, int n, int nrows, float *s, const void *w, size_t w_row_stride, const void *y);
// bn_vec_dot_rows_batch: mat-mat, s[t * s_stride + r] = dot(row r of w, activation row t) for r < nrows,
// t < ny; activation rows (of the type's vec_dot_type) are y_row_stride bytes apart. For Q1_0/Q2_0/PQ2_0/Q4_0
// (and Q8_0 with VNNI) from 4 activation rows on, each activation row is prepared once and each weight row is
// expanded once per 8 activation rows (prefill, DSpark's verify); below 4, and for other types, bn_vec_dot_rows per
// activation row. For those types (and every type below 4 rows) each result is bn_vec_dot_rows' bit for bit.
void bn_vec_dot_rows_batch(int type, int n, int nrows, int ny, float *s, size_t s_stride, const void *w,
                           size_t w_row_stride, const void *y, size_t y_row_stride);
// The same mat-mat with the activations prepared once for many calls (the engine's threads each take a share of the
// weight rows): bn_vec_dot_batch_prep_size: bytes of the prepared activations for ny rows of n elements, 0 when the
// type or row count has no prepared form here (then use bn_vec_dot_rows_batch); bn_vec_dot_batch_prepare: prepares
// groups [g0, g1) of 8 activation rows ((ny + 7) / 8 groups in all) into prep (32-byte aligned); and
// bn_vec_dot_rows_prepared: bn_vec_dot_rows_batch's results, bit for bit, from them.
size_t bn_vec_dot_batch_prep_size(int type, int n, int ny);
void bn_vec_dot_batch_prepare(int type, int n, int ny, int g0, int g1, const void *y, size_t y_row_stride,
                              void *prep);
void bn_vec_dot_rows_prepared(int type, int n, int nrows, int ny, float *s, size_t s_stride, const void *w,
                              size_t w_row_stride, const void *prep);
// bn_simd_name: "avx2+vnni+avx512", "avx2+vnni", "avx2+avx512", "avx2" or "scalar" — what the dispatch picked
// (BONSAI_SIMD=scalar forces scalar, BONSAI_SIMD=avx2 disables the AVX512-VNNI and AVX-512 kernels).
const char *bn_simd_name(void);

// ---- F32 / F16 / BF16 weights times f32 activations (quant/float_rows.c) ---------------------------------
// bn_float_rows: s[t * s_stride + r] = dot(row r of w, row t of x) over n elements for r < nrows, t < ny; w is F32,
// F16 or BF16 (rows w_stride bytes apart), x is f32 (rows x_stride floats apart) and is not rounded to the weight's
// type. Each result depends only on its two rows (the same bits whatever nrows, ny or the split into calls): the
// decode mat-vec and a verify pass's rows agree bit for bit.
void bn_float_rows(int type, int n, int nrows, int ny, float *s, size_t s_stride, const void *w, size_t w_stride,
                   const float *x, size_t x_stride);
// bn_float_gemm: the products of bn_float_rows for a large batch (prefill), each weight block converted once and
// tiled against all activation rows; each result a sequential fp32 sum in element order (so independent of the
// split too, but not bn_float_rows' bits). Returns 1, or 0 without AVX-512 (nothing done; use sgemm).
int bn_float_gemm(int type, int n, int nrows, int ny, float *s, size_t s_stride, const void *w, size_t w_stride,
                  const float *x, size_t x_stride);

// bn_dequantize: dequantize n elements of type into dst (F32/F16/BF16 included); returns 0 or -1.
int bn_dequantize(int type, const void *src, float *dst, int64_t n);
// bn_quantize_ref: quantize n floats (n % blck == 0) with the reference quantizer; returns bytes
// written or 0 if the type has no quantizer (F32/F16/BF16 are plain conversions).
size_t bn_quantize_ref(int type, const float *src, void *dst, int64_t n);
// bn_quantize_keep_scales: quantize n floats into type's blocks whose scales d are copied from scales_from
// (n elements of the same type, e.g. the reference quantization of the weights before a LoRA merge) and
// whose codes are the reference rounding of src at that d: Q1_0 the sign bits, Q2_0 / PQ2_0
// clamp(round(x/d) + 1, 0, 2) (ternary; values beyond ±1.5·d saturate at ±d). A LoRA delta then changes
// codes, never a block's scale. dst may equal scales_from. Returns bytes written, or 0 for another type.
size_t bn_quantize_keep_scales(int type, const float *src, const void *scales_from, void *dst, int64_t n);
// bn_type_keeps_scales: true for the types bn_quantize_keep_scales handles (Q1_0, Q2_0, PQ2_0).
bool bn_type_keeps_scales(int type);

// ---- Q5_0 / Q5_1 (quant/q5_0.c, q5_1.c): the format functions the type table points at ----------
// bn_q5_{0,1}_to_float: dequantize n elements (n % 32 == 0), bit-exact with ggml's dequantize_row_q5_*.
void bn_q5_0_to_float(const void *src, float *dst, int64_t n);
void bn_q5_1_to_float(const void *src, float *dst, int64_t n);
// bn_q5_{0,1}_from_float_ref: quantize n floats, byte-identical to ggml's quantize_row_q5_*_ref.
void bn_q5_0_from_float_ref(const float *src, void *dst, int64_t n);
void bn_q5_1_from_float_ref(const float *src, void *dst, int64_t n);
// bn_dot_q5_0_ref (· Q8_0) / bn_dot_q5_1_ref (· Q8_1): scalar dots in ggml's generic summation order.
void bn_dot_q5_0_ref(int n, float *s, const void *x, const void *y);
void bn_dot_q5_1_ref(int n, float *s, const void *x, const void *y);
// Q5_K (quant/q5_k.c): dequantize / reference quantize (n % 256 == 0, bit-exact with ggml), scalar · Q8_K.
void bn_q5_K_to_float(const void *src, float *dst, int64_t n);
void bn_q5_K_from_float_ref(const float *src, void *dst, int64_t n);
void bn_dot_q5_K_ref(int n, float *s, const void *x, const void *y);

#endif
