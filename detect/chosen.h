// detect/chosen.h — chosen-token selection at the rejected position (docs/antidoom.md §6): temperature
// renormalisation of the recorded top-K, drop the rejected token and its case variants, optional
// relative min-p, top-k, ascending order, surface filters, cap. Needs no tokenizer: token strings
// come from callbacks.
#ifndef BONSAI_DETECT_CHOSEN_H
#define BONSAI_DETECT_CHOSEN_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int32_t id;
    double logprob; // raw ln softmax over the vocabulary
} bn_topk;

typedef struct {
    double temperature;                   // generation temperature T (floored at 1e-6)
    double min_p;                         // relative floor p >= min_p * max p; <= 0: off (shipped)
    int top_k;                            // 50: keep the most probable
    int max_tokens;                       // 20: chosen_max_tokens
    int min_decoded_chars;                // 1: len(strip(decode)) must reach this
    bool require_alnum;                   // false
    const char *const *skip_raw_substrings; // chosen_skip_raw_token_substrings (default none)
    int n_skip_raw;
} bn_chosen_params;

// Token string callback: returns the bytes of token id (length in *len), never NULL.
typedef const char *(*bn_tok_str_fn)(void *ctx, int32_t id, size_t *len);
typedef struct {
    bn_tok_str_fn decoded; // decoded surface (" Wait")
    bn_tok_str_fn raw;     // raw engine string ("ĠWait"); NULL = same as decoded
    void *ctx;
} bn_tok_strs;

// bn_chosen_params_default: returns the shipped antidoom settings for temperature T.
bn_chosen_params bn_chosen_params_default(double temperature);
// bn_select_chosen: writes up to out_cap chosen ids (ascending probability) and their
// renormalised probabilities (out_p may be NULL); returns the count (0 = no row).
int bn_select_chosen(const bn_topk *list, int n, int32_t rejected, const bn_chosen_params *p,
                     const bn_tok_strs *ts, int32_t *out_ids, double *out_p, int out_cap);
#endif
