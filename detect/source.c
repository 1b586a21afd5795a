// detect/source.c — the in-process completion source: prefill, then sample token by token,
// recording the raw top-K log-probabilities at each position.
#include "detect/source.h"
#include "core/forward.h"
#include "core/model.h"
#include "core/sampler.h"
#include "core/tokenizer.h"
#include "core/util.h"
#include <stdlib.h>
#include <string.h>

typedef struct {
    bn_source base;
    const bn_model *model;
    const bn_tokenizer *tok;
    bn_state *state;
    float *logits; // {n_vocab}
} inproc;

bn_gen_params bn_gen_params_default(void) {
    bn_gen_params p = {.temperature = 0.1f, .top_k = 50, .top_p = 1.0f, .min_p = 0.01f, .seed = 0,
                       .n_predict = 4000, .n_probs = 20};
    return p;
}

static int inproc_generate(bn_source *base, const int32_t *prompt, int n_prompt, const bn_gen_params *p,
                           bn_gen_result *out, char *err, size_t errlen) {
    inproc *s = (inproc *)base;
    memset(out, 0, sizeof *out);
    int n_vocab = s->model->cfg.n_vocab, n_ctx = bn_state_n_ctx(s->state);
    if (n_prompt <= 0) return bn_err(err, errlen, "empty prompt");
    if (n_prompt >= n_ctx) return bn_err(err, errlen, "prompt of %d tokens does not fit the context (%d)", n_prompt, n_ctx);
    int budget = p->n_predict < n_ctx - n_prompt ? p->n_predict : n_ctx - n_prompt;
    int k = p->n_probs < n_vocab ? p->n_probs : n_vocab;
    if (k < 0) k = 0;
    bn_state_reset(s->state);
    bn_forward_out fo = {.logits = s->logits};
    if (bn_forward(s->model, s->state, prompt, n_prompt, &fo, err, errlen) < 0) return -1;
    bn_sampler_params sp = {.temperature = p->temperature, .top_k = p->top_k, .top_p = p->top_p,
                            .min_p = p->min_p, .seed = p->seed, .min_keep = 1};
    bn_sampler *smp = bn_sampler_new(&sp);
    out->k = k;
    out->ids = xmalloc(((size_t)budget + 1) * sizeof *out->ids);
    out->logprob = xmalloc(((size_t)budget + 1) * sizeof *out->logprob);
    out->topk = xmalloc(((size_t)budget * (size_t)k + 1) * sizeof *out->topk);
    int32_t *ids = xmalloc(((size_t)k + 1) * sizeof *ids);
    float *lps = xmalloc(((size_t)k + 1) * sizeof *lps);
    out->hit_limit = true;
    int rc = 0;
    for (int i = 0; i < budget; i++) {
        int32_t id = bn_sampler_sample(smp, s->logits, n_vocab);
        if (bn_token_is_eog(s->tok, id)) { out->hit_limit = false; break; }
        int got = bn_logits_topk(s->logits, n_vocab, k, ids, lps);
        for (int j = 0; j < k; j++)
            out->topk[(size_t)out->n * k + j] = j < got ? (bn_topk){ids[j], lps[j]} : (bn_topk){-1, -1e30};
        out->logprob[out->n] = bn_logits_logprob(s->logits, n_vocab, id);
        out->ids[out->n++] = id;
        if (i + 1 == budget) break; // no forward needed for a token nobody will extend
        if (bn_forward(s->model, s->state, &id, 1, &fo, err, errlen) < 0) { rc = -1; break; }
    }
    free(ids);
    free(lps);
    bn_sampler_free(smp);
    if (rc) bn_gen_result_free(out);
    return rc;
}

static void inproc_destroy(bn_source *base) {
    inproc *s = (inproc *)base;
    bn_state_free(s->state);
    free(s->logits);
    free(s);
}

bn_source *bn_source_inprocess(const bn_model *m, const bn_tokenizer *tok, int n_ctx, int n_threads) {
    inproc *s = xcalloc(1, sizeof *s);
    s->base.endpoint = "in-process";
    s->base.generate = inproc_generate;
    s->base.destroy = inproc_destroy;
    s->model = m;
    s->tok = tok;
    s->state = bn_state_new(m, n_ctx, n_threads);
    s->logits = xmalloc((size_t)m->cfg.n_vocab * sizeof *s->logits);
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
