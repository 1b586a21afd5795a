// cuda/topk.cuh — row-wise device argmax (cuda/topk.cu); bn_cu_argmax and bn_cu_topk are declared in
// cuda/mm.cuh.
#ifndef BONSAI_CUDA_TOPK_CUH
#define BONSAI_CUDA_TOPK_CUH
#include "cuda/common.cuh"
#include <stdint.h>

// bn_cu_argmax_rows: out[r] (device int32) = bn_cu_argmax of row r of x (rows contiguous rows of n
// floats; first index on ties, NaN never wins, −1 for an all-NaN row), one block per row; returns the
// launch status.
cudaError_t bn_cu_argmax_rows(const float *x, int n, int rows, int32_t *out, cudaStream_t s);

#endif
