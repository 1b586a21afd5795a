// tests/serve/test_server_lora.c — LoRA adapters in bonsai-serve (docs/server.md §9.5) on a generated tiny model:
// two adapters loaded at start (--lora A, --lora-scaled B 0.5); GET /lora-adapters lists them with their global
// scales; a greedy /completion without a lora field decodes what the CPU engine decodes in-process at the global
// scales, token for token; the per-request lora field applies its scales to that request only (adapters not listed:
// 0, which gives the base model's tokens) and leaves the global scales alone; POST /lora-adapters sets the global
// scales; bad ids, scales and bodies are 400 invalid_request_error in llama-server's error shape; a server started
// with --lora-init-without-apply lists every scale as 0 and decodes the base model.
#include "tests/test.h"
#include "tests/serve/http_client.h"
#include "tests/serve/server_fixture.h"
#include "core/adapter.h"
#include "core/forward.h"
#include "core/model.h"
#include "train/lora.h"
#include "base/rng.h"
#include "base/util.h"
#include <jansson.h>
#include <math.h>
#include <string.h>

#define N_GEN 8
static server_fixture F;
static char ad[2][400];
static const int32_t PROMPT[6] = {40, 7, 300, 12, 99, 5};

static json_t *call(const char *method, const char *path, const char *body, int *status) {
    return http_json(F.port, method, path, body, status);
}

// served: the ids of a greedy /completion of N_GEN tokens from PROMPT (past end-of-generation tokens, as the
// in-process run) with extra fields (",…" or ""); the count.
static int served(const char *extra, int32_t *ids) {
    char body[512];
    snprintf(body, sizeof body,
             "{\"prompt\":[40,7,300,12,99,5],\"n_predict\":%d,\"temperature\":0,\"ignore_eos\":true%s}", N_GEN,
             extra);
    int st;
    json_t *j = call("POST", "/completion", body, &st);
    json_t *t = json_object_get(j, "tokens");
    int n = st == 200 ? (int)json_array_size(t) : -1;
    for (int i = 0; i < n && i < N_GEN; i++) ids[i] = (int32_t)json_integer_value(json_array_get(t, i));
    json_decref(j);
    return n;
}

// expected: the CPU engine's greedy ids from PROMPT with both adapters at scales s0, s1.
static void expected(const bn_model *m, const bn_lora_set *set, float s0, float s1, int32_t *ids) {
    char err[256];
    bn_state *s = bn_state_new(m, 64, 1);
    bn_state_set_lora(s, set);
    const float sc[2] = {s0, s1};
    bn_state_set_lora_scales(s, sc, 2);
    int32_t next;
    bn_forward_out o = {.argmax = &next};
    CHECK(bn_forward(m, s, PROMPT, 6, &o, err, sizeof err) == 0, "forward: %s", err);
    for (int i = 0; i < N_GEN; i++) {
        ids[i] = next;
        if (i + 1 < N_GEN) CHECK(bn_forward(m, s, &ids[i], 1, &o, err, sizeof err) == 0, "forward: %s", err);
    }
    bn_state_free(s);
}

// scales_are: GET /lora-adapters lists two adapters (ids 0, 1, their files) at scales a, b.
static void scales_are(float a, float b, const char *when) {
    int st;
    json_t *j = call("GET", "/lora-adapters", NULL, &st);
    bool ok = st == 200 && json_array_size(j) == 2;
    for (int i = 0; ok && i < 2; i++) {
        json_t *e = json_array_get(j, (size_t)i);
        ok = json_integer_value(json_object_get(e, "id")) == i &&
             !strcmp(json_string_value(json_object_get(e, "path")) ?: "", ad[i]) &&
             fabs(json_number_value(json_object_get(e, "scale")) - (i ? b : a)) < 1e-6;
    }
    CHECK(ok, "%s: GET /lora-adapters lists both adapters at %g, %g (status %d)", when, a, b, st);
    json_decref(j);
}

// bad: method path body is a 400 invalid_request_error whose message holds want.
static void bad(const char *method, const char *path, const char *body, const char *want) {
    int st;
    json_t *j = call(method, path, body, &st);
    json_t *e = json_object_get(j, "error");
    const char *msg = json_string_value(json_object_get(e, "message"));
    CHECK(st == 400 && json_integer_value(json_object_get(e, "code")) == 400 &&
              !strcmp(json_string_value(json_object_get(e, "type")) ?: "", "invalid_request_error") && msg &&
              strstr(msg, want),
          "%s %s %s: 400 invalid_request_error naming '%s' (got %d: %s)", method, path, body, want, st,
          msg ? msg : "");
    json_decref(j);
}

// write_adapters: two random adapters of m: every projection (seed 1), and the head and FFN (seed 2).
static int write_adapters(const bn_model *m) {
    char err[256];
    const unsigned masks[2] = {BN_LORA_ATTN | BN_LORA_FFN | BN_LORA_GDN | BN_LORA_HEAD, BN_LORA_FFN | BN_LORA_HEAD};
    for (int k = 0; k < 2; k++) {
        snprintf(ad[k], sizeof ad[k], "%s/lora%d.gguf", F.dir, k);
        bn_lora *l = bn_lora_from_model(m, masks[k], 4, 8.0f, 0, err, sizeof err);
        if (!l) return -1;
        bn_lora_init_peft(l, (uint64_t)k + 1);
        bn_rng rng;
        bn_rng_seed(&rng, (uint64_t)k + 10);
        for (int i = 0; i < l->n_tensors; i++)
            for (int64_t e = 0; e < l->t[i].n_out * l->r; e++)
                l->params[l->t[i].off_b + e] = (float)(bn_rng_uniform(&rng) - 0.5);
        const int rc = bn_lora_save_gguf(l, ad[k], err, sizeof err);
        bn_lora_free(l);
        if (rc) return -1;
    }
    return 0;
}

int main(void) {
    char err[256];
    if (fixture_model(&F, "tiny") != 0) return test_skip("cannot write the model");
    bn_model *m = bn_model_load(F.model, err, sizeof err);
    CHECK(m && write_adapters(m) == 0, "model and adapters: %s", err);
    const char *paths[2] = {ad[0], ad[1]};
    bn_lora_set *set = m ? bn_lora_set_open(m, paths, NULL, 2, err, sizeof err) : NULL;
    CHECK(set != NULL, "adapters: %s", err);
    if (!set) return test_done("test_server_lora");
    int32_t base[N_GEN], glob[N_GEN], got[N_GEN], want[N_GEN];
    expected(m, set, 0, 0, base);
    expected(m, set, 1.0f, 0.5f, glob);
    CHECK(memcmp(base, glob, sizeof base) != 0, "the adapters change the greedy tokens");

    const char *args[] = {"--lora", ad[0], "--lora-scaled", ad[1], "0.5", NULL};
    CHECK(fixture_start(&F, args) == 0, "server starts with two adapters");
    scales_are(1.0f, 0.5f, "at start");
    CHECK(served("", got) == N_GEN && !memcmp(got, glob, sizeof got), "no lora field: the global scales' tokens");
    expected(m, set, 0.25f, 0, want);
    CHECK(served(",\"lora\":[{\"id\":0,\"scale\":0.25}]", got) == N_GEN && !memcmp(got, want, sizeof got),
          "lora [{id 0, scale 0.25}]: adapter 1 at 0 for this request");
    CHECK(served(",\"lora\":[]", got) == N_GEN && !memcmp(got, base, sizeof got), "lora []: the base model's tokens");
    scales_are(1.0f, 0.5f, "after per-request scales");
    int st;
    json_t *j = call("POST", "/lora-adapters", "[{\"id\":1,\"scale\":2}]", &st);
    CHECK(st == 200 && json_is_true(json_object_get(j, "success")), "POST /lora-adapters: success (%d)", st);
    json_decref(j);
    scales_are(0.0f, 2.0f, "after POST");
    expected(m, set, 0, 2.0f, want);
    CHECK(served("", got) == N_GEN && !memcmp(got, want, sizeof got), "after POST: the new global scales' tokens");
    // the same request at the same scales again (its prompt from the slot's cache) gives the same tokens
    CHECK(served("", got) == N_GEN && !memcmp(got, want, sizeof got), "cached prompt at the same scales");
    CHECK(served(",\"lora\":[{\"id\":1,\"scale\":0}]", got) == N_GEN && !memcmp(got, base, sizeof got),
          "cached prompt at other scales: recomputed (base tokens)");

    bad("POST", "/completion", "{\"prompt\":[1],\"lora\":\"x\"}", "'lora' must be an array");
    bad("POST", "/completion", "{\"prompt\":[1],\"lora\":[{\"id\":5,\"scale\":1}]}", "id 5");
    bad("POST", "/completion", "{\"prompt\":[1],\"lora\":[{\"id\":0,\"scale\":\"a\"}]}", "'scale'");
    bad("POST", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"lora\":[{\"id\":-1}]}",
        "id -1");
    bad("POST", "/lora-adapters", "{\"id\":0,\"scale\":1}", "must be an array");
    bad("POST", "/lora-adapters", "[{\"id\":2,\"scale\":1}]", "id 2");
    bad("POST", "/lora-adapters", "[{\"id\":0,\"scale\":1e300}]", "'scale'");
    scales_are(0.0f, 2.0f, "after the refused requests");
    CHECK(fixture_stop(&F) == 0, "server stops cleanly");

    const char *init0[] = {"--lora", ad[0], "--lora", ad[1], "--lora-init-without-apply", NULL};
    CHECK(fixture_start(&F, init0) == 0, "server starts with --lora-init-without-apply");
    scales_are(0, 0, "--lora-init-without-apply");
    CHECK(served("", got) == N_GEN && !memcmp(got, base, sizeof got), "--lora-init-without-apply: base tokens");
    CHECK(fixture_stop(&F) == 0, "server stops cleanly");
    bn_lora_set_free(set);
    bn_model_free(m);
    return test_done("test_server_lora");
}
