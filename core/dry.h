// core/dry.h — DRY ("don't repeat yourself"), llama.cpp's dry sampler: a token that would extend a token sequence
// already seen in the window (the last last_n tokens of the history) beyond allowed_length tokens loses
// multiplier · base^(length − allowed_length) of its logit (the exponent capped so the power stays below FLT_MAX).
// Sequence breakers ("\n", ":", "\"", "*" by default) cut the sequences it may match: no match reaches back over the
// last breaker in the window, and a token that is a breaker by itself is never penalized.
#ifndef BONSAI_DRY_H
#define BONSAI_DRY_H
#include <stdint.h>
#include "core/tokenizer.h"

typedef struct bn_dry_breakers bn_dry_breakers;

// the default sequence breakers (llama.cpp's): "\n", ":", "\"", "*"
#define BN_DRY_N_DEFAULT 4
extern const char *const bn_dry_default_breakers[BN_DRY_N_DEFAULT];

// bn_dry_breakers_new: the breaker strings strs[0..n) (NULL: the defaults) as token sequences of tok's vocabulary,
// as llama.cpp derives them: a token whose text contains a breaker is a breaker by itself; a token whose text ends
// with a breaker's first characters is the head of a sequence whose tail is the tokenization of the rest (at most 20
// tokens); strings are cut to 40 bytes, empty ones skipped. Returns the set (free with bn_dry_breakers_free).
bn_dry_breakers *bn_dry_breakers_new(const bn_tokenizer *tok, const char *const *strs, int n);
// bn_dry_breakers_free: releases b (NULL is fine).
void bn_dry_breakers_free(bn_dry_breakers *b);
// bn_dry_apply: subtracts the DRY penalties from logits[0..n_vocab) for the window of hist[0..n_hist) (the last
// last_n tokens; -1: all of it; breakers b may be NULL: none). Off (nothing changes) when multiplier is 0, base < 1
// or last_n is 0.
void bn_dry_apply(const bn_dry_breakers *b, float multiplier, float base, int allowed_length, int last_n,
                  const int32_t *hist, int n_hist, float *logits, int n_vocab);
#endif
