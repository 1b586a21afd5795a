// train/backward.c — fp32 backward of each forward op (docs/model.md §8). See backward.h for layouts.
#include "train/backward.h"
#include <math.h>
#include <string.h>
#include <stdlib.h>
#include <cblas.h>
#include "base/util.h"
#include "quant/quant.h"
#include "core/ops.h"
#include "base/threads.h"
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

#if defined(__x86_64__) || defined(__i386__)
// hsum8: Σ of the 8 lanes.
__attribute__((target("avx2,fma"))) static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// have_avx2_fma: the CPU runs the avx2,fma kernels of this file (checked once).
static int have_avx2_fma(void) {
    static int cached = -1;
    if (cached < 0) cached = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return cached;
}
#else
static int have_avx2_fma(void) { return 0; }
#endif

// ---- linear + LoRA --------------------------------------------------------------------------

// Rows of W dequantized per chunk: at most ~4M floats (16 MiB) at a time.
static int chunk_rows(int64_t n_in, int64_t n_out) {
    int64_t rows = (4 << 20) / (n_in > 0 ? n_in : 1);
    if (rows < 1) rows = 1;
    if (rows > n_out) rows = n_out;
    return (int)rows;
}

// dequant_rows: W rows [j0, j0+nr) as fp32 into buf (or a direct pointer for F32); NULL on error.
static const float *dequant_rows(const bn_weight *W, int64_t j0, int nr, float *buf, char *err, size_t errlen) {
    int64_t n_in = W->ne[0];
    size_t row_bytes = bn_row_size(W->type, n_in);
    const uint8_t *src = (const uint8_t *)W->data + (size_t)j0 * row_bytes;
    if (W->type == BN_F32) return (const float *)src;
    if (bn_dequantize(W->type, src, buf, n_in * nr) != 0) {
        bn_err(err, errlen, "cannot dequantize %s (type %s)", W->name ? W->name : "weight", bn_type_name(W->type));
        return NULL;
    }
    return buf;
}

// apply_drop: xd = x ⊙ drop, or x itself when drop is NULL.
static const float *apply_drop(const float *x, const float *drop, int64_t n, float **owned) {
    *owned = NULL;
    if (!drop) return x;
    float *xd = xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) xd[i] = x[i] * drop[i];
    *owned = xd;
    return xd;
}

int bn_linear_lora_fwd(const bn_weight *W, const bn_lora_view *lora, const float *x, int T,
                       const float *drop, float *y, float *ax, char *err, size_t errlen) {
    int64_t n_in = W->ne[0], n_out = W->ne[1];
    int nr_max = chunk_rows(n_in, n_out);
    float *buf = W->type == BN_F32 ? NULL : xmalloc((size_t)nr_max * n_in * sizeof(float));
    for (int64_t j0 = 0; j0 < n_out; j0 += nr_max) {
        int nr = (int)(n_out - j0 < nr_max ? n_out - j0 : nr_max);
        const float *Wc = dequant_rows(W, j0, nr, buf, err, errlen); // {n_in, nr}
        if (!Wc) { free(buf); return -1; }
        // Y[:, j0:j0+nr] = X · Wcᵀ
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, nr, (int)n_in, 1.0f, x, (int)n_in,
                    Wc, (int)n_in, 0.0f, y + j0, (int)n_out);
    }
    free(buf);
    if (!lora) return 0;
    int r = lora->r;
    float *xd_owned;
    const float *xd = apply_drop(x, drop, n_in * T, &xd_owned);
    float *axb = ax ? ax : xmalloc((size_t)r * T * sizeof(float)); // {r, T}
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, r, (int)n_in, 1.0f, xd, (int)n_in,
                lora->A, (int)n_in, 0.0f, axb, r);
    // Y += scale · AX · Bᵀ   (B is n_out rows of r)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, (int)n_out, r, lora->scale, axb, r,
                lora->B, r, 1.0f, y, (int)n_out);
    if (!ax) free(axb);
    free(xd_owned);
    return 0;
}

int bn_linear_lora_bwd(const bn_weight *W, const bn_lora_view *lora, const float *x, int T,
                       const float *drop, const float *ax, const float *dy, float *dx,
                       char *err, size_t errlen) {
    int64_t n_in = W->ne[0], n_out = W->ne[1];
    if (dx) {
        int nr_max = chunk_rows(n_in, n_out);
        float *buf = W->type == BN_F32 ? NULL : xmalloc((size_t)nr_max * n_in * sizeof(float));
        for (int64_t j0 = 0; j0 < n_out; j0 += nr_max) {
            int nr = (int)(n_out - j0 < nr_max ? n_out - j0 : nr_max);
            const float *Wc = dequant_rows(W, j0, nr, buf, err, errlen);
            if (!Wc) { free(buf); return -1; }
            // dX += dY[:, j0:j0+nr] · Wc
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, (int)n_in, nr, 1.0f, dy + j0, (int)n_out,
                        Wc, (int)n_in, 1.0f, dx, (int)n_in);
        }
        free(buf);
    }
    if (!lora) return 0;
    int r = lora->r;
    float s = lora->scale;
    float *xd_owned;
    const float *xd = apply_drop(x, drop, n_in * T, &xd_owned);
    float *ax_owned = NULL;
    if (!ax) {
        ax_owned = xmalloc((size_t)r * T * sizeof(float));
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, r, (int)n_in, 1.0f, xd, (int)n_in,
                    lora->A, (int)n_in, 0.0f, ax_owned, r);
        ax = ax_owned;
    }
    float *gb = xmalloc((size_t)r * T * sizeof(float)); // {r, T}: Bᵀdy per token
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, r, (int)n_out, 1.0f, dy, (int)n_out,
                lora->B, r, 0.0f, gb, r);
    if (lora->dA) // dA (r × n_in) += s · Gᵀ · Xd
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r, (int)n_in, T, s, gb, r, xd, (int)n_in,
                    1.0f, lora->dA, (int)n_in);
    if (lora->dB) // dB (n_out × r) += s · dYᵀ · AX
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n_out, r, T, s, dy, (int)n_out, ax, r,
                    1.0f, lora->dB, r);
    if (dx) {
        if (!drop) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, (int)n_in, r, s, gb, r, lora->A, (int)n_in,
                        1.0f, dx, (int)n_in);
        } else {
            float *tmp = xcalloc((size_t)n_in * T, sizeof(float));
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, (int)n_in, r, s, gb, r, lora->A, (int)n_in,
                        0.0f, tmp, (int)n_in);
            for (int64_t i = 0; i < n_in * T; i++) dx[i] += tmp[i] * drop[i];
            free(tmp);
        }
    }
    free(gb);
    free(ax_owned);
    free(xd_owned);
    return 0;
}

// ---- norms ----------------------------------------------------------------------------------

void bn_rmsnorm_bwd(const float *x, const float *w, int n, int rows, float eps, const float *dy, float *dx) {
    for (int t = 0; t < rows; t++) {
        const float *xr = x + (size_t)t * n, *dyr = dy + (size_t)t * n;
        float *dxr = dx + (size_t)t * n;
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)xr[i] * xr[i];
        float rho = (float)(1.0 / sqrt(ss / n + eps));
        double dot = 0; // mean(g ⊙ x̂)·n
        for (int i = 0; i < n; i++) dot += (double)dyr[i] * (w ? w[i] : 1.0f) * xr[i] * rho;
        float mean_gx = (float)(dot / n);
        for (int i = 0; i < n; i++) {
            float g = dyr[i] * (w ? w[i] : 1.0f);
            dxr[i] += rho * (g - xr[i] * rho * mean_gx);
        }
    }
}

void bn_l2norm_bwd(const float *x, int n, int rows, float eps, const float *dy, float *dx) {
    for (int t = 0; t < rows; t++) {
        const float *xr = x + (size_t)t * n, *dyr = dy + (size_t)t * n;
        float *dxr = dx + (size_t)t * n;
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)xr[i] * xr[i];
        float inv = (float)(1.0 / sqrt(ss + eps));
        double ydy = 0;
        for (int i = 0; i < n; i++) ydy += (double)xr[i] * inv * dyr[i];
        for (int i = 0; i < n; i++) dxr[i] += (dyr[i] - xr[i] * inv * (float)ydy) * inv;
    }
}

void bn_gated_rmsnorm_bwd(const float *o, const float *z, const float *w, int n, int rows, float eps,
                          const float *dy, float *dout, float *dz) {
    float *gy = xmalloc((size_t)n * sizeof(float));
    for (int t = 0; t < rows; t++) {
        const float *orow = o + (size_t)t * n, *zr = z + (size_t)t * n, *dyr = dy + (size_t)t * n;
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)orow[i] * orow[i];
        float rho = (float)(1.0 / sqrt(ss / n + eps));
        for (int i = 0; i < n; i++) {
            float sg = sigmoidf_(zr[i]);
            float silu = zr[i] * sg;
            gy[i] = dyr[i] * silu;
            if (dz) {
                float dsilu = sg * (1.0f + zr[i] * (1.0f - sg));
                dz[(size_t)t * n + i] += dyr[i] * w[i] * orow[i] * rho * dsilu;
            }
        }
        if (dout) bn_rmsnorm_bwd(orow, w, n, 1, eps, gy, dout + (size_t)t * n);
    }
    free(gy);
}

// ---- elementwise ----------------------------------------------------------------------------

void bn_swiglu_bwd(const float *a, const float *c, int64_t n, const float *dy, float *da, float *dc) {
    for (int64_t i = 0; i < n; i++) {
        float s = sigmoidf_(a[i]);
        if (da) da[i] += dy[i] * c[i] * s * (1.0f + a[i] * (1.0f - s));
        if (dc) dc[i] += dy[i] * a[i] * s;
    }
}

void bn_sigmoid_gate_bwd(const float *u, const float *g, int64_t n, const float *dy, float *du, float *dg) {
    for (int64_t i = 0; i < n; i++) {
        float s = sigmoidf_(g[i]);
        if (du) du[i] += dy[i] * s;
        if (dg) dg[i] += dy[i] * u[i] * s * (1.0f - s);
    }
}

void bn_sigmoid_bwd(const float *beta, int64_t n, const float *dbeta, float *db) {
    for (int64_t i = 0; i < n; i++) db[i] += dbeta[i] * beta[i] * (1.0f - beta[i]);
}

void bn_gdn_gate_bwd(const float *a, const float *dt, const float *ssm_a, int n, int rows,
                     const float *dg, float *da) {
    for (int t = 0; t < rows; t++)
        for (int h = 0; h < n; h++) {
            size_t i = (size_t)t * n + h;
            da[i] += dg[i] * ssm_a[h] * sigmoidf_(a[i] + dt[h]);
        }
}

void bn_scale_bwd(float s, int64_t n, const float *dy, float *dx) {
    for (int64_t i = 0; i < n; i++) dx[i] += s * dy[i];
}

// ---- RoPE -----------------------------------------------------------------------------------

void bn_rope_inplace(float *x, int head_dim, int n_heads, int n_rot, int pos, float base, int mode, int sign) {
    int half = n_rot / 2;
    // θ_i as core/ops.c computes it (ggml's power series in float) so the backward is the exact transpose
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    float theta = (float)pos;
    for (int i = 0; i < half; i++) {
        float c = cosf(theta), s = sign * sinf(theta);
        for (int h = 0; h < n_heads; h++) {
            float *xh = x + (size_t)h * head_dim;
            int i0 = mode == BN_ROPE_NEOX ? i : 2 * i;
            int i1 = mode == BN_ROPE_NEOX ? i + half : 2 * i + 1;
            float a = xh[i0], b = xh[i1];
            xh[i0] = a * c - b * s;
            xh[i1] = b * c + a * s;
        }
        theta *= theta_scale;
    }
}

void bn_rope_bwd(const float *dy, int head_dim, int n_heads, int T, int n_rot, int pos0, float base,
                 int mode, float *dx) {
    size_t row = (size_t)head_dim * n_heads;
    float *tmp = xmalloc(row * sizeof(float));
    for (int t = 0; t < T; t++) {
        memcpy(tmp, dy + t * row, row * sizeof(float));
        bn_rope_inplace(tmp, head_dim, n_heads, n_rot, pos0 + t, base, mode, -1);
        for (size_t i = 0; i < row; i++) dx[t * row + i] += tmp[i];
    }
    free(tmp);
}

// ---- attention ------------------------------------------------------------------------------

// attn_probs: softmax over τ ≤ p of scale·q·k(τ) into P[0..p]; q one head, kv head kvh.
static void attn_probs(const float *qh, const float *k, int p, int hd, int nkv, int kvh, float scale, float *P) {
    float mx = -INFINITY;
    for (int tau = 0; tau <= p; tau++) {
        const float *kr = k + ((size_t)tau * nkv + kvh) * hd;
        P[tau] = bn_dot_f32(qh, kr, hd) * scale;
        if (P[tau] > mx) mx = P[tau];
    }
    double sum = 0;
    for (int tau = 0; tau <= p; tau++) { P[tau] = expf(P[tau] - mx); sum += P[tau]; }
    float inv = (float)(1.0 / sum);
    for (int tau = 0; tau <= p; tau++) P[tau] *= inv;
}

// The training pool (NULL = single-threaded); see bn_train_set_threads.
static bn_pool *g_pool;

void bn_train_set_threads(int n_threads) {
    bn_pool_free(g_pool);
    g_pool = n_threads > 1 ? bn_pool_new(n_threads) : NULL;
}

typedef struct {
    const float *q, *k, *v, *dout;
    float *out, *dq, *dk, *dv;
    int T, hd, nh, nkv;
    float scale;
} attn_job;

// attn_fwd_task: items are (position p, q head h) = p·nh + h.
static void attn_fwd_task(void *ctx, int64_t i0, int64_t i1, int tid) {
    const attn_job *j = ctx;
    int grp = j->nh / j->nkv;
    float *scores = xmalloc((size_t)j->T * sizeof(float));
    for (int64_t i = i0; i < i1; i++) {
        int p = (int)(i / j->nh), h = (int)(i % j->nh), kvh = h / grp;
        bn_attention_head(j->out + ((size_t)p * j->nh + h) * j->hd, j->q + ((size_t)p * j->nh + h) * j->hd,
                          j->k + (size_t)kvh * j->hd, j->v + (size_t)kvh * j->hd, p + 1, (int64_t)j->nkv * j->hd, j->hd,
                          j->scale, scores);
    }
    free(scores);
}

void bn_attn_fwd(const float *q, const float *k, const float *v, int T, int hd, int nh, int nkv,
                 float scale, float *out) {
    attn_job j = {.q = q, .k = k, .v = v, .out = out, .T = T, .hd = hd, .nh = nh, .nkv = nkv, .scale = scale};
    bn_parallel_for(g_pool, (int64_t)T * nh, attn_fwd_task, &j);
}

#if defined(__x86_64__) || defined(__i386__)
// attn_bwd_row_avx2: for one query (p, h) with probabilities P[0..p] and dP[τ] = do·v(τ): dq += scale·Σ dS·k(τ),
// dk(τ) += scale·dS·q, dv(τ) += P·do with dS = P(dP − rowsum); hd % 8 == 0, NULL outputs skipped.
// dP is overwritten with scale·dS.
__attribute__((target("avx2,fma")))
static void attn_bwd_row_avx2(const float *qh, const float *doh, const float *k, int p, int hd, int nkv, int kvh,
                              float scale, const float *P, float *dP, float rowsum, float *dqh, float *dk,
                              float *dv) {
    const size_t kv_stride = (size_t)nkv * hd;
    for (int tau = 0; tau <= p; tau++) dP[tau] = scale * P[tau] * (dP[tau] - rowsum);
    if (dqh) { // dq in registers, 32 (then 8) lanes at a time
        int d = 0;
        for (; d + 32 <= hd; d += 32) {
            __m256 a0 = _mm256_loadu_ps(dqh + d), a1 = _mm256_loadu_ps(dqh + d + 8);
            __m256 a2 = _mm256_loadu_ps(dqh + d + 16), a3 = _mm256_loadu_ps(dqh + d + 24);
            const float *kr = k + (size_t)kvh * hd + d;
            for (int tau = 0; tau <= p; tau++, kr += kv_stride) {
                const __m256 c = _mm256_set1_ps(dP[tau]);
                a0 = _mm256_fmadd_ps(c, _mm256_loadu_ps(kr), a0);
                a1 = _mm256_fmadd_ps(c, _mm256_loadu_ps(kr + 8), a1);
                a2 = _mm256_fmadd_ps(c, _mm256_loadu_ps(kr + 16), a2);
                a3 = _mm256_fmadd_ps(c, _mm256_loadu_ps(kr + 24), a3);
            }
            _mm256_storeu_ps(dqh + d, a0), _mm256_storeu_ps(dqh + d + 8, a1);
            _mm256_storeu_ps(dqh + d + 16, a2), _mm256_storeu_ps(dqh + d + 24, a3);
        }
        for (; d < hd; d += 8) {
            __m256 a0 = _mm256_loadu_ps(dqh + d);
            const float *kr = k + (size_t)kvh * hd + d;
            for (int tau = 0; tau <= p; tau++, kr += kv_stride)
                a0 = _mm256_fmadd_ps(_mm256_set1_ps(dP[tau]), _mm256_loadu_ps(kr), a0);
            _mm256_storeu_ps(dqh + d, a0);
        }
    }
    if (!dk && !dv) return;
    for (int tau = 0; tau <= p; tau++) {
        size_t kvoff = (size_t)tau * kv_stride + (size_t)kvh * hd;
        const __m256 c = _mm256_set1_ps(dP[tau]), pt = _mm256_set1_ps(P[tau]);
        float *dkr = dk ? dk + kvoff : NULL, *dvr = dv ? dv + kvoff : NULL;
        for (int d = 0; d < hd; d += 8) {
            if (dkr) _mm256_storeu_ps(dkr + d, _mm256_fmadd_ps(c, _mm256_loadu_ps(qh + d), _mm256_loadu_ps(dkr + d)));
            if (dvr) _mm256_storeu_ps(dvr + d, _mm256_fmadd_ps(pt, _mm256_loadu_ps(doh + d), _mm256_loadu_ps(dvr + d)));
        }
    }
}
#endif

// attn_bwd_task: items are kv heads; each handles its q heads at every position, so dk/dv
// (per kv head) and dq (per q head) are written by one task only.
static void attn_bwd_task(void *ctx, int64_t i0, int64_t i1, int tid) {
    const attn_job *j = ctx;
    const int hd = j->hd, nh = j->nh, nkv = j->nkv, T = j->T, grp = nh / nkv;
    const float scale = j->scale;
    float *P = xmalloc((size_t)T * sizeof(float));
    float *dP = xmalloc((size_t)T * sizeof(float));
    for (int64_t kvh = i0; kvh < i1; kvh++)
        for (int p = 0; p < T; p++)
            for (int h = (int)kvh * grp; h < ((int)kvh + 1) * grp; h++) {
                const float *qh = j->q + ((size_t)p * nh + h) * hd;
                const float *doh = j->dout + ((size_t)p * nh + h) * hd;
                attn_probs(qh, j->k, p, hd, nkv, (int)kvh, scale, P);
                double rowsum = 0; // Σ_τ dP_τ P_τ
                for (int tau = 0; tau <= p; tau++) {
                    const float *vr = j->v + ((size_t)tau * nkv + kvh) * hd;
                    float s = bn_dot_f32(doh, vr, hd);
                    dP[tau] = s;
                    rowsum += (double)s * P[tau];
                }
#if defined(__x86_64__) || defined(__i386__)
                if (have_avx2_fma() && hd % 8 == 0) {
                    attn_bwd_row_avx2(qh, doh, j->k, p, hd, nkv, (int)kvh, scale, P, dP, (float)rowsum,
                                      j->dq ? j->dq + ((size_t)p * nh + h) * hd : NULL, j->dk, j->dv);
                    continue;
                }
#endif
                for (int tau = 0; tau <= p; tau++) {
                    float dS = P[tau] * (dP[tau] - (float)rowsum);
                    const float *kr = j->k + ((size_t)tau * nkv + kvh) * hd;
                    size_t kvoff = ((size_t)tau * nkv + kvh) * hd;
                    if (j->dq) bn_axpy_f32(j->dq + ((size_t)p * nh + h) * hd, scale * dS, kr, hd);
                    if (j->dk) bn_axpy_f32(j->dk + kvoff, scale * dS, qh, hd);
                    if (j->dv) bn_axpy_f32(j->dv + kvoff, P[tau], doh, hd);
                }
            }
    free(P);
    free(dP);
}

void bn_attn_bwd(const float *q, const float *k, const float *v, int T, int hd, int nh, int nkv,
                 float scale, const float *dout, float *dq, float *dk, float *dv) {
    attn_job j = {.q = q, .k = k, .v = v, .dout = dout, .dq = dq, .dk = dk, .dv = dv,
                  .T = T, .hd = hd, .nh = nh, .nkv = nkv, .scale = scale};
    bn_parallel_for(g_pool, nkv, attn_bwd_task, &j);
}

// ---- causal conv1d + SiLU ---------------------------------------------------------------------

// conv_input: element (ch) of the extended sequence at index e (0..K−2 = state rows, then mix).
static inline float conv_input(const float *mix, const float *state0, int C, int K, int e, int ch) {
    if (e < K - 1) return state0 ? state0[(size_t)ch * (K - 1) + e] : 0.0f;
    return mix[(size_t)(e - (K - 1)) * C + ch];
}

// conv_taps: wt {C, K} = w transposed to one row of C per tap (so the channel loops run contiguous).
static float *conv_taps(const float *w, int C, int K) {
    float *wt = xmalloc((size_t)C * K * sizeof(float));
    for (int ch = 0; ch < C; ch++)
        for (int i = 0; i < K; i++) wt[(size_t)i * C + ch] = w[(size_t)ch * K + i];
    return wt;
}

// conv_row: c[ch] = Σ_i w[ch, i] · input(t + i, ch) for all channels of position t (same summation
// order as the per-channel loop: taps 0..K−1 from zero).
static void conv_row(const float *mix, const float *state0, const float *wt, int C, int K, int t, float *c) {
    memset(c, 0, (size_t)C * sizeof(float));
    for (int i = 0; i < K; i++) {
        int e = t + i;
        const float *wi = wt + (size_t)i * C;
        if (e >= K - 1) {
            const float *src = mix + (size_t)(e - (K - 1)) * C;
            for (int ch = 0; ch < C; ch++) c[ch] += wi[ch] * src[ch];
        } else if (state0) {
            for (int ch = 0; ch < C; ch++) c[ch] += wi[ch] * state0[(size_t)ch * (K - 1) + e];
        } else {
            for (int ch = 0; ch < C; ch++) c[ch] += wi[ch] * 0.0f;
        }
    }
}

void bn_conv1d_silu_fwd(const float *mix, const float *state0, const float *w, int C, int K, int T,
                        float *out, float *state_out) {
    float *wt = conv_taps(w, C, K);
    for (int t = 0; t < T; t++) {
        float *o = out + (size_t)t * C;
        conv_row(mix, state0, wt, C, K, t, o);
        for (int ch = 0; ch < C; ch++) o[ch] = o[ch] * sigmoidf_(o[ch]);
    }
    free(wt);
    if (state_out) {
        float *tmp = xmalloc((size_t)C * (K - 1) * sizeof(float));
        for (int i = 0; i < K - 1; i++)
            for (int ch = 0; ch < C; ch++) tmp[(size_t)ch * (K - 1) + i] = conv_input(mix, state0, C, K, T + i, ch);
        memcpy(state_out, tmp, (size_t)C * (K - 1) * sizeof(float));
        free(tmp);
    }
}

void bn_conv1d_silu_bwd(const float *mix, const float *state0, const float *w, int C, int K, int T,
                        const float *dout, float *dmix, float *dstate0) {
    float *wt = conv_taps(w, C, K);
    float *dc = xmalloc((size_t)C * sizeof(float));
    for (int t = 0; t < T; t++) {
        conv_row(mix, state0, wt, C, K, t, dc);
        const float *dor = dout + (size_t)t * C;
        for (int ch = 0; ch < C; ch++) {
            float c = dc[ch], s = sigmoidf_(c);
            dc[ch] = dor[ch] * s * (1.0f + c * (1.0f - s));
        }
        for (int i = 0; i < K; i++) {
            int e = t + i; // extended index of the input multiplied by tap i
            const float *wi = wt + (size_t)i * C;
            if (e >= K - 1) {
                if (!dmix) continue;
                float *dst = dmix + (size_t)(e - (K - 1)) * C;
                for (int ch = 0; ch < C; ch++) dst[ch] += wi[ch] * dc[ch];
            } else if (dstate0) {
                for (int ch = 0; ch < C; ch++) dstate0[(size_t)ch * (K - 1) + e] += wi[ch] * dc[ch];
            }
        }
    }
    free(dc);
    free(wt);
}

// ---- gated delta-rule recurrence --------------------------------------------------------------

// S layout (ops.h / ggml): S[j*dk + i] = S_ij, i = key dim, j = value dim.
#define SIDX(i, j) ((size_t)(j) * dk + (i))

#if defined(__x86_64__) || defined(__i386__)
// gdn_bwd_step_avx2: one reverse step of the recurrence (the scalar loop of gdn_bwd_head, fused per
// value row jj into two passes over dk); dk % 8 == 0. Adds into dqh/dkh/dvh (NULL = not wanted),
// *dbeta_acc and *dalpha_acc; dS becomes dS_{t−1} as in the scalar code. scratch: 2·dk floats.
__attribute__((target("avx2,fma")))
static void gdn_bwd_step_avx2(const float *Sp, const float *St, const float *qh, const float *kk, const float *vh,
                              const float *doh, float alpha, float b, int dk, int dv, float *dS, float *dqh,
                              float *dkh, float *dvh, double *dbeta_acc, double *dalpha_acc, float *scratch) {
    float *dq = dqh ? dqh : scratch, *dkk = dkh ? dkh : scratch + dk; // dummies when unwanted
    const __m256 va = _mm256_set1_ps(alpha);
    double dbeta = 0, dalpha = 0;
    for (int jj = 0; jj < dv; jj++) {
        const float *sp = Sp + (size_t)jj * dk, *st = St + (size_t)jj * dk;
        float *ds = dS + (size_t)jj * dk;
        const __m256 vdo = _mm256_set1_ps(doh[jj]);
        // pass 1: u = Σ Sp·k; dS += q·do; dq += S_t·do; dd = Σ dS·k
        __m256 au = _mm256_setzero_ps(), add = _mm256_setzero_ps();
        for (int i = 0; i < dk; i += 8) {
            __m256 s = _mm256_loadu_ps(sp + i), kv = _mm256_loadu_ps(kk + i);
            au = _mm256_fmadd_ps(s, kv, au);
            __m256 d = _mm256_fmadd_ps(_mm256_loadu_ps(qh + i), vdo, _mm256_loadu_ps(ds + i));
            _mm256_storeu_ps(ds + i, d);
            add = _mm256_fmadd_ps(d, kv, add);
            _mm256_storeu_ps(dq + i, _mm256_fmadd_ps(_mm256_loadu_ps(st + i), vdo, _mm256_loadu_ps(dq + i)));
        }
        float u = alpha * hsum8(au), delta = b * (vh[jj] - u), dd = hsum8(add);
        if (dvh) dvh[jj] += b * dd;
        dbeta += (double)dd * (vh[jj] - u);
        float du = -b * dd;
        // pass 2: dk += dS·δ + α·Sp·du; d = dS + k·du; dα += Σ d·Sp; dS = α·d
        const __m256 vdelta = _mm256_set1_ps(delta), vdu = _mm256_set1_ps(du), vadu = _mm256_set1_ps(alpha * du);
        __m256 aal = _mm256_setzero_ps();
        for (int i = 0; i < dk; i += 8) {
            __m256 s = _mm256_loadu_ps(sp + i), kv = _mm256_loadu_ps(kk + i), d0 = _mm256_loadu_ps(ds + i);
            __m256 g = _mm256_fmadd_ps(d0, vdelta, _mm256_loadu_ps(dkk + i));
            _mm256_storeu_ps(dkk + i, _mm256_fmadd_ps(s, vadu, g));
            __m256 d = _mm256_fmadd_ps(kv, vdu, d0);
            aal = _mm256_fmadd_ps(d, s, aal);
            _mm256_storeu_ps(ds + i, _mm256_mul_ps(va, d));
        }
        dalpha += hsum8(aal);
    }
    *dbeta_acc += dbeta;
    *dalpha_acc += dalpha;
}

// gdn_step_avx2: bn_gdn_step (core/ops.c) from state Sin into S (Sin may equal S), fused into two
// passes per value row (decay + read, then write + output) instead of four; dk % 8 == 0. Same math,
// sums in another order.
__attribute__((target("avx2,fma")))
static void gdn_step_avx2(float *S, const float *Sin, const float *q, const float *k, const float *v, float alpha,
                          float beta, float *o, int dk, int dv) {
    const __m256 va = _mm256_set1_ps(alpha);
    for (int j = 0; j < dv; j++) {
        float *row = S + (size_t)j * dk;
        const float *rin = Sin + (size_t)j * dk;
        __m256 au = _mm256_setzero_ps();
        for (int i = 0; i < dk; i += 8) {
            __m256 r = _mm256_mul_ps(_mm256_loadu_ps(rin + i), va);
            _mm256_storeu_ps(row + i, r);
            au = _mm256_fmadd_ps(r, _mm256_loadu_ps(k + i), au);
        }
        const __m256 vd = _mm256_set1_ps(beta * (v[j] - hsum8(au)));
        if (!o) { // state only (the backward's recompute)
            for (int i = 0; i < dk; i += 8)
                _mm256_storeu_ps(row + i, _mm256_fmadd_ps(vd, _mm256_loadu_ps(k + i), _mm256_loadu_ps(row + i)));
            continue;
        }
        __m256 ao = _mm256_setzero_ps();
        for (int i = 0; i < dk; i += 8) {
            __m256 r = _mm256_fmadd_ps(vd, _mm256_loadu_ps(k + i), _mm256_loadu_ps(row + i));
            _mm256_storeu_ps(row + i, r);
            ao = _mm256_fmadd_ps(r, _mm256_loadu_ps(q + i), ao);
        }
        o[j] = hsum8(ao);
    }
}

#endif

// gdn_step_from: S = one forward step of the recurrence from state Sin (bn_gdn_step semantics; Sin may
// equal S; SIMD when available). o may be NULL (state only) on the SIMD path: see gdn_out_optional.
static void gdn_step_from(float *S, const float *Sin, const float *q, const float *k, const float *v, float alpha,
                          float beta, float *o, int dk, int dv) {
#if defined(__x86_64__) || defined(__i386__)
    if (have_avx2_fma() && dk % 8 == 0) { gdn_step_avx2(S, Sin, q, k, v, alpha, beta, o, dk, dv); return; }
#endif
    if (S != Sin) memcpy(S, Sin, (size_t)dk * dv * sizeof(float));
    bn_gdn_step(S, q, k, v, alpha, beta, o, dk, dv);
}

// gdn_out_optional: gdn_step_from accepts o == NULL for head size dk.
static bool gdn_out_optional(int dk) { return have_avx2_fma() && dk % 8 == 0; }

// gdn_step: one in-place forward step of the recurrence.
static void gdn_step(float *S, const float *q, const float *k, const float *v, float alpha, float beta,
                     float *o, int dk, int dv) {
    gdn_step_from(S, S, q, k, v, alpha, beta, o, dk, dv);
}

typedef struct {
    int T, Hk, Hv, dk, dv, CK;
    const float *q, *k, *v, *g, *beta, *S0, *dout, *dS_final;
    float *out, *S_out, *dq, *dk_, *dv_, *dg, *dbeta, *dS0;
} gdn_job;

// gdn_fwd_task: items are value heads (independent).
static void gdn_fwd_task(void *ctx, int64_t h0, int64_t h1, int tid) {
    const gdn_job *j = ctx;
    const int dk = j->dk, dv = j->dv, Hk = j->Hk, Hv = j->Hv;
    size_t ssz = (size_t)dk * dv;
    float *S = xmalloc(ssz * sizeof(float));
    for (int64_t h = h0; h < h1; h++) {
        int kh = (int)(h % Hk);
        if (j->S0) memcpy(S, j->S0 + h * ssz, ssz * sizeof(float)); else memset(S, 0, ssz * sizeof(float));
        for (int t = 0; t < j->T; t++) {
            size_t gi = (size_t)t * Hv + h;
            gdn_step(S, j->q + ((size_t)t * Hk + kh) * dk, j->k + ((size_t)t * Hk + kh) * dk, j->v + gi * dv,
                        expf(j->g[gi]), j->beta[gi], j->out + gi * dv, dk, dv);
        }
        if (j->S_out) memcpy(j->S_out + h * ssz, S, ssz * sizeof(float));
    }
    free(S);
}

void bn_gdn_fwd(int T, int Hk, int Hv, int dk, int dv, const float *q, const float *k, const float *v,
                const float *g, const float *beta, const float *S0, float *out, float *S_out) {
    gdn_job j = {.T = T, .Hk = Hk, .Hv = Hv, .dk = dk, .dv = dv, .q = q, .k = k, .v = v, .g = g, .beta = beta,
                 .S0 = S0, .out = out, .S_out = S_out};
    float *tmp = NULL;
    if (S_out && S_out == S0) { // aliasing: keep S0 intact until every head has read it
        tmp = xmalloc((size_t)Hv * dk * dv * sizeof(float));
        j.S_out = tmp;
    }
    bn_parallel_for(g_pool, Hv, gdn_fwd_task, &j);
    if (tmp) { memcpy(S_out, tmp, (size_t)Hv * dk * dv * sizeof(float)); free(tmp); }
}

// gdn_bwd_head: the backward of one value head h (adds into its rows of dq/dk — the caller makes
// sure no other thread works on a value head with the same key head).
static void gdn_bwd_head(const gdn_job *j, int h, float *ckpt, float *chunk, float *dS, float *scratch, float *o_dummy) {
    const int T = j->T, Hk = j->Hk, Hv = j->Hv, dk = j->dk, dv = j->dv, CK = j->CK, kh = h % Hk;
    const float *q = j->q, *k = j->k, *v = j->v, *g = j->g, *beta = j->beta;
    o_dummy = gdn_out_optional(dk) ? NULL : o_dummy; // outputs of the recompute are not needed
    float *dq = j->dq, *dk_ = j->dk_, *dv_ = j->dv_, *dg = j->dg, *dbeta = j->dbeta;
    size_t ssz = (size_t)dk * dv;
    float *u = scratch, *delta = u + dv, *ddelta = delta + dv, *du = ddelta + dv;
    // forward pass storing checkpoints: ckpt[c] = S before step c·CK
    float *S = chunk; // working state
    if (j->S0) memcpy(S, j->S0 + h * ssz, ssz * sizeof(float)); else memset(S, 0, ssz * sizeof(float));
    for (int t = 0; t < T; t++) {
        if (t % CK == 0) memcpy(ckpt + (size_t)(t / CK) * ssz, S, ssz * sizeof(float));
        size_t gi = (size_t)t * Hv + h;
        gdn_step(S, q + ((size_t)t * Hk + kh) * dk, k + ((size_t)t * Hk + kh) * dk, v + gi * dv, expf(g[gi]), beta[gi],
                    o_dummy, dk, dv);
    }
    if (j->dS_final) memcpy(dS, j->dS_final + h * ssz, ssz * sizeof(float)); else memset(dS, 0, ssz * sizeof(float));
    for (int c = T > 0 ? (T - 1) / CK : -1; c >= 0; c--) {
        int t0 = c * CK, t1 = t0 + CK < T ? t0 + CK : T;
        // recompute: chunk[s] = state before step t0 + s (s = 0..t1−t0)
        memcpy(chunk, ckpt + (size_t)c * ssz, ssz * sizeof(float));
        for (int t = t0; t < t1; t++) {
            float *Sn = chunk + (size_t)(t - t0 + 1) * ssz;
            size_t gi = (size_t)t * Hv + h;
            gdn_step_from(Sn, chunk + (size_t)(t - t0) * ssz, q + ((size_t)t * Hk + kh) * dk,
                          k + ((size_t)t * Hk + kh) * dk, v + gi * dv, expf(g[gi]), beta[gi], o_dummy, dk, dv);
        }
        for (int t = t1 - 1; t >= t0; t--) {
            const float *Sp = chunk + (size_t)(t - t0) * ssz;     // S_{t−1}
            const float *St = chunk + (size_t)(t - t0 + 1) * ssz; // S_t
            const float *qh = q + ((size_t)t * Hk + kh) * dk, *kk = k + ((size_t)t * Hk + kh) * dk;
            size_t gi = (size_t)t * Hv + h;
            const float *vh = v + gi * dv, *doh = j->dout + gi * dv;
            float *dqh = dq ? dq + ((size_t)t * Hk + kh) * dk : NULL;
            float *dkh = dk_ ? dk_ + ((size_t)t * Hk + kh) * dk : NULL;
            float alpha = expf(g[gi]), b = beta[gi];
#if defined(__x86_64__) || defined(__i386__)
            if (have_avx2_fma() && dk % 8 == 0) {
                double dbeta_acc = 0, dalpha_acc = 0;
                gdn_bwd_step_avx2(Sp, St, qh, kk, vh, doh, alpha, b, dk, dv, dS, dqh, dkh, dv_ ? dv_ + gi * dv : NULL,
                                  &dbeta_acc, &dalpha_acc, du + dv);
                if (dbeta) dbeta[gi] += (float)dbeta_acc;
                if (dg) dg[gi] += alpha * (float)dalpha_acc;
                continue;
            }
#endif
            // u = (αS_{t−1})ᵀk, δ = β(v − u)
            for (int jj = 0; jj < dv; jj++) {
                float acc = 0;
                for (int i = 0; i < dk; i++) acc += Sp[SIDX(i, jj)] * kk[i];
                u[jj] = alpha * acc;
                delta[jj] = b * (vh[jj] - u[jj]);
            }
            // 1. o = S_tᵀq: dq += S_t·do; dS += q·doᵀ.  2. S_t = S' + kδᵀ: dk += dS·δ; dδ = dSᵀk
            for (int jj = 0; jj < dv; jj++) {
                float dd = 0;
                for (int i = 0; i < dk; i++) {
                    if (dqh) dqh[i] += St[SIDX(i, jj)] * doh[jj];
                    dS[SIDX(i, jj)] += qh[i] * doh[jj];
                    if (dkh) dkh[i] += dS[SIDX(i, jj)] * delta[jj];
                    dd += dS[SIDX(i, jj)] * kk[i];
                }
                ddelta[jj] = dd;
            }
            // 3. δ = β(v − u): dv = β·dδ; dβ = dδ·(v − u); du = −β·dδ
            double dbeta_acc = 0;
            for (int jj = 0; jj < dv; jj++) {
                if (dv_) dv_[gi * dv + jj] += b * ddelta[jj];
                dbeta_acc += (double)ddelta[jj] * (vh[jj] - u[jj]);
                du[jj] = -b * ddelta[jj];
            }
            if (dbeta) dbeta[gi] += (float)dbeta_acc;
            // 4. u = S'ᵀk, S' = αS_{t−1}: dS' += k·duᵀ; dk += S'·du
            // 5. dα = ⟨dS', S_{t−1}⟩; dg = α·dα; dS_{t−1} = α·dS'
            double dalpha = 0;
            for (int jj = 0; jj < dv; jj++)
                for (int i = 0; i < dk; i++) {
                    if (dkh) dkh[i] += alpha * Sp[SIDX(i, jj)] * du[jj];
                    float d = dS[SIDX(i, jj)] + kk[i] * du[jj];
                    dalpha += (double)d * Sp[SIDX(i, jj)];
                    dS[SIDX(i, jj)] = alpha * d;
                }
            if (dg) dg[gi] += alpha * (float)dalpha;
        }
    }
    if (j->dS0) for (size_t e = 0; e < ssz; e++) j->dS0[h * ssz + e] += dS[e];
}

// gdn_bwd_task: items are key heads κ; each runs the value heads h ≡ κ (mod Hk) one after the
// other, so the shared dq/dk rows of κ are written by one thread only.
static void gdn_bwd_task(void *ctx, int64_t k0, int64_t k1, int tid) {
    const gdn_job *j = ctx;
    size_t ssz = (size_t)j->dk * j->dv;
    int n_ck = (j->T + j->CK - 1) / j->CK + 1;
    float *ckpt = xmalloc((size_t)n_ck * ssz * sizeof(float));
    float *chunk = xmalloc((size_t)(j->CK + 1) * ssz * sizeof(float));
    float *dS = xmalloc(ssz * sizeof(float));
    float *scratch = xmalloc(((size_t)4 * j->dv + 2 * (size_t)j->dk) * sizeof(float)); // u, δ, dδ, du + 2·dk dummies
    float *o_dummy = xmalloc((size_t)j->dv * sizeof(float));
    for (int64_t kh = k0; kh < k1; kh++)
        for (int h = (int)kh; h < j->Hv; h += j->Hk) gdn_bwd_head(j, h, ckpt, chunk, dS, scratch, o_dummy);
    free(ckpt); free(chunk); free(dS); free(scratch); free(o_dummy);
}

void bn_gdn_bwd(int T, int Hk, int Hv, int dk, int dv, const float *q, const float *k, const float *v,
                const float *g, const float *beta, const float *S0, const float *dout, const float *dS_final,
                int ckpt_every, float *dq, float *dk_, float *dv_, float *dg, float *dbeta, float *dS0) {
    gdn_job j = {.T = T, .Hk = Hk, .Hv = Hv, .dk = dk, .dv = dv, .CK = ckpt_every > 0 ? ckpt_every : 32,
                 .q = q, .k = k, .v = v, .g = g, .beta = beta, .S0 = S0, .dout = dout, .dS_final = dS_final,
                 .dq = dq, .dk_ = dk_, .dv_ = dv_, .dg = dg, .dbeta = dbeta, .dS0 = dS0};
    bn_parallel_for(g_pool, Hk, gdn_bwd_task, &j);
}

// ---- parameter gradients (full-parameter training) ---------------------------------------------

void bn_linear_wgrad(const float *x, const float *dy, int64_t n_in, int64_t n_out, int T, float *dW) {
    // dW (n_out × n_in) += dyᵀ (n_out × T) · x (T × n_in)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n_out, (int)n_in, T, 1.0f, dy, (int)n_out, x,
                (int)n_in, 1.0f, dW, (int)n_in);
}

void bn_rmsnorm_wgrad(const float *x, int n, int rows, float eps, const float *dy, float *dw) {
    for (int t = 0; t < rows; t++) {
        const float *xr = x + (size_t)t * n, *dyr = dy + (size_t)t * n;
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)xr[i] * xr[i];
        float rho = (float)(1.0 / sqrt(ss / n + eps));
        for (int i = 0; i < n; i++) dw[i] += dyr[i] * xr[i] * rho;
    }
}

void bn_gated_rmsnorm_wgrad(const float *o, const float *z, int n, int rows, float eps, const float *dy, float *dw) {
    for (int t = 0; t < rows; t++) {
        const float *orow = o + (size_t)t * n, *zr = z + (size_t)t * n, *dyr = dy + (size_t)t * n;
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)orow[i] * orow[i];
        float rho = (float)(1.0 / sqrt(ss / n + eps));
        for (int i = 0; i < n; i++) dw[i] += dyr[i] * orow[i] * rho * zr[i] * sigmoidf_(zr[i]);
    }
}

void bn_conv1d_silu_wgrad(const float *mix, const float *state0, const float *w, int C, int K, int T,
                          const float *dout, float *dw) {
    for (int t = 0; t < T; t++)
        for (int ch = 0; ch < C; ch++) {
            float c = 0;
            for (int i = 0; i < K; i++) c += w[(size_t)ch * K + i] * conv_input(mix, state0, C, K, t + i, ch);
            float s = sigmoidf_(c);
            float dc = dout[(size_t)t * C + ch] * s * (1.0f + c * (1.0f - s));
            for (int i = 0; i < K; i++) dw[(size_t)ch * K + i] += dc * conv_input(mix, state0, C, K, t + i, ch);
        }
}

void bn_gdn_gate_param_grad(const float *a, const float *dt, const float *ssm_a, int n, int rows,
                            const float *dg, float *ddt, float *dssm_a) {
    for (int t = 0; t < rows; t++)
        for (int h = 0; h < n; h++) {
            size_t i = (size_t)t * n + h;
            float u = a[i] + dt[h];
            if (ddt) ddt[h] += dg[i] * ssm_a[h] * sigmoidf_(u);
            if (dssm_a) dssm_a[h] += dg[i] * bn_softplus(u);
        }
}
