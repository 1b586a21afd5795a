// serve/routes.c — the dispatch of the endpoints (docs/server.md §1.1) and the small ones: tokenize, detokenize,
// apply-template, health, props, slots, metrics, models; the completion endpoints are serve/completion.c. Bad input
// of any kind is a JSON 400/404/413, never a 500.
#include "serve/routes.h"
#include "serve/completion.h"
#include "serve/reply.h"
#include "base/unicode.h"
#include "base/util.h"
#include "base/args.h"
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    size_t len = 0, cap = 64 + 8 * (size_t)n;
    char *out = xmalloc(cap); // written token by token: no JSON tree of a long text's tokens
    bn_text_append(&out, &len, &cap, "{\"tokens\":[", 11);
    for (int i = 0; i < n; i++) {
        if (i) bn_text_append(&out, &len, &cap, ",", 1);
        if (!with_pieces) {
            char num[16];
            bn_text_append(&out, &len, &cap, num, (size_t)snprintf(num, sizeof num, "%d", ids[i]));
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
        bn_json_dump_append(json_pack("{s:i,s:o}", "id", ids[i], "piece", piece), &out, &len, &cap);
    }
    bn_text_append(&out, &len, &cap, "]}", 2);
    free(ids);
    return bn_send_buffer(c, 200, "application/json; charset=utf-8", out, len);
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
    // the template in use: the model's own text, or the name of the one --chat-template chose
    const char *tmpl = srv->p.chat_template ? NULL : gguf_get_str(srv->model->gguf, "tokenizer.chat_template");
    json_t *o = json_pack("{s:o,s:i,s:s,s:s,s:{s:b,s:b},s:s,s:s,s:s,s:s,s:b,s:b,s:b,s:b}",
                          "default_generation_settings", slot_json(srv, &si), "total_slots", srv->p.n_slots,
                          "model_alias", srv->model_name, "model_path", srv->p.model_path, "modalities", "vision", 0,
                          "audio", 0, "chat_template", tmpl ? tmpl : bn_chat_format_name(srv->chat_format),
                          "bos_token", bos, "eos_token", eos, "build_info", "", "endpoint_slots",
                          srv->p.slots_endpoint, "endpoint_props", 0, "endpoint_metrics", srv->p.metrics,
                          "is_sleeping", 0);
    char build[96];
    snprintf(build, sizeof build, "b%d-%s", bn_build_number(), bn_build_commit());
    json_object_set_new(o, "build_info", json_string(build)); // llama-server's form: b<build number>-<commit>
    json_object_set_new(o, "version", json_string(bn_version())); // ours
    json_object_set_new(o, "chat_format", json_string(bn_chat_format_name(srv->chat_format))); // ours
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

// route_lora_get: GET /lora-adapters: [{"id", "path", "scale"}] of the adapters loaded at start (global scales).
static int route_lora_get(bn_server *srv, struct MHD_Connection *c) {
    float scales[BN_LORA_MAX];
    const int n = bn_slots_lora(srv->slots, scales, -1, NULL);
    json_t *a = json_array();
    for (int i = 0; i < n; i++) {
        const char *path = "";
        bn_slots_lora(srv->slots, NULL, i, &path);
        json_array_append_new(a, json_pack("{s:i,s:s,s:f}", "id", i, "path", path ? path : "", "scale",
                                           (double)scales[i]));
    }
    return bn_send_json(c, 200, a);
}

// route_lora_post: POST /lora-adapters [{"id", "scale"}]: new global scales (an adapter not listed: 0).
static int route_lora_post(bn_server *srv, struct MHD_Connection *c, json_t *body) {
    char err[256];
    float scales[BN_LORA_MAX];
    const int n = bn_slots_lora(srv->slots, NULL, -1, NULL);
    if (!json_is_array(body)) return bn_send_error(c, 400, "invalid_request_error", "Request body must be an array");
    if (bn_parse_lora(body, n, scales, err, sizeof err) != 0)
        return bn_send_error(c, 400, "invalid_request_error", "%s", err);
    bn_slots_set_lora(srv->slots, scales, n);
    return bn_send_json(c, 200, json_pack("{s:b}", "success", 1));
}

// ---- dispatch -----------------------------------------------------------------------------------

static bool is(const char *url, const char *a, const char *b) {
    return strcmp(url, a) == 0 || (b && strcmp(url, b) == 0);
}

int bn_route(void *ctx, bn_http_req *rq, const char *method, const char *url, const char *body, size_t body_len) {
    bn_server *srv = ctx;
    struct MHD_Connection *c = bn_http_conn(rq);
    bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    if (get && is(url, "/health", "/v1/health")) return bn_send_json(c, 200, json_pack("{s:s}", "status", "ok"));
    if (get && is(url, "/props", NULL)) return route_props(srv, c);
    if (get && is(url, "/slots", NULL)) return route_slots(srv, c);
    if (get && is(url, "/metrics", NULL)) return route_metrics(srv, c);
    if (get && is(url, "/v1/models", "/models")) return route_models(srv, c);
    if (get && is(url, "/lora-adapters", NULL)) return route_lora_get(srv, c);
    int kind = -1;
    if (is(url, "/completion", NULL)) kind = 10;
    else if (is(url, "/v1/completions", "/completions")) kind = 11;
    else if (is(url, "/v1/chat/completions", "/chat/completions")) kind = 12;
    else if (is(url, "/tokenize", NULL)) kind = 1;
    else if (is(url, "/detokenize", NULL)) kind = 2;
    else if (is(url, "/apply-template", NULL)) kind = 3;
    else if (is(url, "/lora-adapters", NULL)) kind = 4;
    if (kind < 0) return bn_send_error(c, 404, "not_found_error", "File Not Found");
    if (!post) return bn_send_error(c, 405, "invalid_request_error", "method %s not allowed on %s", method, url);
    if (bn_json_weight(body, body_len) > BN_SERVE_JSON_WEIGHT_MAX)
        return bn_send_error(c, 413, "invalid_request_error", "request body has too many JSON values (objects, "
                             "arrays, elements): at most about %d", BN_SERVE_JSON_WEIGHT_MAX / 2);
    json_error_t je;
    json_t *j = json_loadb(body, body_len, JSON_REJECT_DUPLICATES, &je);
    if (!j) return bn_send_error(c, 400, "invalid_request_error", "malformed JSON at line %d, column %d: %s", je.line,
                                 je.column, je.text);
    if (kind == 4) { // a JSON array
        const int ret = route_lora_post(srv, c, j);
        json_decref(j);
        return ret;
    }
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
        char *prompt = bn_server_chat_prompt(srv, j, err, sizeof err);
        ret = prompt ? bn_send_json(c, 200, json_pack("{s:s}", "prompt", prompt))
                     : bn_send_error(c, 400, "invalid_request_error", "%s", err);
        free(prompt);
        break;
    }
    case 12: ret = bn_route_chat(srv, rq, j); break;
    default: ret = bn_route_completion(srv, rq, j, kind == 11); break;
    }
    json_decref(j);
    return ret;
}
