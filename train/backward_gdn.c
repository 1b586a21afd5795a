// train/backward_gdn.c — the GatedDeltaNet ops' forward and backward (docs/model.md §8): causal conv1d + SiLU (and
// its weight gradient) and the gated delta-rule recurrence, parallel over heads on the training pool. See backward.h.
#include "train/backward_impl.h"
#include <string.h>
#include <stdlib.h>
#include "base/util.h"
#include "core/ops.h"

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
    bn_parallel_for(bn_train_pool(), Hv, gdn_fwd_task, &j);
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
    bn_parallel_for(bn_train_pool(), Hk, gdn_bwd_task, &j);
}
