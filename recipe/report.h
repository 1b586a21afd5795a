// recipe/report.h — bonsai-antidoom's report: OUT/report.md (one table of every output and base on the held-out
// set, the goals, the unseen prompts, the candidates on validation, warnings) and OUT/report.html (the same tables
// and inline SVG plots: validation loop rate per candidate and per round, chosen_win and loss per training run).
#ifndef BONSAI_RECIPE_REPORT_H
#define BONSAI_RECIPE_REPORT_H
#include <stddef.h>
#include "recipe/run.h"

// bn_recipe_report: writes both files (atomically) from r's manifest and candidates; 0 or -1 (err).
int bn_recipe_report(const bn_recipe_run *r, char *err, size_t errlen);
#endif
