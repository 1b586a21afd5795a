// recipe/report_plots.c — inline SVG plots of bonsai-antidoom's report.
#include "recipe/report_plots.h"
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "base/util.h"
#include "recipe/svg.h"

// candidate_bars: kind k's candidates' validation loop rates, grouped by round; the pick in black.
static void candidate_bars(FILE *f, const bn_recipe_run *r, bn_recipe_kind k) {
    int n = 0, last_round = 0;
    double x = 0, top = 100 * r->vb[k].loop;
    for (int i = 0; i < r->n_cands; i++)
        if (r->cands[i].kind == k) n++, top = fmax(top, 100 * r->cands[i].val_loop);
    if (!n) return;
    bn_svg s;
    char title[128], tip[256];
    snprintf(title, sizeof title, "%s: validation loop rate per candidate (by round)", bn_recipe_kind_name(k));
    bn_svg_begin(&s, f, 540, 260, title, 0, n + r->n_rounds[k], 0, fmax(5, top * 1.05), "candidate (gap = next round)",
                 "loop rate, %");
    for (int i = 0; i < r->n_cands; i++) {
        const bn_candidate *cd = &r->cands[i];
        if (cd->kind != k) continue;
        if (cd->round != last_round) x += 1, last_round = cd->round;
        int ti = 0;
        while (ti < r->c->n_tethers[k] && r->c->tethers[k][ti] != cd->tether) ti++;
        bool pick = !strcmp(r->pick[k], cd->label);
        snprintf(tip, sizeof tip, "%s: loop %.1f %%, drift %+.2f %%, shortfall %.4f%s", cd->label, 100 * cd->val_loop,
                 cd->val_drift, cd->score, pick ? " (pick)" : "");
        bn_svg_bar(&s, x - 0.5, 0.8, 100 * cd->val_loop, pick ? "#000" : bn_svg_color(ti), tip);
        x += 1;
    }
    double gx[2] = {0, n + r->n_rounds[k]}, gy[2] = {100 * r->vb[k].loop * (1 - r->c->goal_cut),
                                                     100 * r->vb[k].loop * (1 - r->c->goal_cut)};
    bn_svg_line(&s, gx, gy, 2, "#d62728", 1);
    for (int t = 0; t < r->c->n_tethers[k] && t < 6; t++) {
        char lg[64];
        snprintf(lg, sizeof lg, "λ_tether %g", r->c->tethers[k][t]);
        bn_svg_legend(&s, t, bn_svg_color(t), lg);
    }
    bn_svg_legend(&s, r->c->n_tethers[k], "#000", "the pick");
    bn_svg_end(&s);
}

// round_lines: kind k's best validation loop rate per round (and the base's at round 0).
static void round_lines(FILE *f, const bn_recipe_run *r, bn_recipe_kind k) {
    if (r->n_rounds[k] < 1) return;
    double xs[65], ys[65], top = 100 * r->vb[k].loop;
    int n = 0;
    xs[n] = 0, ys[n++] = 100 * r->vb[k].loop;
    for (int round = 1; round <= r->n_rounds[k] && n < 65; round++) {
        double best = INFINITY;
        for (int i = 0; i < r->n_cands; i++)
            if (r->cands[i].kind == k && r->cands[i].round == round) best = fmin(best, 100 * r->cands[i].val_loop);
        if (isfinite(best)) xs[n] = round, ys[n++] = best;
    }
    bn_svg s;
    char title[128];
    snprintf(title, sizeof title, "%s: lowest validation loop rate per round (0 = base)", bn_recipe_kind_name(k));
    bn_svg_begin(&s, f, 380, 260, title, 0, fmax(1, r->n_rounds[k]), 0, fmax(5, top * 1.05), "round", "loop rate, %");
    bn_svg_line(&s, xs, ys, n, bn_svg_color(0), 0);
    for (int i = 0; i < n; i++) bn_svg_line(&s, xs + i, ys + i, 1, bn_svg_color(0), 0);
    bn_svg_end(&s);
}

// read_curve: the steps' running chosen_win and loss of a training log; the count (arrays malloc'd).
static int read_curve(const char *path, double **step, double **cw, double **loss) {
    char err[256];
    bn_lines *l = bn_lines_open(path, err, sizeof err);
    int n = 0, cap = 64;
    *step = xmalloc(cap * sizeof **step), *cw = xmalloc(cap * sizeof **cw), *loss = xmalloc(cap * sizeof **loss);
    const char *line;
    size_t len;
    while (l && (line = bn_lines_next(l, &len))) {
        json_t *j = json_loadb(line, len, 0, NULL);
        json_t *st = json_object_get(j, "step");
        if (json_is_integer(st)) {
            if (n == cap) {
                cap *= 2;
                *step = xrealloc(*step, cap * sizeof **step), *cw = xrealloc(*cw, cap * sizeof **cw);
                *loss = xrealloc(*loss, cap * sizeof **loss);
            }
            (*step)[n] = (double)json_integer_value(st);
            (*cw)[n] = json_number_value(json_object_get(j, "chosen_win_avg"));
            (*loss)[n++] = json_number_value(json_object_get(j, "loss"));
        }
        json_decref(j);
    }
    if (l) bn_lines_close(l);
    return n;
}

// curves: kind k's training runs, running chosen_win (which = 0) or loss (1) per step, one line per candidate.
static void curves(FILE *f, const bn_recipe_run *r, bn_recipe_kind k, int which) {
    double xmax = 1, ymax = which ? 0 : 1;
    int n_runs = 0;
    for (int pass = 0; pass < 2; pass++) { // pass 0: the ranges; pass 1: the lines
        bn_svg s;
        if (pass == 1) {
            if (!n_runs) return;
            char title[128];
            snprintf(title, sizeof title, "%s: %s per training step (each candidate)", bn_recipe_kind_name(k),
                     which ? "FTPO loss" : "running chosen_win");
            bn_svg_begin(&s, f, 460, 260, title, 0, xmax, 0, ymax * 1.05, "step", which ? "loss" : "chosen_win");
        }
        for (int i = 0, c = 0; i < r->n_cands; i++) {
            if (r->cands[i].kind != k) continue;
            char path[BN_PATH];
            double *st, *cw, *loss;
            bn_run_path(r, path, sizeof path, "%s.log.jsonl", r->cands[i].label);
            int n = read_curve(path, &st, &cw, &loss);
            if (pass == 0 && n > 0) {
                n_runs++;
                xmax = fmax(xmax, st[n - 1]);
                for (int j = 0; j < n; j++) ymax = fmax(ymax, which ? loss[j] : cw[j]);
            } else if (pass == 1 && n > 0) bn_svg_line(&s, st, which ? loss : cw, n, bn_svg_color(c++), 0);
            free(st), free(cw), free(loss);
        }
        if (pass == 1) {
            if (!which) {
                double gx[2] = {0, xmax}, gy[2] = {r->c->early_stop, r->c->early_stop};
                bn_svg_line(&s, gx, gy, 2, "#999", 1); // the early stop
            }
            bn_svg_end(&s);
        }
    }
}

void bn_report_plots(FILE *f, const bn_recipe_run *r) {
    fputs("<h2>Plots</h2>\n<p>Validation data only (data/val): the dashed red line is the loop-rate goal (the base's "
          "validation rate cut by the goal); hover a bar for its figures. The dashed grey line in the chosen_win plots "
          "is the early stop.</p>\n",
          f);
    for (int k = 0; k < BN_KIND_COUNT; k++) {
        if (!(r->kinds & (1 << k))) continue;
        fprintf(f, "<h3>%s</h3>\n<div>\n", bn_recipe_kind_name(k));
        candidate_bars(f, r, (bn_recipe_kind)k);
        round_lines(f, r, (bn_recipe_kind)k);
        curves(f, r, (bn_recipe_kind)k, 0);
        curves(f, r, (bn_recipe_kind)k, 1);
        fputs("</div>\n", f);
    }
}
