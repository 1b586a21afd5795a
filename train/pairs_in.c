// train/pairs_in.c — pair rows (read by records/pairs.c) → training rows. See pairs_in.h.
#include "train/pairs_in.h"
#include <string.h>
#include <stdlib.h>
#include "records/pairs.h"
#include "base/util.h"

typedef struct {
    const bn_tokenizer *tok;
    int n_vocab, max_seq;
    bn_train_rows *out;
    int cap;
} load_ctx;

// ids_below: returns true when all n ids are < n_vocab (the codec has checked they are >= 0).
static bool ids_below(const int32_t *ids, int n, int n_vocab) {
    for (int i = 0; i < n; i++)
        if (ids[i] >= n_vocab) return false;
    return true;
}

// row_ids: fills r's context and rejected id and *chosen_raw (malloc'd, before the §7.3 filter) from
// the id extension or, without it, by tokenising; returns 0 or -1 with what filled.
static int row_ids(const bn_pair_row *p, const load_ctx *c, bn_train_row *r, int32_t **chosen_raw, int *n_raw,
                   char *what, size_t whatlen) {
    if (p->has_ids) {
        if (!ids_below(p->context_ids, p->n_context, c->n_vocab))
            return bn_err(what, whatlen, "field 'context_ids': not an array of ids < %d", c->n_vocab);
        if (p->rejected_id >= c->n_vocab) return bn_err(what, whatlen, "field 'rejected_id': not an id < %d", c->n_vocab);
        if (!ids_below(p->chosen_ids, p->n_chosen, c->n_vocab))
            return bn_err(what, whatlen, "field 'chosen_ids': not an array of ids < %d", c->n_vocab);
        r->n_ctx = p->n_context;
        r->ctx = xmalloc(sizeof(int32_t) * (r->n_ctx ? r->n_ctx : 1));
        if (r->n_ctx) memcpy(r->ctx, p->context_ids, sizeof(int32_t) * r->n_ctx);
        r->rejected = p->rejected_id;
        *chosen_raw = xmalloc(sizeof(int32_t) * (p->n_chosen ? p->n_chosen : 1));
        if (p->n_chosen) memcpy(*chosen_raw, p->chosen_ids, sizeof(int32_t) * p->n_chosen);
        *n_raw = p->n_chosen;
        return 0;
    }
    if (!c->tok) return bn_err(what, whatlen, "no context_ids (and no tokenizer to tokenise context_before)");
    int n = bn_tokenize(c->tok, p->context_before, strlen(p->context_before), true, true, &r->ctx);
    if (n < 0) return bn_err(what, whatlen, "cannot tokenise context_before");
    r->n_ctx = n;
    r->rejected = bn_token_lookup(c->tok, p->rejected_token);
    if (r->rejected < 0) return bn_err(what, whatlen, "rejected_token '%s' is not in the vocab", p->rejected_token);
    *chosen_raw = xmalloc(sizeof(int32_t) * (p->n_chosen ? p->n_chosen : 1));
    int k = 0;
    for (int i = 0; i < p->n_chosen; i++) {
        int32_t id = bn_token_lookup(c->tok, p->chosen_tokens[i]);
        if (id >= 0) (*chosen_raw)[k++] = id; // unknown strings are dropped like invalid chosen
    }
    *n_raw = k;
    return 0;
}

// row_from_pair: fills r from one pair row; returns 1 = keep, 0 = filtered (counted), -1 = error.
static int row_from_pair(const bn_pair_row *p, load_ctx *c, bn_train_row *r, char *what, size_t whatlen) {
    memset(r, 0, sizeof *r);
    if (strncmp(p->source_prompt, "[TRIMMED_SOURCE_PROMPT]", 23) == 0) { c->out->n_dropped_trimmed++; return 0; }
    int32_t *chosen_raw = NULL;
    int n_raw = 0;
    if (row_ids(p, c, r, &chosen_raw, &n_raw, what, whatlen) < 0) { free(chosen_raw); return -1; }
    // chosen: distinct, != rejected (§7.3)
    r->chosen = xmalloc(sizeof(int32_t) * (n_raw ? n_raw : 1));
    for (int i = 0; i < n_raw; i++) {
        int32_t id = chosen_raw[i];
        bool dup = id == r->rejected;
        for (int j = 0; j < r->n_chosen && !dup; j++) dup = r->chosen[j] == id;
        if (!dup) r->chosen[r->n_chosen++] = id;
    }
    free(chosen_raw);
    r->heldout = p->split && strcmp(p->split, "heldout") == 0;
    if (r->n_chosen == 0) { c->out->n_dropped_no_chosen++; return 0; }
    if (r->n_ctx == 0 || r->n_ctx + 1 > c->max_seq) { c->out->n_dropped_long++; return 0; }
    return 1;
}

static void row_free(bn_train_row *r) { free(r->ctx); free(r->chosen); }

// add_row: bn_pairs_each's callback: converts, filters and keeps one row.
static int add_row(bn_pair_row *p, int line, void *ctx, char *err, size_t errlen) {
    load_ctx *c = ctx;
    bn_train_row r;
    int rc = row_from_pair(p, c, &r, err, errlen);
    if (rc <= 0) { row_free(&r); return rc; }
    r.line = line;
    if (c->out->n_rows == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 64;
        c->out->rows = xrealloc(c->out->rows, sizeof(bn_train_row) * c->cap);
    }
    c->out->rows[c->out->n_rows++] = r;
    return 0;
}

bn_train_rows *bn_train_rows_load(const char *path, const bn_tokenizer *tok, int n_vocab, int max_seq,
                                  char *err, size_t errlen) {
    load_ctx c = {tok, n_vocab, max_seq, xcalloc(1, sizeof(bn_train_rows)), 0};
    if (bn_pairs_each(path, add_row, &c, err, errlen) < 0) {
        bn_train_rows_free(c.out);
        return NULL;
    }
    return c.out;
}

void bn_train_rows_free(bn_train_rows *r) {
    if (!r) return;
    for (int i = 0; i < r->n_rows; i++) row_free(&r->rows[i]);
    free(r->rows);
    free(r);
}
