// quant/kquant.h — internal to quant/: the scale/min search and 6-bit packing that Q4_K and Q5_K share
// (ggml's quantize_row_q{4,5}_K_ref differ only in nmax, rmin and nstep, and in how codes are stored).
#ifndef BONSAI_KQUANT_H
#define BONSAI_KQUANT_H
#include "quant/quant.h"

// bn_k_scale_min: unpacks the 6-bit scale and min of sub-block j (0..7) from a 12-byte scales field.
void bn_k_scale_min(int j, const uint8_t *scales, uint8_t *sc, uint8_t *mn);

// bn_k_quantize_block: one 256-element super-block: per 32-sub-block weighted scale/min search (codes
// 0..nmax; make_qkx2_quants with rmin, rdelta 0.1, nstep), packs scales[12], *d, *dmin, and writes the
// final codes of every element into L[256] (ggml's reference rounding).
void bn_k_quantize_block(const float *x, int nmax, float rmin, int nstep, uint8_t scales[12], bn_half *d,
                         bn_half *dmin, uint8_t L[256]);
#endif
