// recipe/report_plots.h — the plots of bonsai-antidoom's HTML report, inline SVG (recipe/svg.h): per output kind the
// validation loop rate of every candidate (by round, the pick marked, the goal as a dashed line), the round picks'
// validation loop rate per round, and each training run's running chosen_win and loss per step (its LABEL.log.jsonl).
#ifndef BONSAI_RECIPE_REPORT_PLOTS_H
#define BONSAI_RECIPE_REPORT_PLOTS_H
#include <stdio.h>
#include "recipe/run.h"

// bn_report_plots: writes the plots' HTML (a heading and the SVGs) to f.
void bn_report_plots(FILE *f, const bn_recipe_run *r);
#endif
