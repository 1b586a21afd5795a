// tests/cuda/test_cuda_fwd_ops.c — the GPU trainer's forward ops (cuda/cuda_fwd_ops.h: cuda/fwd_ops.cu,
// cuda/fwd_linear.cu) vs the CPU functions train/graph.c calls (core/ops.c, train/backward.c, quant/quant.c) on random
// inputs with a fixed seed, shapes with tails (rows > 1, n not a multiple of 32, rows longer than a block).
// Built twice: `cuda_fwd_ops` links the GPU library (skipped without a device); `cuda_fwd_ops_emu` links the CPU
// emulator (cuda/emu/) and always runs, also in shuffled order.
// Tolerance: per element |gpu − cpu| <= TOL·(1 + |cpu|) (the linear: max |Δ| <= TOL·max(1, max |cpu|) per array, as
// tests/cuda/test_cuda_bwd_seq.c). The kernels use the CPU's formulas in fp32 and differ only in rounding: the norms'
// row sums are float tree sums where the CPU sums in double (relative ~n·2^-24 at worst), the device's expf, log1pf,
// sinf and cosf may be 1-2 ulp off the host's, the CPU's SiLU may take its AVX-512 path, and cuBLAS sums the linear's
// products in its own order. 2e-5 leaves room for those on a GPU while a wrong index or a missing term gives errors of
// order 1e-2 and more. Exact (bit-identical) checks: the dequantized weights (bn_dequantize) and their bf16 rounding
// (bn_fp32_to_bf16), the embedding lookup, copy_cols, the add and the bias, bf16 copies of activations and back. The
// linear with bf16 GEMMs is held to TOL against its fp32 twin (the CPU's product of the bf16-rounded weight and input:
// bf16 products are exact in fp32) and to BF16_TOL against the plain fp32 product.
#include "tests/test.h"
#define TEST_RNG_SEED 0x2545f4914f6cdd1dull
#include "tests/cuda/dev_arrays.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_fwd_ops.h"
#include "core/ops.h"
#include "train/backward.h"
#include "quant/quant.h"
#include "base/util.h"
#include <math.h>
#include <stdbool.h>
#include <string.h>
#include <stdint.h>

#define TOL 2e-5
// The bf16 GEMM path against the plain fp32 product: each input rounded to bf16 (relative 2^-9) moves a sum of n_in
// products by ~2^-8·sqrt(n_in) of a typical product; measured 1.8e-3..2.7e-3 of the largest output on these shapes.
#define BF16_TOL 2e-2

// check_close: per element |got − ref| / (1 + |ref|) within TOL; prints and returns the largest.
static double check_close(const char *what, const float *ref, const float *got, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)got[i] - ref[i]) / (1 + fabs(ref[i]));
        worst = e > worst || e != e ? e : worst;
    }
    CHECK(worst <= TOL, "%s: max error %.3g", what, worst);
    printf("%-64s max err %.3g\n", what, worst);
    return worst;
}

// check_dev_close: the device result d (n floats, freed) against ref with check_close.
static void check_dev_close(const char *what, const float *ref, float *d, size_t n) {
    float *got = from_dev(d, n);
    check_close(what, ref, got, n);
    free(got);
}

// check_dev_bits: the device result d (n floats, freed) against ref with check_bits.
static void check_dev_bits(const char *what, const float *ref, float *d, size_t n) {
    float *got = from_dev(d, n);
    check_bits(what, ref, got, n);
    free(got);
}

// ---- norms --------------------------------------------------------------------------------------------------------

// check_rmsnorm: rows of n through bn_rmsnorm, with the weight or without (NULL).
static void check_rmsnorm(int n, int rows, bool with_w) {
    const size_t nt = (size_t)n * rows;
    const float eps = 1e-6f;
    float *x = rand_vec(nt, 1.5f), *w = rand_vec(n, 1.0f), *y = xmalloc(nt * sizeof(float));
    for (int t = 0; t < rows; t++) bn_rmsnorm(y + (size_t)t * n, x + (size_t)t * n, with_w ? w : NULL, n, eps);
    float *x_d = to_dev(x, nt), *w_d = to_dev(w, n), *y_d = bn_cuda_dev_floats(nt, err, sizeof err);
    CHECK(bn_cuda_rmsnorm_fwd(x_d, with_w ? w_d : NULL, n, rows, eps, y_d, NULL, err, sizeof err) == 0, "%s", err);
    char what[96];
    snprintf(what, sizeof what, "rmsnorm n %d rows %d%s", n, rows, with_w ? "" : " (no weight)");
    check_dev_close(what, y, y_d, nt);
    bn_cuda_dev_free(x_d), bn_cuda_dev_free(w_d);
    free(x), free(w), free(y);
}

// check_l2norm: rows of n through bn_l2norm, then times scale as train/graph.c scales q.
static void check_l2norm(int n, int rows, float scale) {
    const size_t nt = (size_t)n * rows;
    const float eps = 1e-6f;
    float *x = rand_vec(nt, 2.0f), *y = xmalloc(nt * sizeof(float));
    for (int t = 0; t < rows; t++) {
        bn_l2norm(y + (size_t)t * n, x + (size_t)t * n, n, eps);
        for (int i = 0; i < n; i++) y[(size_t)t * n + i] *= scale;
    }
    float *x_d = to_dev(x, nt), *y_d = bn_cuda_dev_floats(nt, err, sizeof err);
    CHECK(bn_cuda_l2norm_fwd(x_d, n, rows, eps, scale, y_d, NULL, err, sizeof err) == 0, "%s", err);
    char what[96];
    snprintf(what, sizeof what, "l2norm n %d rows %d scale %g", n, rows, scale);
    check_dev_close(what, y, y_d, nt);
    bn_cuda_dev_free(x_d);
    free(x), free(y);
}

// check_gated_rmsnorm: rows of n through bn_gated_rmsnorm, with the weight or without.
static void check_gated_rmsnorm(int n, int rows, bool with_w) {
    const size_t nt = (size_t)n * rows;
    const float eps = 1e-6f;
    float *o = rand_vec(nt, 1.5f), *z = rand_vec(nt, 3.0f), *w = rand_vec(n, 1.0f), *y = xmalloc(nt * sizeof(float));
    for (size_t off = 0; off < nt; off += n) bn_gated_rmsnorm(y + off, o + off, z + off, with_w ? w : NULL, n, eps);
    float *o_d = to_dev(o, nt), *z_d = to_dev(z, nt), *w_d = to_dev(w, n);
    float *y_d = bn_cuda_dev_floats(nt, err, sizeof err);
    CHECK(bn_cuda_gated_rmsnorm_fwd(o_d, z_d, with_w ? w_d : NULL, n, rows, eps, y_d, NULL, err, sizeof err) == 0,
          "%s", err);
    char what[96];
    snprintf(what, sizeof what, "gated_rmsnorm n %d rows %d%s", n, rows, with_w ? "" : " (no weight)");
    check_dev_close(what, y, y_d, nt);
    bn_cuda_dev_free(o_d), bn_cuda_dev_free(z_d), bn_cuda_dev_free(w_d);
    free(o), free(z), free(w), free(y);
}

// ---- elementwise --------------------------------------------------------------------------------------------------

// check_swiglu_gate: bn_swiglu and bn_sigmoid_gate over n elements.
static void check_swiglu_gate(int n) {
    float *a = rand_vec(n, 6.0f), *c = rand_vec(n, 2.0f), *y = xmalloc(n * sizeof(float));
    float *a_d = to_dev(a, n), *c_d = to_dev(c, n), *y_d = bn_cuda_dev_floats(n, err, sizeof err);
    char what[96];
    bn_swiglu(y, a, c, n);
    CHECK(bn_cuda_swiglu_fwd(a_d, c_d, n, y_d, NULL, err, sizeof err) == 0, "%s", err);
    snprintf(what, sizeof what, "swiglu n %d", n);
    float *got = from_dev(y_d, n);
    check_close(what, y, got, n);
    free(got);
    bn_sigmoid_gate(y, c, a, n);
    y_d = bn_cuda_dev_floats(n, err, sizeof err);
    CHECK(bn_cuda_sigmoid_gate_fwd(c_d, a_d, n, y_d, NULL, err, sizeof err) == 0, "%s", err);
    snprintf(what, sizeof what, "sigmoid_gate n %d", n);
    check_dev_close(what, y, y_d, n);
    bn_cuda_dev_free(a_d), bn_cuda_dev_free(c_d);
    free(a), free(c), free(y);
}

// check_gdn_gates: beta = σ(b), g = softplus(a + dt)·ssm_a per row of n heads, as train/graph.c computes them (a
// wide range of a + dt, so softplus's x > 20 branch is taken too).
static void check_gdn_gates(int n, int rows) {
    const size_t nt = (size_t)n * rows;
    float *b = rand_vec(nt, 6.0f), *a = rand_vec(nt, 15.0f), *dt = rand_vec(n, 10.0f), *ssm_a = rand_vec(n, 3.0f);
    float *beta = xmalloc(nt * sizeof(float)), *g = xmalloc(nt * sizeof(float));
    for (size_t i = 0; i < nt; i++) {
        beta[i] = bn_sigmoid(b[i]);
        g[i] = bn_softplus(a[i] + dt[i % n]) * ssm_a[i % n];
    }
    float *b_d = to_dev(b, nt), *a_d = to_dev(a, nt), *dt_d = to_dev(dt, n), *ssm_a_d = to_dev(ssm_a, n);
    float *beta_d = bn_cuda_dev_floats(nt, err, sizeof err), *g_d = bn_cuda_dev_floats(nt, err, sizeof err);
    CHECK(bn_cuda_gdn_gates_fwd(b_d, a_d, dt_d, ssm_a_d, n, rows, beta_d, g_d, NULL, err, sizeof err) == 0, "%s", err);
    char what[96];
    snprintf(what, sizeof what, "gdn_gates beta n %d rows %d", n, rows);
    check_dev_close(what, beta, beta_d, nt);
    snprintf(what, sizeof what, "gdn_gates g n %d rows %d", n, rows);
    check_dev_close(what, g, g_d, nt);
    float *inputs_d[] = {b_d, a_d, dt_d, ssm_a_d};
    for (size_t i = 0; i < sizeof inputs_d / sizeof *inputs_d; i++) bn_cuda_dev_free(inputs_d[i]);
    free(b), free(a), free(dt), free(ssm_a), free(beta), free(g);
}

// check_add: y = a + b into a third array, into a and into b (exact), then a row bias added to rows of n.
static void check_add(int n, int rows) {
    const size_t nt = (size_t)n * rows;
    float *a = rand_vec(nt, 1.0f), *b = rand_vec(nt, 1.0f), *bias = rand_vec(n, 1.0f), *y = xmalloc(nt * sizeof(float));
    for (size_t i = 0; i < nt; i++) y[i] = a[i] + b[i];
    const char *names[] = {"add y = a + b", "add a += b (y aliases a)", "add b += a (y aliases b)"};
    for (int alias = 0; alias < 3; alias++) {
        float *a_d = to_dev(a, nt), *b_d = to_dev(b, nt);
        float *y_d = alias == 1 ? a_d : alias == 2 ? b_d : bn_cuda_dev_floats(nt, err, sizeof err);
        CHECK(bn_cuda_add(a_d, b_d, (int64_t)nt, y_d, NULL, err, sizeof err) == 0, "%s", err);
        check_dev_bits(names[alias], y, y_d, nt);
        if (alias != 1) bn_cuda_dev_free(a_d);
        if (alias != 2) bn_cuda_dev_free(b_d);
    }
    float *y_d = to_dev(y, nt);
    for (size_t i = 0; i < nt; i++) y[i] += bias[i % n];
    float *bias_d = to_dev(bias, n);
    CHECK(bn_cuda_add_row_bias(y_d, bias_d, n, rows, NULL, err, sizeof err) == 0, "%s", err);
    char what[96];
    snprintf(what, sizeof what, "add_row_bias n %d rows %d", n, rows);
    check_dev_bits(what, y, y_d, nt);
    bn_cuda_dev_free(bias_d);
    free(a), free(b), free(bias), free(y);
}

// check_bf16_copies: bn_cuda_to_bf16 of n values (random, ties of both parities, ±0, ±inf, a NaN, a subnormal) gives
// bn_fp32_to_bf16's bits, and bn_cuda_from_bf16 of those bits gives bn_bf16_to_fp32's floats (the trainer's kept
// layer inputs, written and read back). n even: the bits travel as n/2 floats.
static void check_bf16_copies(size_t n) {
    float *x = rand_vec(n, 3.0f);
    const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x00000000u, 0x80000000u, 0x7f800000u,
                                0xff800000u, 0x7fc00001u, 0x00012345u, 0x477fffffu};
    for (size_t i = 0; i < sizeof special / sizeof *special && i < n; i++) memcpy(&x[i], &special[i], 4);
    float *x_d = to_dev(x, n), *b_d = bn_cuda_dev_floats(n / 2, err, sizeof err), *y_d = bn_cuda_dev_floats(n, err,
                                                                                                        sizeof err);
    CHECK(bn_cuda_to_bf16(x_d, (int64_t)n, (uint16_t *)b_d, NULL, err, sizeof err) == 0 &&
              bn_cuda_from_bf16((const uint16_t *)b_d, (int64_t)n, y_d, NULL, err, sizeof err) == 0, "%s", err);
    uint16_t *bits = (uint16_t *)from_dev(b_d, n / 2);
    float *y = from_dev(y_d, n);
    size_t bad_bits = 0, bad_back = 0;
    for (size_t i = 0; i < n; i++) {
        const float want = bn_bf16_to_fp32(bits[i]);
        bad_bits += bits[i] != bn_fp32_to_bf16(x[i]);
        bad_back += memcmp(&y[i], &want, 4) != 0;
    }
    CHECK(bad_bits == 0 && bad_back == 0, "bf16 copies: %zu of %zu bits differ from bn_fp32_to_bf16, %zu widened "
          "values from bn_bf16_to_fp32", bad_bits, n, bad_back);
    printf("%-64s %s\n", "  to_bf16 / from_bf16: bn_fp32_to_bf16 and back", bad_bits || bad_back ? "DIFFERS"
                                                                                                  : "bit-identical");
    bn_cuda_dev_free(x_d);
    free(x), free(bits), free(y);
}

// check_copy_cols: columns [src_off, src_off + width) of rows of src_stride into [dst_off, ...) of rows of
// dst_stride; the rest of dst keeps its values.
static void check_copy_cols(int rows, int64_t src_stride, int64_t src_off, int64_t dst_stride, int64_t dst_off,
                            int64_t width) {
    const size_t ns = (size_t)rows * src_stride, nd = (size_t)rows * dst_stride;
    float *src = rand_vec(ns, 1.0f), *dst = rand_vec(nd, 1.0f);
    float *src_d = to_dev(src, ns), *dst_d = to_dev(dst, nd);
    for (int r = 0; r < rows; r++)
        memcpy(dst + r * dst_stride + dst_off, src + r * src_stride + src_off, (size_t)width * sizeof(float));
    CHECK(bn_cuda_copy_cols(src_d, src_stride, src_off, dst_d, dst_stride, dst_off, width, rows, NULL, err,
                            sizeof err) == 0, "%s", err);
    char what[96];
    snprintf(what, sizeof what, "copy_cols rows %d src %lld+%lld dst %lld+%lld width %lld", rows,
             (long long)src_stride, (long long)src_off, (long long)dst_stride, (long long)dst_off, (long long)width);
    check_dev_bits(what, dst, dst_d, nd);
    bn_cuda_dev_free(src_d);
    free(src), free(dst);
}

// ---- RoPE ---------------------------------------------------------------------------------------------------------

// check_rope: T rows of n_heads heads rotated in place, row t at pos0 + t, as bn_rope_inplace with sign +1.
static void check_rope(int head_dim, int n_heads, int T, int n_rot, int pos0, int mode) {
    const size_t row = (size_t)head_dim * n_heads, nt = row * T;
    const float base = 10000000.0f;
    float *x = rand_vec(nt, 1.0f);
    float *x_d = to_dev(x, nt);
    for (int t = 0; t < T; t++) bn_rope_inplace(x + t * row, head_dim, n_heads, n_rot, pos0 + t, base, mode, 1);
    CHECK(bn_cuda_rope_fwd(x_d, head_dim, n_heads, T, n_rot, pos0, base, mode, NULL, err, sizeof err) == 0, "%s",
          err);
    char what[96];
    snprintf(what, sizeof what, "rope %s hd %d heads %d T %d n_rot %d pos0 %d", mode == BN_ROPE_NEOX ? "neox" : "norm",
             head_dim, n_heads, T, n_rot, pos0);
    check_dev_close(what, x, x_d, nt);
    free(x);
}

// ---- weights of any stored type -----------------------------------------------------------------------------------

// quantized_rows: ne1 random rows of ne0 in type (quant/'s reference quantizer; F32 as is); NULL when the type has
// no quantizer.
static uint8_t *quantized_rows(int type, int64_t ne0, int64_t ne1) {
    const size_t rb = bn_row_size(type, ne0);
    float *wf = rand_vec((size_t)(ne0 * ne1), 1.0f);
    uint8_t *wq = xmalloc(rb * ne1);
    bool ok = true;
    for (int64_t r = 0; r < ne1 && ok; r++) {
        if (type == BN_F32) memcpy(wq + r * rb, wf + r * ne0, rb);
        else ok = bn_quantize_ref(type, wf + r * ne0, wq + r * rb, ne0) == rb;
    }
    free(wf);
    if (!ok) free(wq);
    return ok ? wq : NULL;
}

// check_weights_bf16: bn_cuda_dequant_rows_bf16 of rows r0 .. r0 + nr of device weight w_d equals bn_fp32_to_bf16 of
// their fp32 values deq, bit for bit.
static void check_weights_bf16(int type, const void *w_d, int64_t ne0, int64_t r0, int64_t nr, const float *deq) {
    const size_t n = (size_t)(ne0 * nr), n_floats = (n + 1) / 2;
    float *d = bn_cuda_dev_floats(n_floats, err, sizeof err);
    CHECK(d && bn_cuda_dequant_rows_bf16(type, w_d, ne0, r0, nr, (uint16_t *)d, NULL, err, sizeof err) == 0, "%s", err);
    float *got = from_dev(d, n_floats);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += ((const uint16_t *)got)[i] != bn_fp32_to_bf16(deq[i]);
    CHECK(bad == 0, "dequant_rows_bf16 %s: %zu of %zu values differ from bn_fp32_to_bf16", bn_type_name(type), bad, n);
    printf("%-64s %s\n", "  dequant_rows_bf16: bn_fp32_to_bf16 of those rows", bad ? "DIFFERS" : "bit-identical");
    free(got);
}

// check_weights: bn_cuda_dequant_rows (rows 2..6 of 9) and bn_cuda_get_rows_f32 (repeated ids, first and last rows)
// bit-identical to bn_dequantize for one type, and bn_cuda_dequant_rows_bf16 to their bf16 rounding; rows of ne0 (a
// multiple of the type's block).
static void check_weights(int type, int64_t ne0) {
    const int64_t ne1 = 9, r0 = 2, nr = 5;
    const int ids[] = {8, 0, 3, 3, 7, 1};
    const int n_ids = (int)(sizeof ids / sizeof *ids);
    const size_t rb = bn_row_size(type, ne0);
    uint8_t *wq = quantized_rows(type, ne0, ne1);
    CHECK(wq, "%s: no quantizer", bn_type_name(type));
    if (!wq) return;
    float *deq = xmalloc(sizeof(float) * ne0 * ne1), *picked = xmalloc(sizeof(float) * ne0 * n_ids);
    for (int64_t r = 0; r < ne1; r++) CHECK(bn_dequantize(type, wq + r * rb, deq + r * ne0, ne0) == 0, "dequantize");
    for (int i = 0; i < n_ids; i++) memcpy(picked + i * ne0, deq + ids[i] * ne0, sizeof(float) * ne0);
    void *w_d = bn_cuda_dev_bytes(rb * ne1, err, sizeof err);
    CHECK(w_d && bn_cuda_dev_upload_bytes(w_d, wq, rb * ne1, err, sizeof err) == 0, "%s", err);
    int *ids_d = bn_cuda_dev_ints(n_ids, err, sizeof err);
    CHECK(ids_d && bn_cuda_dev_upload_ints(ids_d, ids, n_ids, err, sizeof err) == 0, "%s", err);
    float *rows_d = bn_cuda_dev_floats(ne0 * nr, err, sizeof err), *got_d = bn_cuda_dev_floats(ne0 * n_ids, err, sizeof err);
    CHECK(bn_cuda_dequant_rows(type, w_d, ne0, r0, nr, rows_d, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(bn_cuda_get_rows_f32(type, w_d, ne0, ne1, ids_d, n_ids, got_d, NULL, err, sizeof err) == 0, "%s", err);
    char what[96];
    snprintf(what, sizeof what, "dequant_rows %s ne0 %lld rows %lld..%lld", bn_type_name(type), (long long)ne0,
             (long long)r0, (long long)(r0 + nr - 1));
    check_dev_bits(what, deq + r0 * ne0, rows_d, ne0 * nr);
    snprintf(what, sizeof what, "get_rows_f32 %s ne0 %lld, %d ids", bn_type_name(type), (long long)ne0, n_ids);
    check_dev_bits(what, picked, got_d, ne0 * n_ids);
    check_weights_bf16(type, w_d, ne0, r0, nr, deq + r0 * ne0);
    bn_cuda_dev_free_bytes(w_d), bn_cuda_dev_free_ints(ids_d);
    free(wq), free(deq), free(picked);
}

// check_weight_errors: a type the device does not dequantize, and a row that is not whole blocks, are refused with
// the type named; empty shapes do nothing.
static void check_weight_errors(void) {
    err[0] = 0;
    CHECK(bn_cuda_dequant_rows(BN_Q5_0, NULL, 64, 0, 2, NULL, NULL, err, sizeof err) == -1, "Q5_0 accepted");
    CHECK(strstr(err, "type 6"), "error names no type: %s", err);
    err[0] = 0;
    CHECK(bn_cuda_dequant_rows_bf16(BN_Q5_0, NULL, 64, 0, 2, NULL, NULL, err, sizeof err) == -1 && strstr(err, "type 6"),
          "Q5_0 accepted by dequant_rows_bf16: %s", err);
    CHECK(bn_cuda_get_rows_f32(BN_Q8_0, NULL, 40, 3, NULL, 2, NULL, NULL, err, sizeof err) == -1, "Q8_0 x 40 accepted");
    CHECK(bn_cuda_dequant_rows(BN_Q8_0, NULL, 64, 0, 0, NULL, NULL, err, sizeof err) == 0, "no rows: %s", err);
    CHECK(bn_cuda_get_rows_f32(BN_F32, NULL, 64, 3, NULL, 0, NULL, NULL, err, sizeof err) == 0, "no ids: %s", err);
    printf("%-64s ok\n", "dequant_rows / get_rows_f32 refusals and empty shapes");
}

// ---- linear + LoRA ------------------------------------------------------------------------------------------------

// weight_bits: W {n_in, n_out} as `type` (BN_F32: W itself, copied; BN_F16: fp16 bits; others: quant/'s reference
// quantizer row by row), n_out rows of bn_row_size(type, n_in) bytes.
static void *weight_bits(int type, const float *w, int64_t n_in, int64_t n_out) {
    const size_t n = (size_t)(n_in * n_out);
    if (type != BN_F32 && type != BN_F16) {
        const size_t rb = bn_row_size(type, n_in);
        uint8_t *q = xmalloc(rb * n_out);
        for (int64_t r = 0; r < n_out; r++) bn_quantize_ref(type, w + r * n_in, q + r * rb, n_in);
        return q;
    }
    if (type == BN_F32) {
        float *c = xmalloc(n * sizeof(float));
        memcpy(c, w, n * sizeof(float));
        return c;
    }
    uint16_t *h = xmalloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) h[i] = bn_fp32_to_fp16(w[i]);
    return h;
}

// check_array: max |got − ref| relative to max(1, max |ref|) within TOL (test_cuda_bwd_seq.c's measure for sums).
static void check_array(const char *what, const float *ref, const float *got, size_t n) {
    double worst = 0, scale = 1;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)got[i] - ref[i]);
        worst = e > worst || e != e ? e : worst;
    }
    CHECK(worst <= TOL * scale, "%s: max error %.3g (scale %.3g)", what, worst, scale);
    printf("%-64s max err %.3g (of %.3g)\n", what, worst / scale, scale);
}

// bf16_twin_fwd: into y, what the bf16 path computes from weight bits of `type`: bf16(W)·bf16(x) in fp32 (each product
// of two bf16 values is exact in fp32, so only the order of the sums differs from the device's) plus the LoRA part of
// (x, drop) in fp32, through the CPU's bn_linear_lora_fwd (a zero weight gives the LoRA part alone); ax as it.
static void bf16_twin_fwd(int type, const void *bits, int64_t n_in, int64_t n_out, const bn_lora_view *lora,
                          const float *x, int T, const float *drop, float *y, float *ax) {
    const size_t nw = (size_t)(n_in * n_out), ny = (size_t)n_out * T;
    float *wf = xmalloc(nw * sizeof(float)), *zero = xcalloc(nw, sizeof(float)), *yl = xmalloc(ny * sizeof(float));
    CHECK(bn_dequantize(type, bits, wf, (int64_t)nw) == 0, "dequantize %s", bn_type_name(type));
    float *wb = bf16_rounded(wf, nw), *xb = bf16_rounded(x, (size_t)n_in * T);
    bn_weight Wb = {.data = wb, .type = BN_F32, .ne = {n_in, n_out, 1, 1}, .name = "w_bf16"};
    bn_weight Z = {.data = zero, .type = BN_F32, .ne = {n_in, n_out, 1, 1}, .name = "zero"};
    CHECK(bn_linear_lora_fwd(&Wb, NULL, xb, T, NULL, y, NULL, err, sizeof err) == 0, "%s", err);
    if (lora) {
        CHECK(bn_linear_lora_fwd(&Z, lora, x, T, drop, yl, ax, err, sizeof err) == 0, "%s", err);
        for (size_t i = 0; i < ny; i++) y[i] += yl[i];
    }
    free(wf), free(zero), free(yl), free(wb), free(xb);
}

// check_lora_ax: bn_cuda_lora_ax of device x {n_in, T} gives the linear's kept A·x (ax, host) bit for bit.
static void check_lora_ax(void *blas, const bn_cuda_lora *lora, int64_t n_in, const float *x_d, int T,
                          const float *ax) {
    const size_t n = (size_t)lora->r * T;
    float *ax_d = bn_cuda_dev_floats(n, err, sizeof err);
    CHECK(bn_cuda_lora_ax(blas, lora, n_in, x_d, T, ax_d, NULL, err, sizeof err) == 0, "lora_ax: %s", err);
    float *got = from_dev(ax_d, n);
    check_bits("  lora_ax alone: the same A·x", ax, got, n);
    free(got);
}

// check_linear: bn_cuda_linear_lora_fwd vs bn_linear_lora_fwd for one weight type and shape; r = 0: no LoRA;
// with_drop: a dropout mask; with_ax: A·(x⊙drop) kept for the backward. bf16: the base product with bf16 inputs,
// checked against its fp32 twin (bf16_twin_fwd) within TOL, and against the plain fp32 product within BF16_TOL while
// farther from it than TOL (the rounding did happen).
static void check_linear(int type, int64_t n_in, int64_t n_out, int r, int T, bool with_drop, bool with_ax, bool bf16) {
    char what[128];
    snprintf(what, sizeof what, "linear %s %lldx%lld r %d T %d%s%s%s", bn_type_name(type), (long long)n_in,
             (long long)n_out, r, T, with_drop ? " drop" : "", with_ax ? " ax" : "", bf16 ? " bf16 GEMM" : "");
    const size_t nw = (size_t)n_in * n_out, nx = (size_t)n_in * T, ny = (size_t)n_out * T, nax = (size_t)r * T;
    float *w = rand_vec(nw, 0.5f), *x = rand_vec(nx, 1.0f), *A = rand_vec((size_t)n_in * r, 0.3f);
    float *B = rand_vec((size_t)r * n_out, 0.3f), *drop = NULL, *y = xmalloc(ny * sizeof(float));
    float *ax = with_ax ? xmalloc(nax * sizeof(float)) : NULL, *twin = bf16 ? xmalloc(ny * sizeof(float)) : NULL;
    if (with_drop) {
        drop = xmalloc(nx * sizeof(float));
        for (size_t i = 0; i < nx; i++) drop[i] = frand() < -0.6f ? 0.0f : 1.0f / 0.8f;
    }
    void *bits = weight_bits(type, w, n_in, n_out);
    bn_weight W = {.data = bits, .type = type, .ne = {n_in, n_out, 1, 1}, .name = "w"};
    bn_lora_view view = {.r = r, .scale = 2.0f / (r ? r : 1), .A = A, .B = B};
    CHECK(bn_linear_lora_fwd(&W, r ? &view : NULL, x, T, drop, y, ax, err, sizeof err) == 0, "%s", err);
    if (bf16) bf16_twin_fwd(type, bits, n_in, n_out, r ? &view : NULL, x, T, drop, twin, NULL);
    const size_t wbytes = bn_row_size(type, n_in) * n_out;
    void *w_d = bn_cuda_dev_bytes(wbytes, err, sizeof err);
    CHECK(w_d && bn_cuda_dev_upload_bytes(w_d, bits, wbytes, err, sizeof err) == 0, "%s", err);
    float *x_d = to_dev(x, nx), *A_d = to_dev(A, (size_t)n_in * r), *B_d = to_dev(B, (size_t)r * n_out);
    float *drop_d = to_dev(drop, nx), *y_d = bn_cuda_dev_floats(ny, err, sizeof err);
    float *ax_d = with_ax ? bn_cuda_dev_floats(nax, err, sizeof err) : NULL;
    float *ws = bn_cuda_dev_floats(bn_cuda_linear_lora_fwd_workspace_floats(bf16, type, n_in, n_out, r, T), err,
                                   sizeof err);
    void *blas = bn_cuda_blas_new(err, sizeof err);
    CHECK(blas, "%s", err);
    bn_cuda_lora lora = {.r = r, .scale = view.scale, .A = A_d, .B = B_d};
    CHECK(bn_cuda_linear_lora_fwd(blas, bf16, type, w_d, n_in, n_out, r ? &lora : NULL, x_d, T, drop_d, y_d, ax_d, ws,
                                  NULL, err, sizeof err) == 0, "%s", err);
    float *y_g = from_dev(y_d, ny), *ax_g = from_dev(ax_d, nax);
    check_array(what, bf16 ? twin : y, y_g, ny);
    if (bf16) {
        const double e = rel_max_diff(y, y_g, ny);
        CHECK(e > TOL && e <= BF16_TOL, "%s: %.3g from the fp32 product (bf16 rounding: above %g, within %g)", what, e,
              TOL, BF16_TOL);
        printf("%-64s %.3g from the fp32 product\n", "  bf16 GEMM", e);
    }
    if (with_ax) check_array("  its ax = A·(x⊙drop)", ax, ax_g, nax);
    if (with_ax && !with_drop) check_lora_ax(blas, &lora, n_in, x_d, T, ax_g);
    bn_cuda_blas_free(blas);
    bn_cuda_dev_free_bytes(w_d);
    float *dev[] = {x_d, A_d, B_d, drop_d, ws};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) bn_cuda_dev_free(dev[i]);
    float *host[] = {w, x, A, B, drop, y, ax, y_g, ax_g, twin};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++) free(host[i]);
    free(bits);
}

// check_linear_errors: a weight without a type and a LoRA of rank 0 are refused; T = 0 does nothing.
static void check_linear_errors(void) {
    bn_cuda_lora lora0 = {.r = 0};
    for (int bf16 = 0; bf16 < 2; bf16++) {
        CHECK(bn_cuda_linear_lora_fwd(NULL, bf16, -1, NULL, 64, 8, NULL, NULL, 2, NULL, NULL, NULL, NULL, NULL, err,
                                      sizeof err) == -1, "a weight of type -1 accepted");
        CHECK(bn_cuda_linear_lora_fwd(NULL, bf16, BN_F32, NULL, 64, 8, &lora0, NULL, 2, NULL, NULL, NULL, NULL, NULL,
                                      err, sizeof err) == -1, "rank 0 accepted");
        CHECK(bn_cuda_linear_lora_fwd(NULL, bf16, BN_F32, NULL, 64, 8, NULL, NULL, 0, NULL, NULL, NULL, NULL, NULL, err,
                                      sizeof err) == 0, "T = 0: %s", err);
    }
    printf("%-64s ok\n", "linear refusals and T = 0");
}

int main(void) {
    if (bn_cuda_device_count() == 0) return test_skip("no CUDA device on this machine");
    char name[128];
    printf("device: %s\n", bn_cuda_device_name(name, sizeof name));
    check_rmsnorm(300, 5, true);
    check_rmsnorm(45, 3, false);
    check_l2norm(100, 6, 1.0f);
    check_l2norm(300, 3, 1.0f / sqrtf(300.0f));
    check_gated_rmsnorm(300, 4, true);
    check_gated_rmsnorm(37, 3, false);
    check_swiglu_gate(1000);
    check_swiglu_gate(77);
    check_gdn_gates(37, 6);
    check_add(300, 4);
    check_bf16_copies(1000);
    check_copy_cols(5, 300, 40, 100, 3, 70);  // a split of a packed projection
    check_copy_cols(4, 37, 0, 111, 74, 37);   // assembled into the last third of a packed row
    check_rope(24, 3, 5, 16, 7, BN_ROPE_NEOX); // partial rotation: dims 16..23 pass through
    check_rope(24, 3, 5, 16, 7, BN_ROPE_NORM);
    check_rope(80, 2, 4, 80, 1000, BN_ROPE_NEOX);
    check_rope(80, 2, 4, 80, 1000, BN_ROPE_NORM);
    const struct { int type; int64_t ne0; } types[] = {
        {BN_Q1_0, 384}, {BN_Q2_0, 320}, {BN_PQ2_0, 384}, {BN_Q8_0, 352}, {BN_Q4_0, 352}, {BN_Q4_1, 352},
        {BN_Q4_K, 512}, {BN_Q6_K, 512}, {BN_F16, 333}, {BN_BF16, 333}, {BN_F32, 333},
    };
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) check_weights(types[i].type, types[i].ne0);
    check_weight_errors();
    check_linear(BN_F32, 300, 70, 0, 5, false, false, false);
    check_linear(BN_F32, 48, 40, 4, 7, true, true, false);
    check_linear(BN_F32, 300, 37, 6, 3, false, false, false);
    check_linear(BN_F16, 72, 300, 4, 3, false, true, false);
    check_linear(BN_F16, 1024, 4100, 8, 2, true, true, false); // two chunks of widened F16 rows
    check_linear(BN_F16, 100, 50, 0, 4, false, false, false);
    check_linear(BN_Q8_0, 96, 40, 4, 3, true, true, false);     // quantized weights: their rows dequantized in the workspace
    check_linear(BN_Q1_0, 1024, 4100, 8, 2, false, true, false); // two chunks of dequantized Q1_0 rows
    check_linear(BN_Q2_0, 320, 33, 0, 3, false, false, false);
    // bf16 GEMMs: F32 weights made bf16 too, an F16 weight, quantized ones, and two chunks (8192 rows of 1024, then 8)
    check_linear(BN_F32, 300, 70, 4, 5, true, true, true);
    check_linear(BN_F16, 72, 300, 0, 3, false, false, true);
    check_linear(BN_Q8_0, 96, 40, 4, 3, false, true, true);
    check_linear(BN_Q1_0, 1024, 8200, 8, 3, false, true, true);
    check_linear_errors();
    return test_done("cuda_fwd_ops");
}
