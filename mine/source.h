// mine/source.h — the "completion source" (docs/design.md §3): given prompt token ids and sampling
// settings, return the generated ids with the raw top-K (id, logprob) of every position (the
// distribution that produced that token: ln softmax of the raw logits, no temperature/samplers,
// as llama-server's n_probs with post_sampling_probs false). One in-process implementation over
// core/engine.h + core/sampler.h; an HTTP one can fill the same table.
#ifndef BONSAI_DETECT_SOURCE_H
#define BONSAI_DETECT_SOURCE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "detect/chosen.h"

struct bn_model;
struct bn_tokenizer;
struct bn_engine;
struct bn_step_batcher;

typedef struct {
    float temperature;  // <= 0: greedy
    int top_k;          // <= 0: whole vocabulary
    float top_p;        // >= 1: off
    float min_p;        // <= 0: off
    uint64_t seed;
    int n_predict;      // maximum new tokens
    int n_probs;        // K of the recorded top-K (20); 0 = none
    // repetition penalties over the last repeat_last_n tokens of prompt + generation (core/sampler.h; off by
    // default: repeat_last_n 64, repeat_penalty 1, frequency and presence 0)
    int repeat_last_n;
    float repeat_penalty, frequency_penalty, presence_penalty;
    // DRY (core/dry.h; off by default: multiplier 0, base 1.75, allowed length 2, last 64 tokens)
    float dry_multiplier, dry_base;
    int dry_allowed_length, dry_penalty_last_n;
    const char *const *dry_breakers; // sequence breaker strings; NULL: the defaults
    int n_dry_breakers;
} bn_gen_params;

typedef struct {
    int n;              // generated tokens (EOG token excluded)
    int32_t *ids;       // {n}
    float *logprob;     // {n} raw logprob of each generated token
    int k;              // entries per position in topk
    bn_topk *topk;      // {n, k}: position i's raw top-K, descending
    bool hit_limit;     // stopped by n_predict (or the context) rather than an EOG token
} bn_gen_result;

typedef struct bn_source bn_source;
struct bn_source {
    const char *endpoint; // label written into pair rows' gen.endpoint ("in-process", a URL)
    // generate: returns 0 and fills out (free with bn_gen_result_free), or -1 with err filled.
    int (*generate)(bn_source *s, const int32_t *prompt, int n_prompt, const bn_gen_params *p,
                    bn_gen_result *out, char *err, size_t errlen);
    void (*destroy)(bn_source *s);
};

// bn_gen_params_default: antidoom's generation settings (T 0.1, top_k 50, top_p 1, min_p 0.01,
// seed 0, n_predict 4000, n_probs 20, no repetition penalties, no DRY).
bn_gen_params bn_gen_params_default(void);
// bn_gen_params_penalized: true when p asks for repetition penalties or DRY (bn_sampler_params_penalized).
bool bn_gen_params_penalized(const bn_gen_params *p);
// bn_source_inprocess: a source running model m on n_threads CPU threads with a context of n_ctx
// tokens (prompt + generation); tok decides end-of-generation. Returns the source (never NULL).
bn_source *bn_source_inprocess(const struct bn_model *m, const struct bn_tokenizer *tok, int n_ctx, int n_threads);
// bn_source_engine: a source with its own state of n_ctx tokens on engine e (the caller's, which must outlive it).
// Sources generating at once on one device engine share a batcher (spec/step_batch.h, the caller's; NULL: this
// source alone uses the engine): their decode steps run batched, prefills under its engine lock. On a device
// engine a position brings back only its top-k logits and
// ln Σ exp when the chain reads no more than BN_FORWARD_TOPK_MAX values (top_k 1..64) and n_probs <= 64
// (raw log-probs: logit − lse, summed in float on the device), else the row. Returns NULL with err when the
// state cannot be made (device memory).
bn_source *bn_source_engine(const struct bn_engine *e, const struct bn_tokenizer *tok, int n_ctx,
                            struct bn_step_batcher *batcher, char *err, size_t errlen);
// bn_source_free: destroys any source (NULL is fine).
void bn_source_free(bn_source *s);
// bn_gen_result_free: releases what generate filled.
void bn_gen_result_free(bn_gen_result *r);
#endif
