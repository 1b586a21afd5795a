// eval/perplexity.h — llama-perplexity's method (docs/server.md §14) on our engine: the token stream is cut
// into n_ctx chunks, each evaluated from a fresh state with BOS replacing its first token when the
// vocab adds BOS; positions n_ctx/2 .. n_ctx-2 predict the next token; nll accumulated in double
// (log-softmax as llama.cpp: float max, double sum of expf).
#ifndef BONSAI_PERPLEXITY_H
#define BONSAI_PERPLEXITY_H
#include <stdint.h>
#include <stddef.h>
#include "core/engine.h"
#include "core/model.h"

typedef struct {
    int n_chunk;       // chunks evaluated
    int count;         // scored tokens
    double nll, nll2;  // sums of -log p and its square
    double ppl;        // exp(nll / count)
    double ppl_err;    // sqrt((mean(nll²) - mean(nll)²)/(count-1)) * ppl  (0 if count < 2)
    double sec_first;  // seconds for the first chunk
} bn_ppl_result;

// Optional callbacks of bn_perplexity (any may be NULL).
typedef struct {
    // on_logits: each scored position in order: row 0 .. n_ctx-2-n_ctx/2 of chunk (0-based), its
    // logits {n_vocab} and the token it predicts. Returns 0, or -1 with err filled to stop the run
    // (KL-divergence files: write error, base file exhausted).
    int (*on_logits)(void *ctx, int chunk, int row, const float *logits, int32_t next, char *err, size_t errlen);
    // on_chunk: after each chunk with its 1-based index and the running exp(mean nll).
    void (*on_chunk)(void *ctx, int chunk, double running_ppl);
    void *ctx;
} bn_ppl_hooks;

// bn_perplexity: evaluates min(n_tokens / n_ctx, max_chunks (< 0: all)) chunks of tokens on engine e (the CPU, the
// GPU or both: bn_engine_open's for -ngl); bos >= 0 replaces each chunk's first token. Needs n_tokens >= 2 * n_ctx.
// Returns 0, or -1 with err.
int bn_perplexity(const bn_engine *e, const int32_t *tokens, int n_tokens, int n_ctx, int max_chunks, int32_t bos,
                  const bn_ppl_hooks *hooks, bn_ppl_result *r, char *err, size_t errlen);

// bn_ppl_nll_token: -log softmax(logits)[tok] over n_vocab entries, computed as llama-perplexity does.
double bn_ppl_nll_token(const float *logits, int n_vocab, int32_t tok);

#endif
