// records/pairs.c — pair rows and generation-log rows <-> JSONL (see pairs.h for the schema).
#include "records/pairs.h"
#include "base/lineout.h"
#include "base/unicode.h"
#include "base/util.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

// ---- writing helpers ------------------------------------------------------------------------

// A JSON string from bytes that may hold invalid UTF-8 (replaced by U+FFFD).
static json_t *jstr(const char *s) {
    if (!s) return json_null();
    size_t len = strlen(s);
    json_t *j = json_stringn(s, len);
    if (j) return j;
    uint32_t *cp = xmalloc((len + 1) * sizeof *cp);
    size_t n = bn_utf8_to_cps(s, len, cp, NULL);
    char *clean = xmalloc(4 * n + 1);
    size_t nb = bn_cps_to_utf8(cp, n, clean);
    j = json_stringn(clean, nb);
    free(cp);
    free(clean);
    return j;
}

static json_t *jstr_array(char *const *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, jstr(v[i]));
    return a;
}

static json_t *jid_array(const int32_t *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(v[i]));
    return a;
}

static json_t *rep_to_json(const bn_pair_rep *r, bool with_index) {
    json_t *o = json_object();
    json_object_set_new(o, "start_char", json_integer(r->start_char));
    json_object_set_new(o, "repeat_start_char", json_integer(r->repeat_start_char));
    if (with_index) json_object_set_new(o, "rejected_token_index", json_integer(r->rejected_token_index));
    json_object_set_new(o, "period", json_integer(r->period));
    json_object_set_new(o, "repeats", json_integer(r->repeats));
    json_object_set_new(o, "snippet", jstr(r->snippet ? r->snippet : ""));
    return o;
}

static void set_opt_str(json_t *o, const char *k, const char *v) {
    if (v) json_object_set_new(o, k, jstr(v));
}

static char *dump_line(json_t *o, const json_t *extra, char *err, size_t errlen) {
    if (extra) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)extra, k, v) if (!json_object_get(o, k)) json_object_set(o, k, v);
    }
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!s) bn_err(err, errlen, "JSON encoding failed");
    return s;
}

char *bn_pair_row_to_line(const bn_pair_row *r, char *err, size_t errlen) {
    json_t *o = json_object();
    json_object_set_new(o, "context_before", jstr(r->context_before ? r->context_before : ""));
    json_object_set_new(o, "rejected_token", jstr(r->rejected_token ? r->rejected_token : ""));
    json_object_set_new(o, "rejected_decoded", jstr(r->rejected_decoded ? r->rejected_decoded : ""));
    json_object_set_new(o, "multi_chosen_tokens", jstr_array(r->chosen_tokens, r->n_chosen));
    json_object_set_new(o, "multi_chosen_decoded", jstr_array(r->chosen_decoded, r->n_chosen));
    json_object_set_new(o, "source", jstr(r->source ? r->source : ""));
    json_object_set_new(o, "source_prompt", jstr(r->source_prompt ? r->source_prompt : ""));
    json_object_set_new(o, "repetition", rep_to_json(&r->rep, true));
    if (r->has_ids) {
        json_object_set_new(o, "context_ids", jid_array(r->context_ids, r->n_context));
        json_object_set_new(o, "rejected_id", json_integer(r->rejected_id));
    }
    if (r->has_rejected_logprob) json_object_set_new(o, "rejected_logprob", json_real(r->rejected_logprob));
    if (r->has_ids) json_object_set_new(o, "chosen_ids", jid_array(r->chosen_ids, r->n_chosen));
    if (r->has_topk) {
        json_t *a = json_array();
        for (int i = 0; i < r->n_topk; i++)
            json_array_append_new(a, json_pack("[I,f]", (json_int_t)r->topk[i].id, r->topk[i].logprob));
        json_object_set_new(o, "topk", a);
    }
    if (r->has_gen) {
        const bn_pair_gen *g = &r->gen;
        json_t *go = json_object();
        json_object_set_new(go, "temperature", json_real(g->temperature));
        json_object_set_new(go, "top_k", json_integer(g->top_k));
        json_object_set_new(go, "top_p", json_real(g->top_p));
        json_object_set_new(go, "min_p", json_real(g->min_p));
        json_object_set_new(go, "seed", json_integer(g->seed));
        json_object_set_new(go, "n_probs", json_integer(g->n_probs));
        set_opt_str(go, "endpoint", g->endpoint);
        set_opt_str(go, "model_file", g->model_file);
        set_opt_str(go, "model_sha256", g->model_sha256);
        set_opt_str(go, "file_type", g->file_type);
        json_object_set_new(o, "gen", go);
    }
    if (r->prime_state == 1) json_object_set_new(o, "prime", json_null());
    if (r->prime_state == 2) {
        json_t *po = json_object();
        json_object_set_new(po, "phrase", jstr(r->prime.phrase ? r->prime.phrase : ""));
        json_object_set_new(po, "repeats", json_integer(r->prime.repeats));
        json_object_set_new(po, "prefix_chars", json_integer(r->prime.prefix_chars));
        json_object_set_new(po, "scan_mode", jstr(r->prime.scan_mode ? r->prime.scan_mode : "completion"));
        json_object_set_new(o, "prime", po);
    }
    set_opt_str(o, "split", r->split);
    return dump_line(o, r->extra, err, errlen);
}

char *bn_gen_row_to_line(const bn_gen_row *g, char *err, size_t errlen) {
    json_t *o = json_object();
    json_object_set_new(o, "source", jstr(g->source ? g->source : ""));
    json_object_set_new(o, "prompt", jstr(g->prompt ? g->prompt : ""));
    json_object_set_new(o, "completion", jstr(g->completion ? g->completion : ""));
    json_object_set_new(o, "status", jstr(g->status ? g->status : "clean"));
    json_object_set_new(o, "repetition", g->has_rep ? rep_to_json(&g->rep, g->rep.rejected_token_index >= 0)
                                                    : json_null());
    return dump_line(o, g->extra, err, errlen);
}

// ---- strict reading helpers -----------------------------------------------------------------

typedef struct {
    char *err;
    size_t errlen;
    const char *prefix; // "" or "repetition." etc. for nested objects
} ectx;

static int fail(ectx *e, const char *field, const char *what) {
    return bn_err(e->err, e->errlen, "field '%s%s': %s", e->prefix ? e->prefix : "", field, what);
}

// Required/optional string: returns 0 (set, or absent when optional -> *out NULL) or -1.
static int get_str(ectx *e, json_t *o, const char *k, bool required, char **out) {
    json_t *v = json_object_get(o, k);
    *out = NULL;
    if (!v) return required ? fail(e, k, "missing") : 0;
    if (!json_is_string(v)) return fail(e, k, "expected a string");
    size_t n = json_string_length(v);
    *out = xmalloc(n + 1);
    memcpy(*out, json_string_value(v), n + 1);
    return 0;
}

static int get_int(ectx *e, json_t *o, const char *k, bool required, int64_t lo, int64_t hi, int64_t *out) {
    json_t *v = json_object_get(o, k);
    if (!v) return required ? fail(e, k, "missing") : 0;
    if (!json_is_integer(v)) return fail(e, k, "expected an integer");
    int64_t x = json_integer_value(v);
    if (x < lo || x > hi) return fail(e, k, "integer out of range");
    *out = x;
    return 0;
}

static int get_num(ectx *e, json_t *o, const char *k, bool required, double *out) {
    json_t *v = json_object_get(o, k);
    if (!v) return required ? fail(e, k, "missing") : 0;
    if (!json_is_number(v)) return fail(e, k, "expected a number");
    *out = json_number_value(v);
    return 0;
}

static int get_str_array(ectx *e, json_t *o, const char *k, char ***out, int *n) {
    json_t *a = json_object_get(o, k);
    *out = NULL;
    *n = 0;
    if (!a) return fail(e, k, "missing");
    if (!json_is_array(a)) return fail(e, k, "expected an array of strings");
    size_t cnt = json_array_size(a);
    char **v = xcalloc(cnt + 1, sizeof *v);
    for (size_t i = 0; i < cnt; i++) {
        json_t *s = json_array_get(a, i);
        if (!json_is_string(s)) {
            for (size_t j = 0; j < i; j++) free(v[j]);
            free(v);
            return fail(e, k, "expected an array of strings");
        }
        size_t len = json_string_length(s);
        v[i] = xmalloc(len + 1);
        memcpy(v[i], json_string_value(s), len + 1);
    }
    *out = v;
    *n = (int)cnt;
    return 0;
}

static int get_id_array(ectx *e, json_t *o, const char *k, int32_t **out, int *n) {
    json_t *a = json_object_get(o, k);
    *out = NULL;
    *n = 0;
    if (!a) return fail(e, k, "missing");
    if (!json_is_array(a)) return fail(e, k, "expected an array of token ids");
    size_t cnt = json_array_size(a);
    int32_t *v = xmalloc((cnt + 1) * sizeof *v);
    for (size_t i = 0; i < cnt; i++) {
        json_t *x = json_array_get(a, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX) {
            free(v);
            return fail(e, k, "expected an array of token ids (integers >= 0)");
        }
        v[i] = (int32_t)json_integer_value(x);
    }
    *out = v;
    *n = (int)cnt;
    return 0;
}

static int parse_rep(ectx *e, json_t *v, bool need_index, bn_pair_rep *r) {
    if (!json_is_object(v)) return fail(e, "repetition", "expected an object");
    r->rejected_token_index = -1;
    ectx sub = {e->err, e->errlen, "repetition."};
    if (get_int(&sub, v, "start_char", true, 0, INT64_MAX, &r->start_char) ||
        get_int(&sub, v, "repeat_start_char", true, 0, INT64_MAX, &r->repeat_start_char) ||
        get_int(&sub, v, "rejected_token_index", need_index, 0, INT64_MAX, &r->rejected_token_index) ||
        get_int(&sub, v, "period", true, 1, INT64_MAX, &r->period) ||
        get_int(&sub, v, "repeats", true, 1, INT64_MAX, &r->repeats) ||
        get_str(&sub, v, "snippet", true, &r->snippet))
        return -1;
    return 0;
}

static json_t *load_object(ectx *e, const char *line, size_t len) {
    json_error_t je;
    json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!o) { bn_err(e->err, e->errlen, "invalid JSON at column %d: %s", je.column, je.text); return NULL; }
    if (!json_is_object(o)) {
        json_decref(o);
        bn_err(e->err, e->errlen, "expected a JSON object");
        return NULL;
    }
    return o;
}

// Moves keys not in `known` into a new object (NULL if none).
static json_t *collect_extra(json_t *o, const char *const *known) {
    json_t *extra = NULL;
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        bool is_known = false;
        for (int i = 0; known[i]; i++) is_known = is_known || strcmp(k, known[i]) == 0;
        if (is_known) continue;
        if (!extra) extra = json_object();
        json_object_set(extra, k, v);
    }
    return extra;
}

static const char *const pair_keys[] = {
    "context_before", "rejected_token", "rejected_decoded", "multi_chosen_tokens", "multi_chosen_decoded",
    "source", "source_prompt", "repetition", "context_ids", "rejected_id", "rejected_logprob", "chosen_ids",
    "topk", "gen", "prime", "split", NULL};

static int parse_gen(ectx *outer, json_t *g, bn_pair_gen *out) {
    if (!json_is_object(g)) return fail(outer, "gen", "expected an object");
    ectx sub = {outer->err, outer->errlen, "gen."}, *e = &sub;
    int64_t top_k = 0, n_probs = 0, seed = 0;
    if (get_num(e, g, "temperature", true, &out->temperature) || get_num(e, g, "top_p", false, &out->top_p) ||
        get_num(e, g, "min_p", false, &out->min_p) ||
        get_int(e, g, "top_k", false, 0, INT32_MAX, &top_k) || get_int(e, g, "seed", false, INT64_MIN, INT64_MAX, &seed) ||
        get_int(e, g, "n_probs", false, 0, INT32_MAX, &n_probs) ||
        get_str(e, g, "endpoint", false, &out->endpoint) || get_str(e, g, "model_file", false, &out->model_file) ||
        get_str(e, g, "model_sha256", false, &out->model_sha256) || get_str(e, g, "file_type", false, &out->file_type))
        return -1;
    out->top_k = (int)top_k;
    out->n_probs = (int)n_probs;
    out->seed = seed;
    return 0;
}

static int parse_prime(ectx *outer, json_t *p, bn_pair_prime *out) {
    if (!json_is_object(p)) return fail(outer, "prime", "expected an object or null");
    ectx sub = {outer->err, outer->errlen, "prime."}, *e = &sub;
    int64_t repeats = 0;
    if (get_str(e, p, "phrase", true, &out->phrase) || get_int(e, p, "repeats", true, 0, INT32_MAX, &repeats) ||
        get_int(e, p, "prefix_chars", false, 0, INT64_MAX, &out->prefix_chars) ||
        get_str(e, p, "scan_mode", false, &out->scan_mode))
        return -1;
    out->repeats = (int)repeats;
    if (out->scan_mode && strcmp(out->scan_mode, "completion") && strcmp(out->scan_mode, "assistant"))
        return fail(e, "scan_mode", "expected \"completion\" or \"assistant\"");
    return 0;
}

static int parse_topk(ectx *e, json_t *a, bn_pair_row *r) {
    if (!json_is_array(a)) return fail(e, "topk", "expected an array of [id, logprob]");
    size_t n = json_array_size(a);
    r->topk = xmalloc((n + 1) * sizeof *r->topk);
    for (size_t i = 0; i < n; i++) {
        json_t *pr = json_array_get(a, i);
        json_t *id = json_array_get(pr, 0), *lp = json_array_get(pr, 1);
        if (!json_is_array(pr) || json_array_size(pr) != 2 || !json_is_integer(id) || !json_is_number(lp) ||
            json_integer_value(id) < 0 || json_integer_value(id) > INT32_MAX)
            return fail(e, "topk", "expected an array of [id, logprob]");
        r->topk[i] = (bn_topk){(int32_t)json_integer_value(id), json_number_value(lp)};
    }
    r->n_topk = (int)n;
    r->has_topk = true;
    return 0;
}

static int parse_pair_obj(ectx *e, json_t *o, bn_pair_row *r) {
    if (get_str(e, o, "context_before", true, &r->context_before) ||
        get_str(e, o, "rejected_token", true, &r->rejected_token) ||
        get_str(e, o, "rejected_decoded", true, &r->rejected_decoded) ||
        get_str_array(e, o, "multi_chosen_tokens", &r->chosen_tokens, &r->n_chosen))
        return -1;
    int n_dec = 0;
    if (get_str_array(e, o, "multi_chosen_decoded", &r->chosen_decoded, &n_dec)) return -1;
    if (n_dec != r->n_chosen) {
        for (int i = 0; i < n_dec; i++) free(r->chosen_decoded[i]);
        free(r->chosen_decoded);
        r->chosen_decoded = NULL;
        return fail(e, "multi_chosen_decoded", "length differs from multi_chosen_tokens");
    }
    if (get_str(e, o, "source", true, &r->source) || get_str(e, o, "source_prompt", true, &r->source_prompt))
        return -1;
    json_t *rep = json_object_get(o, "repetition");
    if (!rep) return fail(e, "repetition", "missing");
    if (parse_rep(e, rep, true, &r->rep)) return -1;
    // id extension: context_ids, rejected_id, chosen_ids come together.
    bool any_ids = json_object_get(o, "context_ids") || json_object_get(o, "rejected_id") ||
                   json_object_get(o, "chosen_ids");
    if (any_ids) {
        int64_t rid = 0;
        int n_cid = 0;
        if (get_id_array(e, o, "context_ids", &r->context_ids, &r->n_context) ||
            get_int(e, o, "rejected_id", true, 0, INT32_MAX, &rid) ||
            get_id_array(e, o, "chosen_ids", &r->chosen_ids, &n_cid))
            return -1;
        r->rejected_id = (int32_t)rid;
        r->has_ids = true;
        if (n_cid != r->n_chosen) return fail(e, "chosen_ids", "length differs from multi_chosen_tokens");
    }
    if (json_object_get(o, "rejected_logprob")) {
        if (get_num(e, o, "rejected_logprob", true, &r->rejected_logprob)) return -1;
        r->has_rejected_logprob = true;
    }
    json_t *topk = json_object_get(o, "topk");
    if (topk && parse_topk(e, topk, r)) return -1;
    json_t *gen = json_object_get(o, "gen");
    if (gen) {
        if (parse_gen(e, gen, &r->gen)) return -1;
        r->has_gen = true;
    }
    json_t *prime = json_object_get(o, "prime");
    if (prime && json_is_null(prime)) r->prime_state = 1;
    else if (prime) {
        if (parse_prime(e, prime, &r->prime)) return -1;
        r->prime_state = 2;
    }
    if (get_str(e, o, "split", false, &r->split)) return -1;
    r->extra = collect_extra(o, pair_keys);
    return 0;
}

int bn_pair_row_parse(const char *line, size_t len, bn_pair_row *r, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    ectx e = {err, errlen, ""};
    json_t *o = load_object(&e, line, len);
    if (!o) return -1;
    int rc = parse_pair_obj(&e, o, r);
    json_decref(o);
    if (rc) bn_pair_row_free(r);
    return rc;
}

static const char *const gen_keys[] = {"source", "prompt", "completion", "status", "repetition", NULL};

int bn_gen_row_parse(const char *line, size_t len, bn_gen_row *g, char *err, size_t errlen) {
    memset(g, 0, sizeof *g);
    ectx e = {err, errlen, ""};
    json_t *o = load_object(&e, line, len);
    if (!o) return -1;
    int rc = -1;
    if (get_str(&e, o, "source", true, &g->source) || get_str(&e, o, "prompt", true, &g->prompt) ||
        get_str(&e, o, "completion", true, &g->completion) || get_str(&e, o, "status", true, &g->status))
        goto out;
    json_t *rep = json_object_get(o, "repetition");
    if (!rep) { fail(&e, "repetition", "missing (use null for none)"); goto out; }
    if (!json_is_null(rep)) {
        if (parse_rep(&e, rep, false, &g->rep)) goto out;
        g->has_rep = true;
    }
    g->extra = collect_extra(o, gen_keys);
    rc = 0;
out:
    json_decref(o);
    if (rc) bn_gen_row_free(g);
    return rc;
}

int bn_record_prompt_index(const char *line, size_t len, bool *loop_detected) {
    json_t *o = json_loadb(line, len, 0, NULL);
    if (!json_is_object(o)) { json_decref(o); return -1; }
    json_t *pi = json_object_get(o, "prompt_index");
    int idx = json_is_integer(pi) ? (int)json_integer_value(pi) : -1;
    if (loop_detected) {
        json_t *st = json_object_get(o, "status");
        *loop_detected = json_is_string(st) && !strcmp(json_string_value(st), "loop_detected");
    }
    json_decref(o);
    return idx;
}

// ---- ownership ------------------------------------------------------------------------------

static void free_strs(char **v, int n) {
    if (!v) return;
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

void bn_pair_row_free(bn_pair_row *r) {
    free(r->context_before); free(r->rejected_token); free(r->rejected_decoded);
    free_strs(r->chosen_tokens, r->n_chosen);
    free_strs(r->chosen_decoded, r->n_chosen);
    free(r->source); free(r->source_prompt); free(r->rep.snippet);
    free(r->context_ids); free(r->chosen_ids); free(r->topk);
    free(r->gen.endpoint); free(r->gen.model_file); free(r->gen.model_sha256); free(r->gen.file_type);
    free(r->prime.phrase); free(r->prime.scan_mode); free(r->split);
    if (r->extra) json_decref(r->extra);
    memset(r, 0, sizeof *r);
}

void bn_gen_row_free(bn_gen_row *g) {
    free(g->source); free(g->prompt); free(g->completion); free(g->status); free(g->rep.snippet);
    if (g->extra) json_decref(g->extra);
    memset(g, 0, sizeof *g);
}

static char *dup_or_null(const char *s) { return s ? xstrdup(s) : NULL; }

static char **dup_strs(char *const *v, int n) {
    if (!v) return NULL;
    char **d = xcalloc((size_t)n + 1, sizeof *d);
    for (int i = 0; i < n; i++) d[i] = dup_or_null(v[i]);
    return d;
}

static void *dup_mem(const void *p, size_t n) {
    if (!p) return NULL;
    void *d = xmalloc(n ? n : 1);
    memcpy(d, p, n);
    return d;
}

void bn_pair_row_copy(bn_pair_row *dst, const bn_pair_row *src) {
    *dst = *src;
    dst->context_before = dup_or_null(src->context_before);
    dst->rejected_token = dup_or_null(src->rejected_token);
    dst->rejected_decoded = dup_or_null(src->rejected_decoded);
    dst->chosen_tokens = dup_strs(src->chosen_tokens, src->n_chosen);
    dst->chosen_decoded = dup_strs(src->chosen_decoded, src->n_chosen);
    dst->source = dup_or_null(src->source);
    dst->source_prompt = dup_or_null(src->source_prompt);
    dst->rep.snippet = dup_or_null(src->rep.snippet);
    dst->context_ids = dup_mem(src->context_ids, (size_t)src->n_context * sizeof *src->context_ids);
    dst->chosen_ids = dup_mem(src->chosen_ids, (size_t)src->n_chosen * sizeof *src->chosen_ids);
    dst->topk = dup_mem(src->topk, (size_t)src->n_topk * sizeof *src->topk);
    dst->gen.endpoint = dup_or_null(src->gen.endpoint);
    dst->gen.model_file = dup_or_null(src->gen.model_file);
    dst->gen.model_sha256 = dup_or_null(src->gen.model_sha256);
    dst->gen.file_type = dup_or_null(src->gen.file_type);
    dst->prime.phrase = dup_or_null(src->prime.phrase);
    dst->prime.scan_mode = dup_or_null(src->prime.scan_mode);
    dst->split = dup_or_null(src->split);
    dst->extra = src->extra ? json_deep_copy(src->extra) : NULL;
}

// ---- files ----------------------------------------------------------------------------------

int bn_pairs_each(const char *path, bn_pair_row_fn fn, void *ctx, char *err, size_t errlen) {
    bn_lines *l = bn_lines_open(path, err, errlen);
    if (!l) return -1;
    int line_no = 0, rc = 0;
    const char *line;
    size_t len;
    char inner[1024];
    while (rc == 0 && (line = bn_lines_next(l, &len))) {
        line_no++;
        size_t k = 0;
        while (k < len && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r')) k++;
        if (k == len) continue; // blank line
        bn_pair_row row;
        if (bn_pair_row_parse(line, len, &row, inner, sizeof inner) < 0 || fn(&row, line_no, ctx, inner, sizeof inner) < 0)
            rc = bn_err(err, errlen, "%s:%d: %s", path, line_no, inner);
        bn_pair_row_free(&row);
    }
    if (rc == 0 && bn_lines_failed(l, err, errlen)) rc = -1;
    bn_lines_close(l);
    return rc;
}

typedef struct {
    bn_pair_row *rows;
    int n, cap;
} row_list;

// Takes the row into the list (leaving *row zeroed).
static int append_row(bn_pair_row *row, int line, void *ctx, char *err, size_t errlen) {
    row_list *l = ctx;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->rows = xrealloc(l->rows, (size_t)l->cap * sizeof *l->rows);
    }
    l->rows[l->n++] = *row;
    memset(row, 0, sizeof *row);
    return 0;
}

int bn_pairs_read(const char *path, bn_pair_row **rows_out, char *err, size_t errlen) {
    row_list l = {0};
    *rows_out = NULL;
    if (bn_pairs_each(path, append_row, &l, err, errlen) < 0) {
        bn_pairs_free(l.rows, l.n);
        return -1;
    }
    *rows_out = l.rows;
    return l.n;
}

int bn_pairs_write(const char *path, const bn_pair_row *rows, int n, char *err, size_t errlen) {
    bn_lineout *o = bn_lineout_open(path, err, errlen);
    if (!o) return -1;
    for (int i = 0; i < n; i++) {
        char *line = bn_pair_row_to_line(&rows[i], err, errlen);
        if (!line || bn_lineout_write(o, line, strlen(line), err, errlen) < 0) {
            free(line);
            bn_lineout_abort(o);
            return -1;
        }
        free(line);
    }
    return bn_lineout_commit(o, err, errlen);
}

void bn_pairs_free(bn_pair_row *rows, int n) {
    if (!rows) return;
    for (int i = 0; i < n; i++) bn_pair_row_free(&rows[i]);
    free(rows);
}
