// core/matmul.h — y = W·x for a weight in its stored type, over one or many activation vectors.
// Quantized weights: the activation is quantized once to the weight's vec_dot_type, then rows are dotted in parallel
// (int8 dots; n > 1: row blocks × all activations, each weight block read once per activation block from cache).
// F32/F16/BF16 weights: the f32 activation as is, row kernels for n <= 8 (each row's result the n = 1 bits) and a
// tiled gemm beyond (OpenBLAS sgemm on CPUs without AVX-512).
#ifndef BONSAI_MATMUL_H
#define BONSAI_MATMUL_H
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include "core/model.h"
#include "base/threads.h"

// bn_matmul_work_size: bytes of scratch bn_matmul needs for weight w and n activation vectors.
size_t bn_matmul_work_size(const bn_weight *w, int n);
// bn_matmul: y[t][j] = Σ_i W[j][i] · x[t][i] for t < n, j < w->ne[1], i < w->ne[0].
//   x: [n][ne0] floats, y: [n][ne1] floats (must not alias x); work: bn_matmul_work_size bytes,
//   64-byte aligned. pool may be NULL (single thread).
void bn_matmul(const bn_weight *w, const float *x, float *y, int n, void *work, bn_pool *pool);
// bn_matmul_set_f32_activations: on: quantized weights multiply the f32 activations as they are (weight panels
// dequantized to f32, then sgemm) instead of the activations rounded to the weight's vec_dot_type (llama.cpp's rule,
// the default). A slower reference path: with it a quantized base + adapter gives the log-probs of the adapter merged
// into the base's F16 unpack. Process-wide; set it before any work buffer is sized (bn_matmul_work_size).
void bn_matmul_set_f32_activations(bool on);
// bn_weight_row_f32: dequantizes row j of w (ne0 floats) into dst (embedding lookup); returns 0/-1.
int bn_weight_row_f32(const bn_weight *w, int64_t j, float *dst);

#endif
