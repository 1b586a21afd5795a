// recipe/mining.h — the mining stages of bonsai-antidoom: FTPO pairs of a model on prompt files, primed
// (docs/antidoom.md §3) and sampled, then regularised (mine/regularise.h, its reasons printed), and the balanced
// pair set of several on-policy rounds.
#ifndef BONSAI_RECIPE_MINING_H
#define BONSAI_RECIPE_MINING_H
#include <stddef.h>
#include <stdint.h>
#include "recipe/config.h"

// What one mining stage found.
typedef struct {
    int n_prompts;      // prompts run in each mode
    int n_loops;        // completions that looped (both modes)
    int n_pairs;        // pair rows written
} bn_mine_counts;

// bn_recipe_mine: pairs of model on the first max_per_file prompts (0: all) of each of files[0..n_files), primed
// with seed_prime and sampled (c->temps) with seed_sample, every row marked split, written to out (atomically). Returns 0
// or -1 (err).
int bn_recipe_mine(const bn_recipe_cfg *c, const char *model, const char *const *files, int n_files, int max_per_file,
                   const char *split, uint64_t seed_prime, uint64_t seed_sample, const char *out, bn_mine_counts *cnt,
                   char *err, size_t errlen);
// bn_recipe_regularise: in's rows regularised with c's headroom and seed (what it did printed on stderr) into out;
// returns the rows out, or -1 (err).
int bn_recipe_regularise(const bn_recipe_cfg *c, const char *in, const char *out, char *err, size_t errlen);
// bn_recipe_round_pairs: the train pairs of rounds[0..n) balanced around round 1 (the base's own loops: T = the
// largest round's size but at most 3x round 1's; a larger round thinned to T evenly spaced rows, a smaller one
// repeated to about T, at most 3x), then the validation pairs val (held-out split: evaluated, never trained on),
// into out. Returns the rows written, or -1 (err).
int bn_recipe_round_pairs(const char *const *rounds, int n, const char *val, const char *out, char *err,
                          size_t errlen);
#endif
