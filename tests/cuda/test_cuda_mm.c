// tests/cuda/test_cuda_mm.c — the CUDA matrix kernels (cuda/mm.cuh through cuda/mm_host.h) against the
// CPU reference, for every weight type. Built twice: `cuda_mm` links the GPU library (skips without a
// device), `cuda_mm_emu` links the CPU emulator and always runs.
//
// matmul: y = W·x with W from bn_quantize_ref + bn_dequantize (exact), reference in double:
//  - mmvq path (nb <= BN_CU_MMVQ_MAX_NB = 32, BN_CUDA_MM_MMVQ forces it), quantized W: x rounded per 32 with the CUDA rule
//    (d = amax/127, q = roundf(x/d),
//    value q·fp16(d)); the kernel sums exact integers, so the error is fp32 rounding of the per-block
//    scale products and their sum: tolerance 1e-5 relative to Σ|w·x| (F32/F16/BF16 W: plain x, same).
//  - GEMM path (nb above the routing limit: the tests use 40; fp16): reference Σ fp16(w)·fp16(x) (the documented precision choice; F32 W: plain
//    w·x through sgemm); only the fp32 accumulation differs: tolerance 1e-4 relative to Σ|w·x|.
// The GEMM's fp16 weight tile is shrunk (BONSAI_CUDA_GEMM_TILE_ELEMS) so that the 300-row case takes 5 tiles.
// mmvq kernel variants covered (cuda/mmvq.cu): NB 1/2/4/8 templates (nb 1, 2, 3, 5, 8), the column groups of
// the NB 8 kernel (nb 9, 13, 17, 32 through BN_CUDA_MM_MMVQ: 2-4 groups of unequal size), R 8/4 rows per block
// for the low-bit types, 4/2 for the other quantized ones and 4/2/1 for float weights, with ne1 tails (37, 45,
// 7, 3 rows: a block with fewer rows than R), 1-8 warp blocks (ne0 512 .. 6144), GGUF and planar layouts, and
// multi-weight launches (matmul_multi, bit-identical).
// Tensor-core kernels (cuda/mmq_tc.cu: Q1_0, Q2_0, PQ2_0 at nb 8..32, GGUF and planar): nb 8, 9, 13, 16, 17, 32
// (1-4 column groups of 8, the unused columns of the last group), ne1 tails of the 32-row blocks (300, 77, 45,
// 37, 33, 19, 7 rows), split-K over 4 warps with 1..48 units each (ne0 512..6144), multi-weight launches of
// 1-3 weights at nb 9, 17, 32; same Q8 reference and tolerance as the dp4a path (the per-unit integers are the
// same exact ones, only the fp32 summation order differs).
// GEMM activation range (per-column power-of-two scale, cuda/mm.cu): columns reaching 1e6 (plain fp16: inf)
// and 1e-6 (plain fp16: mostly subnormal or 0) against an F64 reference of fp16(w)·x, tolerance 6e-4 relative
// to Σ|w·x| (every scaled element is a normal fp16: 2^-11 relative, plus fp32 accumulation <= 256·2^-24);
// ordinary columns bit-identical to a run without the extreme columns; an inf or NaN column gives non-finite
// outputs only in that column.
// get_rows: bit-identical to bn_dequantize. argmax/top-k: exact, against a sort with the same order
// (value descending, ties → lower index, NaN last).
#include "tests/test.h"
#include "cuda/cuda_backend.h"
#include "cuda/mm_host.h"
#include "cuda/cuda_engine.h"
#ifdef BONSAI_CUDA_EMU
#include "cuda/emu/emu_api.h"
#endif
#include "quant/quant.h"
#include "base/util.h"
#include "base/rng.h"
#include <string.h>
#include <stdint.h>

static bn_rng rng;
static float frand(float a) { return (2.0f * bn_rng_uniform_f24(&rng) - 1.0f) * a; }

// make_weights: ne1 random rows quantized to type (Q2_0/PQ2_0 also get some code-3 slots); returns
// the bytes, the exact dequantized values in *deq.
static uint8_t *make_weights(int type, int64_t ne0, int64_t ne1, float **deq) {
    size_t rb = bn_row_size(type, ne0);
    float *wf = xmalloc(sizeof(float) * ne0 * ne1);
    uint8_t *wq = xmalloc(rb * ne1);
    *deq = xmalloc(sizeof(float) * ne0 * ne1);
    for (int64_t i = 0; i < ne0 * ne1; i++) wf[i] = frand(1.0f);
    for (int64_t r = 0; r < ne1; r++) {
        bn_quantize_ref(type, wf + r * ne0, wq + r * rb, ne0);
        if (type == BN_Q2_0 || type == BN_PQ2_0) // reserved code 3 (= +2d) must decode too
            for (size_t b = 0; b < rb; b += bn_type_size(type)) wq[r * rb + b + 2 + (r + b) % 16] |= 0xC0;
        bn_dequantize(type, wq + r * rb, *deq + r * ne0, ne0);
    }
    free(wf);
    return wq;
}

// low_bit: the types the tensor-core kernels take at nb >= 8 (cuda/mmq_tc.cu; built with BN_CU_MMA=0: dp4a).
static bool low_bit(int type) { return type == BN_Q1_0 || type == BN_Q2_0 || type == BN_PQ2_0; }

// takes_mmvq: true when bn_cuda_mm_host runs the mmvq kernels for these arguments.
static bool takes_mmvq(int type, int nb, int flags) {
    return (flags & (BN_CUDA_MM_MMVQ | BN_CUDA_MM_MMQ)) || bn_cuda_mm_uses_mmvq(type, nb);
}

// act_ref: x as the kernel sees it: CUDA-rule Q8 rounding (quantized W, mmvq), fp16 (GEMM), or x.
static void act_ref(int type, bool mmvq, const float *x, int64_t n, float *out) {
    bool quantized = bn_type_traits_of(type)->is_quantized;
    if (!mmvq) {
        for (int64_t i = 0; i < n; i++) out[i] = type == BN_F32 ? x[i] : bn_fp16_to_fp32(bn_fp32_to_fp16(x[i]));
        return;
    }
    if (!quantized) {
        memcpy(out, x, sizeof(float) * n);
        return;
    }
    for (int64_t b = 0; b < n / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
        float d = amax / 127.0f, dh = bn_fp16_to_fp32(bn_fp32_to_fp16(d));
        for (int j = 0; j < 32; j++) out[32 * b + j] = amax == 0 ? 0 : roundf(x[32 * b + j] / d) * dh;
    }
}

// matmul_error: one random W {ne0, ne1} × x {ne0, nb}; returns the max relative error (NaN when the call failed).
static double matmul_error(int type, int64_t ne0, int64_t ne1, int nb, int flags) {
    float *wd;
    uint8_t *wq = make_weights(type, ne0, ne1, &wd);
    float *x = xmalloc(sizeof(float) * ne0 * nb), *xr = xmalloc(sizeof(float) * ne0 * nb);
    float *y = xmalloc(sizeof(float) * ne1 * nb);
    for (int64_t i = 0; i < ne0 * nb; i++) x[i] = frand(3.0f);
    memset(x + (nb - 1) * ne0, 0, 32 * sizeof(float)); // an all-zero activation block (d = 0)
    bool gemm = !takes_mmvq(type, nb, flags);
    for (int c = 0; c < nb; c++) act_ref(type, !gemm, x + c * ne0, ne0, xr + c * ne0);
    if (gemm && type != BN_F32) // the GEMM sees fp16 weights
        for (int64_t i = 0; i < ne0 * ne1; i++) wd[i] = bn_fp16_to_fp32(bn_fp32_to_fp16(wd[i]));
    char err[256] = "";
    int rc = bn_cuda_mm_host(type, wq, ne0, ne1, x, nb, y, flags, err, sizeof err);
    if (rc != 0) fprintf(stderr, "%s nb %d: %s\n", bn_type_name(type), nb, err);
    double worst = rc == 0 ? 0 : NAN;
    for (int c = 0; c < nb && rc == 0; c++) {
        for (int64_t r = 0; r < ne1; r++) {
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < ne0; i++) {
                double t = (double)wd[r * ne0 + i] * xr[c * ne0 + i];
                ref += t;
                mag += fabs(t);
            }
            double rel = fabs(y[c * ne1 + r] - ref) / (mag > 0 ? mag : 1);
            if (!(rel <= worst)) worst = rel; // NaN (an unwritten output) sticks
        }
    }
    free(wq); free(wd); free(x); free(xr); free(y);
    return worst;
}

// check_matmul: matmul_error within its tolerance (1e-5 on the mmvq path, 1e-4 on the GEMM path); returns it.
static double check_matmul(int type, int64_t ne0, int64_t ne1, int nb, int flags) {
    const double worst = matmul_error(type, ne0, ne1, nb, flags);
    const double tol = takes_mmvq(type, nb, flags) ? 1e-5 : 1e-4;
    CHECK(worst <= tol, "%s%s%s %lldx%lld nb %d: max relative error %.3g > %g", bn_type_name(type),
          flags & BN_CUDA_MM_REPACK ? " (planar)" : "", flags & BN_CUDA_MM_MMVQ ? " (mmvq)" : "", (long long)ne1,
          (long long)ne0, nb, worst, tol);
    return worst;
}

// check_mma_selfcheck: cuda/mma_check.cu. bn_cuda_mma_selftest passes (on a GPU: cuda/mma.cuh's fragment layout
// is right) and the process decides to use the tensor cores (unless built without them or BONSAI_CUDA_MMA=0).
// With `fault` (the emulator only: a wrong A-fragment layout injected, bn_cuda_emu_set_mma_fault) the tensor-core
// products go wrong (the fault bites), the self-test fails naming its case, the decision is "off" with that
// reason, and the same products are right again (the dp4a kernels). The fp16 MMA (prefill attention) likewise:
// bn_cuda_mma16_selftest passes and BONSAI_CUDA_ATTN_TILED=mma may use it, or under the fault it fails and may not.
static void check_mma_selfcheck(bool fault) {
    char msg[256] = "";
    if (!fault) {
        const int rc16 = bn_cuda_mma16_selftest(msg, sizeof msg);
        CHECK(rc16 == 1 && bn_cuda_attn_mma_ok() == 1, "fp16 tensor-core self-check: %d (%s)", rc16, msg);
        printf("fp16 tensor cores (prefill attention): self-check %s\n", rc16 == 1 ? "passed" : "FAILED");
        if (!bn_cuda_mma_in_use() && strstr(bn_cuda_mma_status(), "self-check") == NULL) {
            printf("tensor cores: %s (self-check not run)\n", bn_cuda_mma_status());
            return;
        }
        const int rc = bn_cuda_mma_selftest(msg, sizeof msg);
        CHECK(rc == 1, "tensor-core self-check: %d (%s)", rc, msg);
        CHECK(bn_cuda_mma_in_use() == 1 && strcmp(bn_cuda_mma_status(), "on") == 0, "tensor cores: %s",
              bn_cuda_mma_status());
        printf("tensor cores: %s (self-check passed)\n", bn_cuda_mma_status());
        return;
    }
#ifdef BONSAI_CUDA_EMU
    bn_cuda_emu_set_mma_fault(1);
    const int rc16 = bn_cuda_mma16_selftest(msg, sizeof msg);
    CHECK(rc16 == 0 && strstr(msg, "fp16 m16n8k16: d[") && bn_cuda_attn_mma_ok() == 0,
          "fp16 self-check under a wrong layout: %d (%s)", rc16, msg);
    printf("wrong fp16 MMA layout: caught (%s); tensor-core prefill attention refused\n", msg);
    const double wrong = matmul_error(BN_Q1_0, 1024, 64, 16, BN_CUDA_MM_MMVQ);
    CHECK(wrong > 1e-3, "a wrong MMA layout went unnoticed by the Q1_0 nb 16 product (error %.3g)", wrong);
    const int rc = bn_cuda_mma_selftest(msg, sizeof msg);
    CHECK(rc == 0 && strstr(msg, "differs from the dp4a kernel"), "self-check under a wrong layout: %d (%s)", rc, msg);
    CHECK(bn_cuda_mma_in_use() == 0 && strstr(bn_cuda_mma_status(), "off (self-check failed: "),
          "decision under a wrong layout: %s", bn_cuda_mma_status());
    check_matmul(BN_Q1_0, 1024, 64, 16, BN_CUDA_MM_MMVQ);
    check_matmul(BN_PQ2_0, 1024, 64, 24, BN_CUDA_MM_MMVQ | BN_CUDA_MM_REPACK);
    bn_cuda_emu_set_mma_fault(0);
    printf("wrong MMA layout: caught (%s); the dp4a kernels took over\n", msg);
#endif
}

// range_errors: max relative errors (to Σ|w·x|) over rows of column c of y against Σ wd·x in F64 (*err_new)
// and of the plain-fp16 product Σ wd·fp16(x) (*err_plain: what the unscaled conversion computes, before fp32
// accumulation); *ref_max = max |Σ wd·x|.
static void range_errors(const float *wd, const float *x, const float *y, int64_t ne0, int64_t ne1, int c,
                         double *err_new, double *err_plain, double *ref_max) {
    *err_new = *err_plain = *ref_max = 0;
    for (int64_t r = 0; r < ne1; r++) {
        double ref = 0, plain = 0, mag = 0;
        for (int64_t i = 0; i < ne0; i++) {
            double w = wd[r * ne0 + i], xi = x[c * ne0 + i];
            ref += w * xi;
            plain += w * bn_fp16_to_fp32(bn_fp32_to_fp16((float)xi));
            mag += fabs(w * xi);
        }
        double e_new = fabs(y[c * ne1 + r] - ref) / mag, e_plain = fabs(plain - ref) / mag;
        if (!(e_new <= *err_new)) *err_new = e_new; // NaN sticks
        if (!(e_plain <= *err_plain)) *err_plain = e_plain;
        *ref_max = fmax(*ref_max, fabs(ref));
    }
}

// fill_log_uniform: n values of random sign, |v| log-uniform in [lo, hi], the first one = hi.
static void fill_log_uniform(float *v, int64_t n, double lo, double hi) {
    for (int64_t i = 0; i < n; i++) {
        double mag = i == 0 ? hi : lo * pow(hi / lo, bn_rng_uniform_f24(&rng));
        v[i] = (float)(frand(1.0f) < 0 ? -mag : mag);
    }
}

// check_gemm_range: the prefill GEMM's per-column scaling (cuda/mm.cu) for one weight type; ne0 256, 300 rows
// (2 fp16 tiles for quantized W at the test's tile size), nb 40 (> BN_CU_MMVQ_MAX_NB: the GEMM path): column 3
// reaches 1e6, column 7 1e-6.
static void check_gemm_range(int type) {
    const int64_t ne0 = 256, ne1 = 300;
    const int nb = 40, big = 3, tiny = 7, inf_col = 9, nan_col = 10;
    const double tol = 6e-4;
    float *wd, *x = xmalloc(sizeof(float) * ne0 * nb), *y[3];
    uint8_t *wq = make_weights(type, ne0, ne1, &wd);
    for (int64_t i = 0; i < ne0 * ne1; i++) wd[i] = bn_fp16_to_fp32(bn_fp32_to_fp16(wd[i])); // the GEMM's fp16 W
    for (int64_t i = 0; i < ne0 * nb; i++) x[i] = frand(3.0f);
    char err[256] = "";
    int rc = 0;
    for (int run = 0; run < 3; run++) { // 0: ordinary columns; 1: + the extreme columns; 2: + inf and NaN
        if (run == 1) {
            fill_log_uniform(x + big * ne0, ne0, 1e3, 1e6);
            fill_log_uniform(x + tiny * ne0, ne0, 1e-9, 1e-6);
        }
        if (run == 2) x[inf_col * ne0 + 17] = INFINITY, x[nan_col * ne0 + 33] = NAN;
        y[run] = xmalloc(sizeof(float) * ne1 * nb);
        rc |= bn_cuda_mm_host(type, wq, ne0, ne1, x, nb, y[run], 0, err, sizeof err);
        CHECK(rc == 0, "%s range run %d: %s", bn_type_name(type), run, err);
    }
    if (rc == 0) {
        int differ01 = 0, differ12 = 0, finite = 0;
        for (int c = 0; c < nb; c++) {
            size_t col = sizeof(float) * ne1;
            if (c != big && c != tiny) differ01 += memcmp(y[0] + c * ne1, y[1] + c * ne1, col) != 0;
            if (c != inf_col && c != nan_col) differ12 += memcmp(y[1] + c * ne1, y[2] + c * ne1, col) != 0;
            else
                for (int64_t r = 0; r < ne1; r++) finite += isfinite(y[2][c * ne1 + r]);
        }
        CHECK(differ01 == 0, "%s: %d ordinary columns changed when other columns became extreme", bn_type_name(type),
              differ01);
        CHECK(differ12 == 0, "%s: %d columns changed when another column got an inf/NaN", bn_type_name(type), differ12);
        CHECK(finite == 0, "%s: %d finite outputs in the inf/NaN columns", bn_type_name(type), finite);
        double e_big, p_big, m_big, e_tiny, p_tiny, m_tiny, e_ord = 0, p_ord, m_ord;
        range_errors(wd, x, y[1], ne0, ne1, big, &e_big, &p_big, &m_big);
        range_errors(wd, x, y[1], ne0, ne1, tiny, &e_tiny, &p_tiny, &m_tiny);
        for (int c = 0; c < nb; c++) {
            if (c == big || c == tiny || c == inf_col || c == nan_col) continue;
            double e;
            range_errors(wd, x, y[1], ne0, ne1, c, &e, &p_ord, &m_ord);
            if (!(e <= e_ord)) e_ord = e;
        }
        // the unscaled conversion would have failed: 1e6 is inf in fp16, the tiny column's plain-fp16 error
        CHECK((bn_fp32_to_fp16(x[big * ne0]) & 0x7fff) == 0x7c00 && isfinite(m_big) && m_big > 65504,
              "%s: column %d does not exercise fp16 overflow (max |ref| %g)", bn_type_name(type), big, m_big);
        CHECK(p_tiny > 4 * tol, "%s: tiny column's plain-fp16 error %.3g not above 4x the tolerance", bn_type_name(type),
              p_tiny);
        CHECK(e_big <= tol && e_tiny <= tol && e_ord <= tol, "%s: max relative error big %.3g, tiny %.3g, "
              "ordinary %.3g > %g", bn_type_name(type), e_big, e_tiny, e_ord, tol);
        printf("%-5s gemm range: max rel err 1e6 column %.2g (max |y| %.3g), 1e-6 column %.2g (plain fp16 %.2g), "
               "ordinary %.2g; ordinary columns bit-identical, inf/NaN columns non-finite\n", bn_type_name(type),
               e_big, m_big, e_tiny, p_tiny, e_ord);
    }
    for (int run = 0; run < 3; run++) free(y[run]);
    free(wq); free(wd); free(x);
}

static void check_get_rows(int type, int64_t ne0, int64_t ne1, int flags) {
    float *wd;
    uint8_t *wq = make_weights(type, ne0, ne1, &wd);
    int32_t ids[] = {5, 0, (int32_t)ne1 - 1, 5, 17};
    int n = 5;
    float *out = xmalloc(sizeof(float) * ne0 * n);
    char err[256] = "";
    int rc = bn_cuda_get_rows_host(type, wq, ne0, ne1, ids, n, out, flags, err, sizeof err);
    CHECK(rc == 0, "get_rows %s: %s", bn_type_name(type), err);
    int bad = 0;
    for (int i = 0; i < n && rc == 0; i++) bad += memcmp(out + i * ne0, wd + ids[i] * ne0, sizeof(float) * ne0) != 0;
    CHECK(bad == 0, "get_rows %s: %d of %d rows differ from bn_dequantize", bn_type_name(type), bad, n);
    int32_t odd[] = {-1, (int32_t)ne1, 2}; // ids outside [0, ne1) (the device argmax's -1): zero rows, no stray read
    rc = bn_cuda_get_rows_host(type, wq, ne0, ne1, odd, 3, out, flags, err, sizeof err);
    bad = 0;
    for (int64_t k = 0; k < 2 * ne0 && rc == 0; k++) bad += out[k] != 0.0f;
    CHECK(rc == 0 && bad == 0 && memcmp(out + 2 * ne0, wd + 2 * ne0, sizeof(float) * ne0) == 0,
          "get_rows %s with ids -1 and ne1: %s, %d nonzero", bn_type_name(type), err, bad);
    free(wq); free(wd); free(out);
}

// ranks_above: the kernels' order (value descending, ties → lower index, NaN last).
static bool ranks_above(float va, int ia, float vb, int ib) {
    bool na = isnan(va), nb = isnan(vb);
    if (na || nb) return nb && (!na || ia < ib);
    return va > vb || (va == vb && ia < ib);
}
static const float *sort_x;
static int cmp_rank(const void *a, const void *b) {
    int ia = *(const int *)a, ib = *(const int *)b;
    return ranks_above(sort_x[ia], ia, sort_x[ib], ib) ? -1 : 1;
}

// fill_logits: values on a coarse grid (many ties), a few NaN and −inf.
static void fill_logits(float *x, int n, bool specials) {
    for (int i = 0; i < n; i++) x[i] = (float)(int)(frand(20.0f)) * 0.5f;
    if (specials && n > 10) {
        x[n / 3] = NAN;
        x[n / 2] = -INFINITY;
        x[n - 1] = NAN;
    }
}

static void check_argmax(void) {
    char err[256] = "";
    int32_t got = -2;
    int n = 5000;
    float *x = xmalloc(sizeof(float) * n);
    fill_logits(x, n, true);
    int want = 0;
    for (int i = 1; i < n; i++)
        if (ranks_above(x[i], i, x[want], want)) want = i;
    CHECK(bn_cuda_argmax_host(x, n, &got, err, sizeof err) == 0, "argmax: %s", err);
    CHECK(got == want, "argmax random with ties/NaN: %d, want %d", got, want);
    x[4000] = 1e30f, x[100] = 1e30f, x[7] = NAN; // tie: the lower index wins; NaN never does
    CHECK(bn_cuda_argmax_host(x, n, &got, err, sizeof err) == 0 && got == 100, "argmax tie: %d, want 100", got);
    for (int i = 0; i < n; i++) x[i] = -INFINITY;
    x[3] = NAN;
    CHECK(bn_cuda_argmax_host(x, n, &got, err, sizeof err) == 0 && got == 0, "argmax all -inf: %d, want 0", got);
    for (int i = 0; i < n; i++) x[i] = NAN;
    CHECK(bn_cuda_argmax_host(x, n, &got, err, sizeof err) == 0 && got == -1, "argmax all NaN: %d, want -1", got);
    for (int i = 0; i < n; i++) x[i] = (float)(i % 97);
    x[4997] = 500.0f; // n 4998: 16-byte loads, the maximum in the 2-element scalar tail
    CHECK(bn_cuda_argmax_host(x, 4998, &got, err, sizeof err) == 0 && got == 4997, "argmax tail: %d", got);
    x[2001] = 600.0f; // odd n: unaligned device copy, scalar loads only
    CHECK(bn_cuda_argmax_host(x, 4999, &got, err, sizeof err) == 0 && got == 2001, "argmax unaligned: %d", got);
    float one = 2.5f;
    CHECK(bn_cuda_argmax_host(&one, 1, &got, err, sizeof err) == 0 && got == 0, "argmax n=1: %d", got);
    free(x);
}

static void check_topk(int n, int k) {
    float *x = xmalloc(sizeof(float) * n), vals[64];
    int32_t idx[64];
    int *order = xmalloc(sizeof(int) * n);
    fill_logits(x, n, true);
    for (int i = 0; i < n; i++) order[i] = i;
    sort_x = x;
    qsort(order, n, sizeof(int), cmp_rank);
    char err[256] = "";
    int rc = bn_cuda_topk_host(x, n, k, vals, idx, err, sizeof err);
    CHECK(rc == 0, "topk n %d k %d: %s", n, k, err);
    int bad = 0;
    for (int j = 0; j < k && rc == 0; j++) {
        float want = x[order[j]];
        bool same_val = isnan(want) ? isnan(vals[j]) : vals[j] == want;
        bad += !(idx[j] == order[j] && same_val);
    }
    CHECK(bad == 0, "topk n %d k %d: %d of %d entries differ from the sort", n, k, bad, k);
    free(x); free(order);
}

// check_multi: bn_cu_matmul_multi on n weights equals n bn_cu_matmul calls bit for bit.
static void check_multi(int n, const int *types, const int64_t *ne1, int64_t ne0, int nb, int flags) {
    uint8_t *wq[4];
    float *wd[4], *y[4], *ys = xmalloc(sizeof(float) * 4096 * nb), *x = xmalloc(sizeof(float) * ne0 * nb);
    for (int64_t i = 0; i < ne0 * nb; i++) x[i] = frand(2.0f);
    for (int i = 0; i < n; i++) {
        wq[i] = make_weights(types[i], ne0, ne1[i], &wd[i]);
        y[i] = xmalloc(sizeof(float) * ne1[i] * nb);
    }
    char err[256] = "";
    int rc = bn_cuda_mm_multi_host(n, types, (const void *const *)wq, ne0, ne1, x, nb, y, flags, err, sizeof err);
    CHECK(rc == 0, "multi: %s", err);
    for (int i = 0; i < n && rc == 0; i++) {
        CHECK(bn_cuda_mm_host(types[i], wq[i], ne0, ne1[i], x, nb, ys, flags, err, sizeof err) == 0, "%s", err);
        CHECK(memcmp(ys, y[i], sizeof(float) * ne1[i] * nb) == 0, "multi weight %d (%s, nb %d, flags %d) differs from "
              "a single bn_cu_matmul", i, bn_type_name(types[i]), nb, flags);
    }
    for (int i = 0; i < n; i++) free(wq[i]), free(wd[i]), free(y[i]);
    free(ys); free(x);
}

int main(int argc, char **argv) {
    if (bn_cuda_device_count() == 0) return test_skip("no CUDA device on this machine");
    char name[128];
    printf("device: %s\n", bn_cuda_device_name(name, sizeof name));
    bn_rng_seed(&rng, 20261130);
    if (argc > 1 && strcmp(argv[1], "mma-fault") == 0) { // the emulator's cuda_mm_emu_mma_fault
#ifndef BONSAI_CUDA_EMU
        return test_skip("mma-fault needs the emulator");
#endif
        check_mma_selfcheck(true);
        return test_done("test_cuda_mm mma-fault");
    }
    setenv("BONSAI_CUDA_GEMM_TILE_ELEMS", "65536", 1); // fp16 tiles of 64 rows at ne0 1024: the 300-row GEMMs tile
    const int types[] = {BN_Q1_0, BN_Q2_0, BN_PQ2_0, BN_Q8_0, BN_Q4_0, BN_Q4_1,
                         BN_Q6_K, BN_Q4_K, BN_F16,  BN_BF16, BN_F32};
    const int nbs[] = {1, 2, 3, 8, 9, 33};
    const int wide_nbs[] = {9, 13, 16, 17, 32}; // the mmvq kernels' column groups (BN_CUDA_MM_MMVQ), MMA groups 2-4
    const int MM = BN_CUDA_MM_MMVQ, RP = BN_CUDA_MM_REPACK;
    const int tc_nbs[] = {8, 9, 13, 16, 17, 32}; // the low-bit types' tensor-core range (cuda/mmq_tc.cu)
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        double worst_vq = 0, worst_gemm = 0;
        for (size_t j = 0; j < sizeof nbs / sizeof nbs[0]; j++) {
            double e = check_matmul(types[t], 512, 37, nbs[j], 0);
            if (bn_cuda_mm_uses_mmvq(types[t], nbs[j])) worst_vq = fmax(worst_vq, e);
            else worst_gemm = fmax(worst_gemm, e);
        }
        for (size_t j = 0; j < sizeof wide_nbs / sizeof wide_nbs[0]; j++)
            worst_vq = fmax(worst_vq, check_matmul(types[t], 512, 37, wide_nbs[j], MM));
        if (low_bit(types[t])) // tensor cores (nb >= 8): 300 rows = 9 blocks of 32 + 12, ne0 6144: 48 units per warp
            for (size_t j = 0; j < sizeof tc_nbs / sizeof tc_nbs[0]; j++) {
                worst_vq = fmax(worst_vq, check_matmul(types[t], j % 2 ? 6144 : 1024, j % 2 ? 19 : 300, tc_nbs[j], MM));
                if (j % 3 == 0) // the same widths on the dp4a kernels (BN_CUDA_MM_DP4A, bench_cuda_mm's comparison)
                    worst_vq = fmax(worst_vq, check_matmul(types[t], 1024, 45, tc_nbs[j], MM | BN_CUDA_MM_DP4A));
            }
        if (low_bit(types[t])) { // the tensor-core prefill path (BN_CUDA_MM_MMQ): 40 = chunks of 20, 100 = 4 of 25
            worst_vq = fmax(worst_vq, check_matmul(types[t], 1024, 300, 40, BN_CUDA_MM_MMQ));
            worst_vq = fmax(worst_vq, check_matmul(types[t], 6144, 19, 100, BN_CUDA_MM_MMQ));
        }
        worst_vq = fmax(worst_vq, check_matmul(types[t], 1024, 300, 1, 0));
        worst_vq = fmax(worst_vq, check_matmul(types[t], 5120, 19, 1, 0)); // 160 units: 5-warp blocks
        worst_vq = fmax(worst_vq, check_matmul(types[t], 6144, 7, 5, 0));  // 192 units: 6-warp blocks, NB 8 kernel
        worst_vq = fmax(worst_vq, check_matmul(types[t], 6144, 7, 17, MM)); // 6-warp blocks, 3 column groups
        worst_vq = fmax(worst_vq, check_matmul(types[t], 1024, 3, 2, 0));  // one block, fewer rows than R
        worst_gemm = fmax(worst_gemm, check_matmul(types[t], 1024, 300, 40, 0)); // 5 fp16 tiles
        check_get_rows(types[t], 512, 37, 0);
        if (!bn_type_traits_of(types[t])->is_quantized) { // float weights take any ne0
            worst_vq = fmax(worst_vq, check_matmul(types[t], 100, 13, 3, 0));
            worst_gemm = fmax(worst_gemm, check_matmul(types[t], 100, 13, 9, 0));
            check_get_rows(types[t], 100, 37, 0);
        }
        printf("%-5s max rel err: mmvq %.2g, gemm %.2g; get_rows exact\n", bn_type_name(types[t]), worst_vq,
               worst_gemm);
    }
    const int range_types[] = {BN_F16, BN_Q8_0, BN_Q1_0};
    for (size_t t = 0; t < sizeof range_types / sizeof range_types[0]; t++) check_gemm_range(range_types[t]);
    // the planar layouts of bn_cu_weight_repack (rows must be 16-byte aligned: these shapes are)
    const int planar[] = {BN_Q1_0, BN_Q2_0, BN_PQ2_0, BN_Q8_0};
    for (size_t t = 0; t < sizeof planar / sizeof planar[0]; t++) {
        int type = planar[t];
        CHECK(bn_cuda_mm_repackable(type, 1024, 45) && bn_cuda_mm_repackable(type, 5120, 19),
              "%s: test shapes not repackable", bn_type_name(type));
        double worst_vq = 0, worst_gemm = 0;
        for (size_t j = 0; j < sizeof nbs / sizeof nbs[0]; j++) {
            double e = check_matmul(type, 1024, 45, nbs[j], BN_CUDA_MM_REPACK);
            if (bn_cuda_mm_uses_mmvq(type, nbs[j])) worst_vq = fmax(worst_vq, e);
            else worst_gemm = fmax(worst_gemm, e);
        }
        for (size_t j = 0; j < sizeof wide_nbs / sizeof wide_nbs[0]; j++)
            worst_vq = fmax(worst_vq, check_matmul(type, 1024, 45, wide_nbs[j], RP | MM));
        worst_vq = fmax(worst_vq, check_matmul(type, 5120, 19, 1, BN_CUDA_MM_REPACK));
        worst_vq = fmax(worst_vq, check_matmul(type, 5120, 19, 17, RP | MM)); // DSpark verify width
        if (low_bit(type)) {
            for (size_t j = 0; j < sizeof tc_nbs / sizeof tc_nbs[0]; j++)
                worst_vq = fmax(worst_vq, check_matmul(type, j % 2 ? 2048 : 1024, j % 2 ? 77 : 33, tc_nbs[j], RP | MM));
            worst_vq = fmax(worst_vq, check_matmul(type, 1024, 45, 65, RP | BN_CUDA_MM_MMQ)); // 3 chunks of 22/22/21
        }
        worst_vq = fmax(worst_vq, check_matmul(type, 1024, 3, 1, BN_CUDA_MM_REPACK));
        check_get_rows(type, 1024, 45, BN_CUDA_MM_REPACK);
        printf("%-5s planar max rel err: mmvq %.2g, gemm %.2g; get_rows exact\n", bn_type_name(type), worst_vq,
               worst_gemm);
    }
    { // bn_cu_matmul_multi: one type (one launch), mixed types (re-quantized only when the order changes), GEMM
        const int t3[] = {BN_Q1_0, BN_Q1_0, BN_Q1_0}, mix[] = {BN_Q1_0, BN_Q1_0, BN_F32, BN_Q8_0};
        const int q2[] = {BN_Q2_0, BN_PQ2_0}, gemm[] = {BN_Q2_0, BN_Q4_K};
        const int64_t r3[] = {37, 5, 130}, r4[] = {37, 5, 130, 9};
        const int multi_nbs[] = {1, 2, 5, 9, 17, 32}; // every NB template; 2-4 column groups (forced mmvq)
        for (size_t j = 0; j < sizeof multi_nbs / sizeof multi_nbs[0]; j++) {
            int nb = multi_nbs[j], mm = nb > 8 ? MM : 0;
            check_multi(3, t3, r3, 1024, nb, mm);
            check_multi(3, t3, r3, 1024, nb, mm | RP);
            check_multi(4, mix, r4, 1024, nb, mm);
            check_multi(2, q2, r3, 1024, nb, mm);
            check_multi(2, q2, r3, 1024, nb, mm | RP);
        }
        check_multi(2, gemm, r3, 1024, 40, 0);
        check_multi(4, mix, r4, 1024, 40, 0); // GEMM path with an F32 weight (sgemm, no fp16 x) among them
        printf("matmul_multi: bit-identical to single calls\n");
    }
    check_argmax();
    const int tk[][2] = {{1, 1}, {100, 7}, {5000, 40}, {70000, 64}, {3000, 64}, {64, 64}};
    for (size_t i = 0; i < sizeof tk / sizeof tk[0]; i++) check_topk(tk[i][0], tk[i][1]);
    check_mma_selfcheck(false);
    return test_done("test_cuda_mm");
}
