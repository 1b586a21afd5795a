// tests/cuda/test_cuda_lora.c — LoRA adapters applied unmerged by the CUDA engine (cuda/lora.cu) against the CPU
// engine with the same adapter (core/adapter.h), on the tiny qwen35 model in F32 and Q1_0 (-ngl 99; an adapter on
// every projection and the LM head, rank 4): a 6-token prefill (every row's logits) and 4 decode steps give the CPU
// engine's log-probs (F32: within 2e-3, the CUDA engine's fp16 KV cache; Q1_0: within 0.2, its activation rounding
// — the bounds tests/cuda/test_cuda_forward.c holds without an adapter) while the adapter moves them by more; a
// batched decode step of three sequences at scales 1, 0.5 and 0 gives what each gives alone (1e-4), the one at 0 the
// model without the adapter; a scale changed between two captured steps is the one the replay uses.
#include "tests/test.h"
#include "tests/cuda/compare.h"
#include "core/adapter.h"
#include "core/engine.h"
#include "core/forward.h"
#include "synth/mkmodel.h"
#include "quantize/quantize.h"
#include "train/lora.h"
#include "base/rng.h"
#include "base/util.h"
#include "cuda/cuda_engine.h"
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/bn-cuda-lora-XXXXXX";
static const int32_t PROMPT[6] = {5, 77, 140, 12, 250, 9};

// adapter: a random rank-4 adapter of m on every projection and the head, written to path; 0 or -1.
static int adapter(const bn_model *m, const char *path) {
    char err[256];
    bn_lora *l = bn_lora_from_model(m, BN_LORA_ATTN | BN_LORA_FFN | BN_LORA_GDN | BN_LORA_HEAD, 4, 8.0f, 0, err,
                                    sizeof err);
    if (!l) return -1;
    bn_lora_init_peft(l, 21);
    bn_rng rng;
    bn_rng_seed(&rng, 22);
    for (int i = 0; i < l->n_tensors; i++)
        for (int64_t e = 0; e < l->t[i].n_out * l->r; e++)
            l->params[l->t[i].off_b + e] = (float)(0.2 * (bn_rng_uniform(&rng) - 0.5));
    const int rc = bn_lora_save_gguf(l, path, err, sizeof err);
    bn_lora_free(l);
    return rc;
}

// engine: the engine for ngl over m with the adapter at path (NULL: none).
static bn_engine *engine(const bn_model *m, int ngl, const char *path) {
    char err[256];
    bn_lora_set *set = path ? bn_lora_set_open(m, &path, NULL, 1, err, sizeof err) : NULL;
    bn_engine *e = !path || set ? bn_engine_open_lora(m, ngl, 2, set, err, sizeof err) : NULL;
    CHECK(e != NULL, "engine -ngl %d: %s", ngl, err);
    return e;
}

// run: the prompt's 6 logits rows then 4 greedy decode steps' rows (from the CPU's tokens, given in tok) into lg
// [10][V]; tok NULL: the run picks its own greedy tokens.
static void run(bn_engine *e, float scale, float *lg, int32_t *tok, bool fill_tok) {
    char err[256];
    const int V = e->m->cfg.n_vocab;
    bn_engine_state *s = bn_engine_state_new(e, 32, err, sizeof err);
    CHECK(s != NULL, "state: %s", err);
    if (!s) return;
    if (bn_lora_set_count(bn_engine_lora(e)))
        CHECK(bn_engine_state_set_lora(s, &scale, 1, err, sizeof err) == 0, "scales: %s", err);
    bn_forward_out o = {.logits = lg, .all_logits = true};
    CHECK(bn_engine_forward(s, PROMPT, 6, &o, err, sizeof err) == 0, "prefill: %s", err);
    for (int i = 0; i < 4; i++) {
        if (fill_tok) tok[i] = bn_logits_argmax(lg + (size_t)(5 + i) * V, V);
        bn_forward_out d = {.logits = lg + (size_t)(6 + i) * V};
        CHECK(bn_engine_forward(s, &tok[i], 1, &d, err, sizeof err) == 0, "decode: %s", err);
    }
    bn_engine_state_free(s);
}

// batch: a decode step of three sequences (the prompt each, then token 40) at scales 1, 0.5, 0 in one pass, into
// lg [3][V]; alone: each sequence's step on its own.
static void batch(bn_engine *e, float *lg, bool alone) {
    char err[256];
    const int V = e->m->cfg.n_vocab;
    const float sc[3] = {1.0f, 0.5f, 0.0f};
    bn_engine_state *s[3];
    bn_forward_out o[3], *op[3];
    const int32_t next[3] = {40, 40, 40};
    for (int i = 0; i < 3; i++) {
        s[i] = bn_engine_state_new(e, 32, err, sizeof err);
        CHECK(s[i] && bn_engine_state_set_lora(s[i], &sc[i], 1, err, sizeof err) == 0, "state: %s", err);
        CHECK(bn_engine_forward(s[i], PROMPT, 6, NULL, err, sizeof err) == 0, "prefill: %s", err);
        o[i] = (bn_forward_out){.logits = lg + (size_t)i * V};
        op[i] = &o[i];
    }
    if (alone)
        for (int i = 0; i < 3; i++) CHECK(bn_engine_forward(s[i], &next[i], 1, op[i], err, sizeof err) == 0, "%s", err);
    else
        CHECK(bn_engine_forward_batch(s, next, 3, op, err, sizeof err) == 0, "batch: %s", err);
    for (int i = 0; i < 3; i++) bn_engine_state_free(s[i]);
}

// rescaled: the prompt at scale 0, then decode steps at scales 0, 0, 1, 0.5 (the later ones replays of a captured
// step on the CUDA engine) into lg [4][V].
static void rescaled(bn_engine *e, float *lg) {
    char err[256];
    const int V = e->m->cfg.n_vocab;
    const float sc[5] = {0.0f, 0.0f, 0.0f, 1.0f, 0.5f};
    bn_engine_state *s = bn_engine_state_new(e, 32, err, sizeof err);
    CHECK(s && bn_engine_state_set_lora(s, &sc[0], 1, err, sizeof err) == 0, "state: %s", err);
    if (!s) return;
    CHECK(bn_engine_forward(s, PROMPT, 6, NULL, err, sizeof err) == 0, "prefill: %s", err);
    for (int i = 0; i < 4; i++) {
        const int32_t t = (int32_t)(60 + i);
        bn_forward_out o = {.logits = lg + (size_t)i * V};
        CHECK(bn_engine_state_set_lora(s, &sc[i + 1], 1, err, sizeof err) == 0, "scale: %s", err);
        CHECK(bn_engine_forward(s, &t, 1, &o, err, sizeof err) == 0, "step: %s", err);
    }
    bn_engine_state_free(s);
}

static void lora_case(const char *type, double tol) {
    char err[256], f32[400], path[400], ad[400];
    snprintf(f32, sizeof f32, "%s/tiny.gguf", dir);
    snprintf(path, sizeof path, "%s/tiny-%s.gguf", dir, type);
    snprintf(ad, sizeof ad, "%s/lora-%s.gguf", dir, type);
    if (strcmp(type, "F32") != 0) {
        bn_quantize_params qp = bn_quantize_params_default();
        qp.type = type, qp.log = NULL, qp.n_threads = 1;
        CHECK(bn_quantize_file(&qp, f32, path, err, sizeof err) == 0, "quantize: %s", err);
    } else
        snprintf(path, sizeof path, "%s", f32);
    bn_model *m = bn_model_load(path, err, sizeof err);
    CHECK(m && adapter(m, ad) == 0, "model and adapter: %s", err);
    if (!m) return;
    const int V = m->cfg.n_vocab;
    bn_engine *cpu = engine(m, 0, ad), *gpu = engine(m, 99, ad), *base = engine(m, 99, NULL);
    if (!cpu || !gpu || !base) goto out;
    CHECK(!strcmp(bn_engine_name(gpu), "CUDA"), "-ngl 99 runs on the CUDA engine (%s)", bn_engine_name(gpu));
    float *lc = xmalloc(sizeof(float) * V * 10), *lg = xmalloc(sizeof(float) * V * 10), *lb = xmalloc(sizeof(float) * V * 10);
    int32_t tok[4];
    run(cpu, 1.0f, lc, tok, true);
    run(gpu, 1.0f, lg, tok, false);
    run(base, 1.0f, lb, tok, false);
    const double d = max_dlogprob(lc, lg, 10, V), effect = max_dlogprob(lb, lg, 10, V);
    printf("%s: CUDA + adapter vs CPU + adapter max|dlogprob| %.3g; the adapter's effect %.3g\n", type, d, effect);
    CHECK(d <= tol, "%s: CUDA vs CPU with the adapter: %.3g (tol %g)", type, d, tol);
    CHECK(effect > 2 * tol, "%s: the adapter moves the log-probs (%.3g)", type, effect);
    // scale 0 on the adapted engine = the engine without the adapter; a changed scale reaches the captured steps
    run(gpu, 0.0f, lg, tok, false);
    const double z = max_dlogprob(lb, lg, 10, V);
    CHECK(z <= 1e-5, "%s: scale 0 = no adapter (%.3g)", type, z);
    rescaled(cpu, lc);
    rescaled(gpu, lg);
    const double dr = max_dlogprob(lc, lg, 4, V);
    printf("%s: steps at scales 0, 0, 1, 0.5 vs the CPU engine %.3g\n", type, dr);
    CHECK(dr <= tol, "%s: scales changed between captured steps: %.3g vs the CPU (tol %g)", type, dr, tol);
    float *bt = xmalloc(sizeof(float) * V * 3), *al = xmalloc(sizeof(float) * V * 3);
    batch(gpu, bt, false);
    batch(gpu, al, true);
    const double db = max_dlogprob(bt, al, 3, V);
    printf("%s: batched step at scales 1, 0.5, 0 vs each alone %.3g\n", type, db);
    CHECK(db <= 1e-4, "%s: batched step vs alone: %.3g (tol 1e-4)", type, db);
    CHECK(max_dlogprob(bt, bt + V, 1, V) > 1e-2, "%s: the sequences' scales differ in effect", type);
    free(bt), free(al), free(lc), free(lg), free(lb);
out:
    bn_engine_free(cpu), bn_engine_free(gpu), bn_engine_free(base);
    bn_model_free(m);
}

int main(void) {
    char err[256], f32[400];
    if (!bn_cuda_available(err, sizeof err)) return test_skip(err);
    if (!mkdtemp(dir)) return test_skip("cannot create a temporary directory");
    snprintf(f32, sizeof f32, "%s/tiny.gguf", dir);
    bn_mkmodel_params p;
    bn_mkmodel_defaults(&p, "tiny");
    CHECK(bn_mkmodel_write(&p, f32, err, sizeof err) == 0, "mkmodel: %s", err);
    lora_case("F32", 2e-3);
    lora_case("Q1_0", 0.2);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    return test_done("cuda_lora");
}
