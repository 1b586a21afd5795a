// train/backward.c — fp32 backward of each forward op (MODEL.md §8). See backward.h for layouts.
#include "train/backward.h"
#include <math.h>
#include <string.h>
#include <stdlib.h>
#include <cblas.h>
#include "core/util.h"
#include "quant/quant.h"
#include "core/ops.h"

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

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
        float s = 0;
        for (int d = 0; d < hd; d++) s += qh[d] * kr[d];
        P[tau] = s * scale;
        if (P[tau] > mx) mx = P[tau];
    }
    double sum = 0;
    for (int tau = 0; tau <= p; tau++) { P[tau] = expf(P[tau] - mx); sum += P[tau]; }
    float inv = (float)(1.0 / sum);
    for (int tau = 0; tau <= p; tau++) P[tau] *= inv;
}

void bn_attn_fwd(const float *q, const float *k, const float *v, int T, int hd, int nh, int nkv,
                 float scale, float *out) {
    int grp = nh / nkv;
    float *scores = xmalloc((size_t)T * sizeof(float));
    for (int p = 0; p < T; p++)
        for (int h = 0; h < nh; h++) {
            int kvh = h / grp;
            bn_attention_head(out + ((size_t)p * nh + h) * hd, q + ((size_t)p * nh + h) * hd, k + (size_t)kvh * hd,
                              v + (size_t)kvh * hd, p + 1, (int64_t)nkv * hd, hd, scale, scores);
        }
    free(scores);
}

void bn_attn_bwd(const float *q, const float *k, const float *v, int T, int hd, int nh, int nkv,
                 float scale, const float *dout, float *dq, float *dk, float *dv) {
    int grp = nh / nkv;
    float *P = xmalloc((size_t)T * sizeof(float));
    float *dP = xmalloc((size_t)T * sizeof(float));
    for (int p = 0; p < T; p++)
        for (int h = 0; h < nh; h++) {
            int kvh = h / grp;
            const float *qh = q + ((size_t)p * nh + h) * hd;
            const float *doh = dout + ((size_t)p * nh + h) * hd;
            attn_probs(qh, k, p, hd, nkv, kvh, scale, P);
            double rowsum = 0; // Σ_τ dP_τ P_τ
            for (int tau = 0; tau <= p; tau++) {
                const float *vr = v + ((size_t)tau * nkv + kvh) * hd;
                float s = 0;
                for (int d = 0; d < hd; d++) s += doh[d] * vr[d];
                dP[tau] = s;
                rowsum += (double)s * P[tau];
            }
            for (int tau = 0; tau <= p; tau++) {
                float dS = P[tau] * (dP[tau] - (float)rowsum);
                const float *kr = k + ((size_t)tau * nkv + kvh) * hd;
                size_t kvoff = ((size_t)tau * nkv + kvh) * hd;
                if (dq) for (int d = 0; d < hd; d++) dq[((size_t)p * nh + h) * hd + d] += scale * dS * kr[d];
                if (dk) for (int d = 0; d < hd; d++) dk[kvoff + d] += scale * dS * qh[d];
                if (dv) for (int d = 0; d < hd; d++) dv[kvoff + d] += P[tau] * doh[d];
            }
        }
    free(P);
    free(dP);
}

// ---- causal conv1d + SiLU ---------------------------------------------------------------------

// conv_input: element (ch) of the extended sequence at index e (0..K−2 = state rows, then mix).
static inline float conv_input(const float *mix, const float *state0, int C, int K, int e, int ch) {
    if (e < K - 1) return state0 ? state0[(size_t)ch * (K - 1) + e] : 0.0f;
    return mix[(size_t)(e - (K - 1)) * C + ch];
}

void bn_conv1d_silu_fwd(const float *mix, const float *state0, const float *w, int C, int K, int T,
                        float *out, float *state_out) {
    for (int t = 0; t < T; t++)
        for (int ch = 0; ch < C; ch++) {
            float c = 0;
            for (int i = 0; i < K; i++) c += w[(size_t)ch * K + i] * conv_input(mix, state0, C, K, t + i, ch);
            out[(size_t)t * C + ch] = c * sigmoidf_(c);
        }
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
    for (int t = 0; t < T; t++)
        for (int ch = 0; ch < C; ch++) {
            float c = 0;
            for (int i = 0; i < K; i++) c += w[(size_t)ch * K + i] * conv_input(mix, state0, C, K, t + i, ch);
            float s = sigmoidf_(c);
            float dc = dout[(size_t)t * C + ch] * s * (1.0f + c * (1.0f - s));
            for (int i = 0; i < K; i++) {
                int e = t + i; // extended index of the input multiplied by tap i
                float g = w[(size_t)ch * K + i] * dc;
                if (e < K - 1) { if (dstate0) dstate0[(size_t)ch * (K - 1) + e] += g; }
                else if (dmix) dmix[(size_t)(e - (K - 1)) * C + ch] += g;
            }
        }
}

// ---- gated delta-rule recurrence --------------------------------------------------------------

// S layout (ops.h / ggml): S[j*dk + i] = S_ij, i = key dim, j = value dim.
#define SIDX(i, j) ((size_t)(j) * dk + (i))

void bn_gdn_fwd(int T, int Hk, int Hv, int dk, int dv, const float *q, const float *k, const float *v,
                const float *g, const float *beta, const float *S0, float *out, float *S_out) {
    size_t ssz = (size_t)dk * dv;
    float *S = xmalloc(ssz * sizeof(float));
    for (int h = 0; h < Hv; h++) {
        int kh = h % Hk;
        if (S0) memcpy(S, S0 + h * ssz, ssz * sizeof(float)); else memset(S, 0, ssz * sizeof(float));
        for (int t = 0; t < T; t++) {
            const float *qh = q + ((size_t)t * Hk + kh) * dk, *kk = k + ((size_t)t * Hk + kh) * dk;
            const float *vh = v + ((size_t)t * Hv + h) * dv;
            size_t gi = (size_t)t * Hv + h;
            bn_gdn_step(S, qh, kk, vh, expf(g[gi]), beta[gi], out + gi * dv, dk, dv);
        }
        if (S_out) memcpy(S_out + h * ssz, S, ssz * sizeof(float));
    }
    free(S);
}

void bn_gdn_bwd(int T, int Hk, int Hv, int dk, int dv, const float *q, const float *k, const float *v,
                const float *g, const float *beta, const float *S0, const float *dout, const float *dS_final,
                int ckpt_every, float *dq, float *dk_, float *dv_, float *dg, float *dbeta, float *dS0) {
    int CK = ckpt_every > 0 ? ckpt_every : 32;
    int n_ck = (T + CK - 1) / CK + 1;
    size_t ssz = (size_t)dk * dv;
    float *ckpt = xmalloc((size_t)n_ck * ssz * sizeof(float));      // ckpt[c] = S before step c·CK
    float *chunk = xmalloc((size_t)(CK + 1) * ssz * sizeof(float)); // chunk[s] = S before step t0 + s
    float *dS = xmalloc(ssz * sizeof(float));
    float *scratch = xmalloc((size_t)4 * dv * sizeof(float));
    float *u = scratch, *delta = u + dv, *ddelta = delta + dv, *du = ddelta + dv;
    float *o_dummy = xmalloc((size_t)dv * sizeof(float));
    for (int h = 0; h < Hv; h++) {
        int kh = h % Hk;
        // forward pass storing checkpoints
        float *S = chunk; // working state
        if (S0) memcpy(S, S0 + h * ssz, ssz * sizeof(float)); else memset(S, 0, ssz * sizeof(float));
        for (int t = 0; t < T; t++) {
            if (t % CK == 0) memcpy(ckpt + (size_t)(t / CK) * ssz, S, ssz * sizeof(float));
            const float *qh = q + ((size_t)t * Hk + kh) * dk, *kk = k + ((size_t)t * Hk + kh) * dk;
            size_t gi = (size_t)t * Hv + h;
            bn_gdn_step(S, qh, kk, v + gi * dv, expf(g[gi]), beta[gi], o_dummy, dk, dv);
        }
        if (dS_final) memcpy(dS, dS_final + h * ssz, ssz * sizeof(float)); else memset(dS, 0, ssz * sizeof(float));
        for (int c = T > 0 ? (T - 1) / CK : -1; c >= 0; c--) {
            int t0 = c * CK, t1 = t0 + CK < T ? t0 + CK : T;
            memcpy(chunk, ckpt + (size_t)c * ssz, ssz * sizeof(float));
            for (int t = t0; t < t1; t++) {
                float *Sn = chunk + (size_t)(t - t0 + 1) * ssz;
                memcpy(Sn, chunk + (size_t)(t - t0) * ssz, ssz * sizeof(float));
                const float *qh = q + ((size_t)t * Hk + kh) * dk, *kk = k + ((size_t)t * Hk + kh) * dk;
                size_t gi = (size_t)t * Hv + h;
                bn_gdn_step(Sn, qh, kk, v + gi * dv, expf(g[gi]), beta[gi], o_dummy, dk, dv);
            }
            for (int t = t1 - 1; t >= t0; t--) {
                const float *Sp = chunk + (size_t)(t - t0) * ssz;     // S_{t−1}
                const float *St = chunk + (size_t)(t - t0 + 1) * ssz; // S_t
                const float *qh = q + ((size_t)t * Hk + kh) * dk, *kk = k + ((size_t)t * Hk + kh) * dk;
                size_t gi = (size_t)t * Hv + h;
                const float *vh = v + gi * dv, *doh = dout + gi * dv;
                float *dqh = dq ? dq + ((size_t)t * Hk + kh) * dk : NULL;
                float *dkh = dk_ ? dk_ + ((size_t)t * Hk + kh) * dk : NULL;
                float alpha = expf(g[gi]), b = beta[gi];
                // u = (αS_{t−1})ᵀk, δ = β(v − u)
                for (int j = 0; j < dv; j++) {
                    float acc = 0;
                    for (int i = 0; i < dk; i++) acc += Sp[SIDX(i, j)] * kk[i];
                    u[j] = alpha * acc;
                    delta[j] = b * (vh[j] - u[j]);
                }
                // 1. o = S_tᵀq: dq += S_t·do; dS += q·doᵀ.  2. S_t = S' + kδᵀ: dk += dS·δ; dδ = dSᵀk
                for (int j = 0; j < dv; j++) {
                    float dd = 0;
                    for (int i = 0; i < dk; i++) {
                        if (dqh) dqh[i] += St[SIDX(i, j)] * doh[j];
                        dS[SIDX(i, j)] += qh[i] * doh[j];
                        if (dkh) dkh[i] += dS[SIDX(i, j)] * delta[j];
                        dd += dS[SIDX(i, j)] * kk[i];
                    }
                    ddelta[j] = dd;
                }
                // 3. δ = β(v − u): dv = β·dδ; dβ = dδ·(v − u); du = −β·dδ
                double dbeta_acc = 0;
                for (int j = 0; j < dv; j++) {
                    if (dv_) dv_[gi * dv + j] += b * ddelta[j];
                    dbeta_acc += (double)ddelta[j] * (vh[j] - u[j]);
                    du[j] = -b * ddelta[j];
                }
                if (dbeta) dbeta[gi] += (float)dbeta_acc;
                // 4. u = S'ᵀk, S' = αS_{t−1}: dS' += k·duᵀ; dk += S'·du
                // 5. dα = ⟨dS', S_{t−1}⟩; dg = α·dα; dS_{t−1} = α·dS'
                double dalpha = 0;
                for (int j = 0; j < dv; j++)
                    for (int i = 0; i < dk; i++) {
                        if (dkh) dkh[i] += alpha * Sp[SIDX(i, j)] * du[j];
                        float d = dS[SIDX(i, j)] + kk[i] * du[j];
                        dalpha += (double)d * Sp[SIDX(i, j)];
                        dS[SIDX(i, j)] = alpha * d;
                    }
                if (dg) dg[gi] += alpha * (float)dalpha;
            }
        }
        if (dS0) for (size_t e = 0; e < ssz; e++) dS0[h * ssz + e] += dS[e];
    }
    free(ckpt);
    free(chunk);
    free(dS);
    free(scratch);
    free(o_dummy);
}
