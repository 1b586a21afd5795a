// recipe/recipe.h — bonsai-antidoom's pipeline as one call (docs/antidoom.md §18): evaluate the base → mine (primed
// and sampled) → regularise → train candidates per output kind → pick on validation data (data/val/, never the
// held-out set) → on-policy rounds → output (adapter, merged F16, requantized Q1_0 / Q2_0) → evaluate held-out →
// report (OUT/report.md, OUT/report.html). Every stage keeps its outputs in OUT and is recorded in OUT/manifest.json,
// so a rerun with the same OUT reuses what finished (recipe/manifest.h).
#ifndef BONSAI_RECIPE_H
#define BONSAI_RECIPE_H
#include <stddef.h>
#include "recipe/config.h"

// bn_recipe_main: runs the whole recipe with settings c (c->model and c->out_dir set); returns 0, or -1 with err.
int bn_recipe_main(const bn_recipe_cfg *c, char *err, size_t errlen);
#endif
