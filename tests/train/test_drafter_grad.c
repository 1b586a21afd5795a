// tests/train/test_drafter_grad.c — the drafter trainer (train/drafter.h, docs/dspark.md §11) on a tiny random
// drafter: (1) its forward's Markov logits equal spec/dspark.c's (bn_drafter_block + bn_drafter_step_logits) on the
// file bn_dtrain_write wrote, in each convention, (2) its backward equals central finite differences of its own loss
// for sampled elements of every tensor, (3) a checkpoint round-trips, (4) AdamW steps on one sequence lower the loss.
#include "tests/test.h"
#include "tests/spec/fixture.h"
#include "train/drafter.h"
#include "quant/quant.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { NTOK = 14, FIRST = 3 };

static bn_mkdrafter_params tiny(void) {
    bn_mkdrafter_params p;
    bn_mkdrafter_defaults(&p);
    p.n_embd = 16, p.n_layer = 2, p.n_ff = 24, p.n_head = 2, p.n_head_kv = 1, p.head_dim = 8, p.n_rot = 8;
    p.n_vocab = 24, p.block_size = 4, p.n_taps = 2, p.target_layers[0] = 1, p.target_layers[1] = 2;
    p.markov_rank = 4, p.snr_feat = 8, p.type = BN_F32, p.seed = 11, p.rope_base = 1e4f;
    return p;
}

typedef struct {
    int32_t tok[NTOK];
    float *taps;
} seqdata;

static void make_seq(seqdata *s, const bn_drafter_config *c) {
    uint64_t st = 99;
    for (int i = 0; i < NTOK; i++) s->tok[i] = (int32_t)(bn_rng_splitmix64(&st) % (uint64_t)(c->n_vocab - 1));
    const int n = NTOK * c->n_taps * c->n_embd;
    s->taps = malloc(sizeof(float) * (size_t)n);
    for (int i = 0; i < n; i++)
        s->taps[i] = (float)((double)(bn_rng_splitmix64(&st) >> 11) / 9007199254740992.0 * 4 - 2);
}

// (1) trainer logits vs the inference code on the file written in convention conv
static void test_matches_inference(bn_dtrain *t, const seqdata *s, const char *path, int conv) {
    const bn_drafter_config *c = &t->cfg;
    const int B = c->block_size, V = c->n_vocab, E = c->n_embd, na = NTOK - B - FIRST;
    char err[512];
    float *lg = malloc(sizeof(float) * (size_t)na * B * V);
    bn_dtrain_seq seq = {.tokens = s->tok, .taps = s->taps, .n = NTOK, .first = FIRST, .logits = lg};
    CHECK(bn_dtrain_step(t, &seq, false, 1, NULL, err, sizeof err) == 0, "forward: %s", err);
    CHECK(bn_dtrain_write(t, path, BN_F32, conv, NULL, err, sizeof err) == 0, "write: %s", err);
    bn_drafter *d2 = bn_drafter_load(path, NULL, err, sizeof err);
    CHECK(d2 != NULL, "load the written drafter: %s", err);
    if (!d2) {
        free(lg);
        return;
    }
    CHECK(d2->cfg.convention == conv, "written as convention %d, loads as %d", conv, d2->cfg.convention);
    double worst = 0;
    float *h = malloc(sizeof(float) * (size_t)B * E), *base = malloc(sizeof(float) * (size_t)B * V);
    float *row = malloc(sizeof(float) * (size_t)V);
    for (int a = 0; a < na; a++) {
        const int p = FIRST + a;
        bn_dstate *ds = bn_dstate_new(d2, NTOK + 8, 1);
        if (p > 0) bn_drafter_process(d2, ds, s->taps, p, 0, err, sizeof err);
        CHECK(bn_drafter_block(d2, ds, s->tok[p], p, B, h, base, err, sizeof err) == 0, "block: %s", err);
        for (int i = 0; i < B; i++) {
            bn_drafter_step_logits(d2, ds, base + (size_t)i * V, s->tok[p + i], row);
            for (int v = 0; v < V; v++) {
                double e = fabs(row[v] - lg[((size_t)a * B + i) * V + v]);
                if (e > worst) worst = e;
            }
        }
        bn_dstate_free(ds);
    }
    const char *cname = conv == BN_DRAFTER_LEGACY ? "legacy" : "dflash";
    CHECK(worst < 1e-4, "trainer logits differ from spec/dspark.c's on the %s file by %.3g (tolerance 1e-4)", cname,
          worst);
    printf("  trainer vs inference logits, %s file: max |diff| %.3g over %d anchors\n", cname, worst, na);
    free(h), free(base), free(row), free(lg);
    bn_drafter_free(d2);
}

static double loss_of(bn_dtrain *t, const bn_dtrain_seq *seq) {
    bn_dtrain_stats st = {0};
    char err[256];
    if (bn_dtrain_step(t, seq, false, 1, &st, err, sizeof err) != 0) bn_die("%s", err);
    return st.loss;
}

// (2) backward vs central differences, up to 10 sampled elements per tensor. The confidence head's label (whether
// the argmax hits) is piecewise constant in the other weights, so its BCE is checked on the head's own weights only.
static void test_grad(bn_dtrain *t, const seqdata *s) {
    bn_dtrain_seq seq = {.tokens = s->tok, .taps = s->taps, .n = NTOK, .first = FIRST};
    char err[256];
    uint64_t st = 5;
    for (int pass = 0; pass < 2; pass++) {
        t->conf_weight = pass == 0 ? 0.0f : 1.0f;
        memset(t->grads, 0, sizeof(float) * (size_t)t->n_params);
        CHECK(bn_dtrain_step(t, &seq, true, 1, NULL, err, sizeof err) == 0, "backward: %s", err);
        for (int k = 0; k < t->n_tensors; k++) {
            const bn_dtrain_tensor *x = &t->t[k];
            const bool conf = !strncmp(x->name, "conf_proj", 9);
            if (conf != (pass == 1)) continue;
            const int64_t n = x->ne0 * x->ne1;
            double max_fd = 0, max_err = 0;
            for (int j = 0; j < 10 && j < n; j++) {
                const int64_t i = x->off + (n <= 10 ? j : (int64_t)(bn_rng_splitmix64(&st) % (uint64_t)n));
                const float save = t->params[i], h = 1e-2f;
                t->params[i] = save + h;
                const double lp = loss_of(t, &seq);
                t->params[i] = save - h;
                const double lm = loss_of(t, &seq);
                t->params[i] = save;
                const double fd = (lp - lm) / (2.0 * h);
                if (fabs(fd) > max_fd) max_fd = fabs(fd);
                if (fabs(fd - t->grads[i]) > max_err) max_err = fabs(fd - t->grads[i]);
            }
            const double rel = max_err / (max_fd + 1e-2);
            CHECK(rel < 0.01, "%s: gradient differs from finite differences: rel err %.3g (tolerance 0.01)", x->name,
                  rel);
            printf("  %-26s max|fd| %-9.3g rel err %.3g\n", x->name, max_fd, rel);
        }
    }
    t->conf_weight = 1.0f;
}

// (3) checkpoint round trip, (4) a few AdamW steps lower the loss.
static void test_ckpt_and_steps(bn_dtrain *t, const seqdata *s, const char *path) {
    bn_dtrain_seq seq = {.tokens = s->tok, .taps = s->taps, .n = NTOK, .first = FIRST};
    char err[256];
    bn_adamw *o = bn_adamw_new(t->n_params);
    bn_adamw_cfg cfg = bn_adamw_cfg_default();
    const double l0 = loss_of(t, &seq);
    for (int k = 0; k < 30; k++) {
        memset(t->grads, 0, sizeof(float) * (size_t)t->n_params);
        bn_dtrain_step(t, &seq, true, 1.0f / 40, NULL, err, sizeof err);
        bn_adamw_step(o, &cfg, 1e-2f, t->params, t->grads);
    }
    const double l1 = loss_of(t, &seq);
    CHECK(l1 < 0.5 * l0, "30 AdamW steps: loss %.4g -> %.4g (expected below half)", l0, l1);
    printf("  30 AdamW steps on one sequence: loss %.4g -> %.4g\n", l0, l1);
    bn_dtrain_pos pos = {.step = 30, .total_steps = 100, .epoch = 1, .data_pos = 7};
    bn_rng_seed(&pos.rng, 3);
    CHECK(bn_dtrain_checkpoint_save(t, o, &pos, path, err, sizeof err) == 0, "checkpoint save: %s", err);
    float *keep = malloc(sizeof(float) * (size_t)t->n_params);
    memcpy(keep, t->params, sizeof(float) * (size_t)t->n_params);
    memset(t->params, 0, sizeof(float) * (size_t)t->n_params);
    bn_adamw *o2 = bn_adamw_new(t->n_params);
    bn_dtrain_pos p2 = {0};
    CHECK(bn_dtrain_checkpoint_load(t, o2, &p2, path, err, sizeof err) == 0, "checkpoint load: %s", err);
    CHECK(!memcmp(keep, t->params, sizeof(float) * (size_t)t->n_params), "checkpoint params differ");
    CHECK(o2->t == o->t && !memcmp(o->m, o2->m, sizeof(float) * (size_t)o->n), "checkpoint AdamW state differs");
    CHECK(p2.step == 30 && p2.data_pos == 7 && p2.rng.s[0] == pos.rng.s[0], "checkpoint position differs");
    bn_adamw *o3 = bn_adamw_new(t->n_params - 1);
    CHECK(bn_dtrain_checkpoint_load(t, o3, &p2, path, err, sizeof err) != 0, "a wrong-size optimizer is refused");
    free(keep);
    bn_adamw_free(o), bn_adamw_free(o2), bn_adamw_free(o3);
}

int main(void) {
    char path[512], out[512], ck[512], err[512];
    bn_mkdrafter_params p = tiny();
    fx_drafter(&p, fx_path(path, sizeof path, "dtrain-init.gguf"));
    fx_path(out, sizeof out, "dtrain-out.gguf");
    fx_path(ck, sizeof ck, "dtrain.ckpt");
    bn_drafter *d = bn_drafter_load(path, NULL, err, sizeof err);
    CHECK(d != NULL, "load: %s", err);
    if (!d) return test_done("test_train_drafter_grad");
    bn_dtrain *t = bn_dtrain_new(d);
    seqdata s;
    make_seq(&s, &t->cfg);
    test_matches_inference(t, &s, out, BN_DRAFTER_DFLASH);
    test_matches_inference(t, &s, out, BN_DRAFTER_LEGACY);
    test_grad(t, &s);
    test_ckpt_and_steps(t, &s, ck);
    free(s.taps);
    bn_dtrain_free(t);
    bn_drafter_free(d);
    unlink(path), unlink(out), unlink(ck);
    return test_done("test_train_drafter_grad");
}
