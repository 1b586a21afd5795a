// core/matmul.c — y = W·x for weights in their stored type (see core/matmul.h).
//
// Paths:
//   quantized (any n): activations quantized once to vec_dot_type with llama.cpp's CPU rounding
//       (bn_quantize_activations_cpu: 127/amax, ties to even); threads split the output rows;
//       n == 1: bn_vec_dot_rows (mat-vec); n > 1: bn_vec_dot_rows_batch (mat-mat: each weight row
//       is read from memory once per call; from 4 rows on, expanded once per 8 activation rows).
//   F32, n <= SMALL_BATCH: float dot per row and activation row (bn_vec_dot_rows with the F32 activation as is;
//       a verify pass's rows equal the decode path's bits).
//   F32, n > SMALL_BATCH: one OpenBLAS sgemm straight on the mmapped weight.
//   F16/BF16, n == 1: float dot of the converted weight row with the f32 activation (F16C/AVX2
//       kernel here; the activation is NOT rounded to f16 as ggml does, so decode == prefill).
//   F16/BF16, 1 < n <= SMALL_BATCH (DSpark's verify): each weight row is converted once per activation
//       row by the n == 1 kernel while it sits in L1 (read from memory once; each row's results equal
//       the decode path's bits).
//   F16/BF16, n > SMALL_BATCH: the weight is dequantized to f32 in panels of rows (about PANEL_FLOATS floats,
//       in the work buffer; nothing is cached between calls — a whole-model f32 copy would triple
//       memory) and each panel goes through sgemm. The dequantization is amortised over n tokens.
#include "core/matmul.h"
#include "quant/quant.h"
#include <cblas.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define ROW_BLOCK 16
#define PANEL_FLOATS (1 << 21) // 8 MiB of f32 per panel
#define MIN_PARALLEL_MACS (1 << 15) // smaller products run on the calling thread (sync costs more)
#define SMALL_BATCH 8 // float weights: up to this many activation rows go through the row kernel, not sgemm

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

static bool is_float_type(int type) { return type == BN_F16 || type == BN_BF16; }

// panel_rows: rows of a F16/BF16 weight dequantized per sgemm panel.
static int64_t panel_rows(int64_t ne0, int64_t ne1) {
    int64_t rows = PANEL_FLOATS / (ne0 > 0 ? ne0 : 1);
    if (rows < ROW_BLOCK) rows = ROW_BLOCK;
    rows -= rows % ROW_BLOCK;
    return rows < ne1 ? rows : ne1;
}

size_t bn_matmul_work_size(const bn_weight *w, int n) {
    const int64_t ne0 = w->ne[0], ne1 = w->ne[1];
    if (w->type == BN_F32) return 64;
    if (is_float_type(w->type))
        return n > SMALL_BATCH ? align64((size_t)panel_rows(ne0, ne1) * (size_t)ne0 * sizeof(float)) : 64;
    const bn_type_traits *tr = bn_type_traits_of(w->type);
    if (!tr) return 64;
    return align64((size_t)n * bn_row_size(tr->vec_dot_type, ne0)) + 64;
}

// ---- F16/BF16 weight row · f32 activation ----------------------------------------------------
static float dot_f16_f32_scalar(const uint16_t *w, const float *x, int n) {
    float sum = 0.0f;
    for (int i = 0; i < n; i++) sum += bn_fp16_to_fp32(w[i]) * x[i];
    return sum;
}
static float dot_bf16_f32_scalar(const uint16_t *w, const float *x, int n) {
    float sum = 0.0f;
    for (int i = 0; i < n; i++) sum += bn_bf16_to_fp32(w[i]) * x[i];
    return sum;
}
#if defined(__x86_64__)
__attribute__((target("avx2,fma,f16c"))) static float hsum256(__m256 v) {
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
    return _mm_cvtss_f32(s4);
}
__attribute__((target("avx2,fma,f16c"))) static float dot_f16_f32_avx2(const uint16_t *w, const float *x, int n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i))), _mm256_loadu_ps(x + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i + 8))), _mm256_loadu_ps(x + i + 8),
                               acc1);
    }
    float sum = hsum256(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) sum += bn_fp16_to_fp32(w[i]) * x[i];
    return sum;
}
__attribute__((target("avx2,fma,f16c"))) static float dot_bf16_f32_avx2(const uint16_t *w, const float *x, int n) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i wi = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(w + i))), 16);
        acc = _mm256_fmadd_ps(_mm256_castsi256_ps(wi), _mm256_loadu_ps(x + i), acc);
    }
    float sum = hsum256(acc);
    for (; i < n; i++) sum += bn_bf16_to_fp32(w[i]) * x[i];
    return sum;
}
// dot_f16_f32_avx2_x4: dot_f16_f32_avx2 of one F16 weight row with up to 4 activation rows (x + t * ldx), each
// weight chunk converted once; every result is bit-identical to dot_f16_f32_avx2 (same operations per row).
__attribute__((target("avx2,fma,f16c"))) static void dot_f16_f32_avx2_x4(const uint16_t *w, const float *x,
                                                                         int64_t ldx, int nx, int n, float *out) {
    __m256 acc0[4], acc1[4];
    for (int t = 0; t < 4; t++) acc0[t] = acc1[t] = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i)));
        const __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i + 8)));
        for (int t = 0; t < nx; t++) {
            acc0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + t * ldx + i), acc0[t]);
            acc1[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + t * ldx + i + 8), acc1[t]);
        }
    }
    for (int t = 0; t < nx; t++) {
        float sum = hsum256(_mm256_add_ps(acc0[t], acc1[t]));
        for (int k = i; k < n; k++) sum += bn_fp16_to_fp32(w[k]) * x[t * ldx + k];
        out[t] = sum;
    }
}
static int have_f16c(void) { return bn_cpu_has_avx2(); }
#endif

// dot_half_f32: dot of a F16 or BF16 weight row with f32 x.
static float dot_half_f32(int type, const uint16_t *w, const float *x, int n) {
#if defined(__x86_64__)
    if (have_f16c()) return type == BN_F16 ? dot_f16_f32_avx2(w, x, n) : dot_bf16_f32_avx2(w, x, n);
#endif
    return type == BN_F16 ? dot_f16_f32_scalar(w, x, n) : dot_bf16_f32_scalar(w, x, n);
}

typedef struct {
    const bn_weight *w;
    const float *x; // [n][ne0]
    float *y;       // [n][ne1]
    int n;
} half_job;

static void half_rows_task(void *ctx, int64_t j0, int64_t j1, int tid) {
    (void)tid;
    const half_job *job = ctx;
    const int64_t ne0 = job->w->ne[0], ne1 = job->w->ne[1];
    const uint16_t *wdata = job->w->data;
    for (int64_t j = j0; j < j1; j++) {
        const uint16_t *row = wdata + (size_t)j * ne0;
#if defined(__x86_64__)
        if (job->w->type == BN_F16 && have_f16c()) { // the weight chunk converted once per 4 activation rows
            for (int t0 = 0; t0 < job->n; t0 += 4) {
                float out[4];
                const int nx = job->n - t0 < 4 ? job->n - t0 : 4;
                dot_f16_f32_avx2_x4(row, job->x + t0 * ne0, ne0, nx, (int)ne0, out);
                for (int t = 0; t < nx; t++) job->y[(t0 + t) * ne1 + j] = out[t];
            }
            continue;
        }
#endif
        for (int t = 0; t < job->n; t++)
            job->y[t * ne1 + j] = dot_half_f32(job->w->type, row, job->x + t * ne0, (int)ne0);
    }
}

// ---- quantized / per-row dot path -----------------------------------------------------------
typedef struct {
    const bn_weight *w;
    const uint8_t *xq;  // [n] activation rows of xq_row bytes
    size_t xq_row, w_row;
    float *y;
    int n;
} dot_job;

// dot_rows_task: items are blocks of ROW_BLOCK output rows, so every kernel call starts at a
// multiple of ROW_BLOCK whatever the thread count (results do not depend on the split).
static void dot_rows_task(void *ctx, int64_t b0, int64_t b1, int tid) {
    (void)tid;
    const dot_job *job = ctx;
    const int64_t ne0 = job->w->ne[0], ne1 = job->w->ne[1];
    const int64_t j0 = b0 * ROW_BLOCK, j1 = b1 * ROW_BLOCK < ne1 ? b1 * ROW_BLOCK : ne1;
    const uint8_t *wdata = job->w->data;
    if (job->n == 1) {
        bn_vec_dot_rows(job->w->type, (int)ne0, (int)(j1 - j0), job->y + j0, wdata + (size_t)j0 * job->w_row,
                        job->w_row, job->xq);
        return;
    }
    // prefill: the quant mat-mat kernel (weight rows expanded once per few activation rows)
    bn_vec_dot_rows_batch(job->w->type, (int)ne0, (int)(j1 - j0), job->n, job->y + j0, (size_t)ne1,
                          wdata + (size_t)j0 * job->w_row, job->w_row, job->xq, job->xq_row);
}

typedef struct {
    const float *x;
    uint8_t *xq;
    size_t xq_row;
    int64_t ne0;
    int vdt;
} quant_job;

static void quantize_task(void *ctx, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    const quant_job *job = ctx;
    for (int64_t t = t0; t < t1; t++)
        bn_quantize_activations_cpu(job->vdt, job->x + t * job->ne0, job->xq + t * job->xq_row, job->ne0);
}

static void matmul_dot(const bn_weight *w, const float *x, float *y, int n, void *work, bn_pool *pool) {
    const int64_t ne0 = w->ne[0], ne1 = w->ne[1];
    const bn_type_traits *tr = bn_type_traits_of(w->type);
    dot_job job = {.w = w, .y = y, .n = n, .w_row = bn_row_size(w->type, ne0)};
    if (w->type == BN_F32) {
        job.xq = (const uint8_t *)x; // F32 · F32: the activation is used as is
        job.xq_row = (size_t)ne0 * sizeof(float);
    } else {
        quant_job qj = {.x = x, .xq = work, .xq_row = bn_row_size(tr->vec_dot_type, ne0), .ne0 = ne0,
                        .vdt = tr->vec_dot_type};
        bn_parallel_for(n > 1 ? pool : NULL, n, quantize_task, &qj);
        job.xq = work;
        job.xq_row = qj.xq_row;
    }
    bn_parallel_for(pool, (ne1 + ROW_BLOCK - 1) / ROW_BLOCK, dot_rows_task, &job);
}

// ---- F16/BF16 prefill: dequantized panels + sgemm -------------------------------------------
typedef struct {
    const bn_weight *w;
    int64_t j0;   // first row of the panel
    float *panel; // [rows][ne0]
    size_t w_row;
} deq_job;

static void dequant_task(void *ctx, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    const deq_job *job = ctx;
    const int64_t ne0 = job->w->ne[0];
    const uint8_t *wdata = job->w->data;
    for (int64_t r = r0; r < r1; r++)
        bn_dequantize(job->w->type, wdata + (size_t)(job->j0 + r) * job->w_row, job->panel + r * ne0, ne0);
}

static void matmul_panels(const bn_weight *w, const float *x, float *y, int n, void *work, bn_pool *pool) {
    const int64_t ne0 = w->ne[0], ne1 = w->ne[1];
    const int64_t rows = panel_rows(ne0, ne1);
    deq_job job = {.w = w, .panel = work, .w_row = bn_row_size(w->type, ne0)};
    for (int64_t j0 = 0; j0 < ne1; j0 += rows) {
        const int64_t nr = ne1 - j0 < rows ? ne1 - j0 : rows;
        job.j0 = j0;
        bn_parallel_for(pool, nr, dequant_task, &job);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, (int)nr, (int)ne0, 1.0f, x, (int)ne0, job.panel,
                    (int)ne0, 0.0f, y + j0, (int)ne1);
    }
}

void bn_matmul(const bn_weight *w, const float *x, float *y, int n, void *work, bn_pool *pool) {
    const int64_t ne0 = w->ne[0], ne1 = w->ne[1];
    if (n <= 0) return;
    if (ne0 * ne1 * n < MIN_PARALLEL_MACS) pool = NULL;
    if (w->type == BN_F32 && n > SMALL_BATCH) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, (int)ne1, (int)ne0, 1.0f, x, (int)ne0, w->data,
                    (int)ne0, 0.0f, y, (int)ne1);
    } else if (is_float_type(w->type) && n > SMALL_BATCH) {
        matmul_panels(w, x, y, n, work, pool);
    } else if (is_float_type(w->type)) {
        half_job job = {.w = w, .x = x, .y = y, .n = n};
        bn_parallel_for(pool, ne1, half_rows_task, &job);
    } else {
        matmul_dot(w, x, y, n, work, pool);
    }
}

int bn_weight_row_f32(const bn_weight *w, int64_t j, float *dst) {
    const size_t row_bytes = bn_row_size(w->type, w->ne[0]);
    if (j < 0 || j >= w->ne[1] || row_bytes == 0) return -1;
    return bn_dequantize(w->type, (const uint8_t *)w->data + (size_t)j * row_bytes, dst, w->ne[0]);
}
