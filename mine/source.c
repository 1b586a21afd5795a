// mine/source.c — the in-process completion source on an engine (CPU, or CUDA with -ngl): prefill, then sample
// token by token, recording the raw top-K log-probabilities at each position.
#include "mine/source.h"
#include "core/engine.h"
#include "core/forward.h"
#include "core/model.h"
#include "core/sampler.h"
#include "spec/step_batch.h"
#include "core/tokenizer.h"
#include "base/util.h"
#include <stdlib.h>
#include <string.h>

typedef struct {
    bn_source base;
    const bn_model *model;
    const bn_tokenizer *tok;
    bn_engine *own;          // the CPU engine bn_source_inprocess made (freed with the source), else NULL
    bn_engine_state *state;  // on the source's engine
    bn_step_batcher *batcher; // NULL, or the decode steps of the sources sharing a device engine, batched
    bool rows_on_host;       // CPU engine: logits rows are host memory anyway (the exact row path below)
    float *logits;           // {n_vocab}
} inproc;

bn_gen_params bn_gen_params_default(void) {
    bn_gen_params p = {.temperature = 0.1f, .top_k = 50, .top_p = 1.0f, .min_p = 0.01f, .seed = 0,
                       .n_predict = 4000, .n_probs = 20, .repeat_last_n = 64, .repeat_penalty = 1.0f,
                       .dry_base = 1.75f, .dry_allowed_length = 2, .dry_penalty_last_n = 64};
    return p;
}

// sampler_params: the sampler chain of p (DRY's breakers not set)
static bn_sampler_params sampler_params(const bn_gen_params *p) {
    return (bn_sampler_params){.temperature = p->temperature, .top_k = p->top_k, .top_p = p->top_p, .min_p = p->min_p,
                               .seed = p->seed, .min_keep = 1, .repeat_last_n = p->repeat_last_n,
                               .repeat_penalty = p->repeat_penalty, .frequency_penalty = p->frequency_penalty,
                               .presence_penalty = p->presence_penalty, .dry_multiplier = p->dry_multiplier,
                               .dry_base = p->dry_base, .dry_allowed_length = p->dry_allowed_length,
                               .dry_penalty_last_n = p->dry_penalty_last_n};
}

bool bn_gen_params_penalized(const bn_gen_params *p) {
    const bn_sampler_params sp = sampler_params(p);
    return bn_sampler_params_penalized(&sp);
}

// A position's head outputs: the logits row (CPU engines, or a chain that reads more than the top
// BN_FORWARD_TOPK_MAX), or its kk best logits and ln Σ exp (a device engine: raw log-probs = logit − lse,
// the sampler draws from the top_k of them, bn_sampler_sample_topk; no row is copied off the device).
typedef struct {
    bn_forward_out fo;
    int kk;              // 0: the row path; else values in the top-k arrays (>= the chain's top_k and K)
    int32_t ids[BN_FORWARD_TOPK_MAX];
    float vals[BN_FORWARD_TOPK_MAX];
    float lse;
} position_out;

// position_out_init: the row path or the top-k path for chain smp and k recorded log-probs.
static void position_out_init(position_out *po, inproc *s, const bn_sampler *smp, int k) {
    memset(po, 0, sizeof *po);
    const int n_vocab = s->model->cfg.n_vocab, need = bn_sampler_topk_needed(smp, BN_FORWARD_TOPK_MAX, n_vocab);
    if (!s->rows_on_host && need > 0 && k <= BN_FORWARD_TOPK_MAX) po->kk = need > k ? need : k;
    if (po->kk) po->fo = (bn_forward_out){.topk = po->kk, .topk_ids = po->ids, .topk_logits = po->vals, .lse = &po->lse};
    else po->fo = (bn_forward_out){.logits = s->logits};
}

// position_record: samples the next token from the position's outputs and records its raw log-prob and the raw
// top-k (k entries, padded with {-1, -1e30}) at row of out; returns the token.
static int32_t position_record(inproc *s, position_out *po, bn_sampler *smp, int k, bn_gen_result *out, int32_t *ids,
                               float *lps) {
    const int n_vocab = s->model->cfg.n_vocab;
    const int32_t id = bn_sampler_pick(smp, &po->fo, 0, n_vocab); // from the top-k values or from the row
    int got;
    float lp;
    if (po->kk) {
        got = k < po->kk ? k : po->kk;
        lp = -1e30f; // the pick is one of the top_k <= kk values
        for (int j = 0; j < po->kk; j++) {
            if (j < got) ids[j] = po->ids[j], lps[j] = po->vals[j] - po->lse;
            if (po->ids[j] == id) lp = po->vals[j] - po->lse;
        }
    } else {
        got = bn_logits_topk(s->logits, n_vocab, k, ids, lps);
        lp = bn_logits_logprob(s->logits, n_vocab, id);
    }
    for (int j = 0; j < k; j++)
        out->topk[(size_t)out->n * k + j] = j < got ? (bn_topk){ids[j], lps[j]} : (bn_topk){-1, -1e30};
    out->logprob[out->n] = lp;
    return id;
}

static int inproc_generate(bn_source *base, const int32_t *prompt, int n_prompt, const bn_gen_params *p,
                           bn_gen_result *out, char *err, size_t errlen) {
    inproc *s = (inproc *)base;
    memset(out, 0, sizeof *out);
    int n_vocab = s->model->cfg.n_vocab, n_ctx = bn_engine_state_n_ctx(s->state);
    if (n_prompt <= 0) return bn_err(err, errlen, "empty prompt");
    if (n_prompt >= n_ctx) return bn_err(err, errlen, "prompt of %d tokens does not fit the context (%d)", n_prompt, n_ctx);
    int budget = p->n_predict < n_ctx - n_prompt ? p->n_predict : n_ctx - n_prompt;
    int k = p->n_probs < n_vocab ? p->n_probs : n_vocab;
    if (k < 0) k = 0;
    bn_sampler_params sp = sampler_params(p);
    // DRY's breakers in this vocabulary (one scan of it per completion: small beside generating one)
    bn_dry_breakers *dry = bn_sampler_params_dry(&sp) ? bn_dry_breakers_new(s->tok, p->dry_breakers, p->n_dry_breakers) : NULL;
    sp.dry_breakers = dry;
    bn_sampler *smp = bn_sampler_new(&sp);
    position_out po;
    position_out_init(&po, s, smp, k);
    bn_engine_state_reset(s->state);
    if (s->batcher) bn_step_batcher_lock(s->batcher);
    int rc = bn_engine_forward(s->state, prompt, n_prompt, &po.fo, err, errlen);
    if (s->batcher) bn_step_batcher_unlock(s->batcher);
    if (rc < 0) {
        bn_sampler_free(smp);
        bn_dry_breakers_free(dry);
        return -1;
    }
    out->k = k;
    out->ids = xmalloc(((size_t)budget + 1) * sizeof *out->ids);
    out->logprob = xmalloc(((size_t)budget + 1) * sizeof *out->logprob);
    out->topk = xmalloc(((size_t)budget * (size_t)k + 1) * sizeof *out->topk);
    int32_t *ids = xmalloc(((size_t)k + 1) * sizeof *ids);
    float *lps = xmalloc(((size_t)k + 1) * sizeof *lps);
    // what the penalties count: the prompt, then each generated token
    int32_t *hist = bn_sampler_params_penalized(&sp) ? xmalloc(((size_t)n_prompt + budget) * sizeof *hist) : NULL;
    if (hist) memcpy(hist, prompt, (size_t)n_prompt * sizeof *hist);
    out->hit_limit = true;
    if (s->batcher) bn_step_batcher_decoding(s->batcher, +1);
    for (int i = 0; i < budget; i++) {
        if (hist) bn_sampler_set_history(smp, hist, n_prompt + out->n);
        int32_t id = position_record(s, &po, smp, k, out, ids, lps);
        if (bn_token_is_eog(s->tok, id)) { out->hit_limit = false; break; }
        if (hist) hist[n_prompt + out->n] = id;
        out->ids[out->n++] = id;
        if (i + 1 == budget) break; // no forward needed for a token nobody will extend
        rc = s->batcher ? bn_step_batcher_step(s->batcher, s->state, id, &po.fo, err, errlen)
                        : bn_engine_forward(s->state, &id, 1, &po.fo, err, errlen);
        if (rc < 0) break;
    }
    if (s->batcher) bn_step_batcher_decoding(s->batcher, -1);
    free(hist);
    free(ids);
    free(lps);
    bn_sampler_free(smp);
    bn_dry_breakers_free(dry);
    if (rc) bn_gen_result_free(out);
    return rc;
}

static void inproc_destroy(bn_source *base) {
    inproc *s = (inproc *)base;
    bn_engine_state_free(s->state);
    bn_engine_free(s->own);
    free(s->logits);
    free(s);
}

bn_source *bn_source_engine(const bn_engine *e, const bn_tokenizer *tok, int n_ctx, bn_step_batcher *batcher, char *err,
                            size_t errlen) {
    bn_engine_state *st = bn_engine_state_new(e, n_ctx, err, errlen);
    if (!st) return NULL;
    inproc *s = xcalloc(1, sizeof *s);
    s->base.endpoint = "in-process";
    s->base.generate = inproc_generate;
    s->base.destroy = inproc_destroy;
    s->model = e->m;
    s->tok = tok;
    s->state = st;
    s->batcher = batcher;
    s->rows_on_host = !strcmp(bn_engine_name(e), "CPU");
    s->logits = xmalloc((size_t)e->m->cfg.n_vocab * sizeof *s->logits);
    return &s->base;
}

bn_source *bn_source_inprocess(const bn_model *m, const bn_tokenizer *tok, int n_ctx, int n_threads) {
    char err[256];
    bn_engine *e = bn_engine_cpu_new(m, n_threads);
    inproc *s = (inproc *)bn_source_engine(e, tok, n_ctx, NULL, err, sizeof err);
    if (!s) bn_die("in-process source: %s", err); // a CPU state only fails on OOM, which dies anyway
    s->own = e;
    return &s->base;
}

void bn_source_free(bn_source *s) {
    if (s) s->destroy(s);
}

void bn_gen_result_free(bn_gen_result *r) {
    free(r->ids);
    free(r->logprob);
    free(r->topk);
    memset(r, 0, sizeof *r);
}
