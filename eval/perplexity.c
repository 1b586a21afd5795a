// eval/perplexity.c — llama-perplexity's method on our engine (see perplexity.h).
#include "eval/perplexity.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "base/util.h"

// Second-half positions are fed in pieces of this many tokens so the logits buffer stays small
// (248k-entry vocabularies): PPL_PIECE × n_vocab floats.
#define PPL_PIECE 32

double bn_ppl_nll_token(const float *logits, int n_vocab, int32_t tok) {
    float max_logit = logits[0];
    for (int i = 1; i < n_vocab; i++) max_logit = logits[i] > max_logit ? logits[i] : max_logit;
    double sum_exp = 0.0;
    for (int i = 0; i < n_vocab; i++) sum_exp += expf(logits[i] - max_logit);
    return -((double)(logits[tok] - max_logit) - log(sum_exp));
}

int bn_perplexity(const bn_engine *e, const int32_t *tokens, int n_tokens, int n_ctx, int max_chunks, int32_t bos,
                  const bn_ppl_hooks *hooks, bn_ppl_result *r, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    if (n_ctx < 4) return bn_err(err, errlen, "context %d too small", n_ctx);
    if (n_tokens < 2 * n_ctx)
        return bn_err(err, errlen, "you need at least %d tokens to evaluate perplexity with a context of %d (got %d)",
                      2 * n_ctx, n_ctx, n_tokens);
    int n_chunk = n_tokens / n_ctx;
    if (max_chunks >= 0 && max_chunks < n_chunk) n_chunk = max_chunks;
    int n_vocab = e->m->cfg.n_vocab, first = n_ctx / 2;
    bn_engine_state *s = bn_engine_state_new(e, n_ctx, err, errlen);
    if (!s) return -1;
    float *logits = xmalloc(sizeof(float) * (size_t)PPL_PIECE * n_vocab);
    int32_t *chunk = xmalloc(sizeof(int32_t) * (size_t)n_ctx);
    int rc = 0;
    for (int c = 0; c < n_chunk && rc == 0; c++) {
        double t0 = bn_time_ms();
        memcpy(chunk, tokens + (size_t)c * n_ctx, sizeof(int32_t) * (size_t)n_ctx);
        if (bos >= 0) chunk[0] = bos;
        bn_engine_state_reset(s);
        // First half: context only (the last-token logits are written and ignored).
        bn_forward_out ctx_out = {.logits = logits};
        rc = bn_engine_forward(s, chunk, first, &ctx_out, err, errlen);
        // Second half: positions first .. n_ctx-2 score tokens first+1 .. n_ctx-1 (the original tokens).
        for (int p = first; p < n_ctx - 1 && rc == 0; p += PPL_PIECE) {
            int k = n_ctx - 1 - p < PPL_PIECE ? n_ctx - 1 - p : PPL_PIECE;
            bn_forward_out out = {.logits = logits, .all_logits = true};
            rc = bn_engine_forward(s, chunk + p, k, &out, err, errlen);
            for (int i = 0; i < k && rc == 0; i++) {
                const float *row_logits = logits + (size_t)i * n_vocab;
                const int32_t next = tokens[(size_t)c * n_ctx + p + i + 1];
                if (hooks && hooks->on_logits) rc = hooks->on_logits(hooks->ctx, c, p + i - first, row_logits, next, err, errlen);
                if (rc != 0) break;
                double v = bn_ppl_nll_token(row_logits, n_vocab, next);
                r->nll += v;
                r->nll2 += v * v;
                r->count++;
            }
        }
        if (rc != 0) break;
        if (c == 0) r->sec_first = (bn_time_ms() - t0) / 1000.0;
        r->n_chunk = c + 1;
        if (hooks && hooks->on_chunk) hooks->on_chunk(hooks->ctx, c + 1, exp(r->nll / r->count));
    }
    free(chunk);
    free(logits);
    bn_engine_state_free(s);
    if (rc != 0) return -1;
    double mean = r->nll / r->count, mean2 = r->nll2 / r->count;
    r->ppl = exp(mean);
    double var = mean2 - mean * mean;
    r->ppl_err = var > 0 && r->count > 1 ? sqrt(var / (r->count - 1)) * r->ppl : 0;
    return 0;
}
