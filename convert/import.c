// convert/import.c — HF safetensors checkpoint → GGUF (llama.cpp convert_hf_to_gguf.py rules).
#include "convert/convert.h"
#include "convert/convert_impl.h"
#include "convert/safetensors.h"
#include "gguf/gguf.h"
#include "base/util.h"
#include "quant/quant.h"
#include <jansson.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int arch;
    const char *prefix; // "model." or "model.language_model."
    int64_t H, L, F, nh, nkv, hd, ctx, V;
    double eps, theta, partial;
    bool tied;
    bool has_head_dim;     // config.json has head_dim (llama.cpp writes key/value_length only then)
    cv_params p;
    int K, interval;
    json_t *layer_types;   // borrowed
    json_t *mrope_section; // borrowed, may be NULL
} hf_config;

static int64_t jint(json_t *o, const char *k, int64_t def) {
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? json_integer_value(v) : def;
}

static double jnum(json_t *o, const char *k, double def) {
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : def;
}

// Bounds on config.json's numbers: each must fit the GGUF KV it becomes (u32) and the int arithmetic of the shapes
// and loops built from it; the tensors' shapes are checked against them later. Layers are bounded again by the
// checkpoint's tensor count (bn_convert_hf_to_gguf).
enum { MAX_DIM = 1 << 20, MAX_LAYERS = 1 << 16, MAX_CONV_KERNEL = 256 };

// in_range: 0 when config.json's key has the value v in lo..hi, else -1 with err
static int in_range(const char *key, int64_t v, int64_t lo, int64_t hi, char *err, size_t errlen) {
    if (v >= lo && v <= hi) return 0;
    return bn_err(err, errlen, "config.json: %s = %lld (expected %lld..%lld)", key, (long long)v, (long long)lo,
                  (long long)hi);
}

// check_gdn: the Gated DeltaNet sizes of a qwen35 config (read from t) in range; 0 or -1 with err
static int check_gdn(json_t *t, char *err, size_t errlen) {
    static const char *const dims[] = {"linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                                       "linear_value_head_dim"};
    for (int i = 0; i < 4; i++)
        if (in_range(dims[i], jint(t, dims[i], 1), 1, MAX_DIM, err, errlen) != 0) return -1;
    if (in_range("linear_conv_kernel_dim", jint(t, "linear_conv_kernel_dim", 4), 1, MAX_CONV_KERNEL, err, errlen) != 0)
        return -1;
    return in_range("full_attention_interval", jint(t, "full_attention_interval", 4), 1, MAX_LAYERS, err, errlen);
}

// check_ranges: the common sizes and the real-valued hyperparameters of c in range; 0 or -1 with err
static int check_ranges(const hf_config *c, char *err, size_t errlen) {
    const struct { const char *key; int64_t v, lo, hi; } lim[] = {
        {"hidden_size", c->H, 1, MAX_DIM},           {"num_hidden_layers", c->L, 1, MAX_LAYERS},
        {"intermediate_size", c->F, 1, 4 * MAX_DIM}, {"num_attention_heads", c->nh, 1, MAX_DIM},
        {"num_key_value_heads", c->nkv, 1, MAX_DIM}, {"head_dim", c->hd, 1, MAX_DIM},
        {"vocab_size", c->V, 0, INT32_MAX},          {"max_position_embeddings", c->ctx, 0, INT32_MAX},
    };
    for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++)
        if (in_range(lim[i].key, lim[i].v, lim[i].lo, lim[i].hi, err, errlen) != 0) return -1;
    if (!(c->eps > 0 && c->eps < 1)) return bn_err(err, errlen, "config.json: rms_norm_eps = %g (expected 0..1)", c->eps);
    if (!(c->theta > 0 && c->theta <= 1e30))
        return bn_err(err, errlen, "config.json: rope_theta = %g (expected 0..1e30)", c->theta);
    if (!(c->partial >= 0 && c->partial <= 1))
        return bn_err(err, errlen, "config.json: partial_rotary_factor = %g (expected 0..1)", c->partial);
    return 0;
}

// read_config: architecture and hyperparameters from config.json (text_config for the VLM class).
static int read_config(json_t *root, hf_config *c, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    json_t *archs = json_object_get(root, "architectures");
    const char *a = json_string_value(json_array_get(archs, 0));
    if (!a) return bn_err(err, errlen, "config.json: no architectures[0]");
    json_t *t = root;
    if (strcmp(a, "Qwen3_5ForCausalLM") == 0) c->arch = CV_QWEN35, c->prefix = "model.";
    else if (strcmp(a, "Qwen3_5ForConditionalGeneration") == 0) {
        c->arch = CV_QWEN35, c->prefix = "model.language_model.";
        if (json_is_object(json_object_get(root, "text_config"))) t = json_object_get(root, "text_config");
    } else if (strcmp(a, "Qwen3ForCausalLM") == 0) c->arch = CV_QWEN3, c->prefix = "model.";
    else if (strcmp(a, "Qwen2ForCausalLM") == 0) c->arch = CV_QWEN2, c->prefix = "model.";
    else
        return bn_err(err, errlen, "unsupported architecture %s (supported: Qwen3_5ForCausalLM, "
                      "Qwen3_5ForConditionalGeneration, Qwen3ForCausalLM, Qwen2ForCausalLM)", a);
    c->H = jint(t, "hidden_size", 0);
    c->L = jint(t, "num_hidden_layers", 0);
    c->F = jint(t, "intermediate_size", 0);
    c->nh = jint(t, "num_attention_heads", 0);
    c->nkv = jint(t, "num_key_value_heads", c->nh);
    c->hd = jint(t, "head_dim", c->nh ? c->H / c->nh : 0);
    c->has_head_dim = json_is_integer(json_object_get(t, "head_dim"));
    c->ctx = jint(t, "max_position_embeddings", 0);
    c->V = jint(t, "vocab_size", 0);
    c->eps = jnum(t, "rms_norm_eps", 1e-6);
    json_t *rp = json_object_get(t, "rope_parameters");
    if (!json_is_object(rp)) rp = json_object_get(t, "rope_scaling");
    c->theta = jnum(t, "rope_theta", json_is_object(rp) ? jnum(rp, "rope_theta", 10000.0) : 10000.0);
    c->partial = jnum(t, "partial_rotary_factor", json_is_object(rp) ? jnum(rp, "partial_rotary_factor", 0.25) : 0.25);
    c->mrope_section = json_is_object(rp) ? json_object_get(rp, "mrope_section") : NULL;
    json_t *tie = json_object_get(t, "tie_word_embeddings");
    if (!tie) tie = json_object_get(root, "tie_word_embeddings");
    c->tied = json_is_true(tie);
    c->p.arch = c->arch;
    if (c->arch == CV_QWEN35) {
        // the GDN sizes and kernel as int: bounded first (check_gdn)
        if (check_gdn(t, err, errlen) != 0) return -1;
        c->p.Hk = (int)jint(t, "linear_num_key_heads", 0);
        c->p.Hv = (int)jint(t, "linear_num_value_heads", 0);
        c->p.dk = (int)jint(t, "linear_key_head_dim", 0);
        c->p.dv = (int)jint(t, "linear_value_head_dim", 0);
        c->K = (int)jint(t, "linear_conv_kernel_dim", 4);
        c->interval = (int)jint(t, "full_attention_interval", 4);
        c->layer_types = json_object_get(t, "layer_types");
        if (c->p.Hk <= 0 || c->p.Hv <= 0 || c->p.dk <= 0 || c->p.dv <= 0 || c->p.Hv % c->p.Hk != 0)
            return bn_err(err, errlen, "config.json: bad linear attention heads (key %d x %d, value %d x %d)", c->p.Hk,
                          c->p.dk, c->p.Hv, c->p.dv);
        if (c->layer_types && (!json_is_array(c->layer_types) || (int64_t)json_array_size(c->layer_types) != c->L))
            return bn_err(err, errlen, "config.json: layer_types has %zu entries, expected num_hidden_layers (%lld)",
                          json_array_size(c->layer_types), (long long)c->L);
    }
    if (c->H <= 0 || c->L <= 0 || c->F <= 0 || c->nh <= 0 || c->nkv <= 0 || c->hd <= 0)
        return bn_err(err, errlen, "config.json: missing or bad hidden_size/num_hidden_layers/intermediate_size/heads");
    return check_ranges(c, err, errlen);
}

static void set_metadata(gguf_writer *w, const hf_config *c, const char *name, int ftype) {
    const char *a = cv_arch_name(c->arch);
    char key[128];
#define KEY(s) (snprintf(key, sizeof key, "%s.%s", a, s), key)
    gguf_set_str(w, "general.architecture", a);
    gguf_set_str(w, "general.type", "model");
    gguf_set_str(w, "general.name", name);
    gguf_set_u32(w, KEY("block_count"), (uint32_t)c->L);
    if (c->ctx > 0) gguf_set_u32(w, KEY("context_length"), (uint32_t)c->ctx);
    gguf_set_u32(w, KEY("embedding_length"), (uint32_t)c->H);
    gguf_set_u32(w, KEY("feed_forward_length"), (uint32_t)c->F);
    gguf_set_u32(w, KEY("attention.head_count"), (uint32_t)c->nh);
    gguf_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)c->nkv);
    if (c->arch == CV_QWEN35 && json_is_array(c->mrope_section)) {
        int32_t sec[4] = {0, 0, 0, 0};
        for (size_t i = 0; i < 4 && i < json_array_size(c->mrope_section); i++)
            sec[i] = (int32_t)json_integer_value(json_array_get(c->mrope_section, i));
        gguf_set_arr(w, KEY("rope.dimension_sections"), GGUF_TYPE_INT32, 4, sec);
    }
    gguf_set_f32(w, KEY("rope.freq_base"), (float)c->theta);
    gguf_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), (float)c->eps);
    if (c->has_head_dim) {
        gguf_set_u32(w, KEY("attention.key_length"), (uint32_t)c->hd);
        gguf_set_u32(w, KEY("attention.value_length"), (uint32_t)c->hd);
    }
    gguf_set_u32(w, "general.file_type", (uint32_t)ftype);
    if (c->arch == CV_QWEN35) {
        gguf_set_u32(w, KEY("ssm.conv_kernel"), (uint32_t)c->K);
        gguf_set_u32(w, KEY("ssm.state_size"), (uint32_t)c->p.dk);
        gguf_set_u32(w, KEY("ssm.group_count"), (uint32_t)c->p.Hk);
        gguf_set_u32(w, KEY("ssm.time_step_rank"), (uint32_t)c->p.Hv);
        gguf_set_u32(w, KEY("ssm.inner_size"), (uint32_t)((int64_t)c->p.Hv * c->p.dv));
        if (c->layer_types) {
            size_t n = json_array_size(c->layer_types);
            uint8_t *rec = xcalloc(n ? n : 1, 1);
            for (size_t i = 0; i < n; i++)
                rec[i] = strcmp(json_string_value(json_array_get(c->layer_types, i)) ?: "", "linear_attention") == 0;
            gguf_set_arr(w, KEY("attention.recurrent_layers"), GGUF_TYPE_BOOL, n, rec);
            free(rec);
        }
        gguf_set_u32(w, KEY("full_attention_interval"), (uint32_t)c->interval);
        gguf_set_u32(w, KEY("rope.dimension_count"), (uint32_t)lround((double)c->hd * c->partial));
        if (!json_is_array(c->mrope_section)) {
            const int32_t def[4] = {11, 11, 10, 0};
            gguf_set_arr(w, KEY("rope.dimension_sections"), GGUF_TYPE_INT32, 4, def);
        }
    }
    gguf_set_u32(w, "general.quantization_version", 2);
#undef KEY
}

// ---- tokenizer ----------------------------------------------------------------------------

static const char *special_content(json_t *v) {
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v)) return json_string_value(json_object_get(v, "content"));
    return NULL;
}

// looks_special: llama.cpp's does_token_look_special (added tokens it makes CONTROL even when not "special").
static bool looks_special(const char *s) {
    size_t n = strlen(s);
    static const char *const exact[] = {"<pad>", "<mask>", "<2mass>", "[@BOS@]"};
    for (size_t i = 0; i < sizeof exact / sizeof *exact; i++)
        if (strcmp(s, exact[i]) == 0) return true;
    if (n >= 4 && strncmp(s, "<|", 2) == 0 && strcmp(s + n - 2, "|>") == 0) return true;
    const char *fl = "<\xef\xbd\x9c", *fr = "\xef\xbd\x9c>"; // fullwidth ｜ (deepseek-coder)
    if (n >= 8 && strncmp(s, fl, 4) == 0 && strcmp(s + n - 4, fr) == 0) return true;
    return n >= 8 && strncmp(s, "<unused", 7) == 0 && s[n - 1] == '>';
}

// token_list: tokens[id] and types[id] of the n embedding rows from tokenizer.json's model.vocab and added_tokens (ids
// without a token become "[PAD<id>]", in pads[id]); 0, or -1 (err) on an id outside 0..n−1 or a malformed entry.
static int token_list(json_t *tok, json_t *vocab, const char *path, int64_t n, const char **tokens, int32_t *types,
                      char **pads, char *err, size_t errlen) {
    const char *k;
    json_t *v;
    size_t i;
    int rc = 0;
    json_object_foreach(vocab, k, v) {
        const int64_t id = json_is_integer(v) ? json_integer_value(v) : -1;
        if (id < 0 || id >= n) {
            if (!json_is_integer(v)) rc = bn_err(err, errlen, "%s: token \"%s\": its id is not an integer", path, k);
            else rc = bn_err(err, errlen, "%s: token \"%s\": id %lld outside 0..%lld (the embedding's rows)", path, k,
                             (long long)id, (long long)n - 1);
            break;
        }
        tokens[id] = k;
        types[id] = 1; // normal
    }
    json_array_foreach(json_object_get(tok, "added_tokens"), i, v) {
        if (rc != 0) break;
        const int64_t id = jint(v, "id", -1);
        const char *s = json_string_value(json_object_get(v, "content"));
        if (id < 0 || id >= n || !s) {
            rc = bn_err(err, errlen, "%s: added_tokens[%zu]: %s", path, i,
                        s ? "id missing or outside the embedding's rows" : "no content string");
            break;
        }
        tokens[id] = s;
        types[id] = (json_is_true(json_object_get(v, "special")) || looks_special(s)) ? 3 : 4;
    }
    for (int64_t t = 0; t < n; t++)
        if (!tokens[t]) {
            pads[t] = xmalloc(32);
            snprintf(pads[t], 32, "[PAD%lld]", (long long)t);
            tokens[t] = pads[t];
            types[t] = 5; // unused
        }
    return rc;
}

// merge_list: model.merges as "a b" strings (ms[i], each owned; "" for a malformed one); 0, or -1 (err) when one is
// neither "a b" nor [a, b].
static int merge_list(json_t *merges, const char *path, char **ms, char *err, size_t errlen) {
    size_t i;
    json_t *v;
    int rc = 0;
    json_array_foreach(merges, i, v) {
        if (json_is_string(v)) ms[i] = xstrdup(json_string_value(v));
        else if (json_is_array(v) && json_array_size(v) == 2) {
            const char *l = json_string_value(json_array_get(v, 0)), *r = json_string_value(json_array_get(v, 1));
            size_t len = strlen(l ?: "") + strlen(r ?: "") + 2;
            ms[i] = xmalloc(len);
            snprintf(ms[i], len, "%s %s", l ?: "", r ?: "");
        } else {
            rc = bn_err(err, errlen, "%s: merge %zu is neither \"a b\" nor [a, b]", path, i);
            ms[i] = xstrdup("");
        }
    }
    return rc;
}

// set_chat_template: tokenizer.chat_template[.NAME] from tokenizer_config.json's chat_template (a string or a list of
// named templates), else from DIR/chat_template.jinja when there is one.
static void set_chat_template(gguf_writer *w, const char *dir, json_t *tc) {
    json_t *tmpl = tc ? json_object_get(tc, "chat_template") : NULL;
    if (json_is_string(tmpl)) {
        gguf_set_str(w, "tokenizer.chat_template", json_string_value(tmpl));
    } else if (json_is_array(tmpl)) {
        size_t i;
        json_t *e;
        json_array_foreach(tmpl, i, e) {
            const char *nm = json_string_value(json_object_get(e, "name"));
            const char *tx = json_string_value(json_object_get(e, "template"));
            if (!nm || !tx) continue;
            char key[256];
            if (strcmp(nm, "default") == 0) snprintf(key, sizeof key, "tokenizer.chat_template");
            else snprintf(key, sizeof key, "tokenizer.chat_template.%s", nm);
            gguf_set_str(w, key, tx);
        }
    } else {
        char path[4096];
        snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
        size_t len;
        char *s = access(path, R_OK) == 0 ? bn_read_file(path, &len, NULL, 0) : NULL;
        if (s) gguf_set_str(w, "tokenizer.chat_template", s);
        free(s);
    }
}

// set_specials: the special token ids (tokenizer_config.json's *_token contents looked up in tokens, config.json's
// *_token_id as the fallback, as gguf-py's SpecialVocab), add_bos/add_eos and the chat template.
static void set_specials(gguf_writer *w, const char *dir, json_t *config, const char *const *tokens, int64_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    json_error_t je;
    json_t *tc = json_load_file(path, 0, &je);
    static const char *const kinds[] = {"bos", "eos", "unk", "sep", "pad"};
    static const char *const gkeys[] = {"bos_token_id", "eos_token_id", "unknown_token_id", "seperator_token_id",
                                        "padding_token_id"};
    for (int s = 0; s < 5; s++) {
        char tk[32];
        snprintf(tk, sizeof tk, "%s_token", kinds[s]);
        const char *content = tc ? special_content(json_object_get(tc, tk)) : NULL;
        int64_t id = -1;
        if (content)
            for (int64_t t = 0; t < n && id < 0; t++)
                if (strcmp(tokens[t], content) == 0) id = t;
        if (id < 0) {
            snprintf(tk, sizeof tk, "%s_token_id", kinds[s]);
            id = jint(config, tk, -1);
        }
        if (id >= 0 && id < n) {
            char key[64];
            snprintf(key, sizeof key, "tokenizer.ggml.%s", gkeys[s]);
            gguf_set_u32(w, key, (uint32_t)id);
        }
    }
    if (tc && json_is_boolean(json_object_get(tc, "add_bos_token")))
        gguf_set_bool(w, "tokenizer.ggml.add_bos_token", json_is_true(json_object_get(tc, "add_bos_token")));
    if (tc && json_is_boolean(json_object_get(tc, "add_eos_token")))
        gguf_set_bool(w, "tokenizer.ggml.add_eos_token", json_is_true(json_object_get(tc, "add_eos_token")));
    set_chat_template(w, dir, tc);
    json_decref(tc);
}

// set_tokenizer: the tokenizer.* KVs from tokenizer.json and tokenizer_config.json (config.json's *_token_id as the
// fallback) for a model of n_rows embedding rows: the token list has n_rows entries (ids without a token become
// "[PAD<id>]"), and an id outside 0..n_rows−1 is refused. Returns 0 or -1 with err.
static int set_tokenizer(gguf_writer *w, const char *dir, const hf_config *c, json_t *config, int64_t n_rows, char *err,
                         size_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    json_error_t je;
    json_t *tok = json_load_file(path, 0, &je);
    if (!tok) return bn_err(err, errlen, "%s: %s", path, je.text);
    json_t *model = json_object_get(tok, "model");
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    const char *type = json_string_value(json_object_get(model, "type"));
    if (!type || strcmp(type, "BPE") != 0 || !json_is_object(vocab) || !json_is_array(merges)) {
        json_decref(tok);
        return bn_err(err, errlen, "%s: not a BPE tokenizer with model.vocab and model.merges", path);
    }
    const int64_t n = n_rows;
    const char **tokens = xcalloc((size_t)n, sizeof(char *));
    int32_t *types = xcalloc((size_t)n, sizeof(int32_t));
    char **pads = xcalloc((size_t)n, sizeof(char *));
    int rc = token_list(tok, vocab, path, n, tokens, types, pads, err, errlen);
    size_t nm = json_array_size(merges);
    char **ms = xcalloc(nm ? nm : 1, sizeof(char *));
    if (merge_list(merges, path, ms, err, errlen) != 0) rc = -1; // (its message replaces an earlier one)
    if (rc == 0) {
        gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
        // llama.cpp picks the pre-tokenizer by hashing the tokenizer's output; the qwen35 regex is the
        // only one of ours with \p{M} (docs/model.md §11.1), so look at the Split pattern instead
        json_t *pt = json_object_get(tok, "pre_tokenizer");
        char *pts = pt ? json_dumps(pt, JSON_COMPACT) : NULL;
        const char *pre = pts ? (strstr(pts, "p{M}") ? "qwen35" : "qwen2") : c->arch == CV_QWEN35 ? "qwen35" : "qwen2";
        gguf_set_str(w, "tokenizer.ggml.pre", pre);
        free(pts);
        gguf_set_arr_str(w, "tokenizer.ggml.tokens", (uint64_t)n, tokens);
        gguf_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, (uint64_t)n, types);
        gguf_set_arr_str(w, "tokenizer.ggml.merges", nm, (const char *const *)ms);
        set_specials(w, dir, config, tokens, n);
    }
    for (size_t m = 0; m < nm; m++) free(ms[m]);
    free(ms);
    for (int64_t t = 0; t < n; t++) free(pads[t]);
    free(pads);
    free(tokens);
    free(types);
    json_decref(tok);
    return rc;
}

// ---- tensors ------------------------------------------------------------------------------

typedef struct {
    cv_map *maps;
    cv_job *jobs;
    int n;
    bn_progress prog;
    int64_t done;
} import_ctx;

static int fill_import(void *ctx, int idx, void *dst, size_t nbytes, char *err, size_t errlen) {
    import_ctx *c = ctx;
    if (cv_transform(&c->jobs[idx], dst, err, errlen) != 0) return -1;
    c->done += (int64_t)nbytes;
    bn_progress_update(&c->prog, c->done, c->maps[idx].gguf);
    return 0;
}

// expected_ne: the GGUF shape llama.cpp gives tensor m (ne[0..1]); false if unknown.
static bool expected_ne(const hf_config *c, const cv_map *m, int64_t V, int64_t ne[2]) {
    const char *s = m->layer >= 0 ? strchr(m->gguf + 4, '.') + 1 : m->gguf;
    int64_t H = c->H, hd = c->hd, Hk = c->p.Hk, Hv = c->p.Hv, dk = c->p.dk, dv = c->p.dv;
    int64_t qrows = c->nh * hd * (c->arch == CV_QWEN35 ? 2 : 1), conv = 2 * Hk * dk + Hv * dv;
    ne[1] = 1;
    if (!strcmp(s, "token_embd.weight") || !strcmp(s, "output.weight")) ne[0] = H, ne[1] = V;
    else if (strstr(s, "norm.weight") && strcmp(s, "ssm_norm.weight") && strcmp(s, "attn_q_norm.weight") &&
             strcmp(s, "attn_k_norm.weight")) ne[0] = H;
    else if (!strcmp(s, "attn_q_norm.weight") || !strcmp(s, "attn_k_norm.weight")) ne[0] = hd;
    else if (!strcmp(s, "ffn_gate.weight") || !strcmp(s, "ffn_up.weight")) ne[0] = H, ne[1] = c->F;
    else if (!strcmp(s, "ffn_down.weight")) ne[0] = c->F, ne[1] = H;
    else if (!strcmp(s, "attn_q.weight")) ne[0] = H, ne[1] = qrows;
    else if (!strcmp(s, "attn_k.weight") || !strcmp(s, "attn_v.weight")) ne[0] = H, ne[1] = c->nkv * hd;
    else if (!strcmp(s, "attn_output.weight")) ne[0] = c->nh * hd, ne[1] = H;
    else if (!strcmp(s, "attn_q.bias")) ne[0] = c->nh * hd;
    else if (!strcmp(s, "attn_k.bias") || !strcmp(s, "attn_v.bias")) ne[0] = c->nkv * hd;
    else if (!strcmp(s, "attn_qkv.weight")) ne[0] = H, ne[1] = conv;
    else if (!strcmp(s, "attn_gate.weight")) ne[0] = H, ne[1] = Hv * dv;
    else if (!strcmp(s, "ssm_beta.weight") || !strcmp(s, "ssm_alpha.weight")) ne[0] = H, ne[1] = Hv;
    else if (!strcmp(s, "ssm_conv1d.weight")) ne[0] = c->K, ne[1] = conv;
    else if (!strcmp(s, "ssm_dt.bias") || !strcmp(s, "ssm_a")) ne[0] = Hv;
    else if (!strcmp(s, "ssm_norm.weight")) ne[0] = dv;
    else if (!strcmp(s, "ssm_out.weight")) ne[0] = Hv * dv, ne[1] = H;
    else return false;
    return true;
}

static bool is_attention_layer(const hf_config *c, int il) {
    if (c->arch != CV_QWEN35) return true;
    if (c->layer_types) return strcmp(json_string_value(json_array_get(c->layer_types, il)) ?: "", "full_attention") == 0;
    return (il + 1) % c->interval == 0;
}

// expected_count: tensors the architecture needs per model (for the "missing tensor" check).
static int expected_count(const hf_config *c) {
    int n = 2 + (c->tied ? 0 : 1);
    for (int il = 0; il < c->L; il++) {
        if (c->arch != CV_QWEN35) n += 11 + (c->arch == CV_QWEN2 ? 3 - 2 : 0);
        else n += is_attention_layer(c, il) ? 11 : 14;
    }
    return n;
}

int bn_convert_hf_to_gguf(const char *hf_dir, const char *out, const bn_convert_opts *o, char *err, size_t errlen) {
    int outtype = o && o->outtype >= 0 ? o->outtype : BN_F16;
    if (outtype != BN_F32 && outtype != BN_F16 && outtype != BN_BF16)
        return bn_err(err, errlen, "outtype must be f32, f16 or bf16");
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", hf_dir);
    json_error_t je;
    json_t *config = json_load_file(path, 0, &je);
    if (!config) return bn_err(err, errlen, "%s: %s", path, je.text);
    hf_config c;
    if (read_config(config, &c, err, errlen) != 0) {
        json_decref(config);
        return -1;
    }
    bn_safetensors *st = bn_st_open_dir(hf_dir, err, errlen);
    if (!st) {
        json_decref(config);
        return -1;
    }
    // general.name: config _name_or_path (last component) or the directory name
    const char *nop = json_string_value(json_object_get(config, "_name_or_path"));
    char namebuf[512], dirbuf[4096];
    snprintf(dirbuf, sizeof dirbuf, "%s", hf_dir);
    if (nop && *nop) snprintf(namebuf, sizeof namebuf, "%s", strrchr(nop, '/') ? strrchr(nop, '/') + 1 : nop);
    else snprintf(namebuf, sizeof namebuf, "%s", basename(dirbuf));
    int ftype = outtype == BN_F32 ? 0 : outtype == BN_F16 ? 1 : 32;
    gguf_writer *w = gguf_writer_new();
    set_metadata(w, &c, namebuf, ftype);
    import_ctx ic = {0};
    ic.maps = xcalloc((size_t)st->n_tensors + 1, sizeof(cv_map));
    ic.jobs = xcalloc((size_t)st->n_tensors + 1, sizeof(cv_job));
    int rc = 0;
    int64_t V = 0, n_skipped = 0, total = 0;
    // vocab rows come from the embedding (llama.cpp sizes the vocab by config/tokenizer; the tensor rules), and
    // every layer has tensors
    char embname[160];
    snprintf(embname, sizeof embname, "%sembed_tokens.weight", c.prefix);
    const bn_st_tensor *emb = bn_st_find(st, embname);
    if (!emb) rc = bn_err(err, errlen, "%s: missing tensor %s", hf_dir, embname);
    else if (emb->n_dims != 2 || emb->shape[0] < 1 || emb->shape[0] > INT32_MAX)
        rc = bn_err(err, errlen, "%s: %s is not a {vocabulary, hidden} matrix", hf_dir, embname);
    else if (c.V > 0 && c.V != emb->shape[0])
        rc = bn_err(err, errlen, "config.json: vocab_size = %lld but %s has %lld rows", (long long)c.V, embname,
                    (long long)emb->shape[0]);
    else if (c.L > st->n_tensors)
        rc = bn_err(err, errlen, "config.json: num_hidden_layers = %lld but the checkpoint has %d tensors",
                    (long long)c.L, st->n_tensors);
    if (rc == 0) V = emb->shape[0];
    if (rc == 0) rc = set_tokenizer(w, hf_dir, &c, config, V, err, errlen);
    size_t plen = strlen(c.prefix);
    for (int i = 0; i < st->n_tensors && rc == 0; i++) {
        const bn_st_tensor *t = &st->t[i];
        const char *rel;
        if (strcmp(t->name, "lm_head.weight") == 0) rel = t->name;
        else if (strncmp(t->name, c.prefix, plen) == 0) rel = t->name + plen;
        else {
            n_skipped++; // vision tower, MTP head, other prefixes: not part of the text GGUF
            continue;
        }
        if (c.tied && strcmp(rel, "lm_head.weight") == 0) {
            n_skipped++;
            continue;
        }
        cv_map *m = &ic.maps[ic.n];
        if (cv_map_from_hf(&c.p, rel, m) != 0) {
            if (strncmp(rel, "visual.", 7) == 0 || strncmp(rel, "mtp.", 4) == 0) {
                n_skipped++;
                continue;
            }
            rc = bn_err(err, errlen, "cannot map tensor %s to a %s GGUF name", t->name, cv_arch_name(c.arch));
            break;
        }
        if (m->layer >= c.L) {
            rc = bn_err(err, errlen, "tensor %s: layer %d beyond num_hidden_layers %lld", t->name, m->layer, (long long)c.L);
            break;
        }
        // GGUF shape = reversed HF shape (conv1d [C, 1, K] squeezed to {K, C})
        int64_t ne[GGUF_MAX_DIMS] = {1, 1, 1, 1};
        int nd = 0;
        for (int d = t->n_dims - 1; d >= 0; d--)
            if (!(m->conv && t->shape[d] == 1 && d == 1)) ne[nd++] = t->shape[d];
        int64_t want[2] = {0, 0};
        if (!expected_ne(&c, m, V, want) || ne[0] != want[0] || ne[1] != want[1] || nd > 2) {
            rc = bn_err(err, errlen, "tensor %s: shape {%lld, %lld} (GGUF order) but config.json implies {%lld, %lld}",
                        t->name, (long long)ne[0], (long long)ne[1], (long long)want[0], (long long)want[1]);
            break;
        }
        if (nd == 0) nd = 1;
        int type = (m->force_f32 || nd == 1) ? BN_F32 : outtype;
        if (gguf_writer_add_tensor(w, m->gguf, nd, ne, type, (uint32_t)type, NULL, err, errlen) < 0) {
            rc = -1;
            break;
        }
        ic.jobs[ic.n] = (cv_job){.src = t->data, .src_type = t->type, .ne0 = ne[0], .n_el = bn_st_nelements(t),
                                 .dst_type = type, .m = m, .p = &c.p, .dir = +1};
        total += (int64_t)gguf_writer_tensor_nbytes(w, ic.n);
        ic.n++;
    }
    if (rc == 0 && ic.n != expected_count(&c))
        rc = bn_err(err, errlen, "%s: %d text tensors mapped but a %lld-layer %s%s model needs %d (missing tensors?)",
                    hf_dir, ic.n, (long long)c.L, cv_arch_name(c.arch), c.tied ? " tied" : "", expected_count(&c));
    if (rc == 0) {
        if (o && o->quiet) ic.prog.mode = BN_PROGRESS_OFF;
        else bn_progress_start(&ic.prog, "bytes", total);
        rc = gguf_writer_write(w, out, fill_import, &ic, err, errlen);
        if (!(o && o->quiet)) {
            bn_progress_finish(&ic.prog, rc == 0 ? "done" : "failed");
            if (rc == 0)
                fprintf(stderr, "bonsai-convert: %s: %d tensors (%lld skipped: vision/MTP/tied head), arch %s\n", out,
                        ic.n, (long long)n_skipped, cv_arch_name(c.arch));
        }
    }
    free(ic.maps);
    free(ic.jobs);
    gguf_writer_free(w);
    bn_st_close(st);
    json_decref(config);
    return rc;
}
