// tests/train/test_lora_infer.c — LoRA adapters applied unmerged by the CPU engine (core/adapter.h), on a tiny
// random qwen35 (untied head: every projection and the LM head adapted) and a dense qwen3 (tied head: the layers):
//   1. Q1_0 base + F32 adapter vs the F16 merge (train/merge.h: the adapter merged into the F16 unpack of the Q1_0
//      base): teacher-forced log-probs over 24 positions. The F16 unpack + the same adapter unmerged agrees with the
//      merge within 1e-3 (f32 activations on both sides: only the merge's f16 rounding differs); the Q1_0 engine
//      rounds its activations to Q8_0 (ggml's rule), so there the bound is the no-adapter gap (Q1_0 vs F16 unpack)
//      × 1.5 + 1e-3; with the f32-activation reference path (bn_matmul_set_f32_activations) the Q1_0 base + adapter
//      agrees with the merge within 1e-3. An F16 adapter (A, B rounded to f16) agrees with the F32 one within 2e-3.
//   2. Bit identity: a verify pass of 6 tokens (all logits) gives the bits of 6 one-token decodes; a ragged batch of
//      three sequences at scales 1, 0.5 and 0 gives each sequence's bits alone; scale 0 gives the no-adapter bits.
//   3. Bad input: wrong shapes, a weight the model lacks, another architecture, a truncated file, a non-adapter —
//      each refused with a message naming the thing.
#include <math.h>
#include <string.h>
#include <unistd.h>
#include "tests/test.h"
#include "synth/mkmodel.h"
#include "quantize/quantize.h"
#include "core/model.h"
#include "core/forward.h"
#include "core/adapter.h"
#include "core/engine.h"
#include "core/matmul.h"
#include "train/lora.h"
#include "train/merge.h"
#include "base/util.h"
#include "base/rng.h"
#include "quant/quant.h"

#define NT 25 // tokens: 24 teacher-forced positions
#define B_AMP 0.04 // B ~ U(-B_AMP/2, B_AMP/2): an effect of a few tenths of a log-prob, like a trained FTPO adapter

static char dir[] = "/tmp/bonsai_lora_infer_XXXXXX";

static int quantize(const char *in, const char *type, const char *out) {
    char err[256];
    bn_quantize_params qp = bn_quantize_params_default();
    qp.type = type;
    qp.log = NULL;
    qp.n_threads = 1;
    qp.allow_requantize = true;
    int rc = bn_quantize_file(&qp, in, out, err, sizeof err);
    CHECK(rc == 0, "quantize %s: %s", type, err);
    return rc;
}

// logprobs: the teacher-forced log-probs lp[t] = log p(tok[t + 1] | tok[..t]) of model path with the adapters
// (set may be NULL) at scale; 0 or -1.
static int logprobs(const bn_model *m, bn_lora_set *set, float scale, const int32_t *tok, double *lp) {
    char err[256];
    const int V = m->cfg.n_vocab;
    bn_state *s = bn_state_new(m, 64, 2);
    bn_state_set_lora(s, set);
    float sc[BN_LORA_MAX];
    for (int i = 0; i < BN_LORA_MAX; i++) sc[i] = scale;
    if (set) bn_state_set_lora_scales(s, sc, bn_lora_set_count(set));
    float *logits = xmalloc(sizeof(float) * (size_t)V * NT);
    bn_forward_out out = {.logits = logits, .all_logits = true};
    int rc = bn_forward(m, s, tok, NT, &out, err, sizeof err);
    CHECK(rc == 0, "forward: %s", err);
    for (int t = 0; rc == 0 && t + 1 < NT; t++)
        lp[t] = (double)logits[(size_t)t * V + tok[t + 1]] - bn_logits_lse(logits + (size_t)t * V, V);
    free(logits);
    bn_state_free(s);
    return rc;
}

static double max_diff(const double *a, const double *b) {
    double d = 0;
    for (int t = 0; t + 1 < NT; t++) d = fmax(d, fabs(a[t] - b[t]));
    return d;
}

// make_adapter: an adapter on every adaptable weight of m (r 4, alpha 8), A PEFT-initialised, B random (effect
// well above the tolerances).
static bn_lora *make_adapter(const bn_model *m) {
    char err[256];
    bn_lora *l = bn_lora_from_model(m, BN_LORA_ATTN | BN_LORA_FFN | BN_LORA_GDN | BN_LORA_HEAD, 4, 8.0f, 0, err,
                                    sizeof err);
    CHECK(l != NULL, "adapter: %s", err);
    if (!l) return NULL;
    bn_lora_init_peft(l, 11);
    bn_rng rng;
    bn_rng_seed(&rng, 12);
    for (int i = 0; i < l->n_tensors; i++)
        for (int64_t e = 0; e < l->t[i].n_out * l->r; e++)
            l->params[l->t[i].off_b + e] = (float)(B_AMP * (bn_rng_uniform(&rng) - 0.5));
    return l;
}

static bn_lora_set *open_set(const bn_model *m, const char *path) {
    char err[256];
    bn_lora_set *s = bn_lora_set_open(m, &path, NULL, 1, err, sizeof err);
    CHECK(s != NULL, "open %s: %s", path, err);
    return s;
}

// merge_case: part 1 on preset.
static void merge_case(const char *preset) {
    char err[256], f32[512], q1[512], f16[512], merged[512], merged32[512], ad32[512], ad16[512];
    snprintf(f32, sizeof f32, "%s/%s.gguf", dir, preset);
    snprintf(q1, sizeof q1, "%s/%s-q1.gguf", dir, preset);
    snprintf(f16, sizeof f16, "%s/%s-f16.gguf", dir, preset);
    snprintf(merged, sizeof merged, "%s/%s-merged.gguf", dir, preset);
    snprintf(merged32, sizeof merged32, "%s/%s-merged32.gguf", dir, preset);
    snprintf(ad32, sizeof ad32, "%s/%s-lora-f32.gguf", dir, preset);
    snprintf(ad16, sizeof ad16, "%s/%s-lora-f16.gguf", dir, preset);
    bn_mkmodel_params p;
    bn_mkmodel_defaults(&p, preset);
    if (bn_mkmodel_write(&p, f32, err, sizeof err)) { CHECK(0, "mkmodel: %s", err); return; }
    if (quantize(f32, "Q1_0", q1) || quantize(q1, "F16", f16)) return;
    bn_model *mq = bn_model_load(q1, err, sizeof err), *mf = bn_model_load(f16, err, sizeof err), *mm = NULL;
    bn_model *m32 = NULL;
    bn_lora_set *sq = NULL, *sf = NULL, *sq16 = NULL;
    CHECK(mq && mf, "load: %s", err);
    bn_lora *l = mq ? make_adapter(mq) : NULL;
    if (!l || !mf) goto out;
    CHECK(bn_lora_save_gguf(l, ad32, err, sizeof err) == 0, "save: %s", err);
    bn_adapter *a16 = bn_adapter_load(ad32, err, sizeof err);
    CHECK(a16 && bn_adapter_save(a16, ad16, BN_F16, err, sizeof err) == 0, "save f16: %s", err);
    bn_adapter_free(a16);
    CHECK(bn_lora_merge_gguf(f16, l, 1.0f, BN_MERGE_F16, merged, NULL, err, sizeof err) == 0, "merge: %s", err);
    CHECK(bn_lora_merge_gguf(f16, l, 1.0f, BN_MERGE_F32, merged32, NULL, err, sizeof err) == 0, "merge: %s", err);
    mm = bn_model_load(merged, err, sizeof err);
    m32 = bn_model_load(merged32, err, sizeof err);
    CHECK(mm && m32, "load merged: %s", err);
    if (!mm || !m32) goto out;
    int32_t tok[NT];
    for (int t = 0; t < NT; t++) tok[t] = (int32_t)((t * 37 + 11) % mq->cfg.n_vocab);
    double lq[NT], lq0[NT], lf[NT], lf0[NT], lm[NT], lm32[NT], lf16[NT];
    sq = open_set(mq, ad32), sf = open_set(mf, ad32), sq16 = open_set(mf, ad16);
    if (!sq || !sf || !sq16) goto out;
    if (logprobs(mq, sq, 1.0f, tok, lq) || logprobs(mq, NULL, 0, tok, lq0) || logprobs(mf, sf, 1.0f, tok, lf) ||
        logprobs(mf, NULL, 0, tok, lf0) || logprobs(mm, NULL, 0, tok, lm) || logprobs(mf, sq16, 1.0f, tok, lf16) || logprobs(m32, NULL, 0, tok, lm32))
        goto out;
    const double effect = max_diff(lm32, lf0), gap0 = max_diff(lq0, lf0);
    const double d_32 = max_diff(lf, lm32), d_f16 = max_diff(lf, lm), d_q1 = max_diff(lq, lm32);
    const double d_16 = max_diff(lf16, lf);
    double lqx[NT];
    bn_matmul_set_f32_activations(true); // the reference path: Q1_0 weights times the f32 activations
    const int rcx = logprobs(mq, sq, 1.0f, tok, lqx);
    bn_matmul_set_f32_activations(false);
    if (rcx) goto out;
    const double d_q1x = max_diff(lqx, lm32);
    printf("%s: adapter effect %.3g; F16 unpack + adapter vs F32 merge %.3g, vs F16 merge %.3g; Q1_0 + adapter vs "
           "F32 merge %.3g (no-adapter Q1_0 vs F16 unpack %.3g), with f32 activations %.3g; F16 adapter vs F32 adapter %.3g (max |Δ log-prob| "
           "over %d positions)\n", preset, effect, d_32, d_f16, d_q1, gap0, d_q1x, d_16,
           NT - 1);
    CHECK(effect > 0.05, "%s: the adapter changes the log-probs (%.3g)", preset, effect);
    CHECK(d_32 <= 1e-3, "%s: F16 unpack + adapter vs F32 merge: %.3g (tol 1e-3)", preset, d_32);
    CHECK(d_f16 <= 2e-2, "%s: F16 unpack + adapter vs F16 merge: %.3g (tol 2e-2)", preset, d_f16);
    CHECK(d_q1 <= 1.5 * gap0 + 1e-3, "%s: Q1_0 + adapter vs merge: %.3g (tol 1.5 × %.3g + 1e-3)", preset, d_q1, gap0);
    CHECK(d_q1x <= 1e-3, "%s: Q1_0 + adapter, f32 activations, vs F32 merge: %.3g (tol 1e-3)", preset, d_q1x);
    CHECK(d_16 <= 2e-3, "%s: F16 adapter vs F32 adapter: %.3g (tol 2e-3)", preset, d_16);
    // scale 0 is the base model, bit for bit
    double lz[NT];
    if (logprobs(mq, sq, 0.0f, tok, lz) == 0) CHECK(max_diff(lz, lq0) == 0, "%s: scale 0 = no adapter", preset);
out:
    bn_lora_set_free(sq), bn_lora_set_free(sf), bn_lora_set_free(sq16);
    bn_model_free(mm);
    bn_model_free(m32);
    bn_lora_free(l);
    bn_model_free(mq);
    bn_model_free(mf);
}

// same_bits: whether n floats are bitwise equal.
static bool same_bits(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

// prefill: a state of m with set at scale, after the 5-token prompt of seed k.
static bn_state *prefilled(const bn_model *m, const bn_lora_set *set, float scale, int k) {
    char err[256];
    bn_state *s = bn_state_new(m, 64, 2);
    bn_state_set_lora(s, set);
    if (set) bn_state_set_lora_scales(s, &scale, 1);
    int32_t p[5];
    for (int t = 0; t < 5; t++) p[t] = (int32_t)((k * 101 + t * 13 + 7) % m->cfg.n_vocab);
    CHECK(bn_forward(m, s, p, 5, NULL, err, sizeof err) == 0, "prefill: %s", err);
    return s;
}

// bits_case: part 2 on the Q1_0 qwen35 model with its F32 adapter.
static void bits_case(void) {
    char err[256], q1[512], ad[512];
    snprintf(q1, sizeof q1, "%s/tiny-q1.gguf", dir);
    snprintf(ad, sizeof ad, "%s/tiny-lora-f32.gguf", dir);
    bn_model *m = bn_model_load(q1, err, sizeof err);
    CHECK(m != NULL, "load: %s", err);
    if (!m) return;
    bn_lora_set *set = open_set(m, ad);
    const size_t V = (size_t)m->cfg.n_vocab;
    const int32_t more[6] = {40, 41, 300, 7, 99, 256};
    float *verify = xmalloc(sizeof(float) * V * 6), *decode = xmalloc(sizeof(float) * V * 6);
    float *batch = xmalloc(sizeof(float) * V * 3), *alone = xmalloc(sizeof(float) * V * 3);
    for (int with = 0; with < 2 && set; with++) { // base first: the property the adapter must keep
        bn_state *a = prefilled(m, with ? set : NULL, 1.0f, 0), *b = prefilled(m, with ? set : NULL, 1.0f, 0);
        bn_forward_out vo = {.logits = verify, .all_logits = true};
        CHECK(bn_forward(m, a, more, 6, &vo, err, sizeof err) == 0, "verify: %s", err);
        for (int t = 0; t < 6; t++) {
            bn_forward_out d = {.logits = decode + (size_t)t * V};
            CHECK(bn_forward(m, b, &more[t], 1, &d, err, sizeof err) == 0, "decode: %s", err);
        }
        CHECK(same_bits(verify, decode, V * 6), "%s: a 6-token verify pass = 6 decodes, bit for bit",
              with ? "adapter" : "base");
        bn_state_free(a), bn_state_free(b);
    }
    // a ragged decode step of three sequences at scales 1, 0.5, 0 = each alone; scale 0 = no adapter
    const float scales[3] = {1.0f, 0.5f, 0.0f};
    bn_state *seq[3], *one[3];
    bn_forward_out bo[3], *bop[3];
    const int32_t next[3] = {5, 77, 300};
    for (int i = 0; i < 3 && set; i++) {
        seq[i] = prefilled(m, set, scales[i], i + 1);
        one[i] = prefilled(m, i == 2 ? NULL : set, scales[i], i + 1);
        bo[i] = (bn_forward_out){.logits = batch + (size_t)i * V};
        bop[i] = &bo[i];
    }
    if (set) {
        CHECK(bn_forward_batch(m, seq, next, 3, bop, err, sizeof err) == 0, "batch: %s", err);
        for (int i = 0; i < 3; i++) {
            bn_forward_out o = {.logits = alone + (size_t)i * V};
            CHECK(bn_forward(m, one[i], &next[i], 1, &o, err, sizeof err) == 0, "alone: %s", err);
            CHECK(same_bits(batch + (size_t)i * V, alone + (size_t)i * V, V),
                  "sequence %d (scale %g) in a batch = alone%s, bit for bit", i, scales[i],
                  i == 2 ? " without the adapter" : "");
            bn_state_free(seq[i]), bn_state_free(one[i]);
        }
        CHECK(!same_bits(batch, batch + 2 * V, V), "the scales differ in effect");
    }
    free(verify), free(decode), free(batch), free(alone);
    bn_lora_set_free(set);
    bn_model_free(m);
}

// refused: loading path, or checking it against m, fails with a message holding every one of want[0..n).
static void refused(const bn_model *m, const char *path, const char *what, const char *const *want, int n) {
    char err[512] = "";
    bn_lora_set *s = bn_lora_set_open(m, &path, NULL, 1, err, sizeof err);
    bool named = true;
    for (int i = 0; i < n; i++) named &= strstr(err, want[i]) != NULL;
    CHECK(!s && named, "%s refused naming it: %s", what, err);
    bn_lora_set_free(s);
}

// bad_case: part 3.
static void bad_case(void) {
    char err[256], q1[512], ad[512], bad[512], dense[512];
    snprintf(q1, sizeof q1, "%s/tiny-q1.gguf", dir);
    snprintf(ad, sizeof ad, "%s/tiny-lora-f32.gguf", dir);
    snprintf(bad, sizeof bad, "%s/bad.gguf", dir);
    snprintf(dense, sizeof dense, "%s/qwen3-tiny-q1.gguf", dir);
    bn_model *m = bn_model_load(q1, err, sizeof err), *md = bn_model_load(dense, err, sizeof err);
    bn_adapter *a = bn_adapter_load(ad, err, sizeof err);
    CHECK(m && md && a, "load: %s", err);
    if (!m || !md || !a) goto out;
    // wrong shape: the first tensor's n_out halved (B keeps its data; the file is still well formed)
    bn_adapter_tensor t0 = a->t[0];
    a->t[0].n_out = t0.n_out / 2;
    CHECK(bn_adapter_save(a, bad, BN_F32, err, sizeof err) == 0, "save: %s", err);
    char shape[64];
    snprintf(shape, sizeof shape, "{%lld, %lld}", (long long)t0.n_in, (long long)t0.n_out);
    refused(m, bad, "a wrong shape", (const char *[]){t0.name, shape, "lora_b {4,"}, 3);
    a->t[0] = t0;
    // a weight the model lacks: layer 0 is a GDN layer (no attn_q)
    snprintf(a->t[0].name, sizeof a->t[0].name, "blk.0.attn_q.weight");
    CHECK(bn_adapter_save(a, bad, BN_F32, err, sizeof err) == 0, "save: %s", err);
    refused(m, bad, "an unknown tensor", (const char *[]){"blk.0.attn_q.weight", "no such weight"}, 2);
    a->t[0] = t0;
    // another architecture: the qwen35 adapter on the qwen3 model
    refused(md, ad, "another architecture", (const char *[]){"'qwen35'", "'qwen3'"}, 2);
    // the LM head of a tied model
    const int n_t = a->n_tensors;
    snprintf(a->t[0].name, sizeof a->t[0].name, "output.weight");
    snprintf(a->arch, sizeof a->arch, "qwen3");
    a->n_tensors = 1;
    CHECK(bn_adapter_save(a, bad, BN_F32, err, sizeof err) == 0, "save: %s", err);
    refused(md, bad, "a head adapter on a tied model", (const char *[]){"output.weight", "tied"}, 2);
    a->n_tensors = n_t;
    // a truncated file
    FILE *f = fopen(ad, "rb");
    char *buf = xmalloc(1 << 20);
    size_t n = f ? fread(buf, 1, 1 << 20, f) : 0;
    if (f) fclose(f);
    f = fopen(bad, "wb");
    if (f) fwrite(buf, 1, n / 2, f), fclose(f);
    free(buf);
    refused(m, bad, "a truncated file", (const char *[]){bad}, 1);
    // a model file given as an adapter
    refused(m, q1, "a model file", (const char *[]){"general.type", "adapter"}, 2);
    // the engine refuses adapters on the CPU+CUDA split before looking for a device
    bn_lora_set *s = open_set(m, ad);
    bn_engine *e = bn_engine_open_lora(m, 2, 1, s, err, sizeof err);
    CHECK(!e && strstr(err, "not split"), "-ngl 2 of 4 layers with an adapter refused: %s", err);
    bn_engine_free(e);
out:
    bn_adapter_free(a);
    bn_model_free(m);
    bn_model_free(md);
}

int main(void) {
    if (!mkdtemp(dir)) return test_skip("cannot create a temp dir");
    merge_case("tiny");
    merge_case("qwen3-tiny");
    bits_case();
    bad_case();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (!getenv("KEEP") && system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    return test_done("train_lora_infer");
}
