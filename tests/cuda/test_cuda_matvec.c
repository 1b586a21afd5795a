// tests/cuda/test_cuda_matvec.c — CUDA low-bit matvec kernels vs the CPU reference.
// Built twice: `cuda_matvec` links the GPU library (skipped with a message without a device, e.g. CI);
// `cuda_matvec_emu` links the CPU emulator (cuda/emu/) and always runs, also in shuffled order.
// Reference: weights dequantized on the CPU (exact), activations quantized to Q8_1 with the CUDA
// rule (d = amax/127, q = roundf(x/d)), dot in double. Tolerance: 1e-4 relative to sum |terms|
// (the kernel sums the same integers; only float accumulation order differs).
#include "tests/test.h"
#include "cuda/cuda_backend.h"
#include "quant/quant.h"
#include "base/util.h"
#include <string.h>
#include <stdint.h>

static uint64_t rng = 88172645463325252ull;
static float frand(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

// check_type: one random matrix of `type`, returns the max relative error seen.
static double check_type(int type, int64_t ncols, int64_t nrows) {
    float *wf = xmalloc(sizeof(float) * ncols * nrows), *x = xmalloc(sizeof(float) * ncols);
    for (int64_t i = 0; i < ncols * nrows; i++) wf[i] = frand();
    for (int64_t i = 0; i < ncols; i++) x[i] = frand() * 3.0f;
    size_t rb = bn_row_size(type, ncols);
    uint8_t *wq = xmalloc(rb * nrows);
    for (int64_t r = 0; r < nrows; r++) bn_quantize_ref(type, wf + r * ncols, wq + r * rb, ncols);
    float *wd = xmalloc(sizeof(float) * ncols * nrows), *y = xmalloc(sizeof(float) * nrows);
    for (int64_t r = 0; r < nrows; r++) bn_dequantize(type, wq + r * rb, wd + r * ncols, ncols);
    // CUDA-rule Q8_1 activations
    float *xq = xmalloc(sizeof(float) * ncols);
    for (int64_t b = 0; b < ncols / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
        float d = amax / 127.0f, dh = bn_fp16_to_fp32(bn_fp32_to_fp16(d));
        for (int j = 0; j < 32; j++) xq[32 * b + j] = amax == 0 ? 0 : roundf(x[32 * b + j] / d) * dh;
    }
    char err[256];
    int rc = bn_cuda_matvec(type, wq, ncols, nrows, x, y, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    double worst = 0;
    for (int64_t r = 0; r < nrows && rc == 0; r++) {
        double ref = 0, mag = 0;
        for (int64_t i = 0; i < ncols; i++) {
            ref += (double)wd[r * ncols + i] * xq[i];
            mag += fabs((double)wd[r * ncols + i] * xq[i]);
        }
        double rel = fabs(y[r] - ref) / (mag > 0 ? mag : 1);
        if (rel > worst) worst = rel;
    }
    CHECK(worst < 1e-4, "%s: max relative error %.3g", bn_type_name(type), worst);
    printf("%-8s %lldx%lld max rel err %.3g\n", bn_type_name(type), (long long)nrows, (long long)ncols, worst);
    free(wf); free(x); free(wq); free(wd); free(y); free(xq);
    return worst;
}

int main(void) {
    if (bn_cuda_device_count() == 0) return test_skip("no CUDA device on this machine");
    char name[128];
    printf("device: %s\n", bn_cuda_device_name(name, sizeof name));
    int types[] = {BN_Q1_0, BN_Q2_0, BN_PQ2_0, BN_Q8_0};
    for (int t = 0; t < 4; t++) {
        check_type(types[t], 512, 37);
        check_type(types[t], 5120, 300);
    }
    return test_done("test_cuda_matvec");
}
