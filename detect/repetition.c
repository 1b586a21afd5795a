// detect/repetition.c — find_inner_repetition on code-point arrays (docs/antidoom.md §4.2).
#include "detect/repetition.h"
#include "base/unicode.h"
#include "base/util.h"
#include <stdlib.h>
#include <string.h>

bn_rep_params bn_rep_params_default(void) {
    bn_rep_params p = {.min_repeats = 4, .min_total_repeated = 60, .min_period = 1, .max_period = 1024,
                       .sample_len = 16, .sample_interval = 128};
    return p;
}

static int same(const uint32_t *a, const uint32_t *b, size_t n) { return memcmp(a, b, n * sizeof *a) == 0; }

// verify(a, p): counts contiguous copies of T[a:a+p] forward and backward; returns 1 when the
// thresholds hold (hit filled).
static int verify(const uint32_t *t, int64_t n, int64_t a, int64_t p, const bn_rep_params *prm, bn_rep_hit *hit) {
    if (p < 1 || a < 0 || a + p > n) return 0;
    const uint32_t *unit = t + a;
    int64_t reps = 0, pos = a;
    while (pos + p <= n && same(t + pos, unit, (size_t)p)) { reps++; pos += p; }
    int64_t end = pos, start = a;
    pos = a - p;
    while (pos >= 0 && same(t + pos, unit, (size_t)p)) { reps++; start = pos; pos -= p; }
    if (reps < prm->min_repeats || reps * p < prm->min_total_repeated) return 0;
    hit->start = start;
    hit->end = end;
    hit->period = p;
    hit->repeats = reps;
    hit->repeat_start = start + p;
    size_t keep = p > BN_REP_SNIPPET_MAX ? BN_REP_SNIPPET_MAX : (size_t)p;
    size_t nb = bn_cps_to_utf8(unit, keep, hit->snippet);
    if (p > BN_REP_SNIPPET_MAX) memcpy(hit->snippet + nb, "...", 4);
    return 1;
}

// First o in [from, to_excl) with T[o:o+w] == F (whole match inside T); -1 if none.
static int64_t find_first(const uint32_t *t, int64_t n, const uint32_t *f, int64_t w, int64_t from, int64_t to_excl) {
    if (to_excl > n - w + 1) to_excl = n - w + 1;
    for (int64_t o = from; o < to_excl; o++)
        if (t[o] == f[0] && same(t + o, f, (size_t)w)) return o;
    return -1;
}

// Last o in [lo, hi] with T[o:o+w] == F; -1 if none.
static int64_t find_last(const uint32_t *t, const uint32_t *f, int64_t w, int64_t lo, int64_t hi) {
    if (lo < 0) lo = 0;
    for (int64_t o = hi; o >= lo; o--)
        if (t[o] == f[0] && same(t + o, f, (size_t)w)) return o;
    return -1;
}

int bn_find_repetition(const uint32_t *text, size_t n_, const bn_rep_params *prm, bn_rep_hit *hit) {
    int64_t n = (int64_t)n_, w = prm->sample_len;
    if (n == 0 || n < prm->min_total_repeated || w < 1 || prm->sample_interval < 1) return 0;
    int64_t min_p = prm->min_period, max_p = prm->max_period;
    for (int64_t s = 0; s < n - w; s += prm->sample_interval) {
        const uint32_t *f = text + s;
        // Forward: the FIRST occurrence at or after s+w. Searching only up to s+max_p is
        // equivalent: an occurrence further away fails the period bound either way.
        int64_t o = find_first(text, n, f, w, s + w, s + max_p + 1);
        if (o >= 0 && o - s >= min_p && o - s <= max_p && verify(text, n, s, o - s, prm, hit)) return 1;
        // Backward: the LAST occurrence wholly inside T[0:s] (o + w <= s), limited the same way.
        o = find_last(text, f, w, s - max_p, s - w);
        if (o >= 0 && s - o >= min_p && s - o <= max_p && verify(text, n, o, s - o, prm, hit)) return 1;
    }
    return 0;
}

int bn_find_repetition_utf8(const char *s, size_t len, const bn_rep_params *p, bn_rep_hit *hit) {
    uint32_t *cp = xmalloc((len + 1) * sizeof *cp);
    size_t n = bn_utf8_to_cps(s, len, cp, NULL);
    int r = bn_find_repetition(cp, n, p, hit);
    free(cp);
    return r;
}
