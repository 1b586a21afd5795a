// tests/serve/test_server_bad.c — bad-request corpus against the real server: every malformed or
// hostile request gets a JSON error with 400/401/404/413 (never 500, never a crash), and the
// server keeps serving afterwards. Also the --api-key check.
#include "tests/test.h"
#include "tests/serve/http_client.h"
#include "tests/serve/server_fixture.h"
#include <jansson.h>
#include <string.h>
#include <stdlib.h>

static server_fixture F;

// expect: sends a request and checks status + a JSON error body of the given type.
static void expect(const char *path, const char *body, size_t len, const char *hdr, int status, const char *type,
                   const char *what) {
    http_resp r;
    int rc = http_request(F.port, "POST", path, body, len, hdr, &r);
    CHECK(rc == 0 && r.status == status, "%s: status %d, want %d", what, r.status, status);
    if (rc == 0 && type) {
        json_t *j = json_loadb(r.body, r.body_len, 0, NULL);
        json_t *e = json_object_get(j, "error");
        CHECK(e && json_integer_value(json_object_get(e, "code")) == status &&
                  json_is_string(json_object_get(e, "message")) &&
                  !strcmp(json_string_value(json_object_get(e, "type")), type),
              "%s: error body %s", what, r.body);
        json_decref(j);
    }
    http_resp_free(&r);
}

static void still_alive(const char *after) { CHECK(fixture_serves(&F), "server still serves after %s", after); }

#define BAD(path, body, status, type) expect(path, body, strlen(body), NULL, status, type, body)

int main(void) {
    if (fixture_model(&F, "tiny") != 0) return printf("FAIL: cannot generate the tiny model\n"), 1; // a bug, not a missing tool
    const char *args[] = {"-c", "128", "--max-body", "1048576", NULL};
    if (fixture_start(&F, args) != 0) {
        CHECK(0, "server did not start");
        return test_done("test_server_bad");
    }
    const char *ire = "invalid_request_error";
    BAD("/completion", "{\"prompt\": \"abc\"", 400, ire);                       // truncated JSON
    BAD("/completion", "", 400, ire);                                           // empty body
    BAD("/completion", "[1,2,3]", 400, ire);                                    // not an object
    BAD("/completion", "{\"prompt\": 42.5}", 400, ire);                         // wrong prompt type
    BAD("/completion", "{}", 400, ire);                                         // missing prompt
    BAD("/completion", "{\"prompt\": \"\"}", 400, ire);                         // empty prompt
    BAD("/completion", "{\"prompt\": \"x\", \"n_predict\": \"ten\"}", 400, ire); // wrong type
    BAD("/completion", "{\"prompt\": \"x\", \"temperature\": [1]}", 400, ire);
    BAD("/completion", "{\"prompt\": \"x\", \"top_p\": 7}", 400, ire);          // out of range
    BAD("/completion", "{\"prompt\": \"x\", \"temperature\": 1e300}", 400, ire); // inf as a float
    BAD("/completion", "{\"prompt\": \"x\", \"repeat_penalty\": 0}", 400, ire);  // a division by it
    BAD("/completion", "{\"prompt\": \"x\", \"repeat_penalty\": \"1.1\"}", 400, ire);
    BAD("/completion", "{\"prompt\": \"x\", \"repeat_last_n\": -2}", 400, ire);
    BAD("/completion", "{\"prompt\": \"x\", \"presence_penalty\": -1e300}", 400, ire);
    BAD("/completion", "{\"prompt\": \"x\", \"frequency_penalty\": [1]}", 400, ire);
    BAD("/completion", "{\"prompt\": \"x\", \"dry_sequence_breakers\": []}", 400, ire);
    BAD("/completion", "{\"prompt\": \"x\", \"dry_sequence_breakers\": [\"a\", 1]}", 400, ire);
    BAD("/completion", "{\"prompt\": \"x\", \"dry_allowed_length\": -1}", 400, ire);
    BAD("/completion", "{\"prompt\": \"x\", \"dry_multiplier\": 1e300}", 400, ire);
    BAD("/completion", "{\"prompt\": \"x\", \"n_probs\": -3}", 400, ire);
    BAD("/completion", "{\"prompt\": \"x\", \"stop\": 5}", 400, ire);
    BAD("/completion", "{\"prompt\": [1, 2, 99999999]}", 400, ire);             // token id out of range
    BAD("/completion", "{\"prompt\": [[1,2],[3]]}", 400, ire);                  // several prompts
    BAD("/completion", "{\"prompt\": \"x\", \"n_predict\": -7}", 400, ire);
    BAD("/completion", "{\"prompt\": \"x\", \"prompt\": \"y\"}", 400, ire);     // duplicate key
    BAD("/v1/completions", "{\"prompt\": \"x\", \"echo\": true}", 400, ire);
    BAD("/v1/chat/completions", "{\"messages\": \"hi\"}", 400, ire);
    BAD("/v1/chat/completions", "{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}", 400, ire);
    BAD("/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_logprobs\": 2}", 400, ire);
    BAD("/tokenize", "{\"content\": {\"a\": 1}}", 400, ire);
    BAD("/detokenize", "{\"tokens\": [\"a\"]}", 400, ire);
    BAD("/detokenize", "{\"tokens\": [-1]}", 400, ire);
    // top_logprobs without logprobs: llama-server's exact message
    {
        http_resp r;
        const char *b = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}";
        http_request(F.port, "POST", "/v1/chat/completions", b, strlen(b), NULL, &r);
        CHECK(strstr(r.body, "top_logprobs requires logprobs to be set to true") != NULL, "exact message");
        http_resp_free(&r);
    }
    // invalid UTF-8 inside a JSON string
    const char bad_utf8[] = "{\"prompt\": \"\xff\xfe\xc3\"}";
    expect("/completion", bad_utf8, sizeof bad_utf8 - 1, NULL, 400, ire, "invalid UTF-8");
    // prompt longer than the context
    {
        size_t n = 4000;
        char *b = malloc(n + 64);
        size_t k = (size_t)sprintf(b, "{\"prompt\": [");
        for (int i = 0; i < 300; i++) k += (size_t)sprintf(b + k, "%s%d", i ? "," : "", 65 + i % 20);
        k += (size_t)sprintf(b + k, "]}");
        expect("/completion", b, k, NULL, 400, "exceed_context_size_error", "prompt over n_ctx");
        free(b);
    }
    // huge n_predict: accepted, bounded by the context (stop_type limit)
    {
        http_resp r;
        const char *b = "{\"prompt\":\"x\",\"n_predict\":2000000000,\"temperature\":1,\"ignore_eos\":true}";
        http_request(F.port, "POST", "/completion", b, strlen(b), NULL, &r);
        json_t *j = json_loads(r.body, 0, NULL);
        CHECK(r.status == 200 && j && !strcmp(json_string_value(json_object_get(j, "stop_type")), "limit"),
              "huge n_predict stops at the context end");
        json_decref(j);
        http_resp_free(&r);
    }
    // 10 MB body → 413
    {
        size_t n = 10u << 20;
        char *b = malloc(n);
        memset(b, ' ', n);
        b[0] = '{';
        b[n - 1] = '}';
        expect("/completion", b, n, NULL, 413, ire, "10 MB body");
        free(b);
    }
    // unknown route and method
    {
        http_resp r;
        http_request(F.port, "GET", "/v2/everything", NULL, 0, NULL, &r);
        CHECK(r.status == 404, "unknown route 404");
        http_resp_free(&r);
    }
    still_alive("the bad-request corpus");
    CHECK(fixture_stop(&F) == 0, "clean exit");

    // API key
    const char *kargs[] = {"--api-key", "s3cret", NULL};
    if (fixture_start(&F, kargs) != 0) {
        CHECK(0, "server with api key did not start");
        return test_done("test_server_bad");
    }
    const char *b = "{\"prompt\":\"ok\",\"n_predict\":1}";
    expect("/completion", b, strlen(b), NULL, 401, "authentication_error", "no key");
    expect("/completion", b, strlen(b), "Authorization: Bearer wrong\r\n", 401, "authentication_error", "wrong key");
    expect("/completion", b, strlen(b), "Authorization: Bearer s3cret\r\n", 200, NULL, "right key");
    expect("/completion", b, strlen(b), "X-Api-Key: s3cret\r\n", 200, NULL, "X-Api-Key");
    http_resp r;
    http_request(F.port, "GET", "/health", NULL, 0, NULL, &r);
    CHECK(r.status == 200, "/health needs no key");
    http_resp_free(&r);
    CHECK(fixture_stop(&F) == 0, "clean exit");
    return test_done("test_server_bad");
}
