// serve/routes.c — the endpoints (docs/server.md §2–10): native /completion, OpenAI /v1/completions and
// /v1/chat/completions (both streaming), tokenize/detokenize/apply-template, health, props, slots,
// metrics, models. Bad input of any kind is a JSON 400/404/413, never a 500.
#include "serve/server.h"
#include "serve/request.h"
#include "base/unicode.h"
#include "base/util.h"
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <float.h>
#include <math.h>

#define SYSTEM_FINGERPRINT "b1-bonsai"

enum api_kind { API_NATIVE = 0, API_OAI_CMPL, API_OAI_CHAT };

// ---- token pieces and probabilities (docs/server.md §5) -------------------------------------------

// piece_json: adds "id", "token" (valid UTF-8 prefix) and "bytes" of token id to o.
static void piece_json(bn_server *srv, json_t *o, int32_t id) {
    char buf[512];
    int n = bn_token_to_piece(srv->tok, id, buf, sizeof buf, true);
    if (n < 0) n = 0;
    size_t ok = bn_utf8_valid_prefix(buf, (size_t)n);
    json_t *bytes = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(bytes, json_integer((unsigned char)buf[i]));
    json_object_set_new(o, "id", json_integer(id));
    json_object_set_new(o, "token", json_stringn(buf, ok));
    json_object_set_new(o, "bytes", bytes);
}

static json_t *logprob_value(float lp) { return json_real(lp == -INFINITY || lp != lp ? -FLT_MAX : lp); }

// prob_entry: one completion_probabilities / logprobs.content element for an event.
static json_t *prob_entry(bn_server *srv, const bn_tok_event *e, bool post) {
    json_t *o = json_object();
    piece_json(srv, o, e->id);
    json_object_set_new(o, post ? "prob" : "logprob", post ? json_real(e->logprob) : logprob_value(e->logprob));
    json_t *top = json_array();
    for (int k = 0; k < e->n_top; k++) {
        json_t *t = json_object();
        piece_json(srv, t, e->top_ids[k]);
        json_object_set_new(t, post ? "prob" : "logprob", post ? json_real(e->top_lp[k]) : logprob_value(e->top_lp[k]));
        json_array_append_new(top, t);
    }
    json_object_set_new(o, post ? "top_probs" : "top_logprobs", top);
    return o;
}

static const char *stop_type_name(int t) {
    return t == BN_STOP_EOS ? "eos" : t == BN_STOP_LIMIT ? "limit" : t == BN_STOP_WORD ? "word" : "none";
}

static const char *finish_reason(const bn_task *t) {
    return t->stop_type == BN_STOP_EOS || t->stop_type == BN_STOP_WORD ? "stop" : "length";
}

static json_t *timings_json(const bn_task *t) {
    int pn = t->p.n_prompt - t->n_cached, gn = t->n_predicted;
    json_t *o = json_pack("{s:i,s:i,s:f,s:f,s:f,s:i,s:f,s:f,s:f}", "cache_n", t->n_cached, "prompt_n", pn, "prompt_ms",
                     t->t_prompt_ms, "prompt_per_token_ms", pn ? t->t_prompt_ms / pn : 0.0, "prompt_per_second",
                     t->t_prompt_ms > 0 ? 1e3 * pn / t->t_prompt_ms : 0.0, "predicted_n", gn, "predicted_ms",
                     t->t_gen_ms, "predicted_per_token_ms", gn ? t->t_gen_ms / gn : 0.0, "predicted_per_second",
                     t->t_gen_ms > 0 ? 1e3 * gn / t->t_gen_ms : 0.0);
    if (t->draft_n > 0) { // only when speculative decoding produced drafts (docs/server.md §3.2)
        json_object_set_new(o, "draft_n", json_integer(t->draft_n));
        json_object_set_new(o, "draft_n_accepted", json_integer(t->draft_n_accepted));
    }
    return o;
}

static json_t *usage_json(const bn_task *t) {
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "completion_tokens", t->n_predicted, "prompt_tokens", t->p.n_prompt,
                     "total_tokens", t->p.n_prompt + t->n_predicted, "prompt_tokens_details", "cached_tokens",
                     t->n_cached);
}

static void random_id(char *buf, size_t n) {
    static const char al[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    uint64_t x = (uint64_t)bn_time_ms() * 6364136223846793005ull ^ (uint64_t)(uintptr_t)buf;
    size_t k = (size_t)snprintf(buf, n, "chatcmpl-");
    for (; k + 1 < n && k < 9 + 32; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[k] = al[x % (sizeof al - 1)];
    }
    buf[k] = 0;
}

// ---- final objects ------------------------------------------------------------------------------

// native_final: the /completion object (§3.2); content/probs only when full (non-stream).
// collect: the task's whole generated text (malloc'd, *len bytes), and, per generated token, its
// probability entry (if n_probs > 0) into probs and its id into tokens (either may be NULL).
static char *collect(bn_server *srv, const bn_task *t, size_t *len_out, json_t *probs, json_t *tokens) {
    size_t cap = 1024, len = 0;
    char *content = xmalloc(cap);
    content[0] = 0;
    for (int i = 0; i < t->n_ev; i++) {
        const bn_tok_event *e = &t->ev[i];
        size_t k = strlen(e->text);
        if (len + k + 1 > cap) content = xrealloc(content, cap = 2 * (len + k + 1));
        memcpy(content + len, e->text, k + 1);
        len += k;
        if (e->id < 0) continue;
        if (probs && t->p.n_probs > 0) json_array_append_new(probs, prob_entry(srv, e, t->p.post_sampling_probs));
        if (tokens) json_array_append_new(tokens, json_integer(e->id));
    }
    *len_out = len;
    return content;
}

static json_t *native_final(bn_server *srv, bn_task *t, bool full) {
    json_t *o = json_object();
    json_t *probs = json_array(), *tokens = json_array();
    size_t len;
    char *content = collect(srv, t, &len, probs, tokens);
    bool nl = strchr(content, '\n') != NULL;
    size_t plen = 0;
    char *prompt = bn_detokenize(srv->tok, t->p.prompt, t->p.n_prompt, true, &plen);
    json_object_set_new(o, "index", json_integer(0));
    json_object_set_new(o, "content", json_stringn(full ? content : "", full ? len : 0));
    json_object_set_new(o, "tokens", full ? tokens : json_array());
    if (!full) json_decref(tokens);
    json_object_set_new(o, "id_slot", json_integer(t->id_slot));
    json_object_set_new(o, "stop", json_true());
    json_object_set_new(o, "model", json_string(srv->model_name));
    json_object_set_new(o, "tokens_predicted", json_integer(t->n_predicted));
    json_object_set_new(o, "tokens_evaluated", json_integer(t->p.n_prompt));
    json_object_set_new(o, "generation_settings", bn_generation_settings_json(&t->p, srv->p.n_ctx));
    json_object_set_new(o, "prompt", json_stringn(prompt, bn_utf8_valid_prefix(prompt, plen)));
    json_object_set_new(o, "has_new_line", json_boolean(nl));
    json_object_set_new(o, "truncated", json_boolean(t->truncated));
    json_object_set_new(o, "stop_type", json_string(stop_type_name(t->stop_type)));
    json_object_set_new(o, "stopping_word", json_string(t->stopping_word));
    json_object_set_new(o, "tokens_cached", json_integer(t->n_cached + t->n_predicted));
    json_object_set_new(o, "timings", timings_json(t));
    if (full && t->p.n_probs > 0) json_object_set_new(o, "completion_probabilities", probs);
    else json_decref(probs);
    free(prompt);
    free(content);
    return o;
}

// oai_final: non-stream /v1/completions or /v1/chat/completions object (§6, §7).
static json_t *oai_final(bn_server *srv, bn_task *t, int kind) {
    json_t *probs = json_array();
    size_t len;
    char *content = collect(srv, t, &len, probs, NULL);
    json_t *logprobs = t->p.n_probs > 0 ? json_pack("{s:o}", "content", probs) : (json_decref(probs), json_null());
    json_t *choice;
    if (kind == API_OAI_CHAT)
        choice = json_pack("{s:s,s:i,s:{s:s,s:s%},s:o}", "finish_reason", finish_reason(t), "index", 0, "message",
                           "role", "assistant", "content", content, len, "logprobs", logprobs);
    else
        choice = json_pack("{s:s%,s:i,s:o,s:s}", "text", content, len, "index", 0, "logprobs", logprobs,
                           "finish_reason", finish_reason(t));
    free(content);
    char id[64];
    random_id(id, sizeof id);
    return json_pack("{s:[o],s:I,s:s,s:s,s:s,s:o,s:s,s:o}", "choices", choice, "created", (json_int_t)time(NULL),
                     "model", srv->model_name, "system_fingerprint", SYSTEM_FINGERPRINT, "object",
                     kind == API_OAI_CHAT ? "chat.completion" : "text_completion", "usage", usage_json(t), "id", id,
                     "timings", timings_json(t));
}

// ---- streaming --------------------------------------------------------------------------------

typedef struct {
    bn_server *srv;
    bn_task *task;
    int kind;
    int next_ev;
    int phase;            // 0 = role chunk (chat), 1 = tokens, 2 = end chunks, 3 = finished
    bool include_usage;
    char id[64];
    long created;
    char *pend;           // formatted bytes not yet handed to MHD
    size_t pend_len, pend_off;
} stream_state;

static void pend_add(stream_state *s, const char *txt) {
    size_t k = strlen(txt);
    s->pend = xrealloc(s->pend, s->pend_len + k + 1);
    memcpy(s->pend + s->pend_len, txt, k + 1);
    s->pend_len += k;
}

static void pend_json(stream_state *s, json_t *j) {
    char *txt = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!txt) return;
    pend_add(s, "data: ");
    pend_add(s, txt);
    pend_add(s, "\n\n");
    free(txt);
}

static json_t *oai_chunk(stream_state *s, json_t *choice) {
    return json_pack("{s:[o],s:I,s:s,s:s,s:s,s:s}", "choices", choice, "created", (json_int_t)s->created, "id", s->id,
                     "model", s->srv->model_name, "system_fingerprint", SYSTEM_FINGERPRINT, "object",
                     s->kind == API_OAI_CHAT ? "chat.completion.chunk" : "text_completion");
}

// produce: formats the next chunk(s) into pend; returns false when everything was produced.
static bool produce(stream_state *s) {
    bn_task *t = s->task;
    if (s->phase == 0) {
        s->phase = 1;
        if (s->kind == API_OAI_CHAT)
            pend_json(s, oai_chunk(s, json_pack("{s:n,s:i,s:{s:s,s:n}}", "finish_reason", "index", 0, "delta", "role",
                                                "assistant", "content")));
        return true;
    }
    if (s->phase == 1) {
        if (bn_task_wait_event(t, s->next_ev)) {
            const bn_tok_event *e = &t->ev[s->next_ev++]; // events are append-only: safe to read
            bool probs = e->id >= 0 && t->p.n_probs > 0;
            if (s->kind == API_NATIVE) {
                json_t *o = json_pack("{s:i,s:s,s:[],s:b,s:i,s:i,s:i}", "index", 0, "content", e->text, "tokens", "stop",
                                      0, "id_slot", -1, "tokens_predicted", s->next_ev, "tokens_evaluated", t->p.n_prompt);
                if (e->id >= 0) json_array_append_new(json_object_get(o, "tokens"), json_integer(e->id));
                if (probs) json_object_set_new(o, "completion_probabilities",
                                               json_pack("[o]", prob_entry(s->srv, e, t->p.post_sampling_probs)));
                pend_json(s, o);
            } else {
                json_t *lp = probs ? json_pack("{s:[o]}", "content", prob_entry(s->srv, e, t->p.post_sampling_probs))
                                   : json_null();
                json_t *choice = s->kind == API_OAI_CHAT
                                     ? json_pack("{s:n,s:i,s:{s:s},s:o}", "finish_reason", "index", 0, "delta", "content",
                                                 e->text, "logprobs", lp)
                                     : json_pack("{s:s,s:i,s:o,s:n}", "text", e->text, "index", 0, "logprobs", lp,
                                                 "finish_reason");
                pend_json(s, oai_chunk(s, choice));
            }
            return true;
        }
        s->phase = 2; // task finished and all events sent
    }
    if (s->phase == 2) {
        s->phase = 3;
        if (t->failed) {
            pend_json(s, json_pack("{s:{s:i,s:s,s:s}}", "error", "code", t->err_code, "message", t->err, "type",
                                   t->err_code == 503 ? "unavailable_error" : "server_error"));
            return true;
        }
        if (s->kind == API_NATIVE) {
            pend_json(s, native_final(s->srv, t, false));
            return true;
        }
        json_t *choice = s->kind == API_OAI_CHAT
                             ? json_pack("{s:s,s:i,s:{}}", "finish_reason", finish_reason(t), "index", 0, "delta")
                             : json_pack("{s:s,s:i,s:n,s:s}", "text", "", "index", 0, "logprobs", "finish_reason",
                                         finish_reason(t));
        json_t *fin = oai_chunk(s, choice);
        if (s->kind == API_OAI_CMPL) json_object_set_new(fin, "usage", usage_json(t));
        json_object_set_new(fin, "timings", timings_json(t));
        pend_json(s, fin);
        if (s->kind == API_OAI_CHAT && s->include_usage) {
            json_t *u = oai_chunk(s, json_null());
            json_object_set_new(u, "choices", json_array());
            json_object_set_new(u, "usage", usage_json(t));
            pend_json(s, u);
        }
        pend_add(s, "data: [DONE]\n\n");
        return true;
    }
    return false;
}

static long stream_next(void *ctx, char *buf, size_t cap) {
    stream_state *s = ctx;
    while (s->pend_off >= s->pend_len) {
        s->pend_len = s->pend_off = 0;
        if (!produce(s)) return -1;
    }
    size_t k = s->pend_len - s->pend_off;
    if (k > cap) k = cap;
    memcpy(buf, s->pend + s->pend_off, k);
    s->pend_off += k;
    return (long)k;
}

static void stream_done(void *ctx) {
    stream_state *s = ctx;
    bn_task_cancel(s->task); // no-op if finished; frees the slot at once if the client went away
    bn_task_release(s->task);
    free(s->pend);
    free(s);
}

// ---- completion endpoints -----------------------------------------------------------------------

static int run_completion(bn_server *srv, struct MHD_Connection *c, int kind, bn_task_params *p, bool include_usage) {
    char err[512];
    int code = 0;
    bn_task *t = bn_slots_submit(srv->slots, p, err, sizeof err, &code);
    if (!t)
        return bn_send_error(c, code, code == 503 ? "unavailable_error" : "exceed_context_size_error", "%s", err);
    if (t->p.stream) {
        stream_state *s = xcalloc(1, sizeof *s);
        s->srv = srv;
        s->task = t;
        s->kind = kind;
        s->include_usage = include_usage;
        s->created = (long)time(NULL);
        random_id(s->id, sizeof s->id);
        s->phase = kind == API_OAI_CHAT ? 0 : 1;
        return bn_send_stream(c, stream_next, stream_done, s);
    }
    bn_task_wait_done(t);
    int ret;
    if (t->failed)
        ret = bn_send_error(c, t->err_code, t->err_code == 503 ? "unavailable_error" : "server_error", "%s", t->err);
    else ret = bn_send_json(c, 200, kind == API_NATIVE ? native_final(srv, t, true) : oai_final(srv, t, kind));
    bn_task_release(t);
    return ret;
}

static int route_completion(bn_server *srv, struct MHD_Connection *c, json_t *body, int kind) {
    char err[512];
    bn_task_params p;
    if (kind == API_OAI_CMPL) {
        json_t *echo = json_object_get(body, "echo");
        if (echo && json_is_true(echo)) return bn_send_error(c, 400, "invalid_request_error", "Only no echo is supported");
        if (json_object_get(body, "best_of")) return bn_send_error(c, 400, "invalid_request_error", "Unsupported param: best_of");
        if (json_object_get(body, "suffix")) return bn_send_error(c, 400, "invalid_request_error", "Unsupported param: suffix");
        json_t *lp = json_object_get(body, "logprobs");
        if (lp && !json_object_get(body, "n_probs")) {
            if (json_is_integer(lp)) json_object_set_new(body, "n_probs", json_integer(json_integer_value(lp)));
            else if (!json_is_null(lp) && !json_is_boolean(lp))
                return bn_send_error(c, 400, "invalid_request_error", "'logprobs' must be an integer");
        }
    } else if (json_object_get(body, "logprobs") && !json_object_get(body, "n_probs")) {
        json_t *lp = json_object_get(body, "logprobs");
        if (json_is_integer(lp)) json_object_set_new(body, "n_probs", json_integer(json_integer_value(lp)));
    }
    if (bn_parse_task_params(srv->tok, srv->dry_default, body, json_object_get(body, "prompt"), &p, err, sizeof err) != 0)
        return bn_send_error(c, 400, "invalid_request_error", "%s", err);
    return run_completion(srv, c, kind, &p, false);
}

// chat_prompt: the request's messages rendered in the model's chat template (bn_chat_prompt_json); NULL + err.
static char *chat_prompt(bn_server *srv, json_t *body, char *err, size_t errlen) {
    const char *arch = gguf_get_str(srv->model->gguf, "general.architecture");
    return bn_chat_prompt_json(arch ? arch : "", body, err, errlen);
}

static int route_chat(bn_server *srv, struct MHD_Connection *c, json_t *body) {
    char err[512];
    json_t *lp = json_object_get(body, "logprobs"), *tlp = json_object_get(body, "top_logprobs");
    bool want_lp = lp && json_is_true(lp);
    if (tlp && !json_is_null(tlp) && !want_lp)
        return bn_send_error(c, 400, "invalid_request_error", "top_logprobs requires logprobs to be set to true");
    if (lp && !json_is_null(lp) && !json_is_boolean(lp))
        return bn_send_error(c, 400, "invalid_request_error", "'logprobs' must be a boolean");
    if (want_lp && !json_object_get(body, "n_probs")) {
        long long k = 20;
        if (tlp && !json_is_null(tlp)) {
            if (!json_is_integer(tlp) || json_integer_value(tlp) < 0 || json_integer_value(tlp) > 20)
                return bn_send_error(c, 400, "invalid_request_error", "'top_logprobs' must be an integer in [0, 20]");
            k = json_integer_value(tlp);
        }
        json_object_set_new(body, "n_probs", json_integer(k ? k : 1));
    }
    char *prompt = chat_prompt(srv, body, err, sizeof err);
    if (!prompt) return bn_send_error(c, 400, "invalid_request_error", "%s", err);
    json_t *pj = json_string(prompt);
    free(prompt);
    if (!pj) return bn_send_error(c, 400, "invalid_request_error", "messages must be valid UTF-8");
    bn_task_params p;
    int rc = bn_parse_task_params(srv->tok, srv->dry_default, body, pj, &p, err, sizeof err);
    json_decref(pj);
    if (rc != 0) return bn_send_error(c, 400, "invalid_request_error", "%s", err);
    json_t *so = json_object_get(body, "stream_options");
    json_t *iu = so ? json_object_get(so, "include_usage") : NULL;
    return run_completion(srv, c, API_OAI_CHAT, &p, iu && json_is_true(iu));
}

// ---- small endpoints ------------------------------------------------------------------------------

static int route_tokenize(bn_server *srv, struct MHD_Connection *c, json_t *body) {
    char err[512];
    json_t *content = json_object_get(body, "content");
    if (!content) return bn_send_error(c, 400, "invalid_request_error", "\"content\" is required");
    bool add_special = false, parse_special = true, with_pieces = false;
    json_t *v;
    if ((v = json_object_get(body, "add_special")) && json_is_boolean(v)) add_special = json_is_true(v);
    if ((v = json_object_get(body, "parse_special")) && json_is_boolean(v)) parse_special = json_is_true(v);
    if ((v = json_object_get(body, "with_pieces")) && json_is_boolean(v)) with_pieces = json_is_true(v);
    int32_t *ids = NULL;
    int n = 0;
    if (bn_parse_prompt(srv->tok, content, add_special && bn_tokenizer_add_bos(srv->tok), parse_special, &ids, &n, err,
                        sizeof err) != 0)
        return bn_send_error(c, 400, "invalid_request_error", "%s", err);
    json_t *toks = json_array();
    for (int i = 0; i < n; i++) {
        if (!with_pieces) {
            json_array_append_new(toks, json_integer(ids[i]));
            continue;
        }
        char buf[512];
        int k = bn_token_to_piece(srv->tok, ids[i], buf, sizeof buf, true);
        if (k < 0) k = 0;
        json_t *piece;
        if (bn_utf8_valid_prefix(buf, (size_t)k) == (size_t)k) piece = json_stringn(buf, (size_t)k);
        else {
            piece = json_array();
            for (int b = 0; b < k; b++) json_array_append_new(piece, json_integer((unsigned char)buf[b]));
        }
        json_array_append_new(toks, json_pack("{s:i,s:o}", "id", ids[i], "piece", piece));
    }
    free(ids);
    return bn_send_json(c, 200, json_pack("{s:o}", "tokens", toks));
}

static int route_detokenize(bn_server *srv, struct MHD_Connection *c, json_t *body) {
    json_t *toks = json_object_get(body, "tokens");
    if (!json_is_array(toks)) return bn_send_error(c, 400, "invalid_request_error", "'tokens' must be an array of ids");
    size_t n = json_array_size(toks);
    int32_t *ids = xmalloc(sizeof(int32_t) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(toks, i);
        long long v = json_is_integer(e) ? json_integer_value(e) : -1;
        if (v < 0 || v >= bn_tokenizer_n_vocab(srv->tok)) {
            free(ids);
            return bn_send_error(c, 400, "invalid_request_error", "tokens[%zu] is not a valid token id", i);
        }
        ids[i] = (int32_t)v;
    }
    size_t len = 0;
    char *txt = bn_detokenize(srv->tok, ids, (int)n, true, &len);
    free(ids);
    json_t *o = json_pack("{s:s%}", "content", txt, bn_utf8_valid_prefix(txt, len));
    free(txt);
    return bn_send_json(c, 200, o);
}

static json_t *slot_json(bn_server *srv, const bn_slot_info *si) {
    bn_task_params dflt = {.sp = bn_sampler_params_default(), .n_predict = -1, .cache_prompt = true, .seed_random = true};
    return json_pack("{s:i,s:i,s:b,s:b,s:i,s:i,s:o,s:[{s:b,s:b,s:i,s:i}]}", "id", si->id, "n_ctx", si->n_ctx,
                     "speculative", si->speculative, "is_processing", si->busy, "n_prompt_tokens", si->n_prompt,
                     "n_prompt_tokens_cache", si->n_cache, "params", bn_generation_settings_json(&dflt, srv->p.n_ctx),
                     "next_token", "has_next_token", si->busy, "has_new_line", 0, "n_remain", -1, "n_decoded",
                     si->n_decoded);
}

static int route_props(bn_server *srv, struct MHD_Connection *c) {
    bn_slot_info si = {.id = 0, .n_ctx = srv->p.n_ctx};
    char bos[128] = "", eos[128] = "";
    int32_t b = bn_token_bos(srv->tok), e = bn_token_eos(srv->tok);
    if (b >= 0) snprintf(bos, sizeof bos, "%s", bn_token_text(srv->tok, b));
    if (e >= 0) snprintf(eos, sizeof eos, "%s", bn_token_text(srv->tok, e));
    const char *tmpl = gguf_get_str(srv->model->gguf, "tokenizer.chat_template");
    json_t *o = json_pack("{s:o,s:i,s:s,s:s,s:{s:b,s:b},s:s,s:s,s:s,s:s,s:b,s:b,s:b,s:b}",
                          "default_generation_settings", slot_json(srv, &si), "total_slots", srv->p.n_slots,
                          "model_alias", srv->model_name, "model_path", srv->p.model_path, "modalities", "vision", 0,
                          "audio", 0, "chat_template", tmpl ? tmpl : "chatml", "bos_token", bos, "eos_token", eos,
                          "build_info", SYSTEM_FINGERPRINT, "endpoint_slots", srv->p.slots_endpoint,
                          "endpoint_props", 0, "endpoint_metrics", srv->p.metrics, "is_sleeping", 0);
    json_object_set_new(o, "backend", json_string(bn_slots_backend(srv->slots))); // ours: the engine (-ngl)
    return bn_send_json(c, 200, o);
}

static int route_slots(bn_server *srv, struct MHD_Connection *c) {
    if (!srv->p.slots_endpoint) return bn_send_error(c, 501, "not_supported_error", "This server does not support slots endpoint.");
    bn_slot_info info[64];
    int n = bn_slots_info(srv->slots, info, 64);
    json_t *a = json_array();
    bool any_idle = false;
    for (int i = 0; i < n && i < 64; i++) {
        json_array_append_new(a, slot_json(srv, &info[i]));
        any_idle |= !info[i].busy;
    }
    const char *fail = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "fail_on_no_slot");
    if (fail && atoi(fail) && !any_idle) {
        json_decref(a);
        return bn_send_error(c, 503, "unavailable_error", "no slot available");
    }
    return bn_send_json(c, 200, a);
}

static int route_metrics(bn_server *srv, struct MHD_Connection *c) {
    if (!srv->p.metrics) return bn_send_error(c, 501, "not_supported_error", "This server does not support metrics endpoint.");
    bn_slots_metrics m;
    bn_slots_get_metrics(srv->slots, &m);
    bn_slot_info info[64];
    int n = bn_slots_info(srv->slots, info, 64), busy = 0;
    for (int i = 0; i < n && i < 64; i++) busy += info[i].busy;
    char buf[8192];
    size_t k = 0;
#define METRIC(type, name, help, fmt, val) \
    k += (size_t)snprintf(buf + k, sizeof buf - k, "# HELP llamacpp:%s %s\n# TYPE llamacpp:%s %s\nllamacpp:%s " fmt "\n", \
                          name, help, name, type, name, val)
    METRIC("counter", "prompt_tokens_total", "Number of prompt tokens processed.", "%llu", (unsigned long long)m.prompt_tokens_total);
    METRIC("counter", "prompt_tokens_cached_total", "Number of prompt tokens reused from the cache.", "%llu", (unsigned long long)m.prompt_tokens_cached_total);
    METRIC("counter", "prompt_seconds_total", "Prompt process time", "%.6f", m.prompt_seconds_total);
    METRIC("counter", "tokens_predicted_total", "Number of generation tokens processed.", "%llu", (unsigned long long)m.tokens_predicted_total);
    METRIC("counter", "tokens_predicted_seconds_total", "Predict process time", "%.6f", m.predicted_seconds_total);
    METRIC("counter", "n_decode_total", "Total number of llama_decode() calls", "%llu", (unsigned long long)m.n_decode_total);
    METRIC("counter", "n_tokens_max", "Largest observed n_tokens.", "%d", m.n_tokens_max);
    METRIC("counter", "spec_decode_num_draft_tokens_total", "Number of draft tokens generated.", "%llu", (unsigned long long)m.spec_draft_tokens);
    METRIC("counter", "spec_decode_num_accepted_tokens_total", "Number of draft tokens accepted.", "%llu", (unsigned long long)m.spec_accepted_tokens);
    METRIC("counter", "spec_decode_num_drafts_total", "Number of drafts generated.", "%llu", (unsigned long long)m.spec_drafts);
    k += (size_t)snprintf(buf + k, sizeof buf - k, "# HELP llamacpp:spec_decode_num_accepted_tokens_per_pos_total "
                          "Rounds that accepted at least position+1 drafts.\n# TYPE llamacpp:"
                          "spec_decode_num_accepted_tokens_per_pos_total counter\n");
    for (int i = 0; i < 8; i++)
        k += (size_t)snprintf(buf + k, sizeof buf - k, "llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position=\"%d\"} %llu\n",
                              i, (unsigned long long)m.spec_accepted_pos[i]);
    METRIC("gauge", "prompt_tokens_seconds", "Average prompt throughput in tokens/s.", "%.3f",
           m.prompt_seconds_total > 0 ? m.prompt_tokens_total / m.prompt_seconds_total : 0.0);
    METRIC("gauge", "predicted_tokens_seconds", "Average generation throughput in tokens/s.", "%.3f",
           m.predicted_seconds_total > 0 ? m.tokens_predicted_total / m.predicted_seconds_total : 0.0);
    METRIC("gauge", "requests_processing", "Number of requests processing.", "%d", busy);
    METRIC("gauge", "requests_deferred", "Number of requests deferred.", "%d", m.requests_deferred);
    METRIC("gauge", "n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call", "%.3f",
           m.decode_steps ? (double)m.decode_step_seqs / (double)m.decode_steps : (double)busy);
    METRIC("gauge", "n_busy_slots_per_draft",
           "Average number of speculative slots per batch of rounds begun together (bonsai: their drafting in one pass)",
           "%.3f", m.draft_calls ? (double)m.draft_call_seqs / (double)m.draft_calls : 0.0);
#undef METRIC
    struct MHD_Response *r = MHD_create_response_from_buffer(k, buf, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4");
    char st[32];
    snprintf(st, sizeof st, "%ld", srv->start_unix);
    MHD_add_response_header(r, "Process-Start-Time-Unix", st);
    int ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

static int route_models(bn_server *srv, struct MHD_Connection *c) {
    const bn_config *cfg = &srv->model->cfg;
    char desc[128];
    bn_model_describe(srv->model, desc, sizeof desc);
    json_t *o = json_pack(
        "{s:[{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:[s],s:[s],s:s,s:{s:s,s:s,s:s,s:[s],s:s,s:s}}],s:s,"
        "s:[{s:s,s:[],s:[],s:s,s:I,s:s,s:{s:i,s:i,s:i,s:i,s:i,s:I,s:I,s:s}}]}",
        "models", "name", srv->model_name, "model", srv->model_name, "modified_at", "", "size", "", "digest", "", "type",
        "model", "description", "", "tags", "", "capabilities", "completion", "parameters", "", "details", "parent_model",
        "", "format", "gguf", "family", "", "families", "", "parameter_size", "", "quantization_level", "", "object",
        "list", "data", "id", srv->model_name, "aliases", "tags", "object", "model", "created",
        (json_int_t)srv->start_unix, "owned_by", "llamacpp", "meta", "vocab_type", 2, "n_vocab", cfg->n_vocab, "n_ctx",
        srv->p.n_ctx, "n_ctx_train", cfg->n_ctx_train, "n_embd", cfg->n_embd, "n_params",
        (json_int_t)bn_model_n_params(srv->model), "size", (json_int_t)srv->model->gguf->size, "ftype", desc);
    return bn_send_json(c, 200, o);
}

// ---- dispatch -----------------------------------------------------------------------------------

static bool is(const char *url, const char *a, const char *b) {
    return strcmp(url, a) == 0 || (b && strcmp(url, b) == 0);
}

int bn_route(bn_server *srv, struct MHD_Connection *c, const char *method, const char *url, const char *body,
             size_t body_len) {
    bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    if (get && is(url, "/health", "/v1/health")) return bn_send_json(c, 200, json_pack("{s:s}", "status", "ok"));
    if (get && is(url, "/props", NULL)) return route_props(srv, c);
    if (get && is(url, "/slots", NULL)) return route_slots(srv, c);
    if (get && is(url, "/metrics", NULL)) return route_metrics(srv, c);
    if (get && is(url, "/v1/models", "/models")) return route_models(srv, c);
    int kind = -1;
    if (is(url, "/completion", NULL)) kind = 10 + API_NATIVE;
    else if (is(url, "/v1/completions", "/completions")) kind = 10 + API_OAI_CMPL;
    else if (is(url, "/v1/chat/completions", "/chat/completions")) kind = 10 + API_OAI_CHAT;
    else if (is(url, "/tokenize", NULL)) kind = 1;
    else if (is(url, "/detokenize", NULL)) kind = 2;
    else if (is(url, "/apply-template", NULL)) kind = 3;
    if (kind < 0) return bn_send_error(c, 404, "not_found_error", "File Not Found");
    if (!post) return bn_send_error(c, 405, "invalid_request_error", "method %s not allowed on %s", method, url);
    json_error_t je;
    json_t *j = json_loadb(body, body_len, JSON_REJECT_DUPLICATES, &je);
    if (!j) return bn_send_error(c, 400, "invalid_request_error", "malformed JSON at line %d, column %d: %s", je.line,
                                 je.column, je.text);
    if (!json_is_object(j)) {
        json_decref(j);
        return bn_send_error(c, 400, "invalid_request_error", "request body must be a JSON object");
    }
    int ret;
    switch (kind) {
    case 1: ret = route_tokenize(srv, c, j); break;
    case 2: ret = route_detokenize(srv, c, j); break;
    case 3: {
        char err[512];
        char *prompt = chat_prompt(srv, j, err, sizeof err);
        ret = prompt ? bn_send_json(c, 200, json_pack("{s:s}", "prompt", prompt))
                     : bn_send_error(c, 400, "invalid_request_error", "%s", err);
        free(prompt);
        break;
    }
    case 10 + API_OAI_CHAT: ret = route_chat(srv, c, j); break;
    default: ret = route_completion(srv, c, j, kind - 10); break;
    }
    json_decref(j);
    return ret;
}
