// tests/serve/test_server_api.c — the real bonsai-serve on loopback with a generated tiny model:
// every endpoint's shape (docs/server.md §2–10), greedy output equal to the in-process engine's, and
// n_probs values equal to the engine's raw-softmax logprobs (tolerance 1e-4: same code path, JSON
// printing rounds to ~1e-7 relative), SSE framing of both families, clean SIGTERM exit.
#include "tests/test.h"
#include "tests/serve/http_client.h"
#include "tests/serve/server_fixture.h"
#include "core/forward.h"
#include "core/sampler.h"
#include "core/tokenizer.h"
#include <jansson.h>
#include <string.h>

static server_fixture F;

static json_t *post_json(const char *path, const char *body, int *status) {
    http_resp r;
    if (http_request(F.port, "POST", path, body, strlen(body), NULL, &r) != 0) {
        *status = 0;
        return NULL;
    }
    *status = r.status;
    json_t *j = json_loadb(r.body, r.body_len, 0, NULL);
    http_resp_free(&r);
    return j;
}

static json_t *get_json(const char *path, int *status) {
    http_resp r;
    if (http_request(F.port, "GET", path, NULL, 0, NULL, &r) != 0) {
        *status = 0;
        return NULL;
    }
    *status = r.status;
    json_t *j = json_loadb(r.body, r.body_len, 0, NULL);
    http_resp_free(&r);
    return j;
}

static bool has_keys(json_t *o, const char *const *keys) {
    for (int i = 0; keys[i]; i++)
        if (!json_object_get(o, keys[i])) {
            fprintf(stderr, "missing key '%s'\n", keys[i]);
            return false;
        }
    return true;
}

// sse_events: splits an SSE body into its "data: " payloads (malloc'd array of strdup'd strings).
static int sse_events(const char *body, char ***out) {
    int n = 0, cap = 64;
    char **ev = malloc(sizeof(char *) * cap);
    const char *p = body;
    while ((p = strstr(p, "data: "))) {
        p += 6;
        const char *e = strstr(p, "\n\n");
        if (!e) break;
        if (n == cap) ev = realloc(ev, sizeof(char *) * (cap *= 2));
        ev[n++] = strndup(p, (size_t)(e - p));
        p = e + 2;
    }
    *out = ev;
    return n;
}

// engine_greedy: in-process greedy run (the reference for the server's output).
static int engine_greedy(const char *prompt, int n_predict, int32_t *out, float *lp_top /* [n][5] */,
                         int32_t *id_top) {
    char err[256];
    bn_model *m = bn_model_load(F.model, err, sizeof err);
    bn_tokenizer *tok = bn_tokenizer_from_gguf(m->gguf, err, sizeof err);
    int32_t *ids;
    int n = bn_tokenize(tok, prompt, strlen(prompt), false, true, &ids);
    bn_state *s = bn_state_new(m, 256, 2);
    float *logits = malloc(sizeof(float) * m->cfg.n_vocab);
    bn_forward_out o = {.logits = logits};
    bn_forward(m, s, ids, n, &o, err, sizeof err);
    int k = 0;
    for (; k < n_predict; k++) {
        bn_logits_topk(logits, m->cfg.n_vocab, 5, id_top + 5 * k, lp_top + 5 * k);
        int32_t t = id_top[5 * k]; // greedy = highest logit (ties → lower id, as bn_logits_topk)
        if (bn_token_is_eog(tok, t)) break;
        out[k] = t;
        bn_forward(m, s, &t, 1, &o, err, sizeof err);
    }
    free(logits);
    free(ids);
    bn_state_free(s);
    bn_tokenizer_free(tok);
    bn_model_free(m);
    return k;
}

static void test_health_and_info(void) {
    int st;
    json_t *j = get_json("/health", &st);
    CHECK(st == 200 && j && !strcmp(json_string_value(json_object_get(j, "status")), "ok"), "health %d", st);
    json_decref(j);
    j = get_json("/props", &st);
    const char *props[] = {"default_generation_settings", "total_slots", "model_alias", "model_path", "modalities",
                           "chat_template", "bos_token", "eos_token", "build_info", NULL};
    CHECK(st == 200 && j && has_keys(j, props), "props");
    CHECK(json_integer_value(json_object_get(j, "total_slots")) == 2, "total_slots");
    json_decref(j);
    j = get_json("/slots", &st);
    CHECK(st == 200 && json_is_array(j) && json_array_size(j) == 2, "slots");
    const char *slot_keys[] = {"id", "n_ctx", "speculative", "is_processing", "params", "next_token", NULL};
    if (json_is_array(j)) CHECK(has_keys(json_array_get(j, 0), slot_keys), "slot keys");
    json_decref(j);
    j = get_json("/v1/models", &st);
    CHECK(st == 200 && j && json_is_array(json_object_get(j, "data")) &&
              !strcmp(json_string_value(json_object_get(j, "object")), "list"),
          "models");
    json_t *d0 = json_array_get(json_object_get(j, "data"), 0);
    const char *mkeys[] = {"id", "object", "created", "owned_by", "meta", NULL};
    CHECK(d0 && has_keys(d0, mkeys), "models.data keys");
    json_decref(j);
    http_resp r;
    http_request(F.port, "GET", "/metrics", NULL, 0, NULL, &r);
    char ct[128];
    CHECK(r.status == 200 && strstr(r.body, "# TYPE llamacpp:prompt_tokens_total counter") &&
              strstr(r.body, "llamacpp:spec_decode_num_draft_tokens_total") &&
              http_header(&r, "Content-Type", ct, sizeof ct) && strstr(ct, "text/plain"),
          "metrics");
    http_resp_free(&r);
    http_request(F.port, "GET", "/nope", NULL, 0, NULL, &r);
    j = json_loads(r.body, 0, NULL);
    CHECK(r.status == 404 && j &&
              !strcmp(json_string_value(json_object_get(json_object_get(j, "error"), "type")), "not_found_error"),
          "404 shape");
    json_decref(j);
    http_resp_free(&r);
}

static void test_completion_matches_engine(void) {
    const char *prompt = "Once upon a time the";
    int32_t ref[32], top_id[32 * 5];
    float top_lp[32 * 5];
    int n_ref = engine_greedy(prompt, 24, ref, top_lp, top_id);
    CHECK(n_ref > 0, "engine produced tokens");
    int st;
    json_t *j = post_json("/completion",
                          "{\"prompt\":\"Once upon a time the\",\"n_predict\":24,\"temperature\":0,\"n_probs\":5,"
                          "\"return_tokens\":true}", &st);
    CHECK(st == 200 && j, "completion status %d", st);
    if (!j) return;
    const char *keys[] = {"index", "content", "tokens", "id_slot", "stop", "model", "tokens_predicted",
                          "tokens_evaluated", "generation_settings", "prompt", "has_new_line", "truncated",
                          "stop_type", "stopping_word", "tokens_cached", "timings", "completion_probabilities", NULL};
    CHECK(has_keys(j, keys), "completion keys");
    json_t *toks = json_object_get(j, "tokens"), *probs = json_object_get(j, "completion_probabilities");
    CHECK((int)json_array_size(toks) >= n_ref, "tokens %zu vs engine %d", json_array_size(toks), n_ref);
    for (int i = 0; i < n_ref && i < (int)json_array_size(toks); i++)
        CHECK(json_integer_value(json_array_get(toks, i)) == ref[i], "greedy token %d", i);
    for (int i = 0; i < n_ref && i < (int)json_array_size(probs); i++) {
        json_t *e = json_array_get(probs, i), *top = json_object_get(e, "top_logprobs");
        CHECK(json_array_size(top) == 5, "5 top logprobs");
        for (int k = 0; k < 5 && k < (int)json_array_size(top); k++) {
            json_t *t = json_array_get(top, k);
            CHECK(json_integer_value(json_object_get(t, "id")) == top_id[5 * i + k], "top id %d/%d", i, k);
            CHECK_NEAR(json_real_value(json_object_get(t, "logprob")), top_lp[5 * i + k], 1e-4, "top logprob");
            CHECK(json_is_array(json_object_get(t, "bytes")) && json_is_string(json_object_get(t, "token")), "piece");
        }
        CHECK_NEAR(json_real_value(json_object_get(e, "logprob")), top_lp[5 * i], 1e-4, "sampled logprob");
    }
    const char *content = json_string_value(json_object_get(j, "content"));
    // streaming gives the same text, no [DONE], a final stop:true object without probabilities
    http_resp r;
    const char *sb = "{\"prompt\":\"Once upon a time the\",\"n_predict\":24,\"temperature\":0,\"stream\":true}";
    http_request(F.port, "POST", "/completion", sb, strlen(sb), NULL, &r);
    char ct[128];
    CHECK(r.status == 200 && http_header(&r, "Content-Type", ct, sizeof ct) && strstr(ct, "text/event-stream"), "sse ct");
    char **ev;
    int n = sse_events(r.body, &ev);
    CHECK(n >= 2, "stream events %d", n);
    CHECK(!strstr(r.body, "[DONE]"), "no [DONE] on /completion");
    size_t cap = 4096, len = 0;
    char *acc = calloc(1, cap);
    for (int i = 0; i < n; i++) {
        json_t *e = json_loads(ev[i], 0, NULL);
        CHECK(e != NULL, "event %d is JSON", i);
        bool stop = e && json_is_true(json_object_get(e, "stop"));
        CHECK(stop == (i == n - 1), "only the last event has stop:true (%d)", i);
        const char *c = e ? json_string_value(json_object_get(e, "content")) : "";
        if (c && len + strlen(c) + 1 < cap) {
            memcpy(acc + len, c, strlen(c) + 1);
            len += strlen(c);
        }
        if (i == n - 1 && e) CHECK(!json_object_get(e, "completion_probabilities") && json_object_get(e, "timings"), "final event");
        json_decref(e);
        free(ev[i]);
    }
    free(ev);
    CHECK(content && !strcmp(acc, content), "streamed text == non-stream text");
    free(acc);
    http_resp_free(&r);
    // the second identical request reuses the prompt cache
    json_t *j2 = post_json("/completion", "{\"prompt\":\"Once upon a time the\",\"n_predict\":4,\"temperature\":0,\"id_slot\":0}", &st);
    json_t *j3 = post_json("/completion", "{\"prompt\":\"Once upon a time the\",\"n_predict\":4,\"temperature\":0,\"id_slot\":0}", &st);
    CHECK(j3 && json_integer_value(json_object_get(json_object_get(j3, "timings"), "cache_n")) > 0, "prompt cache reused");
    CHECK(j2 && j3 && !strcmp(json_string_value(json_object_get(j2, "content")), json_string_value(json_object_get(j3, "content"))),
          "cached run gives the same text");
    json_decref(j2);
    json_decref(j3);
    json_decref(j);
}

static void test_openai_routes(void) {
    int st;
    json_t *j = post_json("/v1/completions", "{\"prompt\":\"Hello\",\"max_tokens\":8,\"temperature\":0,\"logprobs\":3}", &st);
    CHECK(st == 200 && j, "v1/completions %d", st);
    const char *ck[] = {"choices", "created", "model", "system_fingerprint", "object", "usage", "id", NULL};
    if (j) {
        CHECK(has_keys(j, ck), "v1/completions keys");
        CHECK(!strcmp(json_string_value(json_object_get(j, "object")), "text_completion"), "object");
        json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
        CHECK(json_is_string(json_object_get(c0, "text")) && json_is_string(json_object_get(c0, "finish_reason")), "choice");
        CHECK(json_array_size(json_object_get(json_object_get(c0, "logprobs"), "content")) > 0, "logprobs.content");
    }
    json_decref(j);
    j = post_json("/v1/chat/completions",
                  "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Hi\"}],"
                  "\"max_tokens\":8,\"temperature\":0,\"logprobs\":true,\"top_logprobs\":2}", &st);
    CHECK(st == 200 && j, "chat %d", st);
    if (j) {
        json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
        CHECK(!strcmp(json_string_value(json_object_get(j, "object")), "chat.completion"), "chat object");
        CHECK(!strcmp(json_string_value(json_object_get(json_object_get(c0, "message"), "role")), "assistant"), "role");
        json_t *lc = json_object_get(json_object_get(c0, "logprobs"), "content");
        CHECK(json_array_size(lc) > 0 && json_array_size(json_object_get(json_array_get(lc, 0), "top_logprobs")) == 2,
              "chat top_logprobs");
    }
    json_decref(j);
    // chat streaming: role chunk, content chunks, finish chunk, usage chunk, [DONE]
    http_resp r;
    const char *b = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":6,\"temperature\":0,"
                    "\"stream\":true,\"stream_options\":{\"include_usage\":true}}";
    http_request(F.port, "POST", "/v1/chat/completions", b, strlen(b), NULL, &r);
    char **ev;
    int n = sse_events(r.body, &ev);
    CHECK(r.status == 200 && n >= 4, "chat stream events %d", n);
    if (n >= 4) {
        CHECK(!strcmp(ev[n - 1], "[DONE]"), "ends with [DONE]");
        json_t *first = json_loads(ev[0], 0, NULL), *usage = json_loads(ev[n - 2], 0, NULL),
               *fin = json_loads(ev[n - 3], 0, NULL);
        json_t *d0 = json_object_get(json_array_get(json_object_get(first, "choices"), 0), "delta");
        CHECK(d0 && !strcmp(json_string_value(json_object_get(d0, "role")), "assistant"), "role chunk first");
        CHECK(usage && json_array_size(json_object_get(usage, "choices")) == 0 && json_object_get(usage, "usage"), "usage chunk");
        CHECK(fin && json_is_string(json_object_get(json_array_get(json_object_get(fin, "choices"), 0), "finish_reason")),
              "finish chunk");
        CHECK(first && !strcmp(json_string_value(json_object_get(first, "object")), "chat.completion.chunk"), "chunk object");
        json_decref(first);
        json_decref(usage);
        json_decref(fin);
    }
    for (int i = 0; i < n; i++) free(ev[i]);
    free(ev);
    http_resp_free(&r);
    // /v1/completions streaming ends with [DONE]
    b = "{\"prompt\":\"Hello\",\"max_tokens\":4,\"temperature\":0,\"stream\":true}";
    http_request(F.port, "POST", "/v1/completions", b, strlen(b), NULL, &r);
    n = sse_events(r.body, &ev);
    CHECK(n >= 2 && !strcmp(ev[n - 1], "[DONE]"), "v1/completions stream [DONE]");
    for (int i = 0; i < n; i++) free(ev[i]);
    free(ev);
    http_resp_free(&r);
}

static void test_tokenize(void) {
    int st;
    json_t *j = post_json("/tokenize", "{\"content\":\"Hello world\",\"with_pieces\":true}", &st);
    json_t *toks = json_object_get(j, "tokens");
    CHECK(st == 200 && json_array_size(toks) > 0, "tokenize");
    json_t *ids = json_array();
    size_t plen = 0;
    char pieces[256] = "";
    for (size_t i = 0; i < json_array_size(toks); i++) {
        json_t *t = json_array_get(toks, i);
        json_array_append_new(ids, json_integer(json_integer_value(json_object_get(t, "id"))));
        const char *p = json_string_value(json_object_get(t, "piece"));
        if (p && plen + strlen(p) < sizeof pieces) {
            strcat(pieces, p);
            plen += strlen(p);
        }
    }
    CHECK(!strcmp(pieces, "Hello world"), "pieces concatenate to the input: '%s'", pieces);
    json_t *req = json_pack("{s:o}", "tokens", ids);
    char *body = json_dumps(req, 0);
    json_t *d = post_json("/detokenize", body, &st);
    CHECK(st == 200 && d && !strcmp(json_string_value(json_object_get(d, "content")), "Hello world"), "detokenize");
    free(body);
    json_decref(req);
    json_decref(d);
    json_decref(j);
    j = post_json("/apply-template", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", &st);
    CHECK(st == 200 && j && strstr(json_string_value(json_object_get(j, "prompt")), "<|im_start|>user\nHi<|im_end|>\n"),
          "apply-template");
    json_decref(j);
}

// test_penalties: repeat_penalty & co. reach the sampler (a presence penalty of 1e6 over the whole history makes
// greedy output avoid every token of the prompt and of itself), show in generation_settings, and change the output
static void test_penalties(void) {
    int st;
    const char *prompt = "\"Once upon a time the cat sat on the mat and the cat sat on the mat\"";
    char body[512];
    snprintf(body, sizeof body, "{\"prompt\":%s,\"n_predict\":24,\"temperature\":0,\"return_tokens\":true}", prompt);
    json_t *plain = post_json("/completion", body, &st);
    CHECK(st == 200 && plain, "plain greedy completion");
    snprintf(body, sizeof body,
             "{\"prompt\":%s,\"n_predict\":24,\"temperature\":0,\"presence_penalty\":1e6,\"repeat_last_n\":-1,"
             "\"repeat_penalty\":1.25,\"frequency_penalty\":0.5}", prompt);
    json_t *pen = post_json("/completion", body, &st);
    CHECK(st == 200 && pen, "penalized greedy completion");
    json_t *tk = json_object_get(pen, "tokens"), *gs = json_object_get(pen, "generation_settings");
    json_t *tz = post_json("/tokenize", "{\"content\":\"Once upon a time the cat sat on the mat and the cat sat on the mat\"}", &st);
    json_t *ptoks = json_object_get(tz, "tokens");
    CHECK(json_array_size(tk) == 24 && json_array_size(ptoks) > 0, "24 tokens, a tokenized prompt");
    bool fresh = true; // no generated token repeats the prompt or an earlier generated token
    for (size_t i = 0; i < json_array_size(tk); i++) {
        json_int_t id = json_integer_value(json_array_get(tk, i));
        for (size_t k = 0; k < json_array_size(ptoks); k++) fresh &= id != json_integer_value(json_array_get(ptoks, k));
        for (size_t k = 0; k < i; k++) fresh &= id != json_integer_value(json_array_get(tk, k));
    }
    CHECK(fresh, "presence_penalty 1e6 over the whole history: no generated token seen before");
    CHECK(json_real_value(json_object_get(gs, "presence_penalty")) == 1e6 &&
              json_real_value(json_object_get(gs, "repeat_penalty")) == 1.25 &&
              json_real_value(json_object_get(gs, "frequency_penalty")) == 0.5 &&
              json_integer_value(json_object_get(gs, "repeat_last_n")) == -1,
          "generation_settings shows the penalties");
    CHECK(strcmp(json_string_value(json_object_get(plain, "content")), json_string_value(json_object_get(pen, "content"))),
          "the penalties change the greedy output");
    // DRY: its settings and breakers in generation_settings; a strong DRY changes the greedy output
    snprintf(body, sizeof body,
             "{\"prompt\":%s,\"n_predict\":24,\"temperature\":0,\"dry_multiplier\":8,\"dry_allowed_length\":1,"
             "\"dry_penalty_last_n\":-1,\"dry_sequence_breakers\":[\"zz\"]}", prompt);
    json_t *dry = post_json("/completion", body, &st);
    json_t *dgs = json_object_get(dry, "generation_settings"), *br = json_object_get(dgs, "dry_sequence_breakers");
    CHECK(st == 200 && json_real_value(json_object_get(dgs, "dry_multiplier")) == 8 &&
              json_integer_value(json_object_get(dgs, "dry_allowed_length")) == 1 &&
              json_integer_value(json_object_get(dgs, "dry_penalty_last_n")) == -1 && json_array_size(br) == 1 &&
              !strcmp(json_string_value(json_array_get(br, 0)), "zz"),
          "generation_settings shows DRY");
    CHECK(st == 200 && strcmp(json_string_value(json_object_get(plain, "content")),
                              json_string_value(json_object_get(dry, "content"))),
          "DRY changes the greedy output");
    json_decref(dry);
    json_decref(plain);
    json_decref(pen);
    json_decref(tz);
}

int main(void) {
    if (fixture_model(&F, "tiny") != 0) return printf("FAIL: cannot generate the tiny model\n"), 1; // a bug, not a missing tool
    const char *args[] = {"-np", "2", "-c", "256", "--metrics", NULL};
    if (fixture_start(&F, args) != 0) {
        CHECK(0, "server did not start");
        return test_done("test_server_api");
    }
    test_health_and_info();
    test_completion_matches_engine();
    test_openai_routes();
    test_tokenize();
    test_penalties();
    CHECK(fixture_stop(&F) == 0, "SIGTERM → exit 0");
    return test_done("test_server_api");
}
