// tests/compat/test_compat_pq2.c — PQ2_0 (legacy g128, stored with type id 42) has no llama.cpp
// mainline reference, so our engine on a PQ2_0 model is compared with our engine on the same weights
// dequantized to F32. The only difference left is the Q8_0 rounding of activations in the PQ2_0 dot
// products, so the bound is tight. Also checks that id 42 resolves to g128 by byte span.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/test.h"
#include "tests/compat/compat_common.h"
#include "core/util.h"
#include "quant/quant.h"

#define N_CTX 128
#define N_GEN 64
// Bound on max |Δ logprob| over all positions and vocab entries between PQ2_0 and its dequantized
// F32 copy (activation rounding to Q8_0 only); measured value is printed.
#define TOL_ROW 0.05
#define MIN_GREEDY 64

int main(void) {
    const char *name = "compat-pq2_0-vs-dequant";
    char err[512];
    const char *dir = compat_tmpdir();
    if (!dir) { perror("mkdtemp"); return 1; }
    char base[600], pq[600], deq[600];
    snprintf(base, sizeof base, "%s/base.gguf", dir);
    snprintf(pq, sizeof pq, "%s/pq2_0.gguf", dir);
    snprintf(deq, sizeof deq, "%s/dequant.gguf", dir);
    int rc = compat_make_model("tiny", BN_F32, 99, base, err, sizeof err);
    if (rc == 0) rc = compat_requant(base, pq, BN_PQ2_0, 42, 41, err, sizeof err);
    if (rc == 0) rc = compat_requant(pq, deq, BN_F32, BN_F32, 0, err, sizeof err);
    if (rc != 0) { fprintf(stderr, "%s: %s\n", name, err); compat_rmdir(dir); return 1; }

    bn_model *mq = bn_model_load(pq, err, sizeof err);
    CHECK(mq != NULL, "load PQ2_0 model: %s", err);
    bn_model *mf = bn_model_load(deq, err, sizeof err);
    CHECK(mf != NULL, "load dequantized model: %s", err);
    if (!mq || !mf) { compat_rmdir(dir); return test_done(name); }
    CHECK(mq->w.layers[0].ffn_up.type == BN_PQ2_0, "ffn_up stored as id 42 resolved to %s, want q2_0_g128",
          bn_type_name(mq->w.layers[0].ffn_up.type));
    int n_vocab = mq->cfg.n_vocab;
    bn_state *sq = bn_state_new(mq, N_CTX, 2), *sf = bn_state_new(mf, N_CTX, 2);
    float *lq = xmalloc(sizeof(float) * (size_t)N_CTX * n_vocab), *lf = xmalloc(sizeof(float) * (size_t)N_CTX * n_vocab);
    int32_t toks[N_CTX];
    double worst = 0;
    for (int q = 0; q < 3; q++) {
        int n = q == 0 ? 16 : q == 1 ? 64 : N_CTX;
        compat_random_tokens(500 + q, 0, n_vocab, n, toks);
        int ra = compat_forward_all(mq, sq, toks, n, q == 0 ? 1 : 0, lq, err, sizeof err);
        CHECK(ra == 0, "forward PQ2_0: %s", err);
        int rb = compat_forward_all(mf, sf, toks, n, q == 0 ? 1 : 0, lf, err, sizeof err);
        CHECK(rb == 0, "forward F32: %s", err);
        if (ra || rb) continue;
        compat_diff d;
        compat_diff_logits(lq, lf, n, n_vocab, toks + 1, &d);
        printf("%s seq %d (n %d): max|dlogprob| row %.3g, next-token max %.3g mean %.3g, argmax diff %d/%d\n", name, q,
               n, d.max_abs_row, d.max_abs_next, d.mean_abs_next, d.argmax_diff, d.n_pos);
        worst = d.max_abs_row > worst ? d.max_abs_row : worst;
    }
    printf("%s: worst max|dlogprob| %.3g (bound %g)\n", name, worst, TOL_ROW);
    CHECK(worst <= TOL_ROW, "max |dlogprob| %.4g exceeds %g", worst, TOL_ROW);

    int32_t gq[N_GEN], gf[N_GEN];
    compat_random_tokens(7, 0, n_vocab, 6, toks);
    int ga = compat_greedy(mq, sq, toks, 6, N_GEN, gq, err, sizeof err);
    int gb = compat_greedy(mf, sf, toks, 6, N_GEN, gf, err, sizeof err);
    CHECK(ga == 0 && gb == 0, "greedy failed: %s", err);
    int same = 0;
    while (same < N_GEN && gq[same] == gf[same]) same++;
    printf("%s greedy: %d/%d identical before divergence (required >= %d)\n", name, same, N_GEN, MIN_GREEDY);
    CHECK(same >= MIN_GREEDY, "greedy agreement %d < %d", same, MIN_GREEDY);

    free(lq);
    free(lf);
    bn_state_free(sq);
    bn_state_free(sf);
    bn_model_free(mq);
    bn_model_free(mf);
    compat_rmdir(dir);
    return test_done(name);
}
