// tests/serve/test_server_spec.c — bonsai-serve with DSpark speculative decoding (-md, a random
// tiny drafter) and with the oracle drafter (a measurement aid that drafts the target's own greedy
// continuation): greedy output token-identical to the plain server, draft counters in timings,
// /metrics and /slots. Prompt cache with speculation: two requests on slot 0 whose prompts share a
// 12-token prefix (cache_prompt); the second reuses the cache (timings.cache_n > 0, tokens_cached =
// cache_n + tokens_predicted) with -md as without, and both texts equal the plain server's. The first of them,
// which asks for no log-probs (decode steps take the engine's argmax), gives the same text with n_probs, and so
// does a sampled request (top_k 40, fixed seed: decode steps take the engine's 40 best logits). /props
// names the engine (BONSAI_SERVE_BACKEND, default CPU): serve_spec_emu runs all of it with -ngl 99 on the CUDA
// emulator.
#include "tests/test.h"
#include "tests/serve/http_client.h"
#include "tests/serve/server_fixture.h"
#include <jansson.h>
#include <string.h>

static server_fixture F;
static const char *REQ = "{\"prompt\":\"Once upon a time the\",\"n_predict\":48,\"temperature\":0,\"n_probs\":3}";
// greedy with repetition penalties and DRY: each verified row's pick counts the committed tokens and the drafts before it
static const char *REQ_PEN = "{\"prompt\":\"Once upon a time the\",\"n_predict\":48,\"temperature\":0,\"n_probs\":3,"
                             "\"repeat_penalty\":1.5,\"presence_penalty\":3,\"frequency_penalty\":0.5,"
                             "\"repeat_last_n\":-1,\"dry_multiplier\":2,\"dry_allowed_length\":1,"
                             "\"dry_penalty_last_n\":-1}";

// two requests with a shared prefix (token ids of the tiny vocabulary), greedy, on one slot
static const char *REQ_P1 = "{\"prompt\":[10,200,33,47,300,5,99,123,7,64,250,18],\"n_predict\":24,"
                            "\"temperature\":0,\"id_slot\":0,\"cache_prompt\":true}";
static const char *REQ_P1_LP = "{\"prompt\":[10,200,33,47,300,5,99,123,7,64,250,18],\"n_predict\":24,"
                               "\"temperature\":0,\"id_slot\":0,\"cache_prompt\":true,\"n_probs\":2}";
// sampled (llama-server's default chain, fixed seed), without and with log-probs
static const char *REQ_S = "{\"prompt\":[10,200,33,47,300,5,99],\"n_predict\":24,\"temperature\":0.8,"
                           "\"top_k\":40,\"seed\":1234,\"id_slot\":0}";
static const char *REQ_S_LP = "{\"prompt\":[10,200,33,47,300,5,99],\"n_predict\":24,\"temperature\":0.8,"
                              "\"top_k\":40,\"seed\":1234,\"id_slot\":0,\"n_probs\":1}";
static const char *REQ_P2 = "{\"prompt\":[10,200,33,47,300,5,99,123,7,64,250,18,77,401,9,260,31],\"n_predict\":24,"
                            "\"temperature\":0,\"id_slot\":0,\"cache_prompt\":true}";

static json_t *post(const char *body) {
    http_resp r;
    if (http_request(F.port, "POST", "/completion", body, strlen(body), NULL, &r) != 0) return NULL;
    json_t *j = r.status == 200 ? json_loadb(r.body, r.body_len, 0, NULL) : NULL;
    if (!j) fprintf(stderr, "status %d: %s\n", r.status, r.body);
    http_resp_free(&r);
    return j;
}

static json_t *complete(void) { return post(REQ); }

// timing: timings.<key> of a completion.
static long timing(json_t *j, const char *key) {
    return (long)json_integer_value(json_object_get(json_object_get(j, "timings"), key));
}

static const char *content(json_t *j) {
    const char *c = json_string_value(json_object_get(j, "content"));
    return c ? c : "(none)";
}

// shared_prefix: runs REQ_P1 then REQ_P2 on the running server into pair[0..1]; checks the second reused
// the cache and reports it in tokens_cached.
static void shared_prefix(json_t *pair[2], const char *what) {
    pair[0] = post(REQ_P1);
    pair[1] = post(REQ_P2);
    CHECK(pair[0] && pair[1], "%s: shared-prefix requests", what);
    if (!pair[0] || !pair[1]) return;
    long cached = timing(pair[1], "cache_n");
    long tokens_cached = (long)json_integer_value(json_object_get(pair[1], "tokens_cached"));
    long predicted = (long)json_integer_value(json_object_get(pair[1], "tokens_predicted"));
    printf("%s: second request cache_n %ld, tokens_cached %ld, tokens_predicted %ld\n", what, cached, tokens_cached,
           predicted);
    CHECK(cached > 0 && tokens_cached == cached + predicted, "%s: the second request reused the prompt cache", what);
    // REQ_P1 asks for no log-probs: its decode steps took the engine's argmax (serve/slots.c argmax_steps,
    // bn_spec_set_no_step_logits); with n_probs the steps keep their logits rows: the same text
    json_t *lp = post(REQ_P1_LP);
    CHECK(lp && strcmp(content(lp), content(pair[0])) == 0 &&
              json_array_size(json_object_get(lp, "completion_probabilities")) > 0,
          "%s: greedy text without log-probs (argmax steps) \"%s\" != with n_probs \"%s\"", what, content(pair[0]),
          lp ? content(lp) : "");
    json_decref(lp);
    // sampled: without log-probs the plain server's steps take the top_k best logits only (bn_sampler_sample_topk);
    // with n_probs they keep the row: the same draws, the same text
    json_t *sa = post(REQ_S), *sb = post(REQ_S_LP);
    CHECK(sa && sb && strcmp(content(sa), content(sb)) == 0 && strlen(content(sa)) > 0,
          "%s: sampled text without log-probs (top-k steps) \"%s\" != with n_probs \"%s\"", what,
          sa ? content(sa) : "", sb ? content(sb) : "");
    json_decref(sa), json_decref(sb);
}

static bool same_tokens(json_t *a, json_t *b) {
    json_t *pa = json_object_get(a, "completion_probabilities"), *pb = json_object_get(b, "completion_probabilities");
    if (json_array_size(pa) != json_array_size(pb) || json_array_size(pa) == 0) return false;
    for (size_t i = 0; i < json_array_size(pa); i++)
        if (json_integer_value(json_object_get(json_array_get(pa, i), "id")) !=
            json_integer_value(json_object_get(json_array_get(pb, i), "id")))
            return false;
    return true;
}

// check_backend: /props names the engine the slots run on: env BONSAI_SERVE_BACKEND (serve_spec_emu: "CUDA"),
// else "CPU".
static void check_backend(const char *what) {
    const char *want = getenv("BONSAI_SERVE_BACKEND") ? getenv("BONSAI_SERVE_BACKEND") : "CPU";
    http_resp r;
    json_t *j = NULL;
    if (http_request(F.port, "GET", "/props", NULL, 0, NULL, &r) == 0) {
        j = r.status == 200 ? json_loadb(r.body, r.body_len, 0, NULL) : NULL;
        http_resp_free(&r);
    }
    const char *got = json_string_value(json_object_get(j, "backend"));
    CHECK(got && !strcmp(got, want), "%s server: /props backend %s, want %s", what, got ? got : "(none)", want);
    json_decref(j);
}

int main(void) {
    if (fixture_model(&F, "tiny") != 0) return printf("FAIL: cannot generate the tiny model\n"), 1; // a bug, not a missing tool
    CHECK(fixture_drafter(&F) == 0, "drafter");
    const char *drafter = F.drafter;

    const char *plain_args[] = {"-c", "256", NULL};
    CHECK(fixture_start(&F, plain_args) == 0, "plain server");
    check_backend("plain");
    json_t *plain = complete();
    CHECK(plain != NULL, "plain completion");
    json_t *plain_pen = post(REQ_PEN);
    CHECK(plain_pen && !same_tokens(plain, plain_pen), "the penalties change the plain greedy output");
    json_t *plain_pair[2];
    shared_prefix(plain_pair, "plain");
    fixture_stop(&F);

    const char *spec_args[] = {"-c", "256", "-md", drafter, "--spec-type", "draft-dspark", "--spec-draft-n-max", "4",
                               "--no-spec-adaptive", "--metrics", NULL};
    CHECK(fixture_start(&F, spec_args) == 0, "dspark server");
    check_backend("dspark");
    json_t *spec = complete();
    CHECK(spec && same_tokens(plain, spec), "DSpark greedy output == plain greedy output");
    json_t *spec_pair[2];
    shared_prefix(spec_pair, "dspark");
    for (int i = 0; i < 2; i++) {
        CHECK(plain_pair[i] && spec_pair[i] && strcmp(content(plain_pair[i]), content(spec_pair[i])) == 0,
              "shared-prefix request %d: DSpark text \"%s\" != plain text \"%s\"", i + 1,
              spec_pair[i] ? content(spec_pair[i]) : "", plain_pair[i] ? content(plain_pair[i]) : "");
        CHECK(spec_pair[i] && timing(spec_pair[i], "draft_n") > 0, "shared-prefix request %d drafted", i + 1);
    }
    for (int i = 0; i < 2; i++) json_decref(plain_pair[i]), json_decref(spec_pair[i]);
    json_t *tm = json_object_get(spec, "timings");
    CHECK(json_integer_value(json_object_get(tm, "draft_n")) > 0, "timings.draft_n present");
    http_resp r;
    http_request(F.port, "GET", "/metrics", NULL, 0, NULL, &r);
    CHECK(r.body && !strstr(r.body, "llamacpp:spec_decode_num_draft_tokens_total 0\n") &&
              strstr(r.body, "spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"}"),
          "spec counters in /metrics");
    http_resp_free(&r);
    http_request(F.port, "GET", "/slots", NULL, 0, NULL, &r);
    CHECK(r.body && strstr(r.body, "\"speculative\":true"), "/slots speculative");
    http_resp_free(&r);
    json_t *spec_pen = post(REQ_PEN);
    CHECK(spec_pen && same_tokens(plain_pen, spec_pen) && timing(spec_pen, "draft_n") > 0,
          "DSpark greedy output with repetition penalties == plain's (drafted %ld)", spec_pen ? timing(spec_pen, "draft_n") : -1);
    json_decref(spec_pen);
    CHECK(fixture_stop(&F) == 0, "clean exit");
    json_decref(spec);

    const char *oracle_args[] = {"-c", "256", "--spec-type", "draft-oracle", "--spec-draft-n-max", "4",
                                 "--no-spec-adaptive", NULL};
    CHECK(fixture_start(&F, oracle_args) == 0, "oracle server");
    json_t *orc = complete();
    CHECK(orc && same_tokens(plain, orc), "oracle greedy output == plain greedy output");
    tm = json_object_get(orc, "timings");
    long dn = (long)json_integer_value(json_object_get(tm, "draft_n")),
         da = (long)json_integer_value(json_object_get(tm, "draft_n_accepted"));
    printf("oracle: draft_n %ld, accepted %ld\n", dn, da);
    CHECK(dn > 0 && da == dn, "the oracle's drafts are all accepted (%ld of %ld)", da, dn);
    // the oracle drafts the unpenalized greedy continuation: the penalized picks reject some, the output stays
    json_t *orc_pen = post(REQ_PEN);
    CHECK(orc_pen && same_tokens(plain_pen, orc_pen), "oracle greedy output with repetition penalties == plain's");
    printf("oracle, penalized: draft_n %ld, accepted %ld\n", orc_pen ? timing(orc_pen, "draft_n") : -1,
           orc_pen ? timing(orc_pen, "draft_n_accepted") : -1);
    json_decref(orc_pen);
    CHECK(fixture_stop(&F) == 0, "clean exit");
    json_decref(orc);
    json_decref(plain);
    json_decref(plain_pen);
    return test_done("test_server_spec");
}
