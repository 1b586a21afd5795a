// train/pairs_in.c — pair-row JSONL → training rows. See pairs_in.h.
#include "train/pairs_in.h"
#include <string.h>
#include <stdlib.h>
#include <jansson.h>
#include "base/util.h"

// ids_from_array: integer array field → malloc'd ids; -1 on a wrong type or out-of-range id.
static int ids_from_array(json_t *arr, int n_vocab, int32_t **out, int *n) {
    if (!json_is_array(arr)) return -1;
    size_t len = json_array_size(arr);
    int32_t *ids = xmalloc(sizeof(int32_t) * (len ? len : 1));
    for (size_t i = 0; i < len; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= n_vocab) { free(ids); return -1; }
        ids[i] = (int32_t)json_integer_value(v);
    }
    *out = ids;
    *n = (int)len;
    return 0;
}

// row_from_json: fills r from one object; returns 1 = keep, 0 = filtered (counted), -1 = error.
static int row_from_json(json_t *o, const bn_tokenizer *tok, int n_vocab, int max_seq, bn_train_row *r,
                         bn_train_rows *out, char *what, size_t whatlen) {
    memset(r, 0, sizeof *r);
    const char *sp = json_string_value(json_object_get(o, "source_prompt"));
    if (sp && strncmp(sp, "[TRIMMED_SOURCE_PROMPT]", 23) == 0) { out->n_dropped_trimmed++; return 0; }
    json_t *ctx = json_object_get(o, "context_ids");
    int32_t *chosen_raw = NULL;
    int n_raw = 0;
    if (ctx) {
        json_t *rej = json_object_get(o, "rejected_id");
        if (ids_from_array(ctx, n_vocab, &r->ctx, &r->n_ctx)) { snprintf(what, whatlen, "field 'context_ids': not an array of ids < %d", n_vocab); return -1; }
        if (!json_is_integer(rej) || json_integer_value(rej) < 0 || json_integer_value(rej) >= n_vocab) {
            snprintf(what, whatlen, "field 'rejected_id': missing or out of range");
            return -1;
        }
        r->rejected = (int32_t)json_integer_value(rej);
        if (ids_from_array(json_object_get(o, "chosen_ids"), n_vocab, &chosen_raw, &n_raw)) {
            snprintf(what, whatlen, "field 'chosen_ids': missing or not an array of ids < %d", n_vocab);
            return -1;
        }
    } else {
        if (!tok) { snprintf(what, whatlen, "no context_ids (and no tokenizer to tokenise context_before)"); return -1; }
        const char *cb = json_string_value(json_object_get(o, "context_before"));
        const char *rt = json_string_value(json_object_get(o, "rejected_token"));
        json_t *mc = json_object_get(o, "multi_chosen_tokens");
        if (!cb || !rt || !json_is_array(mc)) { snprintf(what, whatlen, "needs context_before, rejected_token, multi_chosen_tokens"); return -1; }
        int n = bn_tokenize(tok, cb, strlen(cb), true, true, &r->ctx);
        if (n < 0) { snprintf(what, whatlen, "cannot tokenise context_before"); return -1; }
        r->n_ctx = n;
        r->rejected = bn_token_lookup(tok, rt);
        if (r->rejected < 0) { snprintf(what, whatlen, "rejected_token '%s' is not in the vocab", rt); return -1; }
        n_raw = (int)json_array_size(mc);
        chosen_raw = xmalloc(sizeof(int32_t) * (n_raw ? n_raw : 1));
        int k = 0;
        for (int i = 0; i < n_raw; i++) {
            const char *s = json_string_value(json_array_get(mc, i));
            int32_t id = s ? bn_token_lookup(tok, s) : -1;
            if (id >= 0) chosen_raw[k++] = id; // unknown strings are dropped like invalid chosen
        }
        n_raw = k;
    }
    // chosen: distinct, != rejected (§7.3)
    r->chosen = xmalloc(sizeof(int32_t) * (n_raw ? n_raw : 1));
    for (int i = 0; i < n_raw; i++) {
        int32_t c = chosen_raw[i];
        bool dup = c == r->rejected;
        for (int j = 0; j < r->n_chosen && !dup; j++) dup = r->chosen[j] == c;
        if (!dup) r->chosen[r->n_chosen++] = c;
    }
    free(chosen_raw);
    const char *split = json_string_value(json_object_get(o, "split"));
    r->heldout = split && strcmp(split, "heldout") == 0;
    if (r->n_chosen == 0) { out->n_dropped_no_chosen++; return 0; }
    if (r->n_ctx == 0 || r->n_ctx + 1 > max_seq) { out->n_dropped_long++; return 0; }
    return 1;
}

static void row_free(bn_train_row *r) { free(r->ctx); free(r->chosen); }

bn_train_rows *bn_train_rows_load(const char *path, const bn_tokenizer *tok, int n_vocab, int max_seq,
                                  char *err, size_t errlen) {
    bn_lines *lines = bn_lines_open(path, err, errlen);
    if (!lines) return NULL;
    bn_train_rows *out = xcalloc(1, sizeof *out);
    int cap = 0, line_no = 0;
    const char *line;
    size_t len;
    char what[256];
    while ((line = bn_lines_next(lines, &len))) {
        line_no++;
        size_t i = 0;
        while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) i++;
        if (i == len) continue;
        json_error_t je;
        json_t *o = json_loadb(line, len, 0, &je);
        if (!json_is_object(o)) {
            bn_err(err, errlen, "%s:%d: not a JSON object (%s)", path, line_no, o ? "wrong type" : je.text);
            json_decref(o);
            goto fail;
        }
        bn_train_row r;
        int rc = row_from_json(o, tok, n_vocab, max_seq, &r, out, what, sizeof what);
        json_decref(o);
        if (rc < 0) { row_free(&r); bn_err(err, errlen, "%s:%d: %s", path, line_no, what); goto fail; }
        if (rc == 0) { row_free(&r); continue; }
        r.line = line_no;
        if (out->n_rows == cap) {
            cap = cap ? 2 * cap : 64;
            out->rows = xrealloc(out->rows, sizeof(bn_train_row) * cap);
        }
        out->rows[out->n_rows++] = r;
    }
    if (bn_lines_failed(lines, err, errlen)) goto fail;
    bn_lines_close(lines);
    return out;
fail:
    bn_lines_close(lines);
    bn_train_rows_free(out);
    return NULL;
}

void bn_train_rows_free(bn_train_rows *r) {
    if (!r) return;
    for (int i = 0; i < r->n_rows; i++) row_free(&r->rows[i]);
    free(r->rows);
    free(r);
}
