// detect/frame.c — frame loops over token ids (docs/antidoom.md §16).
//
// next[i]: the next position whose anchor_len tokens equal those at i (-1: none), from an open-addressing table keyed
// by the n-gram's content (exact, no hash collisions taken for matches). sim[p]: the similarity of the period
// [p, next[p]) and the one after it, computed once (-1: not yet), so a chain walked from several starts costs one
// edit distance per period.
#include "detect/frame.h"
#include "base/util.h"
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

bn_frame_params bn_frame_params_default(void) {
    return (bn_frame_params){.anchor_len = 4, .min_repeats = 6, .min_repeats_verbatim = 4, .min_tokens = 16,
                             .max_period = 256, .min_similarity = 0.5};
}

static uint64_t gram_hash(const int32_t *g, int a) {
    uint64_t h = 1469598103934665603ull;
    for (int k = 0; k < a; k++) h = (h ^ (uint32_t)g[k]) * 1099511628211ull;
    return h ^ (h >> 29);
}

// next_occurrence: next[i] for every i <= n - a (the rest -1).
static void next_occurrence(const int32_t *ids, int64_t n, int a, int64_t *next) {
    for (int64_t i = 0; i < n; i++) next[i] = -1;
    if (n < a) return;
    size_t cap = 16;
    while (cap < 2 * (size_t)n) cap *= 2;
    int64_t *slot = xmalloc(cap * sizeof *slot); // the latest position seen (scanning backwards) per n-gram
    for (size_t k = 0; k < cap; k++) slot[k] = -1;
    for (int64_t i = n - a; i >= 0; i--) {
        size_t k = (size_t)gram_hash(ids + i, a) & (cap - 1);
        while (slot[k] >= 0 && memcmp(ids + slot[k], ids + i, (size_t)a * sizeof *ids)) k = (k + 1) & (cap - 1);
        next[i] = slot[k];
        slot[k] = i;
    }
    free(slot);
}

// edit_similarity: 1 - Levenshtein(x, y) / max(nx, ny) over token ids; returns a value below floor without finishing
// when the lengths alone rule floor out. row holds max(nx, ny) + 1 ints.
static double edit_similarity(const int32_t *x, int nx, const int32_t *y, int ny, double floor, int *row) {
    int longer = nx > ny ? nx : ny, diff = nx > ny ? nx - ny : ny - nx;
    if (longer == 0) return 1;
    if (1.0 - (double)diff / longer < floor) return -1;
    for (int j = 0; j <= ny; j++) row[j] = j;
    for (int i = 1; i <= nx; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= ny; j++) {
            int up = row[j], best = diag + (x[i - 1] != y[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return 1.0 - (double)row[ny] / longer;
}

typedef struct {
    const int32_t *ids;
    const int64_t *next;
    double *sim;
    int *row;
    const bn_frame_params *p;
} frame_scan;

// period_sim: similarity of [a, next[a]) and [next[a], next[next[a]]) (both exist, within max_period).
static double period_sim(frame_scan *fs, int64_t a) {
    if (fs->sim[a] < -1.5) {
        int64_t b = fs->next[a], c = fs->next[b];
        fs->sim[a] = edit_similarity(fs->ids + a, (int)(b - a), fs->ids + b, (int)(c - b), fs->p->min_similarity,
                                     fs->row);
    }
    return fs->sim[a];
}

// chain_entries: entries reachable from i by next[] with gaps within max_period (capped at cap).
static int64_t chain_entries(const frame_scan *fs, int64_t i, int64_t cap) {
    int64_t count = 1;
    for (int64_t q; count < cap && (q = fs->next[i]) >= 0 && q - i <= fs->p->max_period; i = q) count++;
    return count;
}

// run_from: walks the frame entered at i; returns 1 and fills hit when it qualifies.
static int run_from(frame_scan *fs, int64_t i, int64_t n, bn_frame_hit *hit) {
    const bn_frame_params *p = fs->p;
    int64_t count = 1, prev = -1, cur = i, q;
    double worst = 1;
    while ((q = fs->next[cur]) >= 0 && q - cur <= p->max_period) {
        if (prev >= 0) {
            double s = period_sim(fs, prev);
            if (s < p->min_similarity) break;
            if (s < worst) worst = s;
        }
        count++;
        prev = cur;
        cur = q;
    }
    if (prev < 0 || count < (worst == 1.0 ? p->min_repeats_verbatim : p->min_repeats)) return 0;
    int64_t end = cur + (cur - prev > p->anchor_len ? cur - prev : p->anchor_len); // the last entry's extent
    if (end > n) end = n;
    if (end - i < p->min_tokens) return 0;
    *hit = (bn_frame_hit){.start = i, .repeat_start = fs->next[i], .end = end, .period = fs->next[i] - i,
                          .repeats = count, .similarity = worst};
    return 1;
}

int bn_find_frame_loop(const int32_t *ids, size_t n_, const bn_frame_params *p, bn_frame_hit *hit) {
    int64_t n = (int64_t)n_;
    int a = p->anchor_len;
    int need = p->min_repeats < p->min_repeats_verbatim ? p->min_repeats : p->min_repeats_verbatim;
    if (a < 1 || need < 2 || p->max_period < 1 || n < a || n < p->min_tokens) return 0;
    int64_t *next = xmalloc((size_t)n * sizeof *next);
    double *sim = xmalloc((size_t)n * sizeof *sim);
    int *row = xmalloc(((size_t)p->max_period + 2) * sizeof *row);
    next_occurrence(ids, n, a, next);
    for (int64_t i = 0; i < n; i++) sim[i] = -2;
    frame_scan fs = {ids, next, sim, row, p};
    int found = 0;
    for (int64_t i = 0; i + a <= n && !found; i++)
        if (chain_entries(&fs, i, need) >= need) found = run_from(&fs, i, n, hit);
    free(next);
    free(sim);
    free(row);
    return found;
}

bn_rep_hit bn_frame_rep_hit(const bn_toktext *t, const bn_frame_hit *f) {
    bn_rep_hit h = {.start = (int64_t)t->off[f->start], .repeat_start = (int64_t)t->off[f->repeat_start],
                    .end = (int64_t)t->off[f->end], .repeats = f->repeats};
    h.period = h.repeat_start - h.start;
    size_t keep = h.period > BN_REP_SNIPPET_MAX ? BN_REP_SNIPPET_MAX : (size_t)h.period;
    size_t nb = bn_cps_to_utf8(t->cp + h.start, keep, h.snippet);
    if (h.period > BN_REP_SNIPPET_MAX) memcpy(h.snippet + nb, "...", 4);
    else h.snippet[nb] = 0;
    return h;
}

// piece_end: one past the word piece starting at i (spaces/tabs, then a run of letters/digits/non-ASCII or one char).
static size_t piece_end(const char *s, size_t len, size_t i) {
    while (i < len && (s[i] == ' ' || s[i] == '\t')) i++;
    if (i == len) return i;
    unsigned char c = (unsigned char)s[i];
    bool word = c >= 0x80 || (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
    if (!word) return i + 1;
    while (i < len) {
        c = (unsigned char)s[i];
        if (!(c >= 0x80 || (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z'))) break;
        i++;
    }
    return i;
}

size_t bn_frame_units(const char *s, size_t len, int32_t **out) {
    int32_t *v = xmalloc((len + 1) * sizeof *v);
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t e = piece_end(s, len, i);
        uint32_t h = 2166136261u;
        for (size_t k = i; k < e; k++) h = (h ^ (unsigned char)s[k]) * 16777619u;
        v[n++] = (int32_t)(h & 0x7fffffff);
        i = e;
    }
    *out = v;
    return n;
}
