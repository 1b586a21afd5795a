// tests/train/test_qat.c — quantization-aware full-parameter training (train/sft_qat.c) on the
// tiny qwen35 (synth/mkmodel "tiny", F32), target Q1_0:
//  1. selection: the QAT tensors are exactly those bonsai-quantize's rules (bn_requant_type) store
//     as Q1_0; their forward copies are Q1_0 values (every 128-block is ±d, one |d|);
//  2. STE definition: loss and gradient of the QAT params (master W, forward on deq(Q(W))) are
//     bit-identical to plain training's loss and gradient at the weights deq(Q(W)); the gradient at
//     W itself differs (the check can fail);
//  3. a step updates the master and refreshes the forward copy (deq(Q(new W)), bit-exact);
//  4. QAT beats plain training + quantization: 40 steps each (same seed, lr 3e-3, a 64-token
//     sequence repeated) — the Q1_0 model's loss after QAT is below 0.5× the loss of the plain-trained
//     model quantized to Q1_0 (measured: 0.083 vs 5.06; the plain model is at 0.10 in F32);
//  5. write-back: the file is Q1_0 where QAT ran (dequantized = the forward copies, bit-exact), F32
//     elsewhere, and `bonsai-quantize F16` then `bonsai-quantize Q1_0` reproduce it byte for byte;
//     with --qat-skip token_embd it is F16 there and `Q1_0 --tensor-type token_embd=f16` reproduces it;
//  6. checkpoints: a QAT checkpoint resumes (forward copies recomputed bit-exactly) and is refused by
//     a run without QAT.
#include <string.h>
#include <unistd.h>
#include "tests/test.h"
#include "tests/train/fixture.h"
#include "synth/mkmodel.h"
#include "core/model.h"
#include "gguf/gguf.h"
#include "base/util.h"
#include "base/rng.h"
#include "quant/quant.h"
#include "quantize/quantize.h"
#include "train/sft.h"
#include "train/fakequant.h"

static char DIR_[] = "/tmp/bonsai_test_qat_XXXXXX";

// q1_blocks_ok: every 128-element block of x holds one magnitude (Q1_0 values ±d).
static bool q1_blocks_ok(const float *x, int64_t n) {
    for (int64_t b = 0; b < n; b += 128)
        for (int i = 1; i < 128; i++)
            if (fabsf(x[b + i]) != fabsf(x[b])) return false;
    return true;
}

static bn_sft_params *qat_params(const bn_model *m, const char *skip) {
    char err[256];
    bn_sft_params *p = bn_sft_params_new(m, err, sizeof err);
    if (!p) { CHECK(0, "params: %s", err); return NULL; }
    int n = bn_sft_qat_enable(p, "Q1_0", skip, err, sizeof err);
    CHECK(n > 0, "qat enable: %s", err);
    return p;
}

static void test_selection(const bn_model *m) {
    char err[256];
    bn_sft_params *p = qat_params(m, NULL);
    if (!p) return;
    int n_qat = 0, n_want = 0, bad_sel = 0, bad_vals = 0;
    for (int i = 0; i < p->n_tensors; i++) {
        const bn_sft_tensor *t = &p->t[i];
        int ty = bn_requant_type("Q1_0", NULL, t->name, t->ne, BN_F32, m->cfg.tied_output, err, sizeof err);
        bool want = ty == BN_Q1_0;
        n_want += want;
        n_qat += t->qat;
        bad_sel += want != t->qat;
        if (t->qat && !q1_blocks_ok(p->fq + t->off, t->n)) bad_vals++;
    }
    printf("selection: %d of %d tensors fake-quantized (bonsai-quantize Q1_0 rules: %d)\n", n_qat, p->n_tensors, n_want);
    CHECK(bad_sel == 0 && n_qat > 0, "%d tensors selected differently from bonsai-quantize's rules", bad_sel);
    CHECK(bad_vals == 0, "%d forward copies are not Q1_0 values", bad_vals);
    // the forward reads the copies: the shadow model's ffn_up and output point into fq
    const bn_sft_tensor *up = NULL, *out = NULL;
    for (int i = 0; i < p->n_tensors; i++) {
        if (!strcmp(p->t[i].name, "blk.0.ffn_up.weight")) up = &p->t[i];
        if (!strcmp(p->t[i].name, "output.weight")) out = &p->t[i];
    }
    CHECK(up && out && up->qat && out->qat && p->m.w.layers[0].ffn_up.data == p->fq + up->off &&
          p->m.w.output.data == p->fq + out->off, "the shadow model does not read the fake-quantized copies");
    bn_sft_params_free(p);
}

static void test_ste_gradient(const bn_model *m, const bn_sft_data *d) {
    char err[256];
    bn_sft_params *p = qat_params(m, NULL), *q = bn_sft_params_new(m, err, sizeof err),
                  *r = bn_sft_params_new(m, err, sizeof err);
    if (!p || !q || !r) { CHECK(0, "params"); return; }
    // q: plain params holding deq(Q(W)) where QAT runs; r: plain params at W
    for (int i = 0; i < p->n_tensors; i++) {
        const bn_sft_tensor *t = &p->t[i];
        memcpy(q->params + t->off, (t->qat ? p->fq : p->params) + t->off, sizeof(float) * (size_t)t->n);
    }
    const int T = 33;
    bn_sft_zero_grad(p);
    bn_sft_zero_grad(q);
    bn_sft_zero_grad(r);
    double lp = bn_sft_seq_loss(p, d->tok, T, 1.0f, true, err, sizeof err);
    double lq = bn_sft_seq_loss(q, d->tok, T, 1.0f, true, err, sizeof err);
    double lr = bn_sft_seq_loss(r, d->tok, T, 1.0f, true, err, sizeof err);
    size_t nb = sizeof(float) * (size_t)p->n_params;
    CHECK(lp == lq, "QAT loss %.9g vs plain loss at deq(Q(W)) %.9g", lp, lq);
    CHECK(memcmp(p->grads, q->grads, nb) == 0, "STE gradient differs from the gradient at deq(Q(W))");
    int64_t n_diff = 0;
    for (int64_t k = 0; k < p->n_params; k++) n_diff += p->grads[k] != r->grads[k];
    printf("STE: loss %.6f = plain loss at deq(Q(W)) (plain loss at W %.6f); gradients bit-identical, "
           "%lld of %lld elements differ from the gradient at W\n", lp, lr, (long long)n_diff, (long long)p->n_params);
    CHECK(n_diff > p->n_params / 2 && lp != lr, "the gradient at W is (nearly) the same: the check is vacuous");
    // one step: the master moves, the forward copy follows it
    float *w0 = xmalloc(nb), *fq0 = xmalloc(nb), *fq_want = xmalloc(nb);
    memcpy(w0, p->params, nb);
    memcpy(fq0, p->fq, nb);
    bn_sft_cfg cfg = fx_sft_cfg(1);
    bn_adamw *o = bn_adamw_new(p->n_params);
    bn_sft_pos pos = {.total_steps = 1};
    bn_rng_seed(&pos.rng, 3);
    double loss;
    CHECK(bn_sft_step(p, o, &cfg, d, &pos, &loss, NULL, NULL, err, sizeof err) == 0, "step: %s", err);
    int bad = 0, moved = 0, fq_moved = 0;
    for (int i = 0; i < p->n_tensors; i++) {
        const bn_sft_tensor *t = &p->t[i];
        if (!t->qat) continue;
        bn_fake_quantize(BN_Q1_0, p->params + t->off, fq_want + t->off, t->ne[0], t->n / t->ne[0]);
        bad += memcmp(fq_want + t->off, p->fq + t->off, sizeof(float) * (size_t)t->n) != 0;
        moved += memcmp(w0 + t->off, p->params + t->off, sizeof(float) * (size_t)t->n) != 0;
        fq_moved += memcmp(fq0 + t->off, p->fq + t->off, sizeof(float) * (size_t)t->n) != 0;
    }
    printf("step: %d QAT masters moved, %d forward copies changed, %d stale\n", moved, fq_moved, bad);
    CHECK(bad == 0, "%d forward copies are not deq(Q(master)) after a step", bad);
    CHECK(moved > 0 && fq_moved > 0, "the step did not move the masters (%d) or their copies (%d)", moved, fq_moved);
    free(w0);
    free(fq0);
    free(fq_want);
    bn_adamw_free(o);
    bn_sft_params_free(p);
    bn_sft_params_free(q);
    bn_sft_params_free(r);
}

// train: n steps (seed 7) of p; returns the last loss.
static double train(bn_sft_params *p, const bn_sft_data *d, int n) {
    char err[256];
    bn_sft_cfg cfg = fx_sft_cfg(n);
    bn_adamw *o = bn_adamw_new(p->n_params);
    bn_sft_pos pos = {.total_steps = n};
    bn_rng_seed(&pos.rng, 7);
    double loss = NAN;
    for (int s = 0; s < n; s++)
        if (bn_sft_step(p, o, &cfg, d, &pos, &loss, NULL, NULL, err, sizeof err)) { CHECK(0, "step: %s", err); break; }
    bn_adamw_free(o);
    return loss;
}

// mean_loss: mean CE of the 4 windows of 33 tokens at 0, 33, 66, 99 under p's forward.
static double mean_loss(bn_sft_params *p, const bn_sft_data *d) {
    char err[256];
    double sum = 0;
    for (int w = 0; w < 4; w++) sum += bn_sft_seq_loss(p, d->tok + 33 * w, 33, 1.0f, false, err, sizeof err) / 4;
    return sum;
}

static void test_qat_beats_ptq(const bn_model *m, const bn_sft_data *d) {
    char err[256];
    const int steps = 40;
    bn_sft_params *plain = bn_sft_params_new(m, err, sizeof err), *qat = qat_params(m, NULL);
    if (!plain || !qat) return;
    double q_init = mean_loss(qat, d);
    train(plain, d, steps);
    double plain_f32 = mean_loss(plain, d);
    CHECK(bn_sft_qat_enable(plain, "Q1_0", NULL, err, sizeof err) > 0, "enable: %s", err); // = quantize it
    double plain_q = mean_loss(plain, d);
    train(qat, d, steps);
    double qat_q = mean_loss(qat, d);
    printf("QAT vs PTQ (%d steps): Q1_0 loss at init %.4f; plain training %.4f in F32 -> %.4f quantized; "
           "QAT %.4f quantized\n", steps, q_init, plain_f32, plain_q, qat_q);
    CHECK(qat_q < 0.5 * plain_q, "QAT's quantized loss %.4f not below half of plain+quantize %.4f", qat_q, plain_q);
    bn_sft_params_free(plain);
    bn_sft_params_free(qat);
}

static bool same_file(const char *a, const char *b) {
    char err[256];
    size_t na, nb;
    char *x = bn_read_file(a, &na, err, sizeof err), *y = bn_read_file(b, &nb, err, sizeof err);
    bool same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

// requant: bonsai-quantize in → out TYPE (with one optional --tensor-type rule); returns 0 or -1.
static int requant(const char *in, const char *out, const char *type, const char *rule) {
    char err[256];
    bn_quantize_params qp = bn_quantize_params_default();
    qp.type = type;
    qp.log = NULL;
    qp.tensor_types = &rule;
    qp.n_tensor_types = rule ? 1 : 0;
    int rc = bn_quantize_file(&qp, in, out, err, sizeof err);
    if (rc) fprintf(stderr, "requant %s: %s\n", type, err);
    return rc;
}

static void test_write_back(const bn_model *m, const bn_sft_data *d, const char *skip) {
    char err[256], out[700], f16[700], rq[700];
    snprintf(out, sizeof out, "%s/qat.gguf", DIR_);
    snprintf(f16, sizeof f16, "%s/qat-f16.gguf", DIR_);
    snprintf(rq, sizeof rq, "%s/qat-rq.gguf", DIR_);
    bn_sft_params *p = qat_params(m, skip);
    if (!p) return;
    train(p, d, 3);
    CHECK(bn_sft_save_gguf(p, out, err, sizeof err) == 0, "save: %s", err);
    gguf_file *g = gguf_open(out, err, sizeof err);
    CHECK(g != NULL, "open: %s", err);
    int bad = 0, n_q1 = 0;
    for (int i = 0; g && i < p->n_tensors; i++) {
        const bn_sft_tensor *t = &p->t[i];
        const gguf_tensor *gt = gguf_find_tensor(g, t->name);
        if (!gt) { bad++; continue; }
        bool skipped = skip && strstr(t->name, skip);
        int want = t->qat ? BN_Q1_0 : skipped ? BN_F16 : BN_F32;
        if ((int)gt->type != want) { bad++; continue; }
        float *x = xmalloc(sizeof(float) * (size_t)t->n);
        bn_dequantize(gt->type, gt->data, x, t->n);
        if (t->qat) {
            n_q1++;
            bad += memcmp(x, p->fq + t->off, sizeof(float) * (size_t)t->n) != 0;
        } else if (!skipped) {
            bad += memcmp(x, p->params + t->off, sizeof(float) * (size_t)t->n) != 0;
        }
        free(x);
    }
    int64_t ft = -1;
    if (g) gguf_get_int(g, "general.file_type", &ft);
    gguf_close(g);
    CHECK(bad == 0 && ft == 40, "written file: %d tensors wrong (type or values), file_type %lld", bad, (long long)ft);
    char rule[64];
    snprintf(rule, sizeof rule, "%s=f16", skip ? skip : "");
    bool ok = requant(out, f16, "F16", NULL) == 0 && requant(f16, rq, "Q1_0", skip ? rule : NULL) == 0;
    bool same = ok && same_file(out, rq);
    printf("write-back%s%s: %d Q1_0 tensors = the forward copies; F16 unpack + Q1_0 requant byte-identical: %s\n",
           skip ? " skip " : "", skip ? skip : "", n_q1, same ? "yes" : "NO");
    CHECK(same, "F16 unpack + requant does not reproduce the QAT file");
    unlink(out);
    unlink(f16);
    unlink(rq);
    bn_sft_params_free(p);
}

static void test_checkpoint(const bn_model *m, const bn_sft_data *d) {
    char err[256], ck[700];
    snprintf(ck, sizeof ck, "%s/qat.ckpt", DIR_);
    bn_sft_params *p = qat_params(m, NULL);
    if (!p) return;
    bn_sft_cfg cfg = fx_sft_cfg(2);
    bn_adamw *o = bn_adamw_new(p->n_params);
    bn_sft_pos pos = {.total_steps = 2};
    bn_rng_seed(&pos.rng, 5);
    double loss;
    bn_sft_step(p, o, &cfg, d, &pos, &loss, NULL, NULL, err, sizeof err);
    CHECK(bn_sft_checkpoint_save(ck, p, o, &pos, err, sizeof err) == 0, "save: %s", err);
    bn_sft_params *q = qat_params(m, NULL), *plain = bn_sft_params_new(m, err, sizeof err);
    bn_adamw *o2 = NULL, *o3 = NULL;
    bn_sft_pos pos2, pos3;
    CHECK(bn_sft_checkpoint_load(ck, q, &o2, &pos2, err, sizeof err) == 0, "load: %s", err);
    size_t nb = sizeof(float) * (size_t)p->n_params;
    CHECK(memcmp(p->params, q->params, nb) == 0 && memcmp(p->fq, q->fq, nb) == 0,
          "resumed masters or forward copies differ");
    CHECK(bn_sft_checkpoint_load(ck, plain, &o3, &pos3, err, sizeof err) != 0, "a QAT checkpoint resumed without QAT");
    printf("checkpoint: QAT resume bit-exact; without QAT: %s\n", err);
    unlink(ck);
    bn_adamw_free(o);
    bn_adamw_free(o2);
    bn_adamw_free(o3);
    bn_sft_params_free(p);
    bn_sft_params_free(q);
    bn_sft_params_free(plain);
}

int main(void) {
    if (!mkdtemp(DIR_)) return test_skip("mkdtemp failed");
    char path[700], tokpath[700], err[256];
    snprintf(tokpath, sizeof tokpath, "%s/tokens.bin", DIR_);
    bn_model *m = fx_tiny_model(DIR_, BN_F32, path, sizeof path);
    if (!m) return test_done("train_qat");
    // the data: one random 64-token sequence (ids < 256, seed 2024), 10 times over
    uint32_t tok[640];
    bn_rng rng;
    bn_rng_seed(&rng, 2024);
    for (int i = 0; i < 640; i++) tok[i] = i < 64 ? (uint32_t)bn_rng_below(&rng, 256) : tok[i - 64];
    CHECK(bn_write_file_atomic(tokpath, tok, sizeof tok, err, sizeof err) == 0, "write tokens: %s", err);
    bn_sft_data d;
    CHECK(bn_sft_data_load(&d, tokpath, m->cfg.n_vocab, 0.0, err, sizeof err) == 0, "load tokens: %s", err);
    test_selection(m);
    test_ste_gradient(m, &d);
    test_qat_beats_ptq(m, &d);
    test_write_back(m, &d, NULL);
    test_write_back(m, &d, "token_embd");
    test_checkpoint(m, &d);
    bn_sft_data_free(&d);
    bn_model_free(m);
    unlink(tokpath);
    unlink(path);
    rmdir(DIR_);
    return test_done("train_qat");
}
