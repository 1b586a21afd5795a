// train/backward.c — fp32 backward of each forward op (docs/model.md §8): linear + LoRA, norms, elementwise, RoPE,
// the weight gradients of full-parameter training, and the thread pool; attention in train/backward_attn.c, causal
// conv1d and the gated delta rule in train/backward_gdn.c. See backward.h for layouts.
#include "train/backward_impl.h"
#include <string.h>
#include <stdlib.h>
#include <cblas.h>
#include "base/util.h"
#include "quant/quant.h"
#include "core/ops.h"

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

// ---- threads ---------------------------------------------------------------------------------

// The training pool (NULL = single-threaded); see bn_train_set_threads.
static bn_pool *g_pool;

void bn_train_set_threads(int n_threads) {
    bn_pool_free(g_pool);
    g_pool = n_threads > 1 ? bn_pool_new(n_threads) : NULL;
}

bn_pool *bn_train_pool(void) { return g_pool; }

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
