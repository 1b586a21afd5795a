// recipe/config.c — bonsai-antidoom's settings: defaults, the JSON config file, stage signatures.
#include "recipe/config.h"
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "base/util.h"

static const char *kind_names[BN_KIND_COUNT] = {"adapter", "f16", "q1_0", "q2_0"};

const char *bn_recipe_kind_name(bn_recipe_kind k) { return k >= 0 && k < BN_KIND_COUNT ? kind_names[k] : "?"; }

const char *bn_recipe_output_type(const bn_recipe_cfg *c) {
    return c->output_type && c->output_type[0] ? c->output_type : NULL;
}

bn_recipe_cfg bn_recipe_cfg_default(void) {
    bn_recipe_cfg c = {
        .kinds = "adapter", .threads = 2, .n_ctx = 2048, .seed = 1, .mine_seed = 1,
        .mine_prompts = {"data/prompts/train.jsonl", "data/val/tether-prompts.jsonl"}, .n_mine_prompts = 2,
        .mine_max = 600,
        .heldout_prompts = "data/prompts/heldout.jsonl", .heldout_text = "data/heldout.txt",
        .unseen_prompts = "data/val/prompts-questions-unseen.jsonl",
        .val_pair_prompts = "data/val/prompts.jsonl", .val_loop_prompts = "data/val/prompts-questions-pick.jsonl",
        .val_text = "data/val/train-riddles.txt", .tether_text = "data/val/tether.txt", .val_max = 120,
        .n_predict = 256, .thinking = -2, .prime_repeats = 3, .prime_prefix_tokens = 24, .temps = "0.1,0.5,0.8",
        .headroom = 1, .seeds = 1, .rounds = 2, .epochs = 12, .early_stop = 0.8, .targets = "lm_head",
        .output_type = "q6_k",
        .lambda_nt = 1, .tether_ctx = 64, .tether_batch = 2, .goal_cut = 0.9, .goal_drift = 1.0};
    // λ_tether per kind: the adapter is not quantized, so a weaker tether holds it; Q2_0 trains with --keep-scales
    const double t_adapter[] = {3, 10}, t_q1[] = {10, 30}, t_q2[] = {1, 3};
    memcpy(c.tethers[BN_KIND_ADAPTER], t_adapter, sizeof t_adapter);
    memcpy(c.tethers[BN_KIND_F16], t_adapter, sizeof t_adapter);
    memcpy(c.tethers[BN_KIND_Q1_0], t_q1, sizeof t_q1);
    memcpy(c.tethers[BN_KIND_Q2_0], t_q2, sizeof t_q2);
    for (int k = 0; k < BN_KIND_COUNT; k++) c.n_tethers[k] = 2;
    return c;
}

void bn_recipe_cfg_full(bn_recipe_cfg *c) {
    c->full = true;
    c->mine_max = 0;
    c->val_max = 0;
    c->rounds = 3;
    c->seeds = 2;
    const double t_q1[] = {3, 10, 30};
    memcpy(c->tethers[BN_KIND_Q1_0], t_q1, sizeof t_q1);
    c->n_tethers[BN_KIND_Q1_0] = 3;
}

// ---- the JSON keys ------------------------------------------------------------------------------------------------

typedef enum { K_STR, K_INT, K_U64, K_REAL, K_BOOL, K_STRS, K_REALS } key_type;
typedef struct {
    const char *name;
    key_type type;
    size_t off, off_n; // off_n: the count of K_STRS / K_REALS
    double lo, hi;
} cfg_key;

#define O(f) offsetof(bn_recipe_cfg, f)
static const cfg_key keys[] = {
    {"model", K_STR, O(model), 0, 0, 0},
    {"out", K_STR, O(out_dir), 0, 0, 0},
    {"kinds", K_STR, O(kinds), 0, 0, 0},
    {"threads", K_INT, O(threads), 0, 1, 4096},
    {"ctx_size", K_INT, O(n_ctx), 0, 64, 1 << 20},
    {"gpu_layers", K_INT, O(n_gpu_layers), 0, 0, 1 << 20},
    {"seed", K_U64, O(seed), 0, 0, 0x1p63},
    {"mine_seed", K_U64, O(mine_seed), 0, 0, 0x1p63},
    {"full", K_BOOL, O(full), 0, 0, 0},
    {"mine_prompts", K_STRS, O(mine_prompts), O(n_mine_prompts), 0, BN_RECIPE_MAX_LIST},
    {"mine_max_prompts", K_INT, O(mine_max), 0, 0, 1 << 30},
    {"mine_spread", K_BOOL, O(mine_spread), 0, 0, 0},
    {"heldout_prompts", K_STR, O(heldout_prompts), 0, 0, 0},
    {"heldout_text", K_STR, O(heldout_text), 0, 0, 0},
    {"unseen_prompts", K_STR, O(unseen_prompts), 0, 0, 0},
    {"val_pair_prompts", K_STR, O(val_pair_prompts), 0, 0, 0},
    {"val_loop_prompts", K_STR, O(val_loop_prompts), 0, 0, 0},
    {"val_text", K_STR, O(val_text), 0, 0, 0},
    {"tether_text", K_STR, O(tether_text), 0, 0, 0},
    {"val_max_prompts", K_INT, O(val_max), 0, 0, 1 << 30},
    {"n_predict", K_INT, O(n_predict), 0, 1, 1 << 20},
    {"thinking", K_INT, O(thinking), 0, -2, 1},
    {"prime_repeats", K_INT, O(prime_repeats), 0, 1, 1000},
    {"prime_prefix_tokens", K_INT, O(prime_prefix_tokens), 0, 1, 1 << 20},
    {"temps", K_STR, O(temps), 0, 0, 0},
    {"headroom", K_REAL, O(headroom), 0, 0.01, 1e6},
    {"seeds", K_INT, O(seeds), 0, 1, 64},
    {"tethers_adapter", K_REALS, O(tethers[BN_KIND_ADAPTER]), O(n_tethers[BN_KIND_ADAPTER]), 0, 1e6},
    {"tethers_f16", K_REALS, O(tethers[BN_KIND_F16]), O(n_tethers[BN_KIND_F16]), 0, 1e6},
    {"tethers_q1_0", K_REALS, O(tethers[BN_KIND_Q1_0]), O(n_tethers[BN_KIND_Q1_0]), 0, 1e6},
    {"tethers_q2_0", K_REALS, O(tethers[BN_KIND_Q2_0]), O(n_tethers[BN_KIND_Q2_0]), 0, 1e6},
    {"rounds", K_INT, O(rounds), 0, 1, 100},
    {"lr", K_REAL, O(lr), 0, 0, 1e3},
    {"rank", K_INT, O(rank), 0, 0, 65536},
    {"epochs", K_INT, O(epochs), 0, 1, 1000000},
    {"early_stop", K_REAL, O(early_stop), 0, 0, 1},
    {"targets", K_STR, O(targets), 0, 0, 0},
    {"output_tensor_type", K_STR, O(output_type), 0, 0, 0},
    {"lambda_nt", K_REAL, O(lambda_nt), 0, 0, 1e6},
    {"tether_ctx", K_INT, O(tether_ctx), 0, 2, 1 << 20},
    {"tether_batch", K_INT, O(tether_batch), 0, 1, 1 << 20},
    {"goal_cut", K_REAL, O(goal_cut), 0, 0, 1},
    {"goal_drift", K_REAL, O(goal_drift), 0, 0, 1e6},
    {0}};
#undef O

// set_key: value v of key k into c; 0, or -1 with err naming what is wrong (the caller adds the file and key).
static int set_key(bn_recipe_cfg *c, const cfg_key *k, json_t *v, char *err, size_t errlen) {
    char *p = (char *)c + k->off;
    switch (k->type) {
    case K_STR:
        if (!json_is_string(v)) return bn_err(err, errlen, "expected a string");
        *(const char **)p = json_string_value(v);
        return 0;
    case K_BOOL:
        if (!json_is_boolean(v)) return bn_err(err, errlen, "expected true or false");
        *(bool *)p = json_is_true(v);
        return 0;
    case K_INT: case K_U64: case K_REAL: {
        if (!json_is_number(v) || (k->type != K_REAL && !json_is_integer(v)))
            return bn_err(err, errlen, "expected %s", k->type == K_REAL ? "a number" : "an integer");
        double x = json_number_value(v);
        if (!(x >= k->lo && x <= k->hi)) return bn_err(err, errlen, "%g is out of range (%g..%g)", x, k->lo, k->hi);
        if (k->type == K_INT) *(int *)p = (int)json_integer_value(v);
        else if (k->type == K_U64) *(uint64_t *)p = (uint64_t)json_integer_value(v);
        else *(double *)p = x;
        return 0;
    }
    case K_STRS: case K_REALS: {
        if (!json_is_array(v) || json_array_size(v) > BN_RECIPE_MAX_LIST)
            return bn_err(err, errlen, "expected an array of at most %d %s", BN_RECIPE_MAX_LIST,
                          k->type == K_STRS ? "strings" : "numbers");
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
            if (k->type == K_STRS && !json_is_string(e)) return bn_err(err, errlen, "element %zu is not a string", i);
            if (k->type == K_REALS && !(json_is_number(e) && json_number_value(e) >= k->lo &&
                                        json_number_value(e) <= k->hi))
                return bn_err(err, errlen, "element %zu is not a number in %g..%g", i, k->lo, k->hi);
            if (k->type == K_STRS) ((const char **)p)[i] = json_string_value(e);
            else ((double *)p)[i] = json_number_value(e);
        }
        *(int *)((char *)c + k->off_n) = (int)json_array_size(v);
        return 0;
    }
    }
    return bn_err(err, errlen, "internal: bad key type");
}

int bn_recipe_cfg_load_json(bn_recipe_cfg *c, const char *path, void **doc, char *err, size_t errlen) {
    json_error_t je;
    *doc = NULL;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) return bn_err(err, errlen, "%s:%d: %s", path, je.line, je.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return bn_err(err, errlen, "%s: expected a JSON object of settings", path);
    }
    const char *name;
    json_t *v, *full = json_object_get(root, "full");
    if (json_is_true(full)) bn_recipe_cfg_full(c); // the budget first: the other keys override it
    json_object_foreach(root, name, v) {
        const cfg_key *k = keys;
        while (k->name && strcmp(k->name, name)) k++;
        char why[256];
        if (!k->name) bn_err(why, sizeof why, "unknown key (docs/antidoom.md §18 lists the keys)");
        if (!k->name || set_key(c, k, v, why, sizeof why) < 0) {
            bn_err(err, errlen, "%s: key \"%s\": %s", path, name, why);
            json_decref(root);
            return -1;
        }
    }
    *doc = root;
    return 0;
}

void bn_recipe_json_free(void *doc) { json_decref((json_t *)doc); }

int bn_recipe_parse_kinds(const char *s, char *err, size_t errlen) {
    int mask = 0;
    const char *p = s;
    while (p && *p) {
        size_t n = strcspn(p, ",");
        int k = 0;
        while (k < BN_KIND_COUNT && (strlen(kind_names[k]) != n || strncasecmp(kind_names[k], p, n))) k++;
        if (k == BN_KIND_COUNT)
            return bn_err(err, errlen, "unknown output kind '%.*s' (adapter, f16, q1_0, q2_0)", (int)n, p);
        mask |= 1 << k;
        p += n + (p[n] == ',');
    }
    if (!mask) return bn_err(err, errlen, "no output kind given");
    return mask;
}

int bn_recipe_parse_reals(const char *s, double *out, int max, char *err, size_t errlen) {
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        double x = strtod(p, &end);
        if (end == p || !isfinite(x) || (*end && *end != ','))
            return bn_err(err, errlen, "'%s' is not a list of numbers", s);
        if (n == max) return bn_err(err, errlen, "'%s': more than %d numbers", s, max);
        out[n++] = x;
        p = *end ? end + 1 : end;
    }
    return n;
}

char *bn_recipe_cfg_json(const bn_recipe_cfg *c) {
    json_t *o = json_object();
    for (const cfg_key *k = keys; k->name; k++) {
        const char *p = (const char *)c + k->off;
        json_t *v = NULL;
        switch (k->type) {
        case K_STR: v = *(const char *const *)p ? json_string(*(const char *const *)p) : json_null(); break;
        case K_BOOL: v = json_boolean(*(const bool *)p); break;
        case K_INT: v = json_integer(*(const int *)p); break;
        case K_U64: v = json_integer((json_int_t) * (const uint64_t *)p); break;
        case K_REAL: v = json_real(*(const double *)p); break;
        case K_STRS: case K_REALS: {
            v = json_array();
            int n = *(const int *)((const char *)c + k->off_n);
            for (int i = 0; i < n; i++)
                json_array_append_new(v, k->type == K_STRS ? json_string(((const char *const *)p)[i])
                                                           : json_real(((const double *)p)[i]));
            break;
        }
        }
        json_object_set_new(o, k->name, v);
    }
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(o);
    return s;
}

uint64_t bn_sig(uint64_t h, const char *text) {
    if (!h) h = 1469598103934665603ULL;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) h = (h ^ *p) * 1099511628211ULL;
    return (h ^ 0xff) * 1099511628211ULL; // a separator, so ("ab","c") and ("a","bc") differ
}

uint64_t bn_sig_file(uint64_t h, const char *path) {
    struct stat st;
    char buf[128];
    h = bn_sig(h, path ? path : "");
    if (!path || stat(path, &st) != 0) return bn_sig(h, "missing");
    snprintf(buf, sizeof buf, "%lld:%lld", (long long)st.st_size, (long long)st.st_mtime);
    return bn_sig(h, buf);
}
