// tests/quantize/tiny256.h — the tests' tiny qwen35 whose quantized rows are all multiples of 256 (so
// the K-quants, Q6_K and TQ apply without shape fallback), and a scratch directory for their files.
#ifndef BONSAI_TESTS_QUANTIZE_TINY256_H
#define BONSAI_TESTS_QUANTIZE_TINY256_H
#include "synth/mkmodel.h"
#include "quant/quant.h"
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

// tiny256_params: the "tiny" preset with n_embd 256, n_ff 512, head_dim 64, F16 weights.
static inline void tiny256_params(bn_mkmodel_params *mp) {
    bn_mkmodel_defaults(mp, "tiny");
    mp->n_embd = 256;
    mp->n_ff = 512;
    mp->head_dim = 64;
    mp->n_rot = 16;
    mp->ssm_d_state = 64;
    mp->type = BN_F16;
}

// scratch_dir: creates /tmp/<prefix>.<pid> into dir; returns 0 or -1.
static inline int scratch_dir(char *dir, size_t n, const char *prefix) {
    snprintf(dir, n, "/tmp/%s.%d", prefix, (int)getpid());
    char cmd[400];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}
#endif
