// tests/train/test_sft_train.c — the full-parameter SFT loop on the tiny qwen35 (synth/mkmodel
// "tiny", F32):
//  1. memorising a repeated 64-token sequence (random windows of 33 tokens, batch 2, lr 3e-3,
//     40 steps): the batch loss drops by more than 50% (threshold: last-5-step mean < 0.5 × first);
//  2. resume: 6 steps in one run vs 3 steps + checkpoint + load into fresh params + 3 steps give
//     bit-identical losses and parameters;
//  3. the written GGUF loads with bn_model_load and the engine's logits (bn_forward, all positions)
//     match the trainer's bn_train_forward_all logits (max |Δ| <= 1e-3·max|logit| + 1e-4);
//  4. held-out perplexity equals exp(mean CE) of the held-out windows computed directly (rel 1e-9),
//     and the token loader rejects ids >= n_vocab and odd-sized files.
//  5. an F16 model's parameters are its exact dequantized weights; the output GGUF is all F32;
//  6. weight decay touches 2-D tensors only.
#include <string.h>
#include <unistd.h>
#include "tests/test.h"
#include "tests/train/fixture.h"
#include "synth/mkmodel.h"
#include "core/model.h"
#include "core/forward.h"
#include "base/util.h"
#include "train/sft.h"
#include "train/graph.h"
#include "quant/quant.h"

static char DIR_[] = "/tmp/bonsai_test_sft_train_XXXXXX";

static void write_tokens(const char *path, const uint32_t *tok, size_t n) {
    char err[256];
    if (bn_write_file_atomic(path, tok, n * 4, err, sizeof err)) { fprintf(stderr, "%s\n", err); exit(1); }
}

static void test_memorise(const bn_model *m, const bn_sft_data *d) {
    char err[256];
    bn_sft_params *p = bn_sft_params_new(m, err, sizeof err);
    CHECK(p != NULL, "params: %s", err);
    if (!p) return;
    bn_sft_cfg cfg = fx_sft_cfg(40);
    bn_adamw *o = bn_adamw_new(p->n_params);
    bn_sft_pos pos = {.total_steps = cfg.total_steps};
    bn_rng_seed(&pos.rng, 7);
    double first = 0, tail = 0;
    for (int s = 0; s < 40; s++) {
        double loss, gn, lr;
        if (bn_sft_step(p, o, &cfg, d, &pos, &loss, &gn, &lr, err, sizeof err)) { CHECK(0, "step: %s", err); break; }
        if (s == 0) first = loss;
        if (s >= 35) tail += loss / 5;
        if (s % 10 == 0 || s == 39) printf("  step %2d loss %.4f |g| %.3f lr %.2e\n", s + 1, loss, gn, lr);
    }
    printf("memorise: first loss %.4f, mean of last 5 %.4f (ratio %.3f)\n", first, tail, tail / first);
    CHECK(tail < 0.5 * first, "loss did not halve: %.4f -> %.4f", first, tail);
    bn_adamw_free(o);
    bn_sft_params_free(p);
}

// run_steps: n steps from (p, o, pos), losses into out.
static void run_steps(bn_sft_params *p, bn_adamw *o, bn_sft_pos *pos, const bn_sft_cfg *cfg, const bn_sft_data *d,
                      int n, double *out) {
    char err[256];
    for (int s = 0; s < n; s++)
        if (bn_sft_step(p, o, cfg, d, pos, &out[s], NULL, NULL, err, sizeof err)) { CHECK(0, "step: %s", err); return; }
}

static void test_resume(const bn_model *m, const bn_sft_data *d) {
    char err[256], ck[600];
    snprintf(ck, sizeof ck, "%s/sft.ckpt", DIR_);
    bn_sft_cfg cfg = fx_sft_cfg(6);
    cfg.warmup_ratio = 0.2f;
    double a[6], b[6];
    // one run of 6 steps
    bn_sft_params *p = bn_sft_params_new(m, err, sizeof err);
    bn_adamw *o = bn_adamw_new(p->n_params);
    bn_sft_pos pos = {.total_steps = 6};
    bn_rng_seed(&pos.rng, 11);
    run_steps(p, o, &pos, &cfg, d, 6, a);
    // 3 steps, checkpoint, fresh state, load, 3 steps
    bn_sft_params *q = bn_sft_params_new(m, err, sizeof err);
    bn_adamw *o2 = bn_adamw_new(q->n_params);
    bn_sft_pos pos2 = {.total_steps = 6};
    bn_rng_seed(&pos2.rng, 11);
    run_steps(q, o2, &pos2, &cfg, d, 3, b);
    CHECK(bn_sft_checkpoint_save(ck, q, o2, &pos2, err, sizeof err) == 0, "save: %s", err);
    bn_adamw_free(o2);
    bn_sft_params_free(q);
    q = bn_sft_params_new(m, err, sizeof err);
    bn_sft_pos pos3 = {0};
    o2 = NULL;
    CHECK(bn_sft_checkpoint_load(ck, q, &o2, &pos3, err, sizeof err) == 0, "load: %s", err);
    if (o2) {
        CHECK(pos3.step == 3 && pos3.total_steps == 6, "resumed at step %lld of %lld", (long long)pos3.step,
              (long long)pos3.total_steps);
        run_steps(q, o2, &pos3, &cfg, d, 3, b + 3);
        for (int s = 0; s < 6; s++) CHECK(a[s] == b[s], "step %d: loss %.9g vs resumed %.9g", s + 1, a[s], b[s]);
        CHECK(memcmp(p->params, q->params, sizeof(float) * (size_t)p->n_params) == 0, "resumed parameters differ");
        printf("resume: 6 losses bit-identical (last %.6f)\n", b[5]);
    }
    // a corrupted checkpoint is refused
    size_t n;
    char *raw = bn_read_file(ck, &n, err, sizeof err);
    if (raw) {
        raw[n / 2] ^= 1;
        bn_write_file_atomic(ck, raw, n, err, sizeof err);
        free(raw);
        bn_adamw *o3 = NULL;
        bn_sft_pos pos4;
        CHECK(bn_sft_checkpoint_load(ck, q, &o3, &pos4, err, sizeof err) != 0, "corrupt checkpoint accepted");
        printf("corrupt checkpoint: %s\n", err);
    }
    unlink(ck);
    bn_adamw_free(o);
    bn_adamw_free(o2);
    bn_sft_params_free(p);
    bn_sft_params_free(q);
}

static void test_write_back(const bn_model *m, const bn_sft_data *d) {
    char err[256], out[600];
    snprintf(out, sizeof out, "%s/trained.gguf", DIR_);
    bn_sft_params *p = bn_sft_params_new(m, err, sizeof err);
    bn_sft_cfg cfg = fx_sft_cfg(3);
    bn_adamw *o = bn_adamw_new(p->n_params);
    bn_sft_pos pos = {.total_steps = 3};
    bn_rng_seed(&pos.rng, 5);
    double l[3];
    run_steps(p, o, &pos, &cfg, d, 3, l); // so the written weights differ from the initial ones
    CHECK(bn_sft_save_gguf(p, out, err, sizeof err) == 0, "save gguf: %s", err);
    bn_model *m2 = bn_model_load(out, err, sizeof err);
    CHECK(m2 != NULL, "load trained gguf: %s", err);
    if (m2) {
        const int T = 16, V = m->cfg.n_vocab;
        float *z_train = xmalloc(sizeof(float) * (size_t)T * V), *z_eng = xmalloc(sizeof(float) * (size_t)T * V);
        bn_train_graph *g = bn_train_forward_all(&p->m, d->tok, T, z_train, err, sizeof err);
        CHECK(g != NULL, "train forward: %s", err);
        bn_train_graph_free(g);
        bn_state *s = bn_state_new(m2, 64, 1);
        bn_forward_out fo = {.logits = z_eng, .all_logits = true};
        CHECK(bn_forward(m2, s, d->tok, T, &fo, err, sizeof err) == 0, "engine forward: %s", err);
        double maxd = 0, maxz = 0;
        for (int i = 0; i < T * V; i++) {
            maxd = fmax(maxd, fabs((double)z_train[i] - z_eng[i]));
            maxz = fmax(maxz, fabs(z_eng[i]));
        }
        printf("write-back: engine vs trainer logits max |Δ| %.3g (max |z| %.3g)\n", maxd, maxz);
        CHECK(maxd <= 1e-3 * maxz + 1e-4, "logits differ: %.3g", maxd);
        // the trained weights really are in the file
        const gguf_tensor *t = gguf_find_tensor(m2->gguf, "blk.0.ffn_up.weight");
        CHECK(t && t->type == 0, "ffn_up not F32 in the output");
        const bn_sft_tensor *st = NULL;
        for (int i = 0; i < p->n_tensors; i++)
            if (strcmp(p->t[i].name, "blk.0.ffn_up.weight") == 0) st = &p->t[i];
        CHECK(st && t && memcmp(t->data, p->params + st->off, sizeof(float) * (size_t)st->n) == 0,
              "written ffn_up differs from the trained parameters");
        bn_state_free(s);
        free(z_train);
        free(z_eng);
        bn_model_free(m2);
    }
    unlink(out);
    bn_adamw_free(o);
    bn_sft_params_free(p);
}

static void test_ppl_and_loader(const bn_model *m, const char *tokpath) {
    char err[256];
    bn_sft_data d;
    CHECK(bn_sft_data_load(&d, tokpath, m->cfg.n_vocab, 0.25, err, sizeof err) == 0, "load: %s", err);
    bn_sft_params *p = bn_sft_params_new(m, err, sizeof err);
    const int ctx = 20;
    double ppl = bn_sft_eval_ppl(p, &d, ctx, 0, err, sizeof err);
    double sum = 0;
    int64_t cnt = 0;
    for (int64_t s = d.n_train; s + 1 < d.n; s += ctx) {
        int len = (int)(d.n - s < ctx + 1 ? d.n - s : ctx + 1);
        sum += bn_sft_seq_loss(p, d.tok + s, len, 1.0f, false, err, sizeof err) * (len - 1);
        cnt += len - 1;
    }
    double want = exp(sum / cnt);
    printf("held-out ppl %.4f over %lld tokens (direct %.4f)\n", ppl, (long long)cnt, want);
    CHECK(fabs(ppl - want) <= 1e-9 * want, "ppl %.9g vs %.9g", ppl, want);
    CHECK(ppl > 1 && isfinite(ppl), "implausible ppl %.3g", ppl); // the random tiny model's logits are loud: ~4e5
    bn_sft_params_free(p);
    bn_sft_data_free(&d);
    // bad files
    char bad[600];
    snprintf(bad, sizeof bad, "%s/bad.bin", DIR_);
    uint32_t big[3] = {1, 2, (uint32_t)m->cfg.n_vocab};
    write_tokens(bad, big, 3);
    CHECK(bn_sft_data_load(&d, bad, m->cfg.n_vocab, 0.1, err, sizeof err) != 0, "id >= n_vocab accepted");
    printf("bad id: %s\n", err);
    CHECK(bn_write_file_atomic(bad, "abcde", 5, err, sizeof err) == 0, "write");
    CHECK(bn_sft_data_load(&d, bad, m->cfg.n_vocab, 0.1, err, sizeof err) != 0, "5-byte file accepted");
    unlink(bad);
}

// test_decay: one step with weight decay 0.5 vs 0 (same windows): 2-D tensors differ by exactly
// lr·wd·θ₀ (tolerance 1e-6·|θ₀| + 1e-7), vectors (norms, ssm_a, ssm_dt) not at all.
static void test_decay(const bn_model *m, const bn_sft_data *d) {
    char err[256];
    bn_sft_params *a = bn_sft_params_new(m, err, sizeof err), *b = bn_sft_params_new(m, err, sizeof err);
    float *theta0 = xmalloc(sizeof(float) * (size_t)a->n_params);
    memcpy(theta0, a->params, sizeof(float) * (size_t)a->n_params);
    bn_sft_cfg ca = fx_sft_cfg(1), cb = fx_sft_cfg(1);
    ca.adam.weight_decay = 0.5f;
    cb.adam.weight_decay = 0.0f;
    bn_adamw *oa = bn_adamw_new(a->n_params), *ob = bn_adamw_new(b->n_params);
    bn_sft_pos pa = {.total_steps = 1}, pb = {.total_steps = 1};
    bn_rng_seed(&pa.rng, 3);
    bn_rng_seed(&pb.rng, 3);
    double la, lb;
    bn_sft_step(a, oa, &ca, d, &pa, &la, NULL, NULL, err, sizeof err);
    bn_sft_step(b, ob, &cb, d, &pb, &lb, NULL, NULL, err, sizeof err);
    int bad_vec = 0, bad_mat = 0, n_vec = 0;
    for (int i = 0; i < a->n_tensors; i++) {
        const bn_sft_tensor *t = &a->t[i];
        n_vec += t->n_dims < 2;
        for (int64_t k = 0; k < t->n; k++) {
            int64_t j = t->off + k;
            double diff = (double)b->params[j] - a->params[j];
            double want = t->n_dims < 2 ? 0.0 : (double)ca.lr * 0.5 * theta0[j];
            if (t->n_dims < 2 ? diff != 0.0 : fabs(diff - want) > 1e-6 * fabs(theta0[j]) + 1e-7) {
                if (t->n_dims < 2) bad_vec++;
                else bad_mat++;
            }
        }
    }
    CHECK(la == lb, "losses differ before the update");
    CHECK(bad_vec == 0 && bad_mat == 0, "weight decay: %d vector and %d matrix elements off", bad_vec, bad_mat);
    printf("decay: matrices decayed by lr·wd·θ, %d vector tensors untouched\n", n_vec);
    free(theta0);
    bn_adamw_free(oa);
    bn_adamw_free(ob);
    bn_sft_params_free(a);
    bn_sft_params_free(b);
}

// test_f16_source: an F16 model trains in F32: the parameters are the exact dequantized weights and
// the written GGUF has every tensor as F32.
static void test_f16_source(void) {
    char path[600], out[600], err[256];
    snprintf(path, sizeof path, "%s/tiny16.gguf", DIR_);
    snprintf(out, sizeof out, "%s/tiny16-out.gguf", DIR_);
    bn_mkmodel_params mp;
    bn_mkmodel_defaults(&mp, "tiny");
    mp.type = BN_F16;
    if (bn_mkmodel_write(&mp, path, err, sizeof err)) { CHECK(0, "mkmodel f16: %s", err); return; }
    bn_model *m = bn_model_load(path, err, sizeof err);
    bn_sft_params *p = m ? bn_sft_params_new(m, err, sizeof err) : NULL;
    CHECK(p != NULL, "f16 params: %s", err);
    if (p) {
        const bn_weight *w = &m->w.layers[0].attn_qkv;
        CHECK(w->type == BN_F16, "source qkv is not f16");
        int64_t n = w->ne[0] * w->ne[1];
        float *ref = xmalloc(sizeof(float) * (size_t)n);
        bn_dequantize(w->type, w->data, ref, n);
        const float *got = p->m.w.layers[0].attn_qkv.data;
        CHECK(p->m.w.layers[0].attn_qkv.type == BN_F32 && memcmp(ref, got, sizeof(float) * (size_t)n) == 0,
              "f16 weights not dequantized exactly");
        free(ref);
        CHECK(bn_sft_save_gguf(p, out, err, sizeof err) == 0, "save: %s", err);
        gguf_file *g = gguf_open(out, err, sizeof err);
        int n_f32 = 0, n_t = g ? (int)g->n_tensors : 0;
        for (int i = 0; i < n_t; i++) n_f32 += g->tensors[i].type == BN_F32;
        int64_t ft = -1;
        if (g) gguf_get_int(g, "general.file_type", &ft);
        CHECK(g && n_f32 == n_t && n_t == p->n_tensors && ft == 0, "written f16 model: %d of %d tensors F32, file_type %lld",
              n_f32, n_t, (long long)ft);
        printf("f16 source: %d tensors dequantized exactly, written as F32\n", n_t);
        gguf_close(g);
    }
    bn_sft_params_free(p);
    bn_model_free(m);
    unlink(out);
    unlink(path);
}

int main(void) {
    if (!mkdtemp(DIR_)) return test_skip("mkdtemp failed");
    char path[600], tokpath[600], err[256];
    snprintf(tokpath, sizeof tokpath, "%s/tokens.bin", DIR_);
    bn_model *m = fx_tiny_model(DIR_, BN_F32, path, sizeof path);
    if (!m) return test_done("train_sft_train");
    // a fixed random 64-token sequence repeated 10 times
    uint32_t seq[64], tok[640];
    uint64_t rs = 2024;
    for (int i = 0; i < 64; i++) {
        rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
        seq[i] = (uint32_t)((rs >> 33) % 256);
    }
    for (int i = 0; i < 640; i++) tok[i] = seq[i % 64];
    write_tokens(tokpath, tok, 640);
    bn_sft_data d;
    CHECK(bn_sft_data_load(&d, tokpath, m->cfg.n_vocab, 0.0, err, sizeof err) == 0, "load tokens: %s", err);
    CHECK(d.n == 640 && d.n_train == 640 && d.tok[65] == (int32_t)seq[1], "token file read wrong");
    test_memorise(m, &d);
    test_resume(m, &d);
    test_write_back(m, &d);
    test_ppl_and_loader(m, tokpath);
    test_f16_source();
    test_decay(m, &d);
    bn_sft_data_free(&d);
    bn_model_free(m);
    unlink(tokpath);
    unlink(path);
    rmdir(DIR_);
    return test_done("train_sft_train");
}
