// recipe/report.c — OUT/report.md and OUT/report.html (tables; plots in recipe/report_plots.c).
#include "recipe/report.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/util.h"
#include "recipe/report_plots.h"

// A row of the results table: a base or an output and its held-out figures (the manifest's result object).
typedef struct {
    char name[64];
    const json_t *res;
    const json_t *base; // the same-type base's result (NULL for a base row)
} result_row;

static double num(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

// rows: the bases compared with and the outputs, in table order; returns the count.
static int rows(const bn_recipe_run *r, result_row *out) {
    int n = 0;
    char name[64];
    for (int k = BN_KIND_F16; k < BN_KIND_COUNT; k++) {
        snprintf(name, sizeof name, "eval-base-%s", bn_recipe_kind_name(k));
        const json_t *res = bn_manifest_result(r->man, name);
        if (res && (k != BN_KIND_F16 || (r->kinds & (1 << BN_KIND_F16 | 1 << BN_KIND_ADAPTER))) &&
            (k == BN_KIND_F16 || (r->kinds & (1 << k)))) {
            out[n] = (result_row){.res = res};
            snprintf(out[n++].name, sizeof out->name, "base-%s", bn_recipe_kind_name(k));
        }
    }
    for (int k = 0; k < BN_KIND_COUNT; k++) {
        if (!(r->kinds & (1 << k))) continue;
        snprintf(name, sizeof name, "out-%s", bn_recipe_kind_name(k));
        const json_t *res = bn_manifest_result(r->man, name);
        if (!res) continue;
        snprintf(name, sizeof name, "eval-base-%s", bn_recipe_kind_name(k == BN_KIND_ADAPTER ? BN_KIND_F16 : k));
        out[n] = (result_row){.res = res, .base = bn_manifest_result(r->man, name)};
        snprintf(out[n++].name, sizeof out->name, "antidoom-%s", bn_recipe_kind_name(k));
    }
    return n;
}

// size_text: bytes as "512 KiB" / "6.1 MiB" into buf.
static const char *size_text(double b, char *buf, size_t n) {
    if (b >= 1 << 30) snprintf(buf, n, "%.2f GiB", b / (1 << 30));
    else if (b >= 1 << 20) snprintf(buf, n, "%.1f MiB", b / (1 << 20));
    else snprintf(buf, n, "%.0f KiB", b / 1024);
    return buf;
}

// table: the results table as Markdown (html 0) or HTML (html 1).
static void table(FILE *f, const result_row *rw, int n, bool html) {
    static const char *head[] = {"model", "loop rate (held-out, 95 % CI)", "seq-rep-4", "chosen_win (validation pairs)",
                                 "perplexity", "drift vs same-type base", "mean length", "size on disk",
                                 "decode tok/s"};
    const int nh = 9;
    if (html) {
        fputs("<table><tr>", f);
        for (int i = 0; i < nh; i++) fprintf(f, "<th>%s</th>", head[i]);
        fputs("</tr>\n", f);
    } else {
        for (int i = 0; i < nh; i++) fprintf(f, "| %s ", head[i]);
        fputs("|\n", f);
        for (int i = 0; i < nh; i++) fputs("|---", f);
        fputs("|\n", f);
    }
    for (int i = 0; i < n; i++) {
        const json_t *o = rw[i].res;
        char cells[9][160], sz[32];
        snprintf(cells[0], 160, "%.60s", rw[i].name);
        snprintf(cells[1], 160, "%.1f %% (%lld/%lld; %.1f-%.1f %%)", 100 * num(o, "loop_rate"),
                 (long long)num(o, "loops"), (long long)num(o, "n"), 100 * num(o, "ci_lo"), 100 * num(o, "ci_hi"));
        snprintf(cells[2], 160, "%.3f", num(o, "seq_rep4"));
        snprintf(cells[3], 160, "%.3f", num(o, "chosen_win"));
        snprintf(cells[4], 160, "%.4f", num(o, "ppl"));
        if (rw[i].base) snprintf(cells[5], 160, "%+.2f %%", 100 * (num(o, "ppl") / num(rw[i].base, "ppl") - 1));
        else snprintf(cells[5], 160, "—");
        snprintf(cells[6], 160, "%.1f", num(o, "mean_len"));
        snprintf(cells[7], 160, "%s", size_text(num(o, "size"), sz, sizeof sz));
        snprintf(cells[8], 160, "%.0f", num(o, "tok_s"));
        for (int c = 0; c < nh; c++) fprintf(f, html ? "%s%s%s" : "%s%s%s", html ? (c ? "<td>" : "<tr><td>") : "| ",
                                             cells[c], html ? "</td>" : " ");
        fputs(html ? "</tr>\n" : "|\n", f);
    }
    if (html) fputs("</table>\n", f);
}

// untouched_line: the loop rates on an untouched prompt file (JSON fields WHICH_loop_rate, ...), when one was given.
static void untouched_line(FILE *f, const char *li, const char *le, const result_row *rw, int n, const char *which,
                           const char *what, const char *file) {
    if (!file || !file[0]) return;
    char k[5][32];
    const char *suffix[5] = {"loop_rate", "loops", "n", "ci_lo", "ci_hi"};
    for (int j = 0; j < 5; j++) snprintf(k[j], sizeof k[j], "%s_%s", which, suffix[j]);
    fprintf(f, "%s%s (%s), greedy loop rate:", li, what, file);
    for (int i = 0, shown = 0; i < n; i++) {
        if (!json_object_get(rw[i].res, k[0])) continue; // evaluated before this file was asked for
        fprintf(f, "%s %s %.1f %% (%lld/%lld; %.1f-%.1f %%)", shown++ ? ";" : "", rw[i].name,
                100 * num(rw[i].res, k[0]), (long long)num(rw[i].res, k[1]), (long long)num(rw[i].res, k[2]),
                100 * num(rw[i].res, k[3]), 100 * num(rw[i].res, k[4]));
    }
    fputs(le, f);
}

// goals: per output the held-out loop-rate cut and drift against the goals, and the untouched prompts' loop rates.
static void goals(FILE *f, const bn_recipe_run *r, const result_row *rw, int n, bool html) {
    const char *li = html ? "<li>" : "- ", *le = html ? "</li>\n" : "\n";
    fputs(html ? "<h2>Goals</h2>\n<ul>\n" : "\n## Goals\n\n", f);
    fprintf(f, "%sper output against its same-type base: held-out loop-rate cut ≥ 90 %%, |perplexity drift| ≤ 2 "
               "%%%s",
            li, le);
    for (int i = 0; i < n; i++) {
        if (!rw[i].base) continue;
        double lb = num(rw[i].base, "loop_rate"), la = num(rw[i].res, "loop_rate");
        double cut = lb > 0 ? (lb - la) / lb : NAN, drift = 100 * (num(rw[i].res, "ppl") / num(rw[i].base, "ppl") - 1);
        bool ok = cut >= 0.9 && fabs(drift) <= 2;
        fprintf(f, "%s%s (pick %s): cut %.1f %% (%.1f → %.1f %%) %s, drift %+.2f %% %s: %s%s", li, rw[i].name,
                json_string_value(json_object_get(rw[i].res, "pick")), 100 * cut, 100 * lb, 100 * la,
                cut >= 0.9 ? "✓" : "✗", drift, fabs(drift) <= 2 ? "✓" : "✗", ok ? "**goals met**" : "goals missed",
                le);
    }
    untouched_line(f, li, le, rw, n, "unseen", "prompts no stage touched", r->c->unseen_prompts);
    untouched_line(f, li, le, rw, n, "other", "prompts from other text, which no stage touched", r->c->other_prompts);
    for (int k = 0; k < BN_KIND_COUNT; k++)
        if (r->kinds & (1 << k))
            fprintf(f, "%s%s: %d round(s), stopped: %s%s", li, bn_recipe_kind_name(k), r->n_rounds[k], r->stop_why[k],
                    le);
    for (int i = 0; i < r->n_cands; i++)
        if (r->cands[i].stalled)
            fprintf(f, "%swarning: %s: chosen_win did not move after the first epoch (learning rate too low?)%s", li,
                    r->cands[i].label, le);
    if (html) fputs("</ul>\n", f);
}

// candidates: every candidate's validation figures.
static void candidates(FILE *f, const bn_recipe_run *r, bool html) {
    fputs(html ? "<h2>Candidates (validation data only)</h2>\n<table><tr><th>candidate</th><th>steps</th><th>val loop "
                 "rate</th><th>val drift</th><th>val chosen_win</th><th>shortfall</th><th>pick</th></tr>\n"
               : "\n## Candidates (validation data only)\n\n| candidate | steps | val loop rate | val drift | val "
                 "chosen_win | shortfall | pick |\n|---|---|---|---|---|---|---|\n",
          f);
    for (int i = 0; i < r->n_cands; i++) {
        const bn_candidate *cd = &r->cands[i];
        bool pick = !strcmp(r->pick[cd->kind], cd->label);
        if (html)
            fprintf(f, "<tr><td>%s</td><td>%lld%s</td><td>%.1f %%</td><td>%+.2f %%</td><td>%.3f</td><td>%.4f</td>"
                       "<td>%s</td></tr>\n",
                    cd->label, (long long)cd->steps, cd->early_stopped ? " (early stop)" : "", 100 * cd->val_loop,
                    cd->val_drift, cd->val_cw, cd->score, pick ? "✓" : "");
        else
            fprintf(f, "| %s | %lld%s | %.1f %% | %+.2f %% | %.3f | %.4f | %s |\n", cd->label, (long long)cd->steps,
                    cd->early_stopped ? " (early stop)" : "", 100 * cd->val_loop, cd->val_drift, cd->val_cw, cd->score,
                    pick ? "**pick**" : "");
    }
    if (html) fputs("</table>\n", f);
}

// header: what was run, on what.
static void header(FILE *f, const bn_recipe_run *r, bool html) {
    const bn_recipe_cfg *c = r->c;
    fprintf(f, html ? "<h1>bonsai-antidoom report</h1>\n<p>" : "# bonsai-antidoom report\n\n");
    fprintf(f, "Model %s; kinds %s; seed %llu; %s budget. Held-out: %s (greedy, %d tokens), perplexity on %s (context "
               "128). Picks use only %s, %s and %s.%s",
            c->model, c->kinds, (unsigned long long)c->seed, c->full ? "full" : "default", c->heldout_prompts,
            c->n_predict, c->heldout_text, c->val_loop_prompts, c->val_text, c->val_pair_prompts,
            html ? "</p>\n" : "\n\n");
    if (r->kinds & (1 << BN_KIND_ADAPTER))
        fprintf(f, "%sThe adapter output is evaluated as the engine applies it (the base file with --lora); its "
                   "candidates were scored on validation through their F16 merges.%s",
                html ? "<p>" : "", html ? "</p>\n" : "\n\n");
}

// write_one: the Markdown or HTML report into path; 0 or -1.
static int write_one(const bn_recipe_run *r, const char *path, bool html, char *err, size_t errlen) {
    bn_atomic_file af;
    if (bn_atomic_open(&af, path, err, errlen)) return -1;
    result_row rw[2 * BN_KIND_COUNT];
    int n = rows(r, rw);
    if (html)
        fputs("<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>bonsai-antidoom report</title><style>"
              "body{font-family:sans-serif;max-width:1100px;margin:1em auto}"
              "table{border-collapse:collapse;margin:.5em 0}"
              "td,th{border:1px solid #ccc;padding:3px 7px;font-size:13px}svg{margin:6px;border:1px solid #eee}"
              "</style></head><body>\n",
              af.f);
    header(af.f, r, html);
    if (!html) fputs("## Results\n\n", af.f);
    else fputs("<h2>Results</h2>\n", af.f);
    table(af.f, rw, n, html);
    goals(af.f, r, rw, n, html);
    if (html) bn_report_plots(af.f, r);
    candidates(af.f, r, html);
    if (html) fputs("</body></html>\n", af.f);
    return bn_atomic_commit(&af, err, errlen);
}

int bn_recipe_report(const bn_recipe_run *r, char *err, size_t errlen) {
    char md[BN_PATH], html[BN_PATH];
    bn_run_path(r, md, sizeof md, "report.md");
    bn_run_path(r, html, sizeof html, "report.html");
    if (write_one(r, md, false, err, errlen) || write_one(r, html, true, err, errlen)) return -1;
    FILE *f = fopen(md, "r"); // the report's tables on stdout too
    if (f) {
        char line[2048];
        while (fgets(line, sizeof line, f)) fputs(line, stdout);
        fclose(f);
    }
    return 0;
}
