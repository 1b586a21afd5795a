// tests/quant/test_dot_batch.c — bn_vec_dot_rows_batch (the mat-mat of prefill and DSpark's verify) for
// every weight type, ny = 1..9 activation rows, odd weight-row counts and padded strides:
//   1. every result is within the tolerance of the scalar reference dot of that weight row and activation
//      row: |a - b| <= 1e-5 * sum|x_i*y_i| + 1e-6 (integer parts are exact; fp32 sums in another order);
//   2. results do not depend on how the rows are split into calls at multiples of 16 (bit-identical; the
//      engine's threads split the rows that way, so results do not depend on the thread count);
//   3. ny < 4 gives bit for bit what bn_vec_dot_rows (the decode mat-vec) gives for each activation row; for
//      Q1_0, Q2_0, PQ2_0, Q4_0 and Q8_0 every ny does (so DSpark's verify passes and prefill give decode's bits);
//   4. for ny >= 5 the result of activation row t does not depend on ny (bit-identical to ny = 9): a
//      verify of 5 tokens and one of 8 agree on their common tokens.
//   5. bn_matmul with F32/F16/BF16 weights and n = 2..8 activation rows (the small-batch row path) gives bit
//      for bit the n = 1 results of each row; n = 9 (the gemm: quant/float_avx512.c, or sgemm) within 1e-5 relative.
//   6. where a type has prepared activations (bn_vec_dot_batch_prep_size > 0), preparing the groups in two calls and
//      running bn_vec_dot_rows_prepared on the rows split as in 2 gives bn_vec_dot_rows_batch's bits.
// Runs with BONSAI_SIMD unset (VNNI where present), =avx2 and =scalar (tests/quant/meson.build).
#include "quant/quant.h"
#include "core/matmul.h"
#include "base/util.h"
#include "tests/test.h"
#include <string.h>

static uint64_t rng = 0x243F6A8885A308D3ULL;
static float uniform(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)(rng >> 40) / 16777216.0f * 2.0f - 1.0f;
}

static const int weight_types[] = {BN_F32, BN_F16, BN_BF16, BN_Q4_0, BN_Q4_1, BN_Q8_0, BN_Q4_K, BN_Q6_K,
                                   BN_TQ1_0, BN_TQ2_0, BN_Q1_0, BN_Q2_0, BN_PQ2_0, BN_PTQ1_0};
enum { NE0 = 512, NROWS = 301, NY_MAX = 9, S_STRIDE = NROWS + 3 };

// exact_type: the types whose mat-mat gives the mat-vec's bits for every number of activation rows (the Bonsai
// types, Q4_0 and Q8_0: quant/matvec_avx2.c's shared formula, or per-row kernels on both sides); others only below 4
// rows (property 3)
static bool exact_type(int type) {
    return type == BN_Q1_0 || type == BN_Q2_0 || type == BN_PQ2_0 || type == BN_Q4_0 || type == BN_Q8_0;
}

static double tolerance(const float *a, const float *b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += fabs((double)a[i] * b[i]);
    return 1e-5 * s + 1e-6;
}

// batch_split: bn_vec_dot_rows_batch over rows [0, nrows) in calls that start at the given row offsets.
static void batch_split(int type, int nrows, int ny, float *s, const uint8_t *w, size_t w_stride, const uint8_t *y,
                        size_t y_stride, const int *cuts, int n_cuts) {
    for (int c = 0; c < n_cuts; c++) {
        int r0 = cuts[c], r1 = c + 1 < n_cuts ? cuts[c + 1] : nrows;
        bn_vec_dot_rows_batch(type, NE0, r1 - r0, ny, s + r0, S_STRIDE, w + w_stride * r0, w_stride, y, y_stride);
    }
}

static void check_type(int type) {
    const bn_type_traits *tr = bn_type_traits_of(type);
    const int vt = tr->vec_dot_type;
    const size_t w_stride = bn_row_size(type, NE0) + 64, y_stride = bn_row_size(vt, NE0) + 96;
    uint8_t *w = calloc(NROWS, w_stride), *y = calloc(NY_MAX, y_stride);
    float *wdeq = malloc(sizeof(float) * NE0 * NROWS), *ydeq = malloc(sizeof(float) * NE0 * NY_MAX);
    float *tmp = malloc(sizeof(float) * NE0);
    for (int r = 0; r < NROWS; r++) {
        for (int i = 0; i < NE0; i++) tmp[i] = uniform() * (float)(1 + r % 5);
        bn_quantize_ref(type, tmp, w + w_stride * r, NE0);
        bn_dequantize(type, w + w_stride * r, wdeq + (size_t)NE0 * r, NE0);
    }
    for (int t = 0; t < NY_MAX; t++) {
        for (int i = 0; i < NE0; i++) tmp[i] = uniform() * (float)(t + 1);
        if (t == 2) tmp[7] = -60.0f; // an outlier: large activation scale in one block
        bn_quantize_activations_cpu(vt, tmp, y + y_stride * t, NE0);
        bn_dequantize(vt, y + y_stride * t, ydeq + (size_t)NE0 * t, NE0);
    }
    float *ref = malloc(sizeof(float) * NROWS * NY_MAX);
    for (int t = 0; t < NY_MAX; t++)
        for (int r = 0; r < NROWS; r++)
            bn_vec_dot_ref(type)(NE0, &ref[t * NROWS + r], w + w_stride * r, y + y_stride * t);
    float *s = malloc(sizeof(float) * S_STRIDE * NY_MAX), *s2 = malloc(sizeof(float) * S_STRIDE * NY_MAX);
    float *s9 = malloc(sizeof(float) * S_STRIDE * NY_MAX), *mv = malloc(sizeof(float) * NROWS);
    const int whole[] = {0}, cuts[] = {0, 16, 48, 160, 272};
    batch_split(type, NROWS, NY_MAX, s9, w, w_stride, y, y_stride, whole, 1);
    double worst = 0; // largest |error| / tolerance over all ny
    for (int ny = 1; ny <= NY_MAX; ny++) {
        for (int i = 0; i < S_STRIDE * NY_MAX; i++) s[i] = s2[i] = NAN;
        batch_split(type, NROWS, ny, s, w, w_stride, y, y_stride, whole, 1);
        batch_split(type, NROWS, ny, s2, w, w_stride, y, y_stride, cuts, 5);
        int bad_ref = 0, bad_split = 0, bad_mv = 0, bad_ny = 0, bad_prep = 0;
        const size_t prep_bytes = bn_vec_dot_batch_prep_size(type, NE0, ny);
        float *sp = malloc(sizeof(float) * S_STRIDE * NY_MAX);
        if (prep_bytes) {
            void *prep = bn_aligned_alloc(prep_bytes);
            const int n_groups = (ny + 7) / 8;
            bn_vec_dot_batch_prepare(type, NE0, ny, 0, n_groups / 2, y, y_stride, prep);
            bn_vec_dot_batch_prepare(type, NE0, ny, n_groups / 2, n_groups, y, y_stride, prep);
            for (int c = 0; c < 5; c++) {
                const int r0 = cuts[c], r1 = c + 1 < 5 ? cuts[c + 1] : NROWS;
                bn_vec_dot_rows_prepared(type, NE0, r1 - r0, ny, sp + r0, S_STRIDE, w + w_stride * r0, w_stride, prep);
            }
            free(prep);
        }
        const bool same_as_mv = ny < 4 || exact_type(type); // results equal to the mat-vec's, bit for bit
        for (int t = 0; t < ny; t++) {
            if (same_as_mv) bn_vec_dot_rows(type, NE0, NROWS, mv, w, w_stride, y + y_stride * t);
            for (int r = 0; r < NROWS; r++) {
                float got = s[t * S_STRIDE + r];
                double tol = tolerance(wdeq + (size_t)NE0 * r, ydeq + (size_t)NE0 * t, NE0);
                double e = fabs((double)got - ref[t * NROWS + r]) / tol;
                if (!(e <= 1.0)) bad_ref++;
                if (e > worst) worst = e;
                if (memcmp(&got, &s2[t * S_STRIDE + r], sizeof got) != 0) bad_split++;
                if (same_as_mv && memcmp(&got, &mv[r], sizeof got) != 0) bad_mv++;
                if (ny >= 5 && memcmp(&got, &s9[t * S_STRIDE + r], sizeof got) != 0) bad_ny++;
                if (prep_bytes && memcmp(&got, &sp[t * S_STRIDE + r], sizeof got) != 0) bad_prep++;
            }
        }
        CHECK(bad_ref == 0, "%s ny=%d: %d of %d results off the reference", tr->name, ny, bad_ref, ny * NROWS);
        CHECK(bad_split == 0, "%s ny=%d: %d results change when the rows are split at multiples of 16", tr->name,
              ny, bad_split);
        CHECK(bad_mv == 0, "%s ny=%d: %d results differ from bn_vec_dot_rows", tr->name, ny, bad_mv);
        CHECK(bad_ny == 0, "%s ny=%d: %d results differ from the same rows in a batch of 9", tr->name, ny, bad_ny);
        CHECK(bad_prep == 0, "%s ny=%d: %d results differ with activations prepared once", tr->name, ny, bad_prep);
        free(sp);
    }
    printf("  %-6s ny 1..9 x %d rows: worst |error| = %.3f x tolerance\n", tr->name, NROWS, worst);
    free(w); free(y); free(wdeq); free(ydeq); free(tmp); free(ref); free(s); free(s2); free(s9); free(mv);
}

// check_matmul_float: property 5 for a F32/F16/BF16 weight of {72, 37} (72 = 4 chunks of 16 + a tail of 8).
static void check_matmul_float(int type) {
    enum { E = 72, R = 37, N_MAX = 9 };
    void *wd = malloc(sizeof(float) * E * R);
    float *x = malloc(sizeof(float) * E * N_MAX), *y = malloc(sizeof(float) * R * N_MAX), y1[R];
    for (int i = 0; i < E * R; i++) {
        if (type == BN_F32) ((float *)wd)[i] = uniform();
        else ((uint16_t *)wd)[i] = type == BN_F16 ? bn_fp32_to_fp16(uniform()) : bn_fp32_to_bf16(uniform());
    }
    for (int i = 0; i < E * N_MAX; i++) x[i] = uniform();
    bn_weight w = {.data = wd, .type = type, .ne = {E, R, 1, 1}, .name = "w"};
    void *work = bn_aligned_alloc(bn_matmul_work_size(&w, N_MAX));
    for (int n = 2; n <= N_MAX; n++) {
        bn_matmul(&w, x, y, n, work, NULL);
        int bad = 0;
        for (int t = 0; t < n; t++) {
            bn_matmul(&w, x + t * E, y1, 1, work, NULL);
            for (int r = 0; r < R; r++) {
                float got = y[t * R + r];
                bool same = n <= 8 ? memcmp(&got, &y1[r], sizeof got) == 0
                                   : fabsf(got - y1[r]) <= 1e-5f * (1 + fabsf(y1[r]));
                if (!same) bad++;
            }
        }
        CHECK(bad == 0, "%s bn_matmul n=%d: %d results differ from n = 1", bn_type_name(type), n, bad);
    }
    free(wd); free(x); free(y); free(work);
}

int main(void) {
    printf("dispatch: %s\n", bn_simd_name());
    for (size_t k = 0; k < sizeof weight_types / sizeof weight_types[0]; k++) check_type(weight_types[k]);
    check_matmul_float(BN_F32);
    check_matmul_float(BN_F16);
    check_matmul_float(BN_BF16);
    return test_done("test_dot_batch");
}
