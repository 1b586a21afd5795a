// tests/quant/test_dot.c — vec_dot kernels: dispatched (SIMD) == scalar reference, reference == the
// double-precision dot of the dequantized operands, bn_vec_dot_rows over odd row counts and padded
// strides, and agreement with ggml's CPU vec_dot (libggml-cpu-haswell.so) where the type exists there.
// Tolerance: |a - b| <= 1e-5 * sum|x_i*y_i| + 1e-6 (fp32 accumulation in a different order; the
// integer parts are exact).
#include "quant/quant.h"
#include "tests/quant/ggml_base.h"
#include <string.h>

static uint64_t rng = 0x13198A2E03707344ULL;
static uint32_t next_u32(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 16); }
static float uniform(void) { return (float)next_u32() / 4294967296.0f * 2.0f - 1.0f; }

static const int weight_types[] = {BN_F32, BN_F16, BN_BF16, BN_Q4_0, BN_Q4_1, BN_Q8_0, BN_Q4_K, BN_Q6_K,
                                   BN_TQ1_0, BN_TQ2_0, BN_Q1_0, BN_Q2_0, BN_PQ2_0, BN_PTQ1_0};
// ggml knows these ids with the same layout (PQ2_0/PTQ1_0 are fork-only).
static bool in_ggml(int type) { return type != BN_PQ2_0 && type != BN_PTQ1_0; }

static int ggml_compared;

typedef struct {
    float *x, *deq_x, *deq_y;
    uint8_t *qx, *qy;
} buffers;

static double tolerance(const float *a, const float *b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += fabs((double)a[i] * b[i]);
    return 1e-5 * s + 1e-6;
}

static void check_type(int type, int n, buffers *B, const ggml_cpu_traits *g) {
    const bn_type_traits *t = bn_type_traits_of(type);
    int vt = t->vec_dot_type;
    float y[8192];
    for (int i = 0; i < n; i++) { B->x[i] = uniform(); y[i] = uniform() * 3.0f; }
    if (n >= 64) { B->x[5] = 0; B->x[n - 1] = 7.5f; y[3] = -50.0f; }   // some structure: zeros, outliers
    memset(B->qx, 0, bn_row_size(type, n));
    memset(B->qy, 0, bn_row_size(vt, n));
    bn_quantize_ref(type, B->x, B->qx, n);
    bn_quantize_activations(vt, y, B->qy, n);
    bn_dequantize(type, B->qx, B->deq_x, n);
    bn_dequantize(vt, B->qy, B->deq_y, n);
    double exact = 0;
    for (int i = 0; i < n; i++) exact += (double)B->deq_x[i] * B->deq_y[i];
    if (vt == BN_Q8_1) {   // Q4_1's min term uses the stored s = fp16(d*sum(q)), not the exact activation sum
        const bn_block_q4_1 *bx = (const bn_block_q4_1 *)B->qx;
        const bn_block_q8_1 *by = (const bn_block_q8_1 *)B->qy;
        for (int b = 0; b < n / 32; b++) {
            double exact_sum = 0;
            for (int j = 0; j < 32; j++) exact_sum += B->deq_y[32 * b + j];
            exact += (double)bn_fp16_to_fp32(bx[b].m) * (bn_fp16_to_fp32(by[b].s) - exact_sum);
        }
    }
    double tol = tolerance(B->deq_x, B->deq_y, n);

    float ref = NAN, best = NAN;
    bn_vec_dot_ref(type)(n, &ref, B->qx, B->qy);
    bn_vec_dot_best(type)(n, &best, B->qx, B->qy);
    CHECK(fabs(ref - exact) <= tol, "%s n=%d: reference dot %.7g vs dequantized dot %.7g", t->name, n, ref, exact);
    CHECK(fabs(best - ref) <= tol, "%s n=%d: %s dot %.7g vs reference %.7g", t->name, n, bn_simd_name(), best, ref);
    float via_traits = NAN;
    t->vec_dot(n, &via_traits, B->qx, B->qy);
    CHECK(via_traits == best, "%s n=%d: traits vec_dot %.9g != dispatched %.9g", t->name, n, via_traits, best);

    if (g && g->vec_dot && in_ggml(type)) {
        CHECK(g->vec_dot_type == vt, "%s: ggml vec_dot_type %d, ours %d", t->name, g->vec_dot_type, vt);
        if (g->vec_dot_type == vt) {
            float theirs = NAN;
            g->vec_dot(n, &theirs, 0, B->qx, 0, B->qy, 0, 1);
            ggml_compared++;
            CHECK(fabs(theirs - ref) <= tol, "%s n=%d: ggml vec_dot %.7g vs ours %.7g", t->name, n, theirs, ref);
        }
    }

    // Row-batched entry: rows with a padded stride, odd counts; every row must equal the single dot.
    const int row_counts[] = {1, 3, 7, 8, 13};
    size_t row_bytes = bn_row_size(type, n), stride = row_bytes + 64;
    uint8_t *w = malloc(stride * 13);
    for (int r = 0; r < 13; r++) {
        for (int i = 0; i < n; i++) B->x[i] = uniform() * (float)(r + 1);
        bn_quantize_ref(type, B->x, w + stride * r, n);
    }
    for (size_t c = 0; c < sizeof row_counts / sizeof row_counts[0]; c++) {
        int nrows = row_counts[c];
        float s[13];
        bn_vec_dot_rows(type, n, nrows, s, w, stride, B->qy);
        int bad = 0;
        for (int r = 0; r < nrows; r++) {
            float one = NAN;
            bn_vec_dot_ref(type)(n, &one, w + stride * r, B->qy);
            bn_dequantize(type, w + stride * r, B->deq_x, n);
            if (!(fabs(s[r] - one) <= tolerance(B->deq_x, B->deq_y, n))) bad++;
        }
        CHECK(bad == 0, "%s n=%d: bn_vec_dot_rows(%d rows): %d rows differ from the reference", t->name, n, nrows, bad);
    }

    // Batched entry: ny activation rows (vec_dot_type, padded stride), output with a padded stride.
    const int ny_counts[] = {1, 2, 5, 9};
    int vt_size = (int)bn_row_size(vt, n);
    size_t y_stride = (size_t)vt_size + 96, s_stride = 17;
    uint8_t *ys = calloc(9, y_stride);
    float *ydeq = malloc(sizeof(float) * n * 9), *out = malloc(sizeof(float) * s_stride * 9);
    for (int t = 0; t < 9; t++) {
        for (int i = 0; i < n; i++) y[i] = uniform() * (float)(t + 1);
        bn_quantize_activations(vt, y, ys + y_stride * t, n);
        bn_dequantize(vt, ys + y_stride * t, ydeq + (size_t)n * t, n);
    }
    for (size_t c = 0; c < sizeof ny_counts / sizeof ny_counts[0]; c++) {
        int ny = ny_counts[c];
        for (size_t i = 0; i < s_stride * 9; i++) out[i] = NAN;
        bn_vec_dot_rows_batch(type, n, 13, ny, out, s_stride, w, stride, ys, y_stride);
        int bad = 0;
        for (int t = 0; t < ny; t++)
            for (int r = 0; r < 13; r++) {
                float one = NAN;
                bn_vec_dot_ref(type)(n, &one, w + stride * r, ys + y_stride * t);
                bn_dequantize(type, w + stride * r, B->deq_x, n);
                if (!(fabs(out[s_stride * t + r] - one) <= tolerance(B->deq_x, ydeq + (size_t)n * t, n))) bad++;
            }
        CHECK(bad == 0, "%s n=%d: bn_vec_dot_rows_batch(13 rows, %d activations): %d results differ", t->name, n, ny, bad);
    }
    free(ys); free(ydeq); free(out);
    free(w);
}

int main(void) {
    buffers B = {malloc(8192 * 4), malloc(8192 * 4), malloc(8192 * 4), malloc(8192 * 4 + 64), malloc(8192 * 4 + 64)};
    char why[1200];
    bool have_ggml = ggml_base_open(why, sizeof why) == 0;
    if (!have_ggml) printf("SKIP (ggml vec_dot comparisons): %s\n", why);
    printf("dispatch: %s\n", bn_simd_name());
    for (size_t k = 0; k < sizeof weight_types / sizeof weight_types[0]; k++) {
        int type = weight_types[k];
        const ggml_cpu_traits *g = have_ggml ? ggml_cpu_traits_of(type) : NULL;
        if (have_ggml && !g && in_ggml(type)) printf("note: ggml CPU traits unavailable for %s\n", bn_type_name(type));
        int blck = bn_type_blck(type);
        if (blck == 1) {
            const int ns[] = {1, 2, 3, 5, 7, 8, 15, 16, 17, 31, 33, 63, 67, 127, 129, 193, 255, 1023};
            for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) check_type(type, ns[i], &B, g);
        } else {
            const int mult[] = {1, 2, 3, 5, 20};
            for (size_t i = 0; i < sizeof mult / sizeof mult[0]; i++) check_type(type, blck * mult[i], &B, g);
            check_type(type, 5120, &B, g);
        }
    }
    printf("compared with ggml's CPU vec_dot: %d cases\n", ggml_compared);
    free(B.x); free(B.deq_x); free(B.deq_y); free(B.qx); free(B.qy);
    return test_done("test_dot");
}
