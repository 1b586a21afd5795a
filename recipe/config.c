// recipe/config.c — bonsai-antidoom's settings: defaults, the JSON config file, stage signatures.
#include "recipe/config.h"
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "base/args.h"
#include "base/util.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "quantize/rules.h"
#include "train/device.h"

static const char *kind_names[BN_KIND_COUNT] = {"adapter", "f16", "q1_0", "q2_0"};

const char *bn_recipe_kind_name(bn_recipe_kind k) { return k >= 0 && k < BN_KIND_COUNT ? kind_names[k] : "?"; }

const char *bn_recipe_output_type(const bn_recipe_cfg *c) {
    return c->output_type && c->output_type[0] ? c->output_type : NULL;
}

int bn_recipe_fit_output_type(bn_recipe_cfg *c, char *note, size_t notelen, char *err, size_t errlen) {
    note[0] = 0;
    const char *head = bn_recipe_output_type(c);
    int kinds = bn_recipe_parse_kinds(c->kinds, err, errlen);
    if (kinds < 0) return -1;
    if (!head || !(kinds & (1 << BN_KIND_Q1_0 | 1 << BN_KIND_Q2_0))) return 0;
    int type = bn_parse_tensor_type_name(head, false, err, errlen);
    if (type < 0) return -1;
    gguf_file *f = gguf_open(c->model, err, errlen);
    if (!f) return -1;
    const gguf_tensor *t = gguf_find_tensor(f, "output.weight");
    if (!t) t = gguf_find_tensor(f, "token_embd.weight"); // a tied head
    int64_t ncols = t ? t->ne[0] : 0;
    gguf_close(f);
    if (!t) return bn_err(err, errlen, "%s: no output.weight or token_embd.weight tensor", c->model);
    int fit = bn_type_shape_fallback(type, ncols);
    if (fit == type) return 0;
    if (fit < 0)
        return bn_err(err, errlen, "--output-tensor-type %s: the output head's rows of %lld values do not fit its "
                      "%d-value blocks, and it has no fallback type", head, (long long)ncols, bn_type_blck(type));
    c->output_type = bn_type_name(fit); // a constant of the type table
    snprintf(note, notelen, "output.weight: rows of %lld values do not fit %s's %d-value blocks; %s instead "
             "(llama-quantize's fallback)", (long long)ncols, head, bn_type_blck(type), c->output_type);
    return 0;
}

int bn_recipe_train_gemm(const bn_recipe_cfg *c) {
    if (!c->train_gemm || !strcmp(c->train_gemm, "bf16")) return BN_TRAIN_GEMM_BF16;
    return !strcmp(c->train_gemm, "f32") ? BN_TRAIN_GEMM_F32 : -1;
}

bn_recipe_cfg bn_recipe_cfg_default(void) {
    bn_recipe_cfg c = {
        .kinds = "adapter", .threads = 2, .n_ctx = 2048, .train_gemm = "bf16", .seed = 1, .mine_seed = 1,
        .mine_prompts = {"data/prompts/train.jsonl", "data/val/tether-prompts.jsonl"}, .n_mine_prompts = 2,
        .mine_max = 600,
        .heldout_prompts = "data/prompts/heldout.jsonl", .heldout_text = "data/heldout.txt",
        .unseen_prompts = "data/val/prompts-questions-unseen.jsonl",
        .other_prompts = "data/val/prompts-other.jsonl",
        .val_pair_prompts = "data/val/prompts.jsonl", .val_loop_prompts = "data/val/prompts-questions-pick.jsonl",
        .val_text = "data/val/train-riddles.txt", .tether_text = "data/val/tether.txt", .val_max = 120,
        .n_predict = 256, .thinking = -2, .prime_repeats = 3, .prime_prefix_tokens = 24, .temps = "0.1,0.5,0.8",
        .headroom = 1, .seeds = 1, .rounds = 2, .epochs = 12, .early_stop = 0.8, .targets = "lm_head",
        .output_type = "q6_k",
        .lambda_nt = 1, .tether_ctx = 64, .tether_batch = 2, .goal_cut = 0.9, .goal_drift = 1.0};
    // λ_tether per kind: the adapter is not quantized, so a weaker tether holds it; Q2_0 trains with --keep-scales
    // (its validation picks took the stronger of 1 and 3 on every seed, so its pair is 3 and 10)
    const double t_adapter[] = {3, 10}, t_q1[] = {10, 30}, t_q2[] = {3, 10};
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

// ---- the keys and the flags ---------------------------------------------------------------------------------------
// Every setting once: its JSON key, type, place and range, and, when bonsai-antidoom has a flag for it, the flag's
// spellings and help (bn_recipe_args turns those into the tool's option table; -m, -t, -c and -ngl are the engine
// table's flags, so their keys have none here).

typedef enum { K_STR, K_INT, K_U64, K_REAL, K_BOOL, K_STRS, K_REALS } key_type;
typedef struct {
    const char *name;
    key_type type;
    size_t off, off_n; // off_n: the count of K_STRS / K_REALS
    double lo, hi;
    const char *section; // a --help heading before this key's flag (or before the next key that has one)
    const char *flag, *meta, *help; // the flag (NULL: config only), its value's name and its help line
    int (*fn)(void *base, const char *opt, const char *val, char *err, size_t errlen); // a flag that is not a plain
                                                                                      // value (lists)
} cfg_key;

// tethers_fn: --tethers KIND=A,B: the λ_tether candidates of one output kind.
static int tethers_fn(void *base, const char *opt, const char *v, char *err, size_t errlen) {
    bn_recipe_cfg *c = base;
    const char *eq = strchr(v, '=');
    char kind[16];
    if (!eq || eq - v >= (int)sizeof kind) return bn_err(err, errlen, "'%s' is not KIND=A,B,...", v);
    snprintf(kind, sizeof kind, "%.*s", (int)(eq - v), v);
    int mask = bn_recipe_parse_kinds(kind, err, errlen);
    if (mask < 0) return -1;
    int k = __builtin_ctz((unsigned)mask);
    int n = bn_recipe_parse_reals(eq + 1, c->tethers[k], BN_RECIPE_MAX_LIST, err, errlen);
    if (n <= 0) return n < 0 ? -1 : bn_err(err, errlen, "'%s': no tether strength", v);
    c->n_tethers[k] = n;
    return 0;
}

// mine_fn: --mine-prompts FILE (repeatable): the first one replaces the default list.
static int mine_fn(void *base, const char *opt, const char *v, char *err, size_t errlen) {
    bn_recipe_cfg *c = base;
    if (c->n_mine_flags == BN_RECIPE_MAX_LIST) return bn_err(err, errlen, "at most %d files", BN_RECIPE_MAX_LIST);
    c->mine_prompts[c->n_mine_flags++] = v;
    c->n_mine_prompts = c->n_mine_flags;
    return 0;
}

#define O(f) offsetof(bn_recipe_cfg, f)
// KEY: a config-only key; FLAG: a key with a flag; LIST: a list key whose flag is a function (fn_ NULL: none).
#define KEY(k_, t_, f_, lo_, hi_) {.name = (k_), .type = (t_), .off = O(f_), .lo = (lo_), .hi = (hi_)}
#define FLAG(k_, t_, f_, lo_, hi_, fl_, m_, h_)                                                                       \
    {.name = (k_), .type = (t_), .off = O(f_), .lo = (lo_), .hi = (hi_), .flag = (fl_), .meta = (m_), .help = (h_)}
#define LIST(k_, t_, f_, n_, lo_, hi_, fl_, fn_, m_, h_)                                                              \
    {.name = (k_), .type = (t_), .off = O(f_), .off_n = O(n_), .lo = (lo_), .hi = (hi_), .flag = (fl_),             \
     .fn = (fn_), .meta = (m_), .help = (h_)}
#define TETHERS(k_, kind_) LIST(k_, K_REALS, tethers[kind_], n_tethers[kind_], 0, 1e6, NULL, NULL, NULL, NULL)
static const cfg_key keys[] = {
    {.name = "model", .type = K_STR, .off = O(model), .section = "run"},
    FLAG("out", K_STR, out_dir, 0, 0, "--out", "DIR",
         "every stage's output, the manifest and the report (required; reused on rerun)"),
    FLAG("kinds", K_STR, kinds, 0, 0, "--kind, --kinds", "LIST",
         "outputs: adapter, f16, q1_0, q2_0 (comma list; default adapter)"),
    KEY("threads", K_INT, threads, 1, 4096),
    KEY("ctx_size", K_INT, n_ctx, 64, 1 << 20),
    KEY("gpu_layers", K_INT, n_gpu_layers, 0, 1 << 20),
    FLAG("seed", K_U64, seed, 0, 0x1p63, "-s, --seed", "N",
         "the first candidate's LoRA init, shuffles and tether windows (then seed+1, ...)"),
    FLAG("mine_seed", K_U64, mine_seed, 0, 0x1p63, "--mine-seed", "N",
         "mining's sampling (apart from -s: runs of several -s can share mining)"),
    FLAG("full", K_BOOL, full, 0, 0, "--full",
         NULL, "the full budget: all mining and validation prompts, 3 rounds, 2 seeds, 3 Q1_0 tethers"),
    {.name = "mine_prompts", .type = K_STRS, .off = O(mine_prompts), .off_n = O(n_mine_prompts),
     .hi = BN_RECIPE_MAX_LIST, .section = "data", .flag = "--mine-prompts", .fn = mine_fn, .meta = "FILE",
     .help = "prompts to mine (repeatable; default the train prompts and the tether prompts)"},
    FLAG("mine_max_prompts", K_INT, mine_max, 0, INT32_MAX, "--mine-max-prompts", "N",
         "prompts mined per round, split over the files: the first of each (0: all)"),
    FLAG("mine_spread", K_BOOL, mine_spread, 0, 0, "--mine-spread", NULL,
         "evenly spaced prompts of each file instead of the first ones"),
    FLAG("heldout_prompts", K_STR, heldout_prompts, 0, 0, "--heldout-prompts", "FILE",
         "held-out evaluation prompts (no pick sees them)"),
    FLAG("heldout_text", K_STR, heldout_text, 0, 0, "--heldout-text", "FILE", "held-out perplexity text"),
    FLAG("unseen_prompts", K_STR, unseen_prompts, 0, 0, "--unseen-prompts", "FILE",
         "a prompt source no stage touches, evaluated at the end"),
    FLAG("other_prompts", K_STR, other_prompts, 0, 0, "--other-prompts", "FILE",
         "prompts from other text than the model's (no stage touches them), evaluated at the end"),
    FLAG("val_pair_prompts", K_STR, val_pair_prompts, 0, 0, "--val-pair-prompts", "FILE",
         "validation pairs are mined on these"),
    FLAG("val_loop_prompts", K_STR, val_loop_prompts, 0, 0, "--val-loop-prompts", "FILE",
         "validation loop rate prompts"),
    FLAG("val_text", K_STR, val_text, 0, 0, "--val-text", "FILE", "validation perplexity text"),
    FLAG("tether_text", K_STR, tether_text, 0, 0, "--tether-text", "FILE", "plain text of the training KL tether"),
    FLAG("val_max_prompts", K_INT, val_max, 0, INT32_MAX, "--val-max-prompts", "N",
         "validation prompts used of each file (0: all)"),
    {.name = "n_predict", .type = K_INT, .off = O(n_predict), .lo = 1, .hi = 1 << 20, .section = "generation",
     .flag = "-n, --n-predict", .meta = "N", .help = "new tokens per prompt (mining and evaluation)"},
    FLAG("thinking", K_INT, thinking, -2, 1, "--thinking", "1|0|-1",
         "chat template: <think> open, closed, plain ChatML (default: what the model's own template has)"),
    KEY("prime_repeats", K_INT, prime_repeats, 1, 1000),
    KEY("prime_prefix_tokens", K_INT, prime_prefix_tokens, 1, 1 << 20),
    KEY("temps", K_STR, temps, 0, 0),
    KEY("headroom", K_REAL, headroom, 0.01, 1e6),
    {.name = "seeds", .type = K_INT, .off = O(seeds), .lo = 1, .hi = 64, .section = "training", .flag = "--seeds",
     .meta = "N", .help = "candidates per tether strength (seeds seed, seed+1, ...)"},
    LIST("tethers_adapter", K_REALS, tethers[BN_KIND_ADAPTER], n_tethers[BN_KIND_ADAPTER], 0, 1e6, "--tethers",
         tethers_fn, "KIND=A,B", "λ_tether candidates of a kind (default adapter=3,10 f16=3,10 q1_0=10,30 q2_0=3,10)"),
    TETHERS("tethers_f16", BN_KIND_F16),
    TETHERS("tethers_q1_0", BN_KIND_Q1_0),
    TETHERS("tethers_q2_0", BN_KIND_Q2_0),
    FLAG("rounds", K_INT, rounds, 1, 64, "--rounds", "N", "most on-policy rounds"),
    FLAG("lr", K_REAL, lr, 0, 1e3, "--lr", "X", "learning rate (0: the model's size preset, bonsai-ftpo-train --help)"),
    FLAG("rank", K_INT, rank, 0, 65536, "--rank", "N", "LoRA rank (0: the size preset)"),
    FLAG("epochs", K_INT, epochs, 1, 1000000, "--epochs", "N", "epochs"),
    FLAG("train_gemm", K_STR, train_gemm, 0, 0, "--train-gemm", BN_TRAIN_GEMM_NAMES,
         "with -ngl: the GPU training's base-weight products with bf16 inputs and fp32 accumulation, or f32 (the "
         "CPU trainer's arithmetic; bonsai-ftpo-train --help)"),
    FLAG("early_stop", K_REAL, early_stop, 0, 1, "--early-stop", "X", "stop at this running chosen_win"),
    FLAG("targets", K_STR, targets, 0, 0, "--targets", "LIST", "LoRA targets"),
    FLAG("output_tensor_type", K_STR, output_type, 0, 0, "--output-tensor-type", "TYPE",
         "q1_0 / q2_0 outputs: output.weight's type (default q6_k, llama-quantize's rule for low-bit files, which "
         "keeps an lm_head adapter's effect; a head too narrow for it: llama-quantize's fallback, q8_0; \"\" = low-bit "
         "like the rest)"),
    FLAG("lambda_nt", K_REAL, lambda_nt, 0, 1e6, "--lambda-nt", "X", "FTPO non-target tether λ_nt"),
    KEY("tether_ctx", K_INT, tether_ctx, 2, 1 << 20),
    KEY("tether_batch", K_INT, tether_batch, 1, 1 << 20),
    KEY("goal_cut", K_REAL, goal_cut, 0, 1),
    FLAG("goal_drift", K_REAL, goal_drift, 0, 1e6, "--goal-drift", "PCT",
         "validation drift the pick allows before a shortfall"),
    {0}};
#undef TETHERS
#undef LIST
#undef FLAG
#undef KEY
#undef O

int bn_recipe_args(bn_arg *out, int cap) {
    int n = 0;
    const char *section = NULL;
    for (const cfg_key *k = keys; k->name; k++) {
        if (k->section) section = k->section;
        if (!k->flag) continue;
        if (n + 3 > cap) return -1; // room for a heading, this flag and the end
        if (section) out[n++] = (bn_arg)BN_SECTION(section), section = NULL;
        bn_arg a = {.names = k->flag, .off = k->off, .meta = k->meta, .help = k->help, .lo = k->lo, .hi = k->hi};
        if (k->fn) a.type = BN_ARG_FN, a.fn = k->fn;
        else if (k->type == K_STR) a.type = BN_ARG_STR;
        else if (k->type == K_INT) a.type = BN_ARG_INT;
        else if (k->type == K_U64) a.type = BN_ARG_U64;
        else if (k->type == K_REAL) a.type = BN_ARG_DOUBLE;
        else if (k->type == K_BOOL) a.type = BN_ARG_TRUE;
        else return -1; // a list key needs a function
        out[n++] = a;
    }
    out[n] = (bn_arg){0};
    return n;
}

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
