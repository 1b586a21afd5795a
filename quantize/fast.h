// quantize/fast.h — fused fp16/fp32 → Q1_0 / Q2_0 (g64) / PQ2_0 (g128) quantizers for the
// requantize driver, bit-identical to dequantize + the reference quantizer (docs/formats.md §3.4).
// AVX2 (+F16C) chosen at run time; blocks with NaN/Inf take the reference path.
#ifndef BONSAI_QUANTIZE_FAST_H
#define BONSAI_QUANTIZE_FAST_H
#include <stdbool.h>
#include <stdint.h>

// bn_quantize_fast: converts n elements (n a multiple of the dst block size) src_type → dst_type
// if a fused kernel exists for the pair and the CPU supports it; returns true if it did the work,
// false if the caller must use the generic path. BONSAI_SIMD=scalar disables it.
bool bn_quantize_fast(int src_type, const void *src, int dst_type, void *dst, int64_t n);

#endif
