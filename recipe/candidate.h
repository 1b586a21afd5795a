// recipe/candidate.h — one training candidate of bonsai-antidoom: an FTPO LoRA (plain for the adapter and f16 kinds,
// through the quantizer for q1_0 / q2_0) trained from the base on a round's pairs with one seed and one tether
// strength, merged, and scored on validation data only (data/val/: loop rate, perplexity drift, chosen_win) against
// the goals; the pick orders candidates by that score (docs/antidoom.md §18).
#ifndef BONSAI_RECIPE_CANDIDATE_H
#define BONSAI_RECIPE_CANDIDATE_H
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "recipe/config.h"
#include "recipe/measure.h"

// The same-type base's validation figures a candidate is scored against.
typedef struct {
    double loop;  // greedy loop rate on the validation prompts
    double ppl;   // perplexity on the validation text
} bn_val_base;

typedef struct {
    bn_recipe_kind kind;
    int round;
    uint64_t seed;
    double tether;      // λ_tether
    char label[96];     // "q1_0-r1-s1-t10": its files are LABEL.adapter.gguf, LABEL.gguf, LABEL.log.jsonl
    // training
    int64_t steps;
    bool early_stopped, stalled;
    double cw_first, cw_last; // running chosen_win at the first / last step
    // validation
    double val_loop, val_ppl, val_drift, val_cw; // drift in %
    double score;       // shortfall against the goals (0: met), the first key of the order
} bn_candidate;

// bn_candidate_label: fills cd->label from its kind, round, seed and tether.
void bn_candidate_label(bn_candidate *cd);
// bn_candidate_train: trains cd (kind, round, seed, tether set) on pairs (train rows + held-out validation rows) from
// base (the model file given to the tool; val_pairs NULL: no validation pairs, chosen_win -1), writes DIR/LABEL.adapter.gguf, the merged DIR/LABEL.gguf (into base_f16:
// the F16 unpack for adapter / f16, requantized for q1_0 / q2_0) and DIR/LABEL.log.jsonl, then scores it against vb
// on the validation data. Returns 0 or -1 (err).
int bn_candidate_train(const bn_recipe_cfg *c, const char *dir, const char *base, const char *base_f16,
                       const char *pairs, const char *val_pairs, const bn_val_base *vb, const bn_measure_gen *g,
                       bn_candidate *cd, char *err, size_t errlen);
// bn_candidate_score: the shortfall of validation figures against the goals: max(0, goal_cut - cut) +
// max(0, |drift| - goal_drift) / 10 (a drift point past the allowance weighs as a tenth of the cut).
double bn_candidate_score(const bn_recipe_cfg *c, const bn_val_base *vb, double loop, double drift);
// bn_candidate_better: true when a comes before b in the pick's order (score, then |drift|); b NULL: true.
bool bn_candidate_better(const bn_candidate *a, const bn_candidate *b);
// bn_candidate_json / bn_candidate_from_json: the candidate as the manifest keeps it, and back (0 or -1).
json_t *bn_candidate_json(const bn_candidate *cd);
int bn_candidate_from_json(const json_t *j, bn_candidate *cd);
#endif
