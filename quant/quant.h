// quant/quant.h — ggml tensor types: ids, block layouts, reference quantize/dequantize and
// dot products. Bit-exact with llama.cpp's reference quantizers (FORMATS.md §3).
//
// Type ids are ggml's, with one exception that resolves the id-42 trap (FORMATS.md §3.9):
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
    BN_Q8_0 = 8,
    BN_Q8_1 = 9,   // activations only
    BN_Q4_K = 12,
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

// Per-type traits. Functions are NULL where a type does not support the operation.
typedef struct {
    const char *name;     // ggml name, lower case ("q1_0", "q6_K"); "q2_0_g128" for BN_PQ2_0
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

// ---- fp16 / bf16 (FORMATS.md §3.1–3.2), bit-exact ------------------------------------------
uint16_t bn_fp32_to_fp16(float f);
float bn_fp16_to_fp32(uint16_t h);
uint16_t bn_fp32_to_bf16(float f);
float bn_bf16_to_fp32(uint16_t h);

// ---- activation quantization for dot products -----------------------------------------------
// bn_quantize_row_q8_0 / q8_1 / q8_K: quantize activations (same rounding as ggml's CPU path:
// d = amax/127, roundf(x*id)); SIMD where available, bit-identical to the reference.
void bn_quantize_row_q8_0(const float *x, void *y, int64_t n);
void bn_quantize_row_q8_1(const float *x, void *y, int64_t n);
void bn_quantize_row_q8_K(const float *x, void *y, int64_t n);

// bn_dequantize: dequantize n elements of type into dst (F32/F16/BF16 included); returns 0 or -1.
int bn_dequantize(int type, const void *src, float *dst, int64_t n);
// bn_quantize_ref: quantize n floats (n % blck == 0) with the reference quantizer; returns bytes
// written or 0 if the type has no quantizer (F32/F16/BF16 are plain conversions).
size_t bn_quantize_ref(int type, const float *src, void *dst, int64_t n);

#endif
