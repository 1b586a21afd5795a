// detect/toktext.c — token text: token surfaces -> code points and back (see toktext.h).
#include "detect/toktext.h"
#include "base/util.h"
#include <stdlib.h>
#include <string.h>

void bn_toktext_build(bn_toktext *t, const char *const *surf, const size_t *lens, int m) {
    size_t total = 0;
    for (int i = 0; i < m; i++) total += lens[i];
    char *bytes = xmalloc(total + 1);
    size_t *tok_byte = xmalloc((size_t)(m + 1) * sizeof *tok_byte); // byte start of each token
    size_t pos = 0;
    for (int i = 0; i < m; i++) {
        tok_byte[i] = pos;
        if (lens[i]) memcpy(bytes + pos, surf[i], lens[i]);
        pos += lens[i];
    }
    tok_byte[m] = total;
    size_t *cp_byte = xmalloc((total + 1) * sizeof *cp_byte);
    t->m = m;
    t->cp = xmalloc((total + 1) * sizeof *t->cp);
    t->n_cp = bn_utf8_to_cps(bytes, total, t->cp, cp_byte);
    t->off = xmalloc((size_t)(m + 1) * sizeof *t->off);
    // off[i] = number of code points whose first byte lies before token i's first byte.
    size_t c = 0;
    for (int i = 0; i <= m; i++) {
        while (c < t->n_cp && cp_byte[c] < tok_byte[i]) c++;
        t->off[i] = c;
    }
    t->off[m] = t->n_cp;
    free(cp_byte);
    free(tok_byte);
    free(bytes);
}

void bn_toktext_free(bn_toktext *t) {
    free(t->cp);
    free(t->off);
    t->cp = NULL;
    t->off = NULL;
    t->m = 0;
    t->n_cp = 0;
}

bn_span bn_toktext_span(const bn_toktext *t, int i) {
    bn_span s = {t->cp + t->off[i], t->off[i + 1] - t->off[i]};
    return s;
}

int bn_toktext_token_at(const bn_toktext *t, size_t c) {
    if (c >= t->n_cp || t->m == 0) return -1;
    // Last token whose start offset is <= c (empty tokens share an offset with their successor).
    int lo = 0, hi = t->m - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (t->off[mid] <= c) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}
