// core/matmul.c — y = W·x for weights in their stored type (see core/matmul.h).
//
// Paths:
//   quantized (any n): activations quantized once to vec_dot_type with llama.cpp's CPU rounding
//       (bn_quantize_activations_cpu: 127/amax, ties to even); threads split the output rows;
//       n == 1: bn_vec_dot_rows (mat-vec); n > 1: bn_vec_dot_rows_batch (mat-mat: each weight row is
//       read from memory once per call; from 4 rows on, expanded once per 8 activation rows).
//   F32/F16/BF16, n <= SMALL_BATCH: bn_float_rows (quant/float_rows.c) on the f32 activation as is (ggml rounds it
//       to f16/bf16 first); every row's result is the same bits whatever n, so a verify pass's rows (DSpark) equal
//       the decode path's.
//   F32/F16/BF16, n > SMALL_BATCH, with AVX-512: bn_float_gemm, blocks of GEMM_BLOCK weight rows converted once and
//       tiled against all activation rows, on the engine's threads.
//   quantized, with bn_matmul_set_f32_activations(true): as F16/BF16 without AVX-512 below (dequantized panels,
//       sgemm on the f32 activations), whatever n.
//   Without AVX-512, n > SMALL_BATCH: F32 one OpenBLAS sgemm straight on the mmapped weight; F16/BF16 dequantized
//       to f32 in panels of rows (about PANEL_FLOATS floats, in the work buffer; nothing cached between calls)
//       and each panel through sgemm.
#include "core/matmul.h"
#include "quant/quant.h"
#include <cblas.h>
#include <string.h>

#define ROW_BLOCK 16
#define PANEL_FLOATS (1 << 21) // 8 MiB of f32 per panel
#define MIN_PARALLEL_MACS (1 << 15) // smaller products run on the calling thread (sync costs more)
#define SMALL_BATCH 8 // float weights: up to this many activation rows go through the row kernel, not the gemm
#define GEMM_BLOCK 64 // float weights, n > SMALL_BATCH: weight rows per bn_float_gemm call

static bool f32_activations; // bn_matmul_set_f32_activations

void bn_matmul_set_f32_activations(bool on) { f32_activations = on; }

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

static bool is_float_type(int type) { return type == BN_F32 || type == BN_F16 || type == BN_BF16; }

// panel_rows: rows of a F16/BF16 weight dequantized per sgemm panel.
static int64_t panel_rows(int64_t ne0, int64_t ne1) {
    int64_t rows = PANEL_FLOATS / (ne0 > 0 ? ne0 : 1);
    if (rows < ROW_BLOCK) rows = ROW_BLOCK;
    rows -= rows % ROW_BLOCK;
    return rows < ne1 ? rows : ne1;
}

size_t bn_matmul_work_size(const bn_weight *w, int n) {
    const int64_t ne0 = w->ne[0], ne1 = w->ne[1];
    if (w->type == BN_F32 || (is_float_type(w->type) && (n <= SMALL_BATCH || bn_cpu_has_avx512()))) return 64;
    const size_t panel = align64((size_t)panel_rows(ne0, ne1) * (size_t)ne0 * sizeof(float));
    if (is_float_type(w->type)) return panel;
    const bn_type_traits *tr = bn_type_traits_of(w->type);
    if (!tr) return 64;
    if (f32_activations) return panel;
    const size_t prep = bn_vec_dot_batch_prep_size(w->type, (int)ne0, n);
    return align64((size_t)n * bn_row_size(tr->vec_dot_type, ne0)) + align64(prep) + 64;
}

// ---- F32/F16/BF16 weights: row kernels (n <= SMALL_BATCH) and the tiled gemm (quant/float_rows.c) ----------
typedef struct {
    const bn_weight *w;
    const float *x; // [n][ne0]
    float *y;       // [n][ne1]
    int n;
    bool gemm;      // bn_float_gemm in blocks of GEMM_BLOCK rows, else bn_float_rows in blocks of ROW_BLOCK
} float_job;

// float_task: output row blocks [b0, b1) through the row kernels or the gemm.
static void float_task(void *ctx, int64_t b0, int64_t b1, int tid) {
    (void)tid;
    const float_job *job = ctx;
    const int64_t ne0 = job->w->ne[0], ne1 = job->w->ne[1], block = job->gemm ? GEMM_BLOCK : ROW_BLOCK;
    const int64_t j0 = b0 * block, j1 = b1 * block < ne1 ? b1 * block : ne1;
    const size_t w_row = bn_row_size(job->w->type, ne0);
    const char *w = (const char *)job->w->data + (size_t)j0 * w_row;
    if (job->gemm)
        bn_float_gemm(job->w->type, (int)ne0, (int)(j1 - j0), job->n, job->y + j0, (size_t)ne1, w, w_row, job->x,
                      (size_t)ne0);
    else
        bn_float_rows(job->w->type, (int)ne0, (int)(j1 - j0), job->n, job->y + j0, (size_t)ne1, w, w_row, job->x,
                      (size_t)ne0);
}

// ---- quantized / per-row dot path -----------------------------------------------------------
typedef struct {
    const bn_weight *w;
    const uint8_t *xq;  // [n] activation rows of xq_row bytes
    const void *prep;   // the activations prepared for the mat-mat (n > 1), or NULL
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
    if (job->prep) {
        bn_vec_dot_rows_prepared(job->w->type, (int)ne0, (int)(j1 - j0), job->n, job->y + j0, (size_t)ne1,
                                 wdata + (size_t)j0 * job->w_row, job->w_row, job->prep);
        return;
    }
    bn_vec_dot_rows_batch(job->w->type, (int)ne0, (int)(j1 - j0), job->n, job->y + j0, (size_t)ne1,
                          wdata + (size_t)j0 * job->w_row, job->w_row, job->xq, job->xq_row);
}

typedef struct {
    const float *x;
    uint8_t *xq;
    void *prep; // NULL: quantize only
    size_t xq_row;
    int64_t ne0;
    int type, vdt, n;
} quant_job;

// quantize_task: items are groups of 8 activation rows: quantized, then prepared for the mat-mat (with prep).
static void quantize_task(void *ctx, int64_t g0, int64_t g1, int tid) {
    (void)tid;
    const quant_job *job = ctx;
    const int64_t t1 = g1 * 8 < job->n ? g1 * 8 : job->n;
    for (int64_t t = g0 * 8; t < t1; t++)
        bn_quantize_activations_cpu(job->vdt, job->x + t * job->ne0, job->xq + t * job->xq_row, job->ne0);
    if (job->prep)
        bn_vec_dot_batch_prepare(job->type, (int)job->ne0, job->n, (int)g0, (int)g1, job->xq, job->xq_row, job->prep);
}

static void matmul_dot(const bn_weight *w, const float *x, float *y, int n, void *work, bn_pool *pool) {
    const int64_t ne0 = w->ne[0], ne1 = w->ne[1];
    const bn_type_traits *tr = bn_type_traits_of(w->type);
    const size_t xq_row = bn_row_size(tr->vec_dot_type, ne0);
    const bool prepared = n > 1 && bn_vec_dot_batch_prep_size(w->type, (int)ne0, n) > 0;
    quant_job qj = {.x = x, .xq = work, .xq_row = xq_row, .ne0 = ne0, .type = w->type, .vdt = tr->vec_dot_type,
                    .n = n, .prep = prepared ? (char *)work + align64((size_t)n * xq_row) : NULL};
    bn_parallel_for(n > 1 ? pool : NULL, (n + 7) / 8, quantize_task, &qj);
    dot_job job = {.w = w, .y = y, .n = n, .w_row = bn_row_size(w->type, ne0), .xq = work, .prep = qj.prep,
                   .xq_row = xq_row};
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
    float_job job = {.w = w, .x = x, .y = y, .n = n};
    if (is_float_type(w->type) && n <= SMALL_BATCH) {
        bn_parallel_for(pool, (ne1 + ROW_BLOCK - 1) / ROW_BLOCK, float_task, &job);
    } else if (is_float_type(w->type) && bn_cpu_has_avx512()) {
        job.gemm = true;
        bn_parallel_for(pool, (ne1 + GEMM_BLOCK - 1) / GEMM_BLOCK, float_task, &job);
    } else if (w->type == BN_F32) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, (int)ne1, (int)ne0, 1.0f, x, (int)ne0, w->data,
                    (int)ne0, 0.0f, y, (int)ne1);
    } else if (is_float_type(w->type) || f32_activations) {
        matmul_panels(w, x, y, n, work, pool);
    } else {
        matmul_dot(w, x, y, n, work, pool);
    }
}

int bn_weight_row_f32(const bn_weight *w, int64_t j, float *dst) {
    const size_t row_bytes = bn_row_size(w->type, w->ne[0]);
    if (j < 0 || j >= w->ne[1] || row_bytes == 0) return -1;
    return bn_dequantize(w->type, (const uint8_t *)w->data + (size_t)j * row_bytes, dst, w->ne[0]);
}
