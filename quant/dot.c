// quant/dot.c — scalar reference dots for the float types, and the runtime dispatch that picks the
// AVX2/FMA kernels (dot_avx2.c) when the CPU has AVX2+FMA+F16C, and for the Q1_0/Q2_0 mat-vec the
// AVX512-VNNI variant where present (and AVX-512 for the float weights, float_rows.c). BONSAI_SIMD=scalar forces
// scalar, BONSAI_SIMD=avx2 disables VNNI and AVX-512.
#include "quant/quant_impl.h"
#include <stdlib.h>
#include <cpuid.h>

int bn_have_avx2, bn_have_vnni, bn_have_avx512;

// F32 · F32: fp32 accumulation in element order.
void bn_dot_f32_ref(int n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    float sum = 0.0f;
    for (int i = 0; i < n; i++) sum += x[i] * y[i];
    *s = sum;
}

// F16 · F16: both converted to fp32 (exact), fp32 accumulation.
void bn_dot_f16_ref(int n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    float sum = 0.0f;
    for (int i = 0; i < n; i++) sum += bn_h2f(x[i]) * bn_h2f(y[i]);
    *s = sum;
}

// BF16 · BF16: both converted to fp32 (exact), fp32 accumulation.
void bn_dot_bf16_ref(int n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    float sum = 0.0f;
    for (int i = 0; i < n; i++) sum += bn_bf16_to_fp32(x[i]) * bn_bf16_to_fp32(y[i]);
    *s = sum;
}

static bn_vec_dot_fn ref_dots[BN_TYPE_MAX] = {
    [BN_F32] = bn_dot_f32_ref,     [BN_F16] = bn_dot_f16_ref,     [BN_BF16] = bn_dot_bf16_ref,
    [BN_Q1_0] = bn_dot_q1_0_ref,   [BN_Q2_0] = bn_dot_q2_0_ref,   [BN_PQ2_0] = bn_dot_pq2_0_ref,
    [BN_PTQ1_0] = bn_dot_ptq1_0_ref, [BN_Q4_0] = bn_dot_q4_0_ref, [BN_Q4_1] = bn_dot_q4_1_ref,
    [BN_Q8_0] = bn_dot_q8_0_ref,   [BN_Q4_K] = bn_dot_q4_K_ref,   [BN_Q6_K] = bn_dot_q6_K_ref,
    [BN_Q5_0] = bn_dot_q5_0_ref,   [BN_Q5_1] = bn_dot_q5_1_ref,   [BN_Q5_K] = bn_dot_q5_K_ref,
    [BN_TQ1_0] = bn_dot_tq1_0_ref, [BN_TQ2_0] = bn_dot_tq2_0_ref,
};

static bn_vec_dot_fn best_dots[BN_TYPE_MAX];

// cpu_f16c: CPUID.1:ECX bit 29 (clang's __builtin_cpu_supports does not know "f16c").
static bool cpu_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && ((c >> 29) & 1);
}

bool bn_cpu_has_avx2(void) { return bn_have_avx2 != 0; }
bool bn_cpu_has_avx512(void) { return bn_have_avx512 != 0; }

// Chooses the kernels once, before main (the static library pulls this file in via types.c).
__attribute__((constructor)) static void dot_dispatch_init(void) {
    __builtin_cpu_init();
    const char *force = getenv("BONSAI_SIMD");
    bool scalar = force && (strcmp(force, "scalar") == 0 || strcmp(force, "0") == 0);
    bool avx2_only = force && strcmp(force, "avx2") == 0;
    bn_have_avx2 = !scalar && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_f16c();
    bn_have_vnni = bn_have_avx2 && !avx2_only && __builtin_cpu_supports("avx512f") &&
                   __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                   __builtin_cpu_supports("avx512vnni");
    bn_have_avx512 = bn_have_avx2 && !avx2_only && __builtin_cpu_supports("avx512f") &&
                     __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                     __builtin_cpu_supports("avx512dq");
    memcpy(best_dots, ref_dots, sizeof best_dots);
    if (bn_have_avx2) {
        best_dots[BN_F32] = bn_dot_f32_avx2;
        best_dots[BN_F16] = bn_dot_f16_avx2;
        best_dots[BN_Q1_0] = bn_dot_q1_0_avx2;
        best_dots[BN_Q2_0] = bn_dot_q2_0_avx2;
        best_dots[BN_PQ2_0] = bn_dot_pq2_0_avx2;
        best_dots[BN_Q4_0] = bn_dot_q4_0_avx2;
        best_dots[BN_Q8_0] = bn_dot_q8_0_avx2;
        best_dots[BN_Q6_K] = bn_dot_q6_K_avx2;
        best_dots[BN_Q4_K] = bn_dot_q4_K_avx2;
        best_dots[BN_TQ2_0] = bn_dot_tq2_0_avx2;
    }
}

bn_vec_dot_fn bn_vec_dot_ref(int type) {
    return type >= 0 && type < BN_TYPE_MAX ? ref_dots[type] : NULL;
}

bn_vec_dot_fn bn_vec_dot_best(int type) {
    return type >= 0 && type < BN_TYPE_MAX ? best_dots[type] : NULL;
}

const char *bn_simd_name(void) {
    if (bn_have_vnni) return bn_have_avx512 ? "avx2+vnni+avx512" : "avx2+vnni";
    return bn_have_avx512 ? "avx2+avx512" : bn_have_avx2 ? "avx2" : "scalar";
}

void bn_dot_dispatch(int type, int n, float *s, const void *x, const void *y) { best_dots[type](n, s, x, y); }

void bn_vec_dot_rows(int type, int n, int nrows, float *s, const void *w, size_t w_row_stride, const void *y) {
    // Q1_0 / Q2_0 / PQ2_0 / Q4_0 (Q8_0 with VNNI): the prepared AVX2 mat-vec kernels for any row count (their
    // results are the mat-mat's, quant/matvec_avx2.c); other types: the dispatched vec_dot per row.
    if (bn_have_avx2 && bn_vec_dot_rows_avx2(type, n, nrows, s, w, w_row_stride, y)) return;
    bn_vec_dot_fn dot = best_dots[type];
    const char *row = w;
    for (int r = 0; r < nrows; r++) dot(n, &s[r], row + (size_t)r * w_row_stride, y);
}

// From 4 activation rows on, the interleaved batch-of-8 kernel costs less than 4 mat-vecs; below, the mat-vec kernel
// per activation row. For Q1_0 / Q2_0 / PQ2_0 / Q4_0 (Q8_0 with VNNI) both give the decode path's bits.
enum { BATCH_MIN = 4 };

size_t bn_vec_dot_batch_prep_size(int type, int n, int ny) {
    return ny >= BATCH_MIN && bn_have_avx2 ? bn_batch_prep_size_avx2(type, n, ny) : 0;
}

void bn_vec_dot_batch_prepare(int type, int n, int ny, int g0, int g1, const void *y, size_t y_row_stride,
                              void *prep) {
    bn_batch_prepare_avx2(type, n, ny, g0, g1, y, y_row_stride, prep);
}

void bn_vec_dot_rows_prepared(int type, int n, int nrows, int ny, float *s, size_t s_stride, const void *w,
                              size_t w_row_stride, const void *prep) {
    bn_batch_rows_avx2(type, n, nrows, ny, s, s_stride, w, w_row_stride, prep);
}

void bn_vec_dot_rows_batch(int type, int n, int nrows, int ny, float *s, size_t s_stride, const void *w,
                           size_t w_row_stride, const void *y, size_t y_row_stride) {
    if (ny >= BATCH_MIN && bn_have_avx2 &&
        bn_vec_dot_rows_batch_avx2(type, n, nrows, ny, s, s_stride, w, w_row_stride, y, y_row_stride))
        return;
    enum { ROW_BLOCK = 256 };   // a block of weight rows stays in cache while every activation row passes
    for (int r0 = 0; r0 < nrows; r0 += ROW_BLOCK) {
        int nr = nrows - r0 < ROW_BLOCK ? nrows - r0 : ROW_BLOCK;
        for (int t = 0; t < ny; t++)
            bn_vec_dot_rows(type, n, nr, s + s_stride * t + r0, (const char *)w + w_row_stride * r0, w_row_stride,
                            (const char *)y + y_row_stride * t);
    }
}
