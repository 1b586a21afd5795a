// detect/localise.c — docs/antidoom.md §5, steps 1-7.
//
// Token classes (on the code points a token owns, see detect/toktext.h):
//   whitespace-only: stripped text is empty (includes tokens owning no code point);
//   boundary-only:   stripped text non-empty and without any alnum or '_' character.
// Step 5 skips boundary-only tokens only (a whitespace token stops it), like the reference's
// separate punctuation pass; step 7 then skips whitespace, so a target can land on punctuation
// that follows a newline (the documented quirk). Budgets count each skipped token's full
// surface length in code points; the token that would exceed a budget is not skipped.
#include "detect/localise.h"
#include "base/util.h"
#include <stdlib.h>
#include <string.h>

static const char *const restart_words[] = {
    "actually", "after", "also", "alternatively", "because", "but", "finally", "first", "given",
    "hmm", "however", "in", "let", "looking", "maybe", "now", "okay", "perhaps", "second", "since",
    "so", "the", "then", "therefore", "this", "thus", "wait",
};

bool bn_is_restart_word(const uint32_t *w, size_t n) {
    for (size_t i = 0; i < sizeof restart_words / sizeof restart_words[0]; i++) {
        const char *r = restart_words[i];
        size_t len = strlen(r);
        if (len != n) continue;
        size_t k = 0;
        while (k < n && w[k] == (uint32_t)(unsigned char)r[k]) k++;
        if (k == n) return true;
    }
    return false;
}

static bool is_ws_only(const bn_toktext *t, int i) {
    return bn_span_strip(bn_toktext_span(t, i), true, true).n == 0;
}

static bool is_boundary_only(const bn_toktext *t, int i) {
    bn_span s = bn_span_strip(bn_toktext_span(t, i), true, true);
    return s.n > 0 && !bn_span_has_word(s);
}

// key(t): surface with leading whitespace stripped.
static bn_span key(const bn_toktext *t, int i) { return bn_span_strip(bn_toktext_span(t, i), true, false); }

// Advances past boundary-only tokens within the budgets; whitespace tokens are skipped too (without
// budget) when skip_ws. Returns the first index not skipped (may be m).
static int skip_boundary(const bn_toktext *t, int i, bool skip_ws) {
    int n_tok = 0;
    size_t n_chars = 0;
    while (i < t->m) {
        if (skip_ws && is_ws_only(t, i)) { i++; continue; }
        if (!is_boundary_only(t, i)) break;
        n_tok++;
        n_chars += bn_toktext_span(t, i).n;
        if (n_tok > BN_LOC_SKIP_MAX_TOKENS || n_chars > BN_LOC_SKIP_MAX_CHARS) break;
        i++;
    }
    return i;
}

static int skip_ws(const bn_toktext *t, int i) {
    while (i < t->m && is_ws_only(t, i)) i++;
    return i;
}

// normalise(d[i]) into a scratch buffer; returns its length.
static size_t norm_word(const bn_toktext *t, int i, uint32_t **buf, size_t *cap) {
    bn_span s = bn_toktext_span(t, i);
    if (s.n > *cap) { *cap = s.n; *buf = xrealloc(*buf, *cap * sizeof **buf); }
    return bn_span_normalise_word(s, *buf);
}

// Step 1 fallback: first non-whitespace char in [repeat_start, end), its token, then skip
// whitespace-only tokens. Returns the index or -1.
static int fallback(const bn_toktext *t, const bn_rep_hit *hit) {
    size_t end = hit->end < (int64_t)t->n_cp ? (size_t)hit->end : t->n_cp;
    for (size_t c = (size_t)(hit->repeat_start < 0 ? 0 : hit->repeat_start); c < end; c++) {
        if (bn_cp_is_space(t->cp[c])) continue;
        int i = skip_ws(t, bn_toktext_token_at(t, c));
        return i < t->m ? i : -1;
    }
    return -1;
}

// Step 6: if the target word is followed by sentence punctuation at the seam and then a restart
// word, returns that word's index; otherwise returns target unchanged.
static int restart_rule(const bn_toktext *t, int target, int seed, int P, bool *moved) {
    uint32_t *buf = NULL;
    size_t cap = 0;
    int result = target;
    if (norm_word(t, target, &buf, &cap) == 0) goto done;
    int a = target + 1, b = a;
    size_t chars = 0;
    bool sentence_end = false;
    while (b < t->m && b - a < BN_LOC_PUNCT_MAX_TOKENS && is_boundary_only(t, b)) {
        bn_span s = bn_toktext_span(t, b);
        chars += s.n;
        if (chars > BN_LOC_PUNCT_MAX_CHARS) break;
        for (size_t k = 0; k < s.n; k++)
            if (s.p[k] == '.' || s.p[k] == '!' || s.p[k] == '?') sentence_end = true;
        b++;
    }
    int seed_prev = seed - 1, rep_prev = seed + P - 1;
    bool seam = seed_prev >= 0 && rep_prev < t->m &&
                !bn_span_eq(bn_toktext_span(t, seed_prev), bn_toktext_span(t, rep_prev));
    if (b == a || !sentence_end || !seam) goto done;
    int next = skip_boundary(t, b, true);
    if (next >= t->m) goto done;
    size_t wn = norm_word(t, next, &buf, &cap);
    if (wn > 0 && bn_is_restart_word(buf, wn)) { result = next; *moved = true; }
done:
    free(buf);
    return result;
}

int bn_localise(const bn_toktext *t, const bn_rep_hit *hit, bn_loc_info *info) {
    bn_loc_info local;
    if (!info) info = &local;
    memset(info, 0, sizeof *info);
    int seed = hit->start >= 0 ? bn_toktext_token_at(t, (size_t)hit->start) : -1;
    int rep = hit->repeat_start >= 0 ? bn_toktext_token_at(t, (size_t)hit->repeat_start) : -1;
    info->seed = seed;
    info->rep = rep;
    info->seed_slid = seed;
    if (seed < 0 || rep < 0 || rep <= seed) {
        info->fallback = true;
        return fallback(t, hit);
    }
    int P = rep - seed;
    info->period_tokens = P;
    while (seed - 1 >= 0 && bn_span_eq(key(t, seed - 1), key(t, seed - 1 + P))) seed--; // step 3
    info->seed_slid = seed;
    int target = seed + P; // step 4
    if (target >= t->m) return -1;
    target = skip_boundary(t, target, false); // step 5
    if (target >= t->m) return -1;
    target = restart_rule(t, target, seed, P, &info->restart_moved); // step 6
    target = skip_ws(t, target); // step 7
    return target < t->m ? target : -1;
}
