// serve/request.c — request JSON → bn_task_params, with llama-server's field names and defaults
// (docs/server.md §3.1) and strict type checks: any wrong type or out-of-range value is a 400.
#include "serve/request.h"
#include "core/chat.h"
#include "base/util.h"
#include <string.h>
#include <stdlib.h>
#include <float.h>
#include <math.h>
#include <errno.h>

// num: reads an optional number field; returns 0 (absent or ok) or -1 (wrong type).
static int num(json_t *o, const char *key, double *out, char *err, size_t errlen) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return bn_err(err, errlen, "'%s' must be a number", key);
    *out = json_number_value(v);
    return 0;
}

// num_float: num for a float field: also -1 when the value is past float range (it would become inf).
static int num_float(json_t *o, const char *key, float *out, char *err, size_t errlen) {
    double d = *out;
    if (num(o, key, &d, err, errlen) != 0) return -1;
    if (!isfinite((float)d)) return bn_err(err, errlen, "'%s' must be a number of float range", key);
    *out = (float)d;
    return 0;
}

static int integer(json_t *o, const char *key, long long *out, char *err, size_t errlen) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (json_is_integer(v)) *out = json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == (double)(long long)json_real_value(v))
        *out = (long long)json_real_value(v);
    else return bn_err(err, errlen, "'%s' must be an integer", key);
    return 0;
}

// int_in: integer for an int field that must lie in lo..hi (else -1: "'key' must be <what>"); absent: *out kept.
static int int_in(json_t *o, const char *key, long long lo, long long hi, const char *what, int *out, char *err,
                  size_t errlen) {
    long long i = *out;
    if (integer(o, key, &i, err, errlen) != 0) return -1;
    if (i < lo || i > hi) return bn_err(err, errlen, "'%s' must be %s", key, what);
    *out = (int)i;
    return 0;
}

static int boolean(json_t *o, const char *key, bool *out, char *err, size_t errlen) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return bn_err(err, errlen, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 0;
}

int bn_parse_lora(json_t *v, int n, float *scales, char *err, size_t errlen) {
    if (!json_is_array(v)) return bn_err(err, errlen, "'lora' must be an array of objects with 'id' and 'scale' fields");
    for (int i = 0; i < n; i++) scales[i] = 0.0f;
    size_t k;
    json_t *e;
    json_array_foreach(v, k, e) {
        json_t *id = json_object_get(e, "id"), *sc = json_object_get(e, "scale");
        if (!json_is_object(e) || !json_is_integer(id))
            return bn_err(err, errlen, "lora[%zu] must be an object with an integer 'id' and a number 'scale'", k);
        const long long i = json_integer_value(id);
        if (i < 0 || i >= n)
            return bn_err(err, errlen, "lora[%zu]: id %lld is not a loaded adapter (%d loaded: ids 0..%d)", k, i, n,
                          n - 1);
        if (sc && !json_is_null(sc) && (!json_is_number(sc) || !isfinite((float)json_number_value(sc))))
            return bn_err(err, errlen, "lora[%zu]: 'scale' must be a number of float range", k);
        scales[i] = sc && json_is_number(sc) ? (float)json_number_value(sc) : 0.0f;
    }
    return 0;
}

size_t bn_json_weight(const char *s, size_t n) {
    size_t w = 0;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = false;
        } else if (c == '"') in_str = true;
        else if (c == '{') w += 4;
        else if (c == '[' || c == ',') w += 2;
    }
    return w;
}

void bn_task_params_free(bn_task_params *p) {
    free(p->prompt);
    for (int i = 0; i < p->n_stop; i++) free(p->stop[i]);
    for (int i = 0; i < p->n_dry_strs; i++) free(p->dry_strs[i]);
    free(p->dry_strs);
    bn_dry_breakers_free(p->dry_own);
    free(p->logit_bias);
    memset(p, 0, sizeof *p);
}

int bn_parse_prompt(const bn_tokenizer *tok, json_t *prompt, bool add_special, bool parse_special, int32_t **out,
                    int *n_out, char *err, size_t errlen) {
    int n_vocab = bn_tokenizer_n_vocab(tok);
    int cap = 256, n = 0;
    int32_t *ids = xmalloc(sizeof(int32_t) * cap);
    json_t *parts = prompt;
    bool single = json_is_string(prompt);
    if (!single && !json_is_array(prompt)) {
        free(ids);
        return bn_err(err, errlen, "'prompt' must be a string or an array of token ids and strings");
    }
    size_t np = single ? 1 : json_array_size(parts);
    for (size_t i = 0; i < np; i++) {
        json_t *e = single ? prompt : json_array_get(parts, i);
        if (json_is_string(e)) {
            int32_t *t = NULL;
            bool bos = add_special && i == 0;
            int k = bn_tokenize(tok, json_string_value(e), json_string_length(e), bos, parse_special, &t);
            if (k < 0) {
                free(ids);
                return bn_err(err, errlen, "cannot tokenize the prompt");
            }
            if (n + k > cap) ids = xrealloc(ids, sizeof(int32_t) * (cap = 2 * (n + k)));
            memcpy(ids + n, t, sizeof(int32_t) * k);
            n += k;
            free(t);
        } else if (json_is_integer(e)) {
            long long v = json_integer_value(e);
            if (v < 0 || v >= n_vocab) {
                free(ids);
                return bn_err(err, errlen, "token id %lld in the prompt is out of range [0, %d)", v, n_vocab);
            }
            if (n == cap) ids = xrealloc(ids, sizeof(int32_t) * (cap *= 2));
            ids[n++] = (int32_t)v;
        } else if (json_is_array(e)) {
            free(ids);
            return bn_err(err, errlen, "multiple prompts in one request are not supported; send one request per prompt");
        } else {
            free(ids);
            return bn_err(err, errlen, "'prompt' elements must be token ids or strings");
        }
    }
    *out = ids;
    *n_out = n;
    return 0;
}

// parse_dry: the DRY fields (llama-server's names); the breakers' token sequences when DRY is on: the defaults, or
// the request's own (built here). Returns 0 or -1 with err (p's allocations then freed by the caller).
static int parse_dry(const bn_tokenizer *tok, const bn_dry_breakers *dflt, json_t *body, bn_task_params *p, char *err,
                     size_t errlen) {
    if (num_float(body, "dry_multiplier", &p->sp.dry_multiplier, err, errlen) != 0) return -1;
    float base = p->sp.dry_base;
    if (num_float(body, "dry_base", &base, err, errlen) != 0) return -1;
    if (base >= 1.0f) p->sp.dry_base = base; // llama-server: a base below 1 keeps the default
    if (int_in(body, "dry_allowed_length", 0, INT32_MAX, ">= 0", &p->sp.dry_allowed_length, err, errlen) != 0 ||
        int_in(body, "dry_penalty_last_n", -1, INT32_MAX, "-1 (all), 0 (off) or a count", &p->sp.dry_penalty_last_n, err,
               errlen) != 0)
        return -1;
    json_t *sb = json_object_get(body, "dry_sequence_breakers");
    if (sb && !json_is_null(sb)) {
        if (!json_is_array(sb) || json_array_size(sb) == 0 || json_array_size(sb) > 64)
            return bn_err(err, errlen, "'dry_sequence_breakers' must be a non-empty array of at most 64 strings");
        p->dry_strs = xcalloc(json_array_size(sb), sizeof(char *));
        for (size_t k = 0; k < json_array_size(sb); k++) {
            json_t *s = json_array_get(sb, k);
            if (!json_is_string(s)) return bn_err(err, errlen, "'dry_sequence_breakers' must be an array of strings");
            p->dry_strs[p->n_dry_strs++] = xstrdup(json_string_value(s));
        }
    }
    p->sp.dry_breakers = dflt;
    if (p->dry_strs && bn_sampler_params_dry(&p->sp))
        p->sp.dry_breakers = p->dry_own = bn_dry_breakers_new(tok, (const char *const *)p->dry_strs, p->n_dry_strs);
    return 0;
}

// bias_value: a logit_bias value: a number, or false (a ban: -INFINITY); -1 otherwise.
static int bias_value(json_t *v, float *out) {
    if (json_is_number(v) && isfinite((float)json_number_value(v))) *out = (float)json_number_value(v);
    else if (json_is_false(v)) *out = -INFINITY;
    else return -1;
    return 0;
}

// bias_add: bias for token key (an id, or a string whose tokens all get it) appended to p's list. Returns 0 or -1.
static int bias_add(const bn_tokenizer *tok, json_t *key, const char *key_str, float bias, bn_task_params *p,
                    char *err, size_t errlen) {
    int n_vocab = bn_tokenizer_n_vocab(tok);
    int32_t *ids = NULL;
    int n = 0;
    if (key && json_is_integer(key)) {
        long long v = json_integer_value(key);
        if (v < 0 || v >= n_vocab)
            return bn_err(err, errlen, "logit_bias: token id %lld is out of range [0, %d)", v, n_vocab);
        ids = xmalloc(sizeof *ids);
        ids[n++] = (int32_t)v;
    } else {
        const char *str = key ? json_string_value(key) : key_str;
        size_t len = key ? json_string_length(key) : strlen(key_str);
        n = bn_tokenize(tok, str, len, false, false, &ids);
        if (n < 0) return bn_err(err, errlen, "logit_bias: cannot tokenize a key");
    }
    p->logit_bias = xrealloc(p->logit_bias, sizeof *p->logit_bias * (size_t)(p->n_logit_bias + n + 1));
    for (int k = 0; k < n; k++) p->logit_bias[p->n_logit_bias++] = (bn_logit_bias){ids[k], bias};
    free(ids);
    return 0;
}

static int bias_cmp(const void *a, const void *b) {
    const bn_logit_bias *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

// parse_logit_bias: llama-server's logit_bias: [[token, bias], ...] or {"token": bias, ...}; a token is an id or a
// string (each of its tokens gets the bias; an object key that is all digits is an id), a bias a number or false
// (ban). Returns 0 or -1 with err.
static int parse_logit_bias(const bn_tokenizer *tok, json_t *body, bn_task_params *p, char *err, size_t errlen) {
    json_t *lb = json_object_get(body, "logit_bias");
    float bias;
    if (!lb || json_is_null(lb)) return 0;
    if (json_is_array(lb)) {
        for (size_t k = 0; k < json_array_size(lb); k++) {
            json_t *e = json_array_get(lb, k), *key = json_array_get(e, 0);
            if (!json_is_array(e) || json_array_size(e) != 2 || !(json_is_integer(key) || json_is_string(key)))
                return bn_err(err, errlen, "logit_bias[%zu] must be a [token id or string, bias] pair", k);
            if (bias_value(json_array_get(e, 1), &bias) != 0)
                return bn_err(err, errlen, "logit_bias[%zu]: the bias must be a number or false", k);
            if (bias_add(tok, key, NULL, bias, p, err, errlen) != 0) return -1;
        }
    } else if (json_is_object(lb)) {
        const char *key;
        json_t *v;
        json_object_foreach(lb, key, v) {
            if (bias_value(v, &bias) != 0)
                return bn_err(err, errlen, "logit_bias: the bias of a token must be a number or false");
            char *end;
            errno = 0;
            long long id = strtoll(key, &end, 10);
            json_t *idj = *key && !*end && errno == 0 ? json_integer(id) : NULL;
            int rc = bias_add(tok, idj, key, bias, p, err, errlen);
            json_decref(idj);
            if (rc != 0) return -1;
        }
    } else return bn_err(err, errlen, "'logit_bias' must be an array of [token, bias] pairs or an object");
    // one entry per token, its biases summed (the same logits as adding each): at most n_vocab entries
    if (p->n_logit_bias > 1) qsort(p->logit_bias, (size_t)p->n_logit_bias, sizeof *p->logit_bias, bias_cmp);
    int n = 0;
    for (int k = 0; k < p->n_logit_bias; k++) {
        if (n > 0 && p->logit_bias[n - 1].id == p->logit_bias[k].id) p->logit_bias[n - 1].bias += p->logit_bias[k].bias;
        else p->logit_bias[n++] = p->logit_bias[k];
    }
    p->n_logit_bias = n;
    p->sp.logit_bias = p->logit_bias;
    p->sp.n_logit_bias = p->n_logit_bias;
    return 0;
}

// parse_task: bn_parse_task_params without the cleanup on failure
static int parse_task(const bn_tokenizer *tok, const bn_dry_breakers *dry_default, json_t *body, json_t *prompt,
                      bn_task_params *p, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    p->sp = bn_sampler_params_default();
    p->n_predict = -1;
    p->cache_prompt = true;
    p->id_slot = -1;
    p->seed_random = true;
    double d;
    long long i;
    if (!json_is_object(body)) return bn_err(err, errlen, "request body must be a JSON object");
    // n_predict and its aliases (the first present wins, as llama-server: n_predict over the OpenAI names)
    const char *np_keys[] = {"n_predict", "max_completion_tokens", "max_tokens"};
    bool np_set = false;
    for (int k = 0; k < 3; k++) {
        json_t *v = json_object_get(body, np_keys[k]);
        if (!v || json_is_null(v)) continue;
        if (integer(body, np_keys[k], &i, err, errlen) != 0) return -1;
        if (i < -1) return bn_err(err, errlen, "'%s' must be >= -1 (-1 = no limit)", np_keys[k]);
        if (!np_set) p->n_predict = i > 0x7fffffff ? 0x7fffffff : (int)i;
        np_set = true;
    }
    if (num_float(body, "temperature", &p->sp.temperature, err, errlen) != 0) return -1;
    i = p->sp.top_k;
    if (integer(body, "top_k", &i, err, errlen) != 0) return -1;
    p->sp.top_k = i > 0x7fffffff ? 0x7fffffff : i < -1 ? -1 : (int)i;
    d = p->sp.top_p;
    if (num(body, "top_p", &d, err, errlen) != 0) return -1;
    if (d < 0 || d > 1) return bn_err(err, errlen, "'top_p' must be in [0, 1]");
    p->sp.top_p = (float)d;
    d = p->sp.min_p;
    if (num(body, "min_p", &d, err, errlen) != 0) return -1;
    if (d < 0 || d > 1) return bn_err(err, errlen, "'min_p' must be in [0, 1]");
    p->sp.min_p = (float)d;
    i = 0;
    if (integer(body, "min_keep", &i, err, errlen) != 0) return -1;
    p->sp.min_keep = i < 0 ? 0 : i > 1000000 ? 1000000 : (int)i;
    // repetition penalties (llama.cpp's penalties sampler, before the chain)
    if (int_in(body, "repeat_last_n", -1, INT32_MAX, "-1 (all), 0 (off) or a count", &p->sp.repeat_last_n, err, errlen))
        return -1;
    if (num_float(body, "repeat_penalty", &p->sp.repeat_penalty, err, errlen) != 0 ||
        num_float(body, "frequency_penalty", &p->sp.frequency_penalty, err, errlen) != 0 ||
        num_float(body, "presence_penalty", &p->sp.presence_penalty, err, errlen) != 0)
        return -1;
    if (!(p->sp.repeat_penalty > 0)) return bn_err(err, errlen, "'repeat_penalty' must be > 0 (1 = off)");
    if (parse_dry(tok, dry_default, body, p, err, errlen) != 0) return -1;
    i = -1;
    if (integer(body, "seed", &i, err, errlen) != 0) return -1;
    if (i != -1 && i != 0xFFFFFFFFll) {
        p->sp.seed = (uint64_t)i;
        p->seed_random = false;
    }
    i = 0;
    if (integer(body, "n_probs", &i, err, errlen) != 0) return -1;
    if (i < 0) return bn_err(err, errlen, "'n_probs' must be >= 0");
    int n_vocab = bn_tokenizer_n_vocab(tok);
    p->n_probs = i > n_vocab ? n_vocab : (int)i; // (as llama-server)
    if (p->n_probs > BN_SERVE_N_PROBS_MAX)
        return bn_err(err, errlen, "'n_probs' must be at most %d on this server", BN_SERVE_N_PROBS_MAX);
    if (boolean(body, "post_sampling_probs", &p->post_sampling_probs, err, errlen) != 0 ||
        boolean(body, "cache_prompt", &p->cache_prompt, err, errlen) != 0 ||
        boolean(body, "ignore_eos", &p->ignore_eos, err, errlen) != 0 ||
        boolean(body, "stream", &p->stream, err, errlen) != 0)
        return -1;
    if (int_in(body, "id_slot", -1, 1000000, "-1 (any) or a slot id", &p->id_slot, err, errlen) != 0) return -1;
    if (parse_logit_bias(tok, body, p, err, errlen) != 0) return -1;
    json_t *stop = json_object_get(body, "stop");
    if (stop && !json_is_null(stop)) {
        if (json_is_string(stop)) {
            if (json_string_length(stop) > 0) p->stop[p->n_stop++] = xstrdup(json_string_value(stop));
        } else if (json_is_array(stop)) {
            if (json_array_size(stop) > BN_MAX_STOP)
                return bn_err(err, errlen, "at most %d stop strings are supported", BN_MAX_STOP);
            for (size_t k = 0; k < json_array_size(stop); k++) {
                json_t *s = json_array_get(stop, k);
                if (!json_is_string(s)) return bn_err(err, errlen, "'stop' must be a string or an array of strings");
                if (json_string_length(s) > 0) p->stop[p->n_stop++] = xstrdup(json_string_value(s));
            }
        } else return bn_err(err, errlen, "'stop' must be a string or an array of strings");
    }
    if (!prompt || json_is_null(prompt)) return bn_err(err, errlen, "\"prompt\" is required");
    if (bn_parse_prompt(tok, prompt, bn_tokenizer_add_bos(tok), true, &p->prompt, &p->n_prompt, err, errlen) != 0)
        return -1;
    if (p->n_prompt == 0) return bn_err(err, errlen, "the prompt is empty");
    return 0;
}

// ---- chat formats --------------------------------------------------------------------------------

static const char *const format_names[] = {"chatml", "qwen35", "qwen3"};

const char *bn_chat_format_name(bn_chat_format f) { return format_names[f]; }

int bn_chat_format_parse(const char *name) {
    for (int f = 0; f < 3; f++)
        if (strcmp(name, format_names[f]) == 0) return f;
    return -1;
}

bn_chat_format bn_chat_format_for_model(const char *arch, const char *tmpl) {
    if (tmpl && !strstr(tmpl, "<think>")) return BN_CHAT_FORMAT_CHATML; // a template without reasoning blocks
    return bn_chat_style_for_arch(arch) == BN_CHAT_QWEN35 ? BN_CHAT_FORMAT_QWEN35 : BN_CHAT_FORMAT_QWEN3;
}

// render_chatml: plain ChatML, <|im_start|>{role}\n{content}<|im_end|>\n per message (reasoning dropped), then
// <|im_start|>assistant\n; NULL for a role that is not system, user, assistant or tool.
static char *render_chatml(const bn_chat_msg *m, int n) {
    size_t cap = 64, len = 0;
    for (int i = 0; i < n; i++) cap += strlen(m[i].role) + strlen(m[i].content) + 32;
    char *out = xmalloc(cap);
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        const char *r = m[i].role;
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool")) {
            free(out);
            return NULL;
        }
        len += (size_t)snprintf(out + len, cap - len, "<|im_start|>%s\n%s<|im_end|>\n", r, m[i].content);
    }
    snprintf(out + len, cap - len, "<|im_start|>assistant\n");
    return out;
}

char *bn_chat_prompt_json(bn_chat_format fmt, json_t *body, char *err, size_t errlen) {
    json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        bn_err(err, errlen, "'messages' must be a non-empty array");
        return NULL;
    }
    size_t n = json_array_size(msgs);
    bn_chat_msg *m = xcalloc(n, sizeof *m);
    char **owned = xcalloc(n, sizeof(char *));
    char *out = NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *msg = json_array_get(msgs, i), *role = json_object_get(msg, "role"), *content = json_object_get(msg, "content");
        if (!json_is_object(msg) || !json_is_string(role)) {
            bn_err(err, errlen, "messages[%zu] needs a string 'role'", i);
            goto done;
        }
        m[i].role = json_string_value(role);
        json_t *rc = json_object_get(msg, "reasoning_content");
        if (json_is_string(rc)) m[i].reasoning = json_string_value(rc);
        if (json_is_string(content)) m[i].content = json_string_value(content);
        else if (json_is_array(content)) {
            size_t cap = 256, len = 0;
            owned[i] = xcalloc(1, cap);
            for (size_t k = 0; k < json_array_size(content); k++) {
                json_t *part = json_array_get(content, k), *txt = json_object_get(part, "text");
                if (!json_is_string(txt)) {
                    bn_err(err, errlen, "messages[%zu].content[%zu]: only text parts are supported", i, k);
                    goto done;
                }
                size_t tl = json_string_length(txt);
                if (len + tl + 1 > cap) owned[i] = xrealloc(owned[i], cap = 2 * (len + tl + 1));
                memcpy(owned[i] + len, json_string_value(txt), tl + 1);
                len += tl;
            }
            m[i].content = owned[i];
        } else if (json_is_null(content) || !content) m[i].content = "";
        else {
            bn_err(err, errlen, "messages[%zu].content must be a string or an array of text parts", i);
            goto done;
        }
    }
    // thinking on unless chat_template_kwargs.enable_thinking is false (the templates' default)
    int thinking = 1;
    json_t *kw = json_object_get(body, "chat_template_kwargs");
    json_t *et = json_is_object(kw) ? json_object_get(kw, "enable_thinking") : NULL;
    if (kw && !json_is_null(kw) && !json_is_object(kw)) {
        bn_err(err, errlen, "'chat_template_kwargs' must be an object");
        goto done;
    }
    if (et && !json_is_null(et) && !json_is_boolean(et)) {
        bn_err(err, errlen, "'chat_template_kwargs.enable_thinking' must be a boolean");
        goto done;
    }
    if (et && json_is_boolean(et)) thinking = json_is_true(et) ? 1 : 0;
    out = fmt == BN_CHAT_FORMAT_CHATML
              ? render_chatml(m, (int)n)
              : bn_chat_render_style(fmt == BN_CHAT_FORMAT_QWEN35 ? BN_CHAT_QWEN35 : BN_CHAT_QWEN3, m, (int)n, true,
                                     thinking);
    if (!out) bn_err(err, errlen, "unknown role in 'messages' (use system, user, assistant or tool)");
done:
    for (size_t i = 0; i < n; i++) free(owned[i]);
    free(owned);
    free(m);
    return out;
}

int bn_parse_task_params(const bn_tokenizer *tok, const bn_dry_breakers *dry_default, json_t *body, json_t *prompt,
                         bn_task_params *p, char *err, size_t errlen) {
    if (parse_task(tok, dry_default, body, prompt, p, err, errlen) == 0) return 0;
    bn_task_params_free(p); // (what the failing step allocated; freeing twice is harmless: it zeroes p)
    return -1;
}

json_t *bn_generation_settings_json(const bn_task_params *p, int n_ctx) {
    json_t *stop = json_array(), *breakers = json_array();
    for (int i = 0; i < p->n_stop; i++) json_array_append_new(stop, json_string(p->stop[i]));
    for (int i = 0; i < (p->dry_strs ? p->n_dry_strs : BN_DRY_N_DEFAULT); i++)
        json_array_append_new(breakers, json_string(p->dry_strs ? p->dry_strs[i] : bn_dry_default_breakers[i]));
    json_t *o = json_pack("{s:i,s:I,s:f,s:i,s:f,s:f,s:f,s:f,s:f,s:i,s:f,s:o,s:i,s:b,s:i,s:b,s:b,s:i,s:[sssssssss]}",
                     "n_predict", p->n_predict, "seed", (json_int_t)(p->seed_random ? 4294967295u : p->sp.seed),
                     "temperature", (double)p->sp.temperature, "top_k", p->sp.top_k, "top_p", (double)p->sp.top_p,
                     "min_p", (double)p->sp.min_p, "typical_p", 1.0, "repeat_penalty", (double)p->sp.repeat_penalty,
                     "presence_penalty", (double)p->sp.presence_penalty, "repeat_last_n", p->sp.repeat_last_n,
                     "frequency_penalty", (double)p->sp.frequency_penalty, "stop", stop, "max_tokens", p->n_predict,
                     "stream", p->stream, "n_probs", p->n_probs, "post_sampling_probs", p->post_sampling_probs,
                     "ignore_eos", p->ignore_eos, "n_ctx", n_ctx, "samplers", "penalties", "dry", "top_n_sigma",
                     "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature");
    json_t *bias = json_array(); // llama-server's form; a ban (-inf) is null
    for (int i = 0; i < p->n_logit_bias; i++)
        json_array_append_new(bias, json_pack("{s:o,s:i}", "bias", isfinite(p->logit_bias[i].bias)
                                                  ? json_real(p->logit_bias[i].bias) : json_null(),
                                              "token", p->logit_bias[i].id));
    json_t *dry = json_pack("{s:f,s:f,s:i,s:i,s:o,s:o}", "dry_multiplier", (double)p->sp.dry_multiplier, "dry_base",
                            (double)p->sp.dry_base, "dry_allowed_length", p->sp.dry_allowed_length, "dry_penalty_last_n",
                            p->sp.dry_penalty_last_n, "dry_sequence_breakers", breakers, "logit_bias", bias);
    if (o && dry) json_object_update(o, dry);
    json_decref(dry);
    return o;
}
