// recipe/mining.c — mining, regularisation and round balancing for bonsai-antidoom.
#include "recipe/mining.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/progress.h"
#include "base/util.h"
#include "core/model.h"
#include "core/tokenizer.h"
#include "mine/options.h"
#include "mine/regularise.h"
#include "mine/runner.h"
#include "spec/step_batch.h"

// Collects the pair rows of one mining pass, in prompt order.
typedef struct {
    bn_pair_row *rows;
    int n, cap, n_loops, n_done;
    bn_progress bar;
} collector;

static bool collect(void *vctx, int i, int rc, bn_mine_result *r, const char *why) {
    collector *c = vctx;
    if (rc < 0) {
        fprintf(stderr, "\nbonsai-antidoom: prompt %d skipped: %s\n", i, why);
        return true;
    }
    c->n_loops += r->looped;
    c->n_done++;
    if (r->has_pair) {
        if (c->n == c->cap) c->rows = xrealloc(c->rows, (size_t)(c->cap = c->cap ? 2 * c->cap : 256) * sizeof *c->rows);
        bn_pair_row_copy(&c->rows[c->n++], &r->pair);
    }
    char extra[64];
    snprintf(extra, sizeof extra, "pairs %d, loops %d", c->n, c->n_loops);
    bn_progress_update(&c->bar, c->n_done, extra);
    return true;
}

// read_prompts: max_per_file prompts of each file (0: all), the first ones or (spread) evenly spaced ones,
// concatenated; the count, or -1 (err). Spread reaches the riddle openings at the end of the shipped train prompts:
// better for Q1_0, worse for the adapter kind on the one seed measured (notes/antidoom-results.md).
static int read_prompts(const char *const *files, int n_files, int max_per_file, bool spread, bn_prompt **out,
                        char *err, size_t errlen) {
    bn_prompt_opts po = bn_prompt_opts_default();
    po.max_prompts = spread ? 0 : max_per_file;
    int n = 0;
    *out = NULL;
    for (int f = 0; f < n_files; f++) {
        bn_prompt *p = NULL;
        int k = bn_prompts_read(files[f], &po, &p, NULL, err, errlen);
        if (k < 0) {
            bn_prompts_free(*out, n);
            return -1;
        }
        int take = max_per_file > 0 && max_per_file < k ? max_per_file : k;
        *out = xrealloc(*out, (size_t)(n + take + 1) * sizeof **out);
        for (int i = 0, j = 0; i < k; i++) // spread: prompt i is taken when it starts a new 1/take-th of the file
            if (j < take && (int64_t)i * take / k == j) (*out)[n + j++] = p[i];
            else bn_prompt_free(&p[i]);
        free(p);
        n += take;
    }
    return n;
}

// mine_pass: one mode over the prompts into col; the options o (mode, seed, temperatures) are the caller's.
static void mine_pass(bn_source **srcs, const bn_tokenizer *tok, const bn_prompt *prompts, int n, const bn_mine_opts *o,
                      const char *label, collector *col) {
    col->n_done = 0;
    bn_progress_start(&col->bar, label, n);
    bn_mine_run(srcs, 1, tok, prompts, 0, n, o, collect, col);
    bn_progress_finish(&col->bar, NULL);
}

int bn_recipe_mine(const bn_recipe_cfg *c, const char *model, const char *const *files, int n_files, int max_per_file,
                   const char *split, uint64_t seed_prime, uint64_t seed_sample, const char *out, bn_mine_counts *cnt,
                   char *err, size_t errlen) {
    bn_prompt *prompts = NULL;
    int n = read_prompts(files, n_files, max_per_file, c->mine_spread, &prompts, err, errlen);
    if (n < 0) return -1;
    bn_model *m = bn_model_load(model, err, errlen);
    bn_tokenizer *tok = m ? bn_tokenizer_from_gguf(m->gguf, err, errlen) : NULL;
    int rc = -1;
    bn_mine_opts o = bn_mine_opts_default();
    o.eng.n_ctx = c->n_ctx;
    o.eng.n_threads = c->threads;
    o.eng.n_gpu_layers = c->n_gpu_layers;
    o.mine.thinking = c->thinking;
    o.mine.gen.n_predict = c->n_predict;
    o.mine.gen.n_probs = 20;
    o.mine.chosen.require_alnum = true;
    o.mine.split = split;
    o.mine.model_file = model;
    collector col = {0};
    bn_mine_gen gen; // -ngl: the device engine; else CPU sources
    if (tok) bn_mine_opts_for_model(&o, m);
    if (tok && bn_mine_gen_open(&o, m, tok, &gen, err, errlen) == 0) {
        o.mine.mode = BN_MINE_PRIME; // primed contexts (docs/antidoom.md §3)
        o.mine.phrase_from_prefix = true;
        o.mine.prime_repeats = c->prime_repeats;
        o.mine.prime_prefix_tokens = c->prime_prefix_tokens;
        o.mine.gen.temperature = 0.1f;
        o.mine.gen.seed = seed_prime;
        mine_pass(gen.srcs, tok, prompts, n, &o, "prompts primed", &col);
        o.mine.mode = BN_MINE_SAMPLE; // sampled at each temperature in turn
        o.mine.gen.seed = seed_sample;
        double t[32];
        int nt = bn_recipe_parse_reals(c->temps, t, 32, err, errlen);
        for (int i = 0; i < nt; i++) o.temps[i] = (float)t[i];
        o.n_temps = nt > 0 ? nt : 0;
        if (nt >= 0) mine_pass(gen.srcs, tok, prompts, n, &o, "prompts sampled", &col);
        if (nt >= 0) rc = bn_pairs_write(out, col.rows, col.n, err, errlen);
        bn_mine_gen_close(&o, &gen);
    }
    if (cnt) *cnt = (bn_mine_counts){.n_prompts = n, .n_loops = col.n_loops, .n_pairs = col.n};
    bn_pairs_free(col.rows, col.n);
    bn_tokenizer_free(tok);
    bn_model_free(m);
    bn_prompts_free(prompts, n);
    return rc;
}

int bn_recipe_regularise(const bn_recipe_cfg *c, const char *in, const char *out, char *err, size_t errlen) {
    bn_pair_row *rows = NULL, *sel = NULL;
    int n = bn_pairs_read(in, &rows, err, errlen);
    if (n < 0) return -1;
    bn_reg_params rp = bn_reg_params_default();
    rp.headroom = c->headroom;
    rp.seed = c->mine_seed;
    bn_reg_stats st;
    int k = bn_regularise(rows, n, &rp, &sel, &st);
    bn_reg_print_stats(stderr, &rp, &st);
    bn_reg_print_top(stderr, sel, k, 5, "output");
    int rc = bn_pairs_write(out, sel, k, err, errlen) < 0 ? -1 : k;
    bn_pairs_free(rows, n);
    bn_pairs_free(sel, k);
    return rc;
}

int bn_recipe_round_pairs(const char *const *rounds, int n, const char *val, const char *out, char *err,
                          size_t errlen) {
    bn_pair_row **r = xcalloc((size_t)n + 1, sizeof *r), *v = NULL, *all = NULL;
    int *cnt = xcalloc((size_t)n + 1, sizeof *cnt), rc = -1, n_all = 0, n_v = 0, nmax = 0, i;
    for (i = 0; i < n; i++) {
        if ((cnt[i] = bn_pairs_read(rounds[i], &r[i], err, errlen)) < 0) break;
        if (cnt[i] > nmax) nmax = cnt[i];
    }
    if (i == n && (n_v = bn_pairs_read(val, &v, err, errlen)) >= 0) {
        int n1 = cnt[0] > 0 ? cnt[0] : nmax, t = nmax < 3 * n1 ? nmax : 3 * n1;
        all = xcalloc((size_t)3 * t * n + n_v + 1, sizeof *all);
        for (i = 0; i < n; i++) { // the rows are shallow copies: written, never freed twice
            if (cnt[i] > t) {
                for (int j = 1; j <= cnt[i]; j++)
                    if ((int64_t)j * t / cnt[i] > (int64_t)(j - 1) * t / cnt[i]) all[n_all++] = r[i][j - 1];
                fprintf(stderr, "  round %d: %d train pairs, thinned to %d\n", i + 1, cnt[i], t);
            } else if (cnt[i] > 0) {
                int copies = (t + cnt[i] / 2) / cnt[i];
                copies = copies < 1 ? 1 : copies > 3 ? 3 : copies;
                for (int k = 0; k < copies; k++)
                    for (int j = 0; j < cnt[i]; j++) all[n_all++] = r[i][j];
                fprintf(stderr, "  round %d: %d train pairs x %d\n", i + 1, cnt[i], copies);
            }
        }
        for (int j = 0; j < n_v; j++) all[n_all++] = v[j];
        rc = bn_pairs_write(out, all, n_all, err, errlen) < 0 ? -1 : n_all;
    }
    for (int j = 0; j < n; j++)
        if (cnt[j] > 0) bn_pairs_free(r[j], cnt[j]);
    if (n_v > 0) bn_pairs_free(v, n_v);
    free(all), free(r), free(cnt);
    return rc;
}
