// tests/train/test_prune.c — post-hoc flip pruning (train/prune.h) on the tiny Q1_0 model:
//  a "trained" head = the base with every block of the 12 FTPO rows' rejected tokens negated (the useful flips) and
//  random sign flips in 40 other rows (noise); pruning with cw_drop 0 and 0.25
//  1. keeps the train-pair chosen_win ≥ its own − cw_drop and lowers the plain-text KL to the base (≥ 20 % here);
//  2. its KL numbers equal the engine's (bn_forward logits of the written files, KL by bn_tether_kl) within
//     2 % + 1e-4 nats (the tool rounds activations like the engine but sums in another order);
//  3. writes only reverts: every output.weight block is the model's or the base's, every other byte the model's;
//  4. is deterministic: a second run writes the same bytes;
//  5. with the next-token-loss objective (cw_drop 0) removes ≥ 20 % of the model's text NLL excess over the base,
//     and the tool's NLL numbers equal the engine's within 0.1 %.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "tests/test.h"
#include "tests/train/fixture.h"
#include "core/forward.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "quantize/quantize.h"
#include "train/prune.h"
#include "train/tether.h"

static char dir[] = "/tmp/bonsai_test_prune_XXXXXX";
enum { NT = 256, CTX = 64 };

// engine_kl: mean KL(p_base ‖ p_model) over text in CTX windows with the engine's logits; *nll = the model's mean
// next-token loss over the positions with a next token in their window.
static double engine_kl(const char *base, const char *model, const int32_t *text, double *nll) {
    char err[256];
    bn_model *m0 = bn_model_load(base, err, sizeof err), *m1 = bn_model_load(model, err, sizeof err);
    CHECK(m0 && m1, "load: %s", err);
    if (!m0 || !m1) return -1;
    int V = m0->cfg.n_vocab;
    float *z0 = xmalloc(sizeof(float) * V * CTX), *z1 = xmalloc(sizeof(float) * V * CTX);
    bn_state *s0 = bn_state_new(m0, CTX, 1), *s1 = bn_state_new(m1, CTX, 1);
    double kl = 0;
    *nll = 0;
    for (int p = 0; p < NT; p += CTX) {
        bn_state_reset(s0);
        bn_state_reset(s1);
        bn_forward_out o0 = {.logits = z0, .all_logits = true}, o1 = {.logits = z1, .all_logits = true};
        CHECK(bn_forward(m0, s0, text + p, CTX, &o0, err, sizeof err) == 0, "forward: %s", err);
        CHECK(bn_forward(m1, s1, text + p, CTX, &o1, err, sizeof err) == 0, "forward: %s", err);
        bn_log_softmax(z0, CTX, V, z0);
        kl += bn_tether_kl(z1, z0, CTX, V, 0.0f, NULL) * CTX;
        bn_log_softmax(z1, CTX, V, z1);
        for (int t = 0; t + 1 < CTX; t++) *nll -= z1[(size_t)t * V + text[p + t + 1]];
    }
    *nll /= (double)(NT / CTX) * (CTX - 1);
    bn_state_free(s0); bn_state_free(s1);
    free(z0); free(z1);
    bn_model_free(m0); bn_model_free(m1);
    return kl / NT;
}

// make_model: writes the base with negated rejected-token rows and 40 noisy rows to path.
static int make_model(const char *base, const bn_train_rows *rows, const char *path) {
    char err[256];
    size_t n = 0;
    uint8_t *file = (uint8_t *)bn_read_file(base, &n, err, sizeof err);
    gguf_file *g = gguf_open(base, err, sizeof err);
    CHECK(file && g, "read base: %s", err);
    if (!file || !g) return -1;
    const gguf_tensor *t = gguf_find_tensor(g, "output.weight");
    CHECK(t && t->type == BN_Q1_0, "tiny Q1_0 has an untied Q1_0 output.weight");
    int H = (int)t->ne[0], V = (int)t->ne[1], bpr = H / 128;
    bn_block_q1_0 *blk = (bn_block_q1_0 *)(file + g->data_offset + t->offset);
    bool *used = xcalloc((size_t)V, 1);
    for (int i = 0; i < rows->n_rows; i++) {
        used[rows->rows[i].rejected] = true;
        for (int k = 0; k < rows->rows[i].n_chosen; k++) used[rows->rows[i].chosen[k]] = true;
    }
    bool *neg = xcalloc((size_t)V, 1);
    for (int i = 0; i < rows->n_rows; i++) neg[rows->rows[i].rejected] = true;
    for (int r = 0; r < V; r++)
        if (neg[r])
            for (int b = 0; b < bpr; b++)
                for (int j = 0; j < 16; j++) blk[r * bpr + b].qs[j] ^= 0xFF;
    bn_rng rng;
    bn_rng_seed(&rng, 5);
    for (int noisy = 0; noisy < 40;) {
        int r = (int)bn_rng_below(&rng, (uint64_t)V);
        if (used[r]) continue;
        used[r] = true;
        noisy++;
        for (int b = 0; b < bpr; b++)
            for (int j = 0; j < 16; j++) blk[r * bpr + b].qs[j] ^= (uint8_t)bn_rng_next(&rng);
    }
    int rc = bn_write_file_atomic(path, file, n, err, sizeof err);
    CHECK(rc == 0, "write: %s", err);
    free(used); free(neg); free(file);
    gguf_close(g);
    return rc;
}

// only_reverts: every byte of out is model's, except output.weight blocks equal to base's.
static void check_only_reverts(const char *base, const char *model, const char *out, int *n_rev) {
    char err[256];
    size_t nb, nm, no;
    uint8_t *b = (uint8_t *)bn_read_file(base, &nb, err, sizeof err);
    uint8_t *m = (uint8_t *)bn_read_file(model, &nm, err, sizeof err);
    uint8_t *o = (uint8_t *)bn_read_file(out, &no, err, sizeof err);
    gguf_file *g = gguf_open(model, err, sizeof err);
    CHECK(b && m && o && g && nm == no && nb == nm, "read the three files");
    if (!(b && m && o && g && nm == no && nb == nm)) return;
    const gguf_tensor *t = gguf_find_tensor(g, "output.weight");
    size_t h0 = g->data_offset + t->offset, h1 = h0 + t->nbytes;
    CHECK(memcmp(o, m, h0) == 0 && memcmp(o + h1, m + h1, nm - h1) == 0, "everything but output.weight is the model's");
    int bad = 0;
    *n_rev = 0;
    for (size_t p = h0; p < h1; p += sizeof(bn_block_q1_0)) {
        bool is_m = memcmp(o + p, m + p, sizeof(bn_block_q1_0)) == 0;
        bool is_b = memcmp(o + p, b + p, sizeof(bn_block_q1_0)) == 0;
        bad += !is_m && !is_b;
        *n_rev += !is_m && is_b;
    }
    CHECK(bad == 0, "every output.weight block is the model's or the base's (%d are neither)", bad);
    free(b); free(m); free(o);
    gguf_close(g);
}

int main(void) {
    if (!mkdtemp(dir)) return test_skip("cannot create a temp dir");
    char f32[600], base[600], model[600], out1[600], out2[600], err[256];
    if (fx_write_tiny(dir, BN_F32, f32, sizeof f32) != 0) return test_done("train_prune");
    snprintf(base, sizeof base, "%s/tiny-q1_0.gguf", dir);
    bn_quantize_params qp = {.type = "Q1_0", .n_threads = 1};
    CHECK(bn_quantize_file(&qp, f32, base, err, sizeof err) == 0, "quantize: %s", err);
    bn_model *mq = bn_model_load(base, err, sizeof err);
    CHECK(mq != NULL, "load: %s", err);
    if (!mq) return test_done("train_prune");
    bn_train_rows *rows = fx_ftpo_rows(mq);
    int32_t text[NT];
    bn_rng rng;
    bn_rng_seed(&rng, 11);
    for (int i = 0; i < NT; i++) text[i] = (int32_t)bn_rng_below(&rng, 250);
    bn_model_free(mq);
    snprintf(model, sizeof model, "%s/model.gguf", dir);
    if (make_model(base, rows, model) != 0) return test_done("train_prune");

    const double drops[3] = {0.0, 0.25, 0.0};
    for (int k = 0; k < 3; k++) {
        bn_prune_cfg cfg = bn_prune_cfg_default();
        cfg.cw_drop = drops[k];
        cfg.objective = k == 2 ? BN_PRUNE_NLL : BN_PRUNE_KL;
        cfg.text_ctx = CTX;
        cfg.n_threads = 1;
        snprintf(out1, sizeof out1, "%s/pruned%d.gguf", dir, k);
        snprintf(out2, sizeof out2, "%s/pruned%d_again.gguf", dir, k);
        bn_prune_stats st, st2;
        CHECK(bn_prune_flips(base, model, rows, text, NT, &cfg, out1, &st, err, sizeof err) == 0, "prune: %s", err);
        CHECK(bn_prune_flips(base, model, rows, text, NT, &cfg, out2, &st2, err, sizeof err) == 0, "prune: %s", err);
        printf("%s, cw_drop %.2f: %d of %d blocks changed (%d rows), %d reverted (%d rows left); KL %.5f -> %.5f; "
               "NLL %.5f -> %.5f (base %.5f); train cw %.4f -> %.4f; margin %.4f -> %.4f\n", k == 2 ? "NLL" : "KL",
               drops[k], st.n_changed, st.n_blocks, st.n_rows_changed, st.n_reverted, st.n_rows_after, st.kl_before,
               st.kl_after, st.nll_before, st.nll_after, st.nll_base, st.cw_before, st.cw_after, st.margin_before,
               st.margin_after);
        CHECK(st.cw_before > 0.5, "the negated rejected rows make the pairs win (cw %.4f > 0.5)", st.cw_before);
        CHECK(st.cw_after >= st.cw_before - drops[k] - 1e-9, "cw %.4f >= bound %.4f", st.cw_after,
              st.cw_before - drops[k]);
        if (k < 2)
            CHECK(st.n_reverted > 0 && st.kl_after <= 0.8 * st.kl_before, "KL %.5f -> %.5f (at least 20 %% lower)",
                  st.kl_before, st.kl_after);
        else
            CHECK(st.n_reverted > 0 && st.nll_after <= st.nll_before - 0.2 * (st.nll_before - st.nll_base),
                  "NLL %.5f -> %.5f (at least 20 %% of the excess over the base's %.5f gone)", st.nll_before,
                  st.nll_after, st.nll_base);
        double n_base, n_before, n_after;
        engine_kl(base, base, text, &n_base);
        double e_before = engine_kl(base, model, text, &n_before), e_after = engine_kl(base, out1, text, &n_after);
        printf("engine KL %.5f -> %.5f, NLL %.5f -> %.5f (base %.5f)\n", e_before, e_after, n_before, n_after, n_base);
        CHECK(fabs(n_before - st.nll_before) <= 1e-3 * n_before && fabs(n_after - st.nll_after) <= 1e-3 * n_after &&
              fabs(n_base - st.nll_base) <= 1e-3 * n_base, "NLL: tool vs engine within 0.1 %%");
        CHECK(fabs(e_before - st.kl_before) <= 0.02 * e_before + 1e-4,
              "KL before: tool %.5f vs engine %.5f (2 %% + 1e-4)", st.kl_before, e_before);
        CHECK(fabs(e_after - st.kl_after) <= 0.02 * e_after + 1e-4, "KL after: tool %.5f vs engine %.5f (2 %% + 1e-4)",
              st.kl_after, e_after);
        int n_rev = 0;
        check_only_reverts(base, model, out1, &n_rev);
        CHECK(n_rev == st.n_reverted, "%d blocks reverted in the file, %d reported", n_rev, st.n_reverted);
        size_t n1, n2;
        char *b1 = bn_read_file(out1, &n1, err, sizeof err), *b2 = bn_read_file(out2, &n2, err, sizeof err);
        CHECK(b1 && b2 && n1 == n2 && memcmp(b1, b2, n1) == 0, "two runs write the same bytes");
        free(b1); free(b2);
    }
    bn_train_rows_free(rows);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    return test_done("train_prune");
}
