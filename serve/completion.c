// serve/completion.c — the completion endpoints (docs/server.md §3–7): native /completion, OpenAI /v1/completions
// and /v1/chat/completions, streaming or not. A request is checked (context, slot, the size of its log-prob answer)
// before its task is queued; its connection then waits without a thread (bn_http_await) for the task's first event
// (a stream: its headers go out with the first token, so a request ended while queued still gets its status) or
// its end.
#include "serve/completion.h"
#include "serve/reply.h"
#include "serve/request.h"
#include "base/unicode.h"
#include "base/util.h"
#include <microhttpd.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <float.h>
#include <math.h>

enum api_kind { API_NATIVE = 0, API_OAI_CMPL, API_OAI_CHAT };

// The stand-in value that the log-probs' text replaces in a dumped final object (they are written token by token,
// never held as one JSON tree).
#define PROBS_MARK "\001bn-probs\001"
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

// probs_text: the JSON array text of the task's per-token probability entries (malloc'd), one token's entry built
// and written at a time.
static char *probs_text(bn_server *srv, const bn_task *t) {
    size_t len = 0, cap = 4096;
    char *out = xmalloc(cap);
    bn_text_append(&out, &len, &cap, "[", 1);
    for (int i = 0; i < t->n_ev; i++) {
        if (t->ev[i].id < 0) continue;
        if (len > 1) bn_text_append(&out, &len, &cap, ",", 1);
        bn_json_dump_append(prob_entry(srv, &t->ev[i], t->p.post_sampling_probs), &out, &len, &cap);
    }
    bn_text_append(&out, &len, &cap, "]", 1);
    return out;
}

// dump_final: o's JSON text (o's reference taken) with the value PROBS_MARK, when there, replaced by the task's
// log-probs text; returns it malloc'd (*len bytes) or NULL.
static char *dump_final(bn_server *srv, const bn_task *t, json_t *o, size_t *len) {
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s) return NULL;
    *len = strlen(s);
    const char *mark = "\"\\u0001bn-probs\\u0001\"";
    char *at = strstr(s, mark);
    if (!at) return s;
    char *probs = probs_text(srv, t);
    size_t head = (size_t)(at - s), ml = strlen(mark), pl = strlen(probs), n = *len - ml + pl;
    char *out = xmalloc(n + 1);
    memcpy(out, s, head);
    memcpy(out + head, probs, pl);
    memcpy(out + head + pl, at + ml, *len - head - ml + 1);
    free(probs);
    free(s);
    *len = n;
    return out;
}

// collect: the task's whole generated text (malloc'd, *len bytes) and, into tokens (may be NULL), its token ids.
static char *collect(const bn_task *t, size_t *len_out, json_t *tokens) {
    size_t cap = 1024, len = 0;
    char *content = xmalloc(cap);
    content[0] = 0;
    for (int i = 0; i < t->n_ev; i++) {
        const bn_tok_event *e = &t->ev[i];
        bn_text_append(&content, &len, &cap, e->text, strlen(e->text));
        if (e->id >= 0 && tokens) json_array_append_new(tokens, json_integer(e->id));
    }
    *len_out = len;
    return content;
}

// native_final: the /completion object (§3.2); content, tokens and probs only when full (non-stream).
static json_t *native_final(bn_server *srv, bn_task *t, bool full) {
    json_t *o = json_object();
    json_t *tokens = json_array();
    size_t len;
    char *content = collect(t, &len, full ? tokens : NULL);
    bool nl = strchr(content, '\n') != NULL;
    size_t plen = 0;
    char *prompt = bn_detokenize(srv->tok, t->p.prompt, t->p.n_prompt, true, &plen);
    json_object_set_new(o, "index", json_integer(0));
    json_object_set_new(o, "content", json_stringn(full ? content : "", full ? len : 0));
    json_object_set_new(o, "tokens", tokens);
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
    if (full && t->p.n_probs > 0) json_object_set_new(o, "completion_probabilities", json_string(PROBS_MARK));
    free(prompt);
    free(content);
    return o;
}

// oai_final: non-stream /v1/completions or /v1/chat/completions object (§6, §7).
static json_t *oai_final(bn_server *srv, bn_task *t, int kind) {
    size_t len;
    char *content = collect(t, &len, NULL);
    json_t *logprobs = t->p.n_probs > 0 ? json_pack("{s:s}", "content", PROBS_MARK) : json_null();
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
    bn_task *task;        // one reference
    int kind;
    int next_ev;
    int phase;            // 0 = role chunk (chat), 1 = tokens, 2 = end chunks, 3 = finished
    bool include_usage;
    char id[64];
    long created;
    char *pend;           // formatted bytes not yet handed to MHD
    size_t pend_len, pend_off, pend_cap;
} stream_state;

static void pend_add(stream_state *s, const char *txt) {
    bn_text_append(&s->pend, &s->pend_len, &s->pend_cap, txt, strlen(txt));
}

static void pend_json(stream_state *s, json_t *j) {
    pend_add(s, "data: ");
    bn_json_dump_append(j, &s->pend, &s->pend_len, &s->pend_cap);
    pend_add(s, "\n\n");
}

static json_t *oai_chunk(stream_state *s, json_t *choice) {
    return json_pack("{s:[o],s:I,s:s,s:s,s:s,s:s}", "choices", choice, "created", (json_int_t)s->created, "id", s->id,
                     "model", s->srv->model_name, "system_fingerprint", SYSTEM_FINGERPRINT, "object",
                     s->kind == API_OAI_CHAT ? "chat.completion.chunk" : "text_completion");
}

// token_chunk: the chunk of one event.
static json_t *token_chunk(stream_state *s, const bn_tok_event *e) {
    bn_task *t = s->task;
    bool probs = e->id >= 0 && t->p.n_probs > 0;
    if (s->kind == API_NATIVE) {
        json_t *o = json_pack("{s:i,s:s,s:[],s:b,s:i,s:i,s:i}", "index", 0, "content", e->text, "tokens", "stop", 0,
                              "id_slot", -1, "tokens_predicted", s->next_ev, "tokens_evaluated", t->p.n_prompt);
        if (e->id >= 0) json_array_append_new(json_object_get(o, "tokens"), json_integer(e->id));
        if (probs)
            json_object_set_new(o, "completion_probabilities",
                                json_pack("[o]", prob_entry(s->srv, e, t->p.post_sampling_probs)));
        return o;
    }
    json_t *lp = probs ? json_pack("{s:[o]}", "content", prob_entry(s->srv, e, t->p.post_sampling_probs)) : json_null();
    json_t *choice = s->kind == API_OAI_CHAT
                         ? json_pack("{s:n,s:i,s:{s:s},s:o}", "finish_reason", "index", 0, "delta", "content", e->text,
                                     "logprobs", lp)
                         : json_pack("{s:s,s:i,s:o,s:n}", "text", e->text, "index", 0, "logprobs", lp, "finish_reason");
    return oai_chunk(s, choice);
}

// end_chunks: the final event(s): an error, or the final object (+ usage) and [DONE].
static void end_chunks(stream_state *s) {
    bn_task *t = s->task;
    if (t->failed) {
        pend_json(s, json_pack("{s:{s:i,s:s,s:s}}", "error", "code", t->err_code, "message", t->err, "type",
                               t->err_code == 503 ? "unavailable_error" : "server_error"));
        return;
    }
    if (s->kind == API_NATIVE) {
        pend_json(s, native_final(s->srv, t, false));
        return;
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
}

// produce: formats the next chunk(s) into pend; returns 1, 0 when the task has nothing new yet (the connection was
// parked: the task wakes it), -1 when everything was produced.
static int produce(stream_state *s) {
    bn_task *t = s->task;
    if (s->phase == 0) {
        s->phase = 1;
        pend_json(s, oai_chunk(s, json_pack("{s:n,s:i,s:{s:s,s:n}}", "finish_reason", "index", 0, "delta", "role",
                                            "assistant", "content")));
        return 1;
    }
    if (s->phase == 1) {
        if (!bn_task_ready_or_park(t, s->next_ev)) return 0;
        if (s->next_ev < bn_task_events(t)) {
            const bn_tok_event *e = &t->ev[s->next_ev++]; // events are append-only: safe to read
            pend_json(s, token_chunk(s, e));
            return 1;
        }
        s->phase = 2; // task finished and all events sent
    }
    if (s->phase == 2) {
        s->phase = 3;
        end_chunks(s);
        bn_task_release(s->task); // its events are not needed any more (the reply is freed later)
        s->task = NULL;
        return 1;
    }
    return -1;
}

static ssize_t stream_next(void *ctx, char *buf, size_t cap) {
    stream_state *s = ctx;
    while (s->pend_off >= s->pend_len) {
        s->pend_len = s->pend_off = 0;
        int r = produce(s);
        if (r <= 0) return r;
    }
    size_t k = s->pend_len - s->pend_off;
    if (k > cap) k = cap;
    memcpy(buf, s->pend + s->pend_off, k);
    s->pend_off += k;
    return (ssize_t)k;
}

static void stream_done(void *ctx) {
    stream_state *s = ctx;
    if (s->task) { // the stream did not reach its end: the client went away
        bn_task_cancel(s->task, BN_CANCEL_CLIENT);
        bn_task_release(s->task);
    }
    free(s->pend);
    free(s);
}

// ---- completion endpoints -----------------------------------------------------------------------

// A request waiting for its task.
typedef struct {
    bn_server *srv;
    int kind;
    bool include_usage;
} job;

static void job_free(void *ctx) { free(ctx); }

static int send_task_error(struct MHD_Connection *c, const bn_task *t) {
    return bn_send_error(c, t->err_code, t->err_code == 503 ? "unavailable_error" : "server_error", "%s", t->err);
}

// job_ready: the task has its first event (a stream) or is done: the reply.
static int job_ready(void *ctx, bn_http_req *rq, bn_task *t) {
    job *j = ctx;
    struct MHD_Connection *c = bn_http_conn(rq);
    if (t->cancel == BN_CANCEL_CLIENT) // nobody reads it
        return bn_send_error(c, 503, "unavailable_error", "the request was cancelled: its client went away");
    if (t->p.n_probs > 0 || t->n_predicted > 1024) bn_http_heavy(rq);
    if (t->failed && (!t->p.stream || bn_task_events(t) == 0)) return send_task_error(c, t);
    if (t->p.stream) {
        stream_state *s = xcalloc(1, sizeof *s);
        *s = (stream_state){.srv = j->srv, .task = bn_task_retain(t), .kind = j->kind,
                            .include_usage = j->include_usage, .created = (long)time(NULL),
                            .phase = j->kind == API_OAI_CHAT ? 0 : 1};
        random_id(s->id, sizeof s->id);
        return bn_send_stream(c, stream_next, stream_done, s);
    }
    size_t len;
    json_t *fin = j->kind == API_NATIVE ? native_final(j->srv, t, true) : oai_final(j->srv, t, j->kind);
    char *txt = dump_final(j->srv, t, fin, &len);
    if (!txt) return bn_send_error(c, 500, "server_error", "cannot encode response");
    return bn_send_buffer(c, 200, "application/json; charset=utf-8", txt, len);
}

// check_task: the refusals before a task is queued (400): a prompt that does not fit the context, a slot that does
// not exist, a log-prob answer larger than BN_SERVE_PROB_ENTRIES_MAX entries. Returns 0, or the MHD result of the
// refusal sent (p freed).
static int check_task(bn_server *srv, struct MHD_Connection *c, bn_task_params *p, bool *refused) {
    const int n_ctx = srv->p.n_ctx, n_prompt = p->n_prompt, n_probs = p->n_probs;
    *refused = true;
    int ret;
    long long gen_max = n_ctx - n_prompt;
    if (p->n_predict >= 0 && p->n_predict < gen_max) gen_max = p->n_predict;
    if (n_prompt >= n_ctx)
        ret = bn_send_error_with(c, 400, "exceed_context_size_error",
                                 json_pack("{s:i,s:i}", "n_prompt_tokens", n_prompt, "n_ctx", n_ctx),
                                 "request (%d tokens) exceeds the available context size (%d tokens), try "
                                 "increasing it", n_prompt, n_ctx);
    else if (p->id_slot >= srv->p.n_slots)
        ret = bn_send_error(c, 400, "invalid_request_error", "Invalid slot ID: id_slot %d does not exist (%d slots)",
                            p->id_slot, srv->p.n_slots);
    else if (n_probs > 0 && (n_probs + 1) * gen_max > BN_SERVE_PROB_ENTRIES_MAX)
        ret = bn_send_error(c, 400, "invalid_request_error",
                            "the log-probabilities asked for (n_probs %d for up to %lld tokens) exceed this server's "
                            "limit of %d entries per request: lower n_probs or n_predict",
                            n_probs, gen_max, BN_SERVE_PROB_ENTRIES_MAX);
    else {
        *refused = false;
        return 0;
    }
    bn_task_params_free(p);
    return ret;
}

static int run_completion(bn_server *srv, bn_http_req *rq, int kind, bn_task_params *p, bool include_usage) {
    struct MHD_Connection *c = bn_http_conn(rq);
    bool refused;
    int ret = check_task(srv, c, p, &refused);
    if (refused) return ret;
    char err[512];
    int code = 0;
    bool stream = p->stream;
    bn_task_hooks hooks = bn_http_hooks(rq);
    bn_task *t = bn_slots_submit(srv->slots, p, &hooks, err, sizeof err, &code);
    if (!t) return bn_send_error(c, code, code == 503 ? "unavailable_error" : "invalid_request_error", "%s", err);
    job *j = xmalloc(sizeof *j);
    *j = (job){srv, kind, include_usage};
    return bn_http_await(rq, t, stream ? 0 : INT_MAX, &(bn_http_waiter){job_ready, job_free, j});
}

// lora_field: the request's "lora" field (per-request adapter scales) into p; 0, or -1 with err (p freed).
static int lora_field(bn_server *srv, json_t *body, bn_task_params *p, char *err, size_t errlen) {
    json_t *v = json_object_get(body, "lora");
    if (!v || json_is_null(v)) return 0;
    if (bn_parse_lora(v, bn_slots_lora(srv->slots, NULL, 0, NULL), p->lora, err, errlen) != 0) {
        bn_task_params_free(p);
        return -1;
    }
    p->has_lora = true;
    return 0;
}

int bn_route_completion(bn_server *srv, bn_http_req *rq, json_t *body, bool oai) {
    struct MHD_Connection *c = bn_http_conn(rq);
    char err[512];
    bn_task_params p;
    json_t *lp = json_object_get(body, "logprobs");
    if (oai) {
        json_t *echo = json_object_get(body, "echo");
        const char *ire = "invalid_request_error";
        if (echo && json_is_true(echo)) return bn_send_error(c, 400, ire, "Only no echo is supported");
        if (json_object_get(body, "best_of")) return bn_send_error(c, 400, ire, "Unsupported param: best_of");
        if (json_object_get(body, "suffix")) return bn_send_error(c, 400, ire, "Unsupported param: suffix");
        if (lp && !json_is_null(lp) && !json_is_boolean(lp) && !json_is_integer(lp))
            return bn_send_error(c, 400, "invalid_request_error", "'logprobs' must be an integer");
    }
    // "logprobs" (an integer) stands for n_probs when that is not given (llama-server)
    if (json_is_integer(lp) && !json_object_get(body, "n_probs"))
        json_object_set_new(body, "n_probs", json_integer(json_integer_value(lp)));
    json_t *prompt = json_object_get(body, "prompt");
    if (bn_parse_task_params(srv->tok, srv->dry_default, body, prompt, &p, err, sizeof err) != 0 ||
        lora_field(srv, body, &p, err, sizeof err) != 0)
        return bn_send_error(c, 400, "invalid_request_error", "%s", err);
    return run_completion(srv, rq, oai ? API_OAI_CMPL : API_NATIVE, &p, false);
}

char *bn_server_chat_prompt(bn_server *srv, json_t *body, char *err, size_t errlen) {
    return bn_chat_prompt_json(srv->chat_format, body, err, errlen);
}

int bn_route_chat(bn_server *srv, bn_http_req *rq, json_t *body) {
    struct MHD_Connection *c = bn_http_conn(rq);
    char err[512];
    json_t *lp = json_object_get(body, "logprobs"), *tlp = json_object_get(body, "top_logprobs");
    bool want_lp = lp && json_is_true(lp);
    if (tlp && !json_is_null(tlp) && !want_lp)
        return bn_send_error(c, 400, "invalid_request_error", "top_logprobs requires logprobs to be set to true");
    if (lp && !json_is_null(lp) && !json_is_boolean(lp))
        return bn_send_error(c, 400, "invalid_request_error", "'logprobs' must be a boolean");
    if (want_lp) { // n_probs = top_logprobs (default 20, at most 20); a body's n_probs is not used (llama-server)
        long long k = 20;
        if (tlp && !json_is_null(tlp)) {
            if (!json_is_integer(tlp) || json_integer_value(tlp) < 0 || json_integer_value(tlp) > 20)
                return bn_send_error(c, 400, "invalid_request_error", "'top_logprobs' must be an integer in [0, 20]");
            k = json_integer_value(tlp);
        }
        json_object_set_new(body, "n_probs", json_integer(k ? k : 1));
    }
    char *prompt = bn_server_chat_prompt(srv, body, err, sizeof err);
    if (!prompt) return bn_send_error(c, 400, "invalid_request_error", "%s", err);
    json_t *pj = json_string(prompt);
    free(prompt);
    if (!pj) return bn_send_error(c, 400, "invalid_request_error", "messages must be valid UTF-8");
    bn_task_params p;
    int rc = bn_parse_task_params(srv->tok, srv->dry_default, body, pj, &p, err, sizeof err);
    if (rc == 0) rc = lora_field(srv, body, &p, err, sizeof err);
    json_decref(pj);
    if (rc != 0) return bn_send_error(c, 400, "invalid_request_error", "%s", err);
    json_t *so = json_object_get(body, "stream_options");
    json_t *iu = so ? json_object_get(so, "include_usage") : NULL;
    return run_completion(srv, rq, API_OAI_CHAT, &p, iu && json_is_true(iu));
}
