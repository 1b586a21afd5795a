// train/backward_attn.c — causal softmax attention with GQA, forward and backward (docs/model.md §8), parallel over
// (position, head) or KV heads on the training pool. See backward.h.
#include "train/backward_impl.h"
#include <string.h>
#include <stdlib.h>
#include "base/util.h"
#include "core/ops.h"

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
    bn_parallel_for(bn_train_pool(), (int64_t)T * nh, attn_fwd_task, &j);
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
    bn_parallel_for(bn_train_pool(), nkv, attn_bwd_task, &j);
}
