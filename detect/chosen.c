// detect/chosen.c — docs/antidoom.md §6 steps 1-8.
#include "detect/chosen.h"
#include "base/unicode.h"
#include "base/util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

bn_chosen_params bn_chosen_params_default(double temperature) {
    bn_chosen_params p = {.temperature = temperature, .min_p = 0.0, .top_k = 50, .max_tokens = 20,
                          .min_decoded_chars = 1, .require_alnum = false};
    return p;
}

typedef struct {
    int32_t id;
    double p;
    int order; // position in the input list: ties keep it
} cand;

static int by_p_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return x->order - y->order;
}

static int by_p_asc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->p != y->p) return x->p < y->p ? -1 : 1;
    return x->order - y->order; // stable: ties stay in top-k order
}

// Decoded text of id as lower-cased code points into buf; returns the count.
static size_t lower_decoded(const bn_tok_strs *ts, int32_t id, uint32_t **buf) {
    size_t len;
    const char *s = ts->decoded(ts->ctx, id, &len);
    *buf = xrealloc(*buf, (len + 1) * sizeof **buf);
    size_t n = bn_utf8_to_cps(s, len, *buf, NULL);
    for (size_t i = 0; i < n; i++) (*buf)[i] = bn_cp_lower((*buf)[i]);
    return n;
}

// Surface filters of step 6; returns true when the token may be a chosen one.
static bool passes_filters(const bn_tok_strs *ts, int32_t id, const bn_chosen_params *p) {
    size_t raw_len;
    const char *raw = (ts->raw ? ts->raw : ts->decoded)(ts->ctx, id, &raw_len);
    for (int k = 0; k < p->n_skip_raw; k++)
        if (p->skip_raw_substrings[k][0] && memmem(raw, raw_len, p->skip_raw_substrings[k],
                                                   strlen(p->skip_raw_substrings[k])))
            return false;
    size_t len;
    const char *dec = ts->decoded(ts->ctx, id, &len);
    uint32_t *cp = xmalloc((len + 1) * sizeof *cp);
    bn_span s = {cp, bn_utf8_to_cps(dec, len, cp, NULL)};
    bn_span stripped = bn_span_strip(s, true, true);
    bool ok = (int64_t)stripped.n >= p->min_decoded_chars;
    if (ok && p->require_alnum) {
        ok = false;
        for (size_t i = 0; i < stripped.n; i++) ok = ok || bn_cp_is_alnum(stripped.p[i]);
    }
    free(cp);
    return ok;
}

int bn_select_chosen(const bn_topk *list, int n, int32_t rejected, const bn_chosen_params *p,
                     const bn_tok_strs *ts, int32_t *out_ids, double *out_p, int out_cap) {
    if (n <= 0) return 0;
    // 1. softmax of lp / T over the returned list (T floored at 1e-6).
    double T = p->temperature > 1e-6 ? p->temperature : 1e-6;
    double mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = fmax(mx, list[i].logprob / T);
    double z = 0;
    for (int i = 0; i < n; i++) z += exp(list[i].logprob / T - mx);
    // 2. drop the rejected token and its case variants.
    uint32_t *rej = NULL, *other = NULL;
    size_t rej_n = lower_decoded(ts, rejected, &rej);
    cand *c = xmalloc((size_t)n * sizeof *c);
    int nc = 0;
    for (int i = 0; i < n; i++) {
        if (list[i].id == rejected) continue;
        size_t on = lower_decoded(ts, list[i].id, &other);
        if (on == rej_n && (on == 0 || memcmp(other, rej, on * sizeof *rej) == 0)) continue;
        c[nc++] = (cand){list[i].id, exp(list[i].logprob / T - mx) / z, i};
    }
    free(rej);
    free(other);
    // 3. relative min-p floor over the remaining candidates (off when min_p <= 0).
    if (p->min_p > 0 && nc > 0) {
        double pmax = 0;
        for (int i = 0; i < nc; i++) pmax = fmax(pmax, c[i].p);
        int kept = 0;
        for (int i = 0; i < nc; i++)
            if (c[i].p >= p->min_p * pmax) c[kept++] = c[i];
        nc = kept;
    }
    // 4. top-k most probable, 5. ascending probability.
    qsort(c, (size_t)nc, sizeof *c, by_p_desc);
    if (p->top_k > 0 && nc > p->top_k) nc = p->top_k;
    qsort(c, (size_t)nc, sizeof *c, by_p_asc);
    // 6-7. surface filters while collecting, up to max_tokens.
    int limit = p->max_tokens < out_cap ? p->max_tokens : out_cap;
    int n_out = 0;
    for (int i = 0; i < nc && n_out < limit; i++) {
        if (!passes_filters(ts, c[i].id, p)) continue;
        out_ids[n_out] = c[i].id;
        if (out_p) out_p[n_out] = c[i].p;
        n_out++;
    }
    free(c);
    return n_out; // 8. zero -> no row
}
