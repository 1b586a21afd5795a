// core/sampler.h — token sampling in llama.cpp's chain order penalties → dry → top_k → top_p → min_p → temperature →
// dist(seed) (docs/server.md §3.1), plus raw-softmax log-probs for n_probs (docs/server.md §5).
// RNG: xoshiro256** seeded through splitmix64 from the 64-bit seed; a seed gives one sequence
// on every machine. Sampling draws one uniform double in [0,1) per token (53 random bits).
#ifndef BONSAI_SAMPLER_H
#define BONSAI_SAMPLER_H
#include <stdint.h>
#include <stdbool.h>
#include "core/forward.h" // bn_forward_out: bn_sampler_head_out / bn_sampler_pick
#include "core/dry.h"
#include "base/args.h"

// One logit bias (llama-server's logit_bias): bias is added to the token's logit before the chain; -INFINITY bans it.
typedef struct {
    int32_t id;
    float bias;
} bn_logit_bias;

typedef struct {
    float temperature; // <= 0: greedy (argmax of the candidates; ties → lowest id)
    int top_k;         // <= 0: whole vocabulary
    float top_p;       // >= 1: off
    float min_p;       // <= 0: off; keep p >= min_p * p_max
    uint64_t seed;     // RNG seed
    int min_keep;      // top_p/min_p keep at least this many (0 → 1)
    // repetition penalties over the last repeat_last_n tokens of the history (bn_sampler_set_history; -1: all of
    // it, 0: off), llama.cpp's penalties sampler: a logit l of a token seen c > 0 times there becomes
    // (l <= 0 ? l * repeat_penalty : l / repeat_penalty) - c * frequency_penalty - presence_penalty
    int repeat_last_n;       // 64
    float repeat_penalty;    // 1: off
    float frequency_penalty; // 0: off
    float presence_penalty;  // 0: off
    // DRY over the last dry_penalty_last_n tokens of the history (core/dry.h; -1: all, 0: off)
    float dry_multiplier;    // 0: off
    float dry_base;          // 1.75
    int dry_allowed_length;  // 2
    int dry_penalty_last_n;  // 64
    const bn_dry_breakers *dry_breakers; // the caller's (bn_dry_breakers_new); NULL: no sequence breakers
    // logit biases, added first (before the penalties, as llama.cpp's chain); ids outside the vocabulary are skipped,
    // an id given twice gets both biases
    const bn_logit_bias *logit_bias;     // the caller's array (NULL: none)
    int n_logit_bias;
} bn_sampler_params;

typedef struct bn_sampler bn_sampler;

// bn_sampler_params_default: llama-server defaults (temp 0.8, top_k 40, top_p 0.95, min_p 0.05, seed 0; penalties
// off: repeat_last_n 64, repeat_penalty 1, frequency and presence 0; DRY off: multiplier 0, base 1.75, allowed
// length 2, last 64, no breakers).
bn_sampler_params bn_sampler_params_default(void);
// bn_sampler_new: a sampler with its own RNG state and scratch space; never NULL.
bn_sampler *bn_sampler_new(const bn_sampler_params *p);
// bn_sampler_free: releases the sampler (NULL is fine).
void bn_sampler_free(bn_sampler *s);
// bn_sampler_reseed: restarts the RNG from seed.
void bn_sampler_reseed(bn_sampler *s, uint64_t seed);
// bn_sampler_params_penalized: true when p penalizes repetition (repeat_last_n != 0 and a penalty that is not
// neutral, or DRY on: multiplier != 0, base >= 1, dry_penalty_last_n != 0) or biases logits (n_logit_bias > 0): then
// a sampler's every pick needs the whole logits row (and, for the penalties, the history).
bool bn_sampler_params_penalized(const bn_sampler_params *p);
// bn_sampler_params_dry: true when p's DRY is on (multiplier != 0, base >= 1, dry_penalty_last_n != 0): its
// breakers are needed (bn_dry_breakers_new).
bool bn_sampler_params_dry(const bn_sampler_params *p);
// Command-line options (base/args.h), llama.cpp's names and ranges. The entries are macros over a struct type T
// and the path P (with its trailing '.') to the fields named as bn_sampler_params's, so one declaration serves
// bn_sampler_params (P empty: the tables below) and other structs with those fields (mine/options.c: bn_gen_params).
// BN_SAMPLER_CHAIN_ARGS: --temp, --top-k, --top-p, --min-p (-s/--seed is the tool's: what it seeds differs).
#define BN_SAMPLER_CHAIN_ARGS(T, P)                                                                                    \
    BN_FLOAT("--temp", offsetof(T, P temperature), "T", "temperature (<= 0: greedy)", -1e6, 1e6),               \
    BN_INT("--top-k", offsetof(T, P top_k), "N", "top-k sampling (<= 0: the whole vocabulary)", -1, INT32_MAX), \
    BN_FLOAT("--top-p", offsetof(T, P top_p), "P", "top-p sampling (1: off)", 0, 1),                           \
    BN_FLOAT("--min-p", offsetof(T, P min_p), "P", "min-p sampling (0: off)", 0, 1)
// BN_SAMPLER_PENALTY_ARGS: the repetition penalties and DRY's numbers (--dry-sequence-breaker is a function of
// where the strings go: bn_sampler_breaker_args).
#define BN_SAMPLER_PENALTY_ARGS(T, P)                                                                                  \
    BN_FLOAT("--repeat-penalty", offsetof(T, P repeat_penalty), "X", \
     "penalize repeated tokens (1: off; llama.cpp's penalties over the last --repeat-last-n tokens)", 1e-6, 1e6),    \
    BN_INT("--repeat-last-n", offsetof(T, P repeat_last_n), "N", \
     "tokens of prompt + output the penalties count (-1: all, 0: off)", -1, INT32_MAX),                              \
    BN_FLOAT("--frequency-penalty", offsetof(T, P frequency_penalty), "X", \
     "subtract X times a token's count (0: off)", -1e6, 1e6),                                                        \
    BN_FLOAT("--presence-penalty", offsetof(T, P presence_penalty), "X", \
     "subtract X from every token seen (0: off)", -1e6, 1e6),                                                        \
    BN_FLOAT("--dry-multiplier", offsetof(T, P dry_multiplier), "X", "llama.cpp's DRY (0: off)", 0, 1e6),     \
    BN_FLOAT("--dry-base", offsetof(T, P dry_base), "X", "DRY's base", 1, 1e6),                                \
    BN_INT("--dry-allowed-length", offsetof(T, P dry_allowed_length), "N", \
     "repeats up to N tokens go unpenalized by DRY", 0, INT32_MAX),                                                  \
    BN_INT("--dry-penalty-last-n", offsetof(T, P dry_penalty_last_n), "N", \
     "tokens DRY scans (-1: all, 0: off)", -1, INT32_MAX)
// bn_sampler_chain_args / bn_sampler_penalty_args: those options over a bn_sampler_params (the table's base).
extern const bn_arg bn_sampler_chain_args[];
extern const bn_arg bn_sampler_penalty_args[];
// --dry-sequence-breaker S (repeatable; replaces the defaults \n : " *; "none" for none): the strings are kept here.
typedef struct {
    const char *dry_breakers[32]; // the --dry-sequence-breaker strings (the caller's argv)
    int n_dry_breakers;
    bool dry_custom;              // given at all (then they replace the defaults, even when none)
} bn_sampler_args;
// bn_sampler_breaker_args: --dry-sequence-breaker over a bn_sampler_args (the table's base).
extern const bn_arg bn_sampler_breaker_args[];
// bn_sampler_args_breakers: DRY's breakers for p in tok's vocabulary (a's strings, else the defaults) into
// p->dry_breakers; returns them (free with bn_dry_breakers_free), NULL (and p->dry_breakers NULL) when DRY is off.
bn_dry_breakers *bn_sampler_args_breakers(bn_sampler_params *p, const bn_sampler_args *a, const bn_tokenizer *tok);
// bn_sampler_needs_history: bn_sampler_params_penalized of s's parameters.
bool bn_sampler_needs_history(const bn_sampler *s);
// bn_sampler_set_history: the tokens before the one to be sampled (prompt and generated ones, oldest first; the
// caller's array, read by the next picks until set again): what the penalties count. Without it they count nothing.
void bn_sampler_set_history(bn_sampler *s, const int32_t *tokens, int n);
// bn_sampler_is_greedy: true when every bn_sampler_sample call returns the raw logits' argmax (ties →
// lowest id, bn_logits_argmax): temperature <= 0 without penalties (top_k/top_p/min_p always keep the best
// candidate, so they do not change the pick; only the candidate list for post_sampling_probs differs).
bool bn_sampler_is_greedy(const bn_sampler *s);
// bn_sampler_sample: one token id drawn from logits[0..n_vocab) after the penalties (logits are not modified).
int32_t bn_sampler_sample(bn_sampler *s, const float *logits, int n_vocab);
// bn_sampler_topk_needed: how many best logits of a row the chain reads when that is at most k: top_k, when
// 1 <= top_k <= k and top_k < n_vocab and s is not penalized (then bn_sampler_sample_topk stands in for
// bn_sampler_sample); else 0.
int bn_sampler_topk_needed(const bn_sampler *s, int k, int n_vocab);
// bn_sampler_sample_topk: bn_sampler_sample from a row's k best logits only (vals descending, ties → lower id
// first, with their ids: bn_logits_topk_values, bn_forward_out.topk): the same pick, RNG draw and candidate
// list as bn_sampler_sample over the whole row of finite logits. -1 when bn_sampler_topk_needed(s, k, n_vocab) is 0.
int32_t bn_sampler_sample_topk(bn_sampler *s, const int32_t *ids, const float *vals, int k, int n_vocab);

// The candidate list after the whole chain for the last bn_sampler_sample call (for
// post_sampling_probs): *ids / *probs point into the sampler (valid until the next call), sorted
// by probability descending, probs renormalised after truncation and temperature. Greedy
// (temperature <= 0) runs top_k/top_p/min_p too and gives probs 1, 0, 0, ... as llama.cpp (capped at
// 1024 candidates when nothing truncates). No RNG draw is made when greedy. Returns the count.
int bn_sampler_last_candidates(const bn_sampler *s, const int32_t **ids, const float **probs);

// bn_logits_topk: the k highest logits' ids (descending logit, ties → lower id first) with their
// log-probabilities under the full raw softmax: p = expf(l - max) / sum, logprob = logf(p), p == 0 →
// -FLT_MAX (as llama.cpp), the float sum Kahan-compensated (within 1e-5 of a double softmax).
// Temperature and the chain play no part (docs/server.md §5). k is clamped to n_vocab; returns the count.
int bn_logits_topk(const float *logits, int n_vocab, int k, int32_t *ids, float *logprobs);
// bn_sampler_head_out: what a forward must return per row for s to pick from it without the logits row, set in
// *out (its other fields kept): the argmax into argmax[row] when s is greedy, else the top_k best logits into
// ids / vals [row][top_k] when s reads no more (bn_sampler_topk_needed with k BN_FORWARD_TOPK_MAX); returns false
// (out untouched) when s needs the whole row.
bool bn_sampler_head_out(const bn_sampler *s, int n_vocab, bn_forward_out *out, int32_t *argmax, int32_t *ids,
                         float *vals);
// bn_sampler_pick: s's token for row j of a pass whose outputs are out: its argmax, a draw from its top-k
// (bn_sampler_sample_topk) or from its logits row (bn_sampler_sample); the same token in all three cases.
int32_t bn_sampler_pick(bn_sampler *s, const bn_forward_out *out, int j, int n_vocab);

// bn_logits_topk_values: the k highest logits (descending, ties → lower id first) and their ids; k is clamped to
// n_vocab; returns the count.
int bn_logits_topk_values(const float *logits, int n_vocab, int k, int32_t *ids, float *vals);
// bn_logits_logprob: log p(id) under the full raw softmax (same numerics as bn_logits_topk).
float bn_logits_logprob(const float *logits, int n_vocab, int32_t id);

#endif
