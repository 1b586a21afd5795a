// eval/tasks.c — task scores and their aggregation (eval/tasks.h).
#include "eval/tasks.h"
#include "eval/stats.h"
#include "core/tokenizer.h"
#include "base/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t bn_task_first_line(const char *text, size_t len) {
    size_t i = 0;
    while (i < len && text[i] == '\n') i++;
    while (i < len && text[i] != '\n') i++;
    return i;
}

int bn_task_tokens(const bn_tokenizer *tok, const char *prompt, const char *reference, int32_t **prompt_ids,
                   int32_t **ref_ids, int *n_ref) {
    *prompt_ids = *ref_ids = NULL;
    *n_ref = 0;
    size_t pl = strlen(prompt), rl = strlen(reference);
    int np = bn_tokenize(tok, prompt, pl, true, true, prompt_ids);
    if (np <= 0) {
        free(*prompt_ids);
        *prompt_ids = NULL;
        return -1;
    }
    char *both = xmalloc(pl + rl + 1);
    memcpy(both, prompt, pl);
    memcpy(both + pl, reference, rl + 1);
    int32_t *all = NULL;
    int na = bn_tokenize(tok, both, pl + rl, true, true, &all);
    free(both);
    if (na >= np && memcmp(all, *prompt_ids, (size_t)np * sizeof *all) == 0) {
        *n_ref = na - np;
        *ref_ids = xmalloc(((size_t)*n_ref + 1) * sizeof **ref_ids);
        memcpy(*ref_ids, all + np, (size_t)*n_ref * sizeof *all);
    } else {
        *n_ref = bn_tokenize(tok, reference, rl, false, true, ref_ids);
        if (*n_ref < 0) *n_ref = 0;
    }
    free(all);
    return np;
}

bn_task_score bn_task_score_one(const char *gen, size_t gen_len, const int32_t *ids, int n_gen, const char *ref,
                                size_t ref_len, const int32_t *ref_ids, int n_ref, int n_tokens) {
    bn_task_score s = {0};
    size_t gl = bn_task_first_line(gen, gen_len), rl = bn_task_first_line(ref, ref_len);
    s.exact = gl == rl && memcmp(gen, ref, gl) == 0;
    s.n_tokens = n_ref < n_tokens ? n_ref : n_tokens;
    if (s.n_tokens < 0) s.n_tokens = 0;
    for (int i = 0; i < s.n_tokens && i < n_gen; i++) s.n_correct += ids[i] == ref_ids[i];
    return s;
}

// finish: the rates and intervals of row r.
static void finish(bn_task_stats *r) {
    r->exact_rate = r->n ? (double)r->n_exact / r->n : 0;
    bn_wilson(r->n_exact, r->n, BN_Z95, &r->exact_lo, &r->exact_hi);
    r->token_acc = r->n_tokens ? (double)r->n_correct / r->n_tokens : 0;
    bn_wilson(r->n_correct, r->n_tokens, BN_Z95, &r->token_lo, &r->token_hi);
}

static void add(bn_task_stats *r, const bn_task_score *s) {
    r->n++;
    r->n_exact += s->exact;
    r->n_tokens += s->n_tokens;
    r->n_correct += s->n_correct;
}

int bn_task_stats_compute(const char *const *family, const bn_task_score *s, int n, bn_task_stats **out) {
    bn_task_stats *rows = xcalloc((size_t)n + 1, sizeof *rows);
    int n_rows = 0;
    for (int i = 0; i < n; i++) {
        int k = 0;
        while (k < n_rows && strcmp(rows[k].family, family[i])) k++;
        if (k == n_rows) rows[n_rows++].family = family[i];
        add(&rows[k], &s[i]);
    }
    bn_task_stats all = {.family = "all"};
    for (int i = 0; i < n; i++) add(&all, &s[i]);
    rows[n_rows++] = all;
    for (int k = 0; k < n_rows; k++) finish(&rows[k]);
    *out = rows;
    return n_rows;
}

json_t *bn_task_stats_json(const bn_task_stats *rows, int n_rows) {
    json_t *a = json_array();
    for (int k = 0; k < n_rows; k++) {
        const bn_task_stats *r = &rows[k];
        json_array_append_new(
            a, json_pack("{s:s,s:I,s:I,s:f,s:[f,f],s:I,s:I,s:f,s:[f,f]}", "family", r->family, "n", (json_int_t)r->n,
                         "exact", (json_int_t)r->n_exact, "exact_rate", r->exact_rate, "exact_rate_ci95", r->exact_lo,
                         r->exact_hi, "tokens", (json_int_t)r->n_tokens, "token_correct", (json_int_t)r->n_correct,
                         "token_accuracy", r->token_acc, "token_accuracy_ci95", r->token_lo, r->token_hi));
    }
    return a;
}

void bn_task_stats_print(FILE *f, const bn_task_stats *rows, int n_rows, int n_tokens) {
    char head[64];
    snprintf(head, sizeof head, "token accuracy (first %d)", n_tokens);
    fprintf(f, "%-12s %6s  %-26s  %-28s\n", "family", "tasks", "first line exact (95% CI)", head);
    for (int k = 0; k < n_rows; k++) {
        const bn_task_stats *r = &rows[k];
        char ex[64], tk[64];
        snprintf(ex, sizeof ex, "%5.1f%% (%.1f-%.1f%%)", 100 * r->exact_rate, 100 * r->exact_lo, 100 * r->exact_hi);
        snprintf(tk, sizeof tk, "%5.1f%% (%.1f-%.1f%%) of %lld", 100 * r->token_acc, 100 * r->token_lo,
                 100 * r->token_hi, (long long)r->n_tokens);
        fprintf(f, "%-12s %6lld  %-26s  %-28s\n", r->family, (long long)r->n, ex, tk);
    }
}
