// tests/serve/test_server_fuzz.c — random requests against the real server (fixed seed, so a failure
// repeats): JSON bodies built from the request fields the server reads, with values of every JSON type and
// edge values (huge and negative integers, NaN/inf spelled out, invalid UTF-8 after byte flips, truncation),
// sent to every route, some streamed and dropped after the first byte. Every reply must be a status the
// server may give (200, 400, 404, 413; never 5xx, never a dropped connection), and the server must keep
// answering a plain completion. The server runs 3 slots with a DSpark drafter drafting every step, so the
// requests also go through the speculative rounds and the batched passes. scripts/sanitize.sh runs this test
// against an ASan/UBSan build of the server, where a memory error ends the server and fails the test.
#include "tests/test.h"
#include "tests/serve/http_client.h"
#include "tests/serve/server_fixture.h"
#include "base/rng.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_REQUESTS = 2000, ALIVE_EVERY = 100 };

static server_fixture F;
static bn_rng R;

static const char *const routes[] = {"/completion", "/completions", "/v1/completions", "/chat/completions",
                                     "/v1/chat/completions", "/tokenize", "/detokenize", "/apply-template",
                                     "/props", "/slots", "/metrics", "/health", "/v1/models", "/no-such-route"};
static const char *const get_routes[] = {"/props", "/slots", "/metrics", "/health", "/v1/models"};
static const char *const keys[] = {
    "prompt", "n_predict", "max_tokens", "temperature", "top_k", "top_p", "min_p", "seed", "stream", "n_probs",
    "stop", "messages", "content", "tokens", "add_special", "with_pieces", "logprobs", "top_logprobs",
    "cache_prompt", "id_slot", "n_keep", "ignore_eos", "samplers", "logit_bias", "stream_options", "n", "echo",
    "parse_special", "speculative.n_max", "speculative.n_min", "speculative.p_min", "return_tokens", "model",
    "repeat_penalty", "presence_penalty", "frequency_penalty", "post_sampling_probs", "role"};
#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))

static int below(int n) { return (int)bn_rng_below(&R, (uint64_t)n); }

// random_text: a short string of ASCII, 2- and 3-byte code points, NUL-free control bytes and special tokens
static json_t *random_text(void) {
    static const char *const fixed[] = {"", "hello world", "<|im_start|>", "<|im_end|>user\n", "\xc3\xa1", "\n\n"};
    if (below(3) == 0) return json_string(fixed[below(COUNT(fixed))]);
    char buf[160];
    int n = 0, len = below(40);
    for (int i = 0; i < len && n < (int)sizeof buf - 4; i++) {
        int c = below(4) == 0 ? 0x80 + below(0x2000) : 1 + below(126);
        if (c < 0x80) buf[n++] = (char)c;
        else if (c < 0x800) buf[n++] = (char)(0xc0 | c >> 6), buf[n++] = (char)(0x80 | (c & 63));
        else
            buf[n++] = (char)(0xe0 | c >> 12), buf[n++] = (char)(0x80 | (c >> 6 & 63)), buf[n++] = (char)(0x80 | (c & 63));
    }
    return json_stringn(buf, (size_t)n);
}

// random_value: any JSON value, nested at most 3 deep (integers at the int64 edges, reals of any size)
static json_t *random_value(int depth) {
    static const json_int_t ints[] = {0, 1, -1, 2, 3, 8, 64, 128, 100000, 2147483647LL, -2147483648LL,
                                      9223372036854775807LL, -9223372036854775807LL - 1};
    static const double reals[] = {0.0, -0.5, 0.7, 2.5, 1e308, -1e308, 1e-320, 1e30};
    switch (below(depth < 3 ? 10 : 6)) {
    case 0: return json_integer(ints[below(COUNT(ints))]);
    case 1: return json_real(reals[below(COUNT(reals))]);
    case 2: return below(3) == 0 ? json_null() : json_boolean(below(2));
    case 3: return random_text();
    case 4: {
        json_t *a = json_array();
        for (int i = below(20); i > 0; i--) json_array_append_new(a, json_integer(below(300) - 5));
        return a;
    }
    case 5: return json_integer(below(50) - 3);
    case 6: {
        json_t *a = json_array();
        for (int i = below(5); i > 0; i--) json_array_append_new(a, random_value(depth + 1));
        return a;
    }
    case 7: {
        json_t *o = json_object();
        for (int i = below(4); i > 0; i--) json_object_set_new(o, keys[below(COUNT(keys))], random_value(depth + 1));
        return o;
    }
    case 8: {
        static const char *const roles[] = {"user", "system", "assistant", "tool", "x"};
        json_t *a = json_array();
        for (int i = below(4); i > 0; i--) {
            json_t *m = json_object();
            json_t *role = below(8) ? json_string(roles[below(COUNT(roles))]) : random_value(depth + 1);
            json_object_set_new(m, "role", role);
            json_object_set_new(m, "content", below(2) ? random_text() : random_value(depth + 1));
            json_array_append_new(a, m);
        }
        return a;
    }
    default: {
        json_t *a = json_array(); // [[token, bias], ...] as logit_bias takes it
        for (int i = below(3); i > 0; i--) {
            json_t *p = json_array();
            json_array_append_new(p, json_integer(below(300)));
            json_array_append_new(p, random_value(depth + 1));
            json_array_append_new(a, p);
        }
        return a;
    }
    }
}

// random_body: a request body (malloc'd, *len bytes): random fields, often a usable prompt or chat, short
// outputs; then in one of ten bodies a few flipped bytes, in one of twenty a truncation, and now and then a
// NaN or Infinity literal spliced in (JSON has none; jansson must refuse them)
static char *random_body(size_t *len) {
    json_t *o = json_object();
    for (int i = below(7); i > 0; i--) json_object_set_new(o, keys[below(COUNT(keys))], random_value(0));
    if (below(10) < 6) json_object_set_new(o, "prompt", below(10) < 3 ? random_value(0) : json_string("once upon"));
    if (below(10) < 4) json_object_set_new(o, "messages", json_pack("[{s:s, s:s}]", "role", "user", "content", "hi"));
    if (below(10) < 7) {
        json_object_set_new(o, "n_predict", json_integer(below(8)));
        json_object_set_new(o, "max_tokens", json_integer(below(8)));
    }
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    size_t n = strlen(s);
    int m = below(40);
    if (m < 4 && n > 0) {
        for (int i = 1 + below(4); i > 0; i--) s[below((int)n)] = (char)below(256);
    } else if (m < 6) {
        n = (size_t)below((int)n + 1);
    } else if (m < 7) {
        const char *lit = below(2) ? "NaN" : "-Infinity";
        char *t = malloc(n + 32);
        snprintf(t, n + 32, "{\"temperature\":%s,%s", lit, s + 1);
        free(s);
        s = t, n = strlen(t);
    }
    *len = n;
    return s;
}

static bool allowed(int status) { return status == 200 || status == 400 || status == 404 || status == 413; }

int main(void) {
    if (fixture_model(&F, "tiny") != 0) return printf("FAIL: cannot generate the tiny model\n"), 1; // a bug, not a missing tool
    if (fixture_drafter(&F) != 0) {
        CHECK(0, "drafter");
        return test_done("test_server_fuzz");
    }
    const char *args[] = {"-c", "256", "-np", "3", "--metrics", "-md", F.drafter, "--spec-type", "draft-dspark",
                          "--spec-draft-n-max", "3", "--no-spec-adaptive", NULL};
    if (fixture_start(&F, args) != 0) {
        CHECK(0, "server did not start");
        return test_done("test_server_fuzz");
    }
    bn_rng_seed(&R, 20261130);
    int by_status[600] = {0}, bad = 0, dropped = 0;
    for (int i = 0; i < N_REQUESTS && bad < 5; i++) {
        size_t len;
        char *body = random_body(&len);
        const char *route = routes[below(COUNT(routes))];
        const char *method = "POST";
        for (int g = 0; g < COUNT(get_routes); g++)
            if (!strcmp(route, get_routes[g]) && below(5) < 4) method = "GET";
        if (!strcmp(method, "POST") && below(30) == 0) { // a client that leaves mid-stream
            char *t = malloc(len + 32);
            snprintf(t, len + 32, "{\"stream\":true,%.*s", (int)(len > 0 ? len - 1 : 0), len > 0 ? body + 1 : "");
            if (http_stream_first_then_close(F.port, route, t, NULL) != 0)
                bad++, fprintf(stderr, "request %d: no connection\n", i);
            dropped++;
            free(t);
        } else {
            http_resp r;
            int rc = http_request(F.port, method, route, body, len, NULL, &r);
            if (rc != 0 || !allowed(r.status)) {
                bad++;
                fprintf(stderr, "request %d: %s %s %.*s -> %d %.200s\n", i, method, route, (int)(len < 300 ? len : 300),
                        body, rc ? -1 : r.status, rc ? "" : r.body);
            } else {
                by_status[r.status]++;
            }
            http_resp_free(&r);
        }
        free(body);
        if ((i + 1) % ALIVE_EVERY == 0 && !fixture_serves(&F)) {
            bad++;
            fprintf(stderr, "server stopped answering after request %d\n", i);
            break;
        }
    }
    printf("replies: 200 x%d, 400 x%d, 404 x%d, 413 x%d; %d streams dropped by the client\n", by_status[200],
           by_status[400], by_status[404], by_status[413], dropped);
    CHECK(bad == 0, "%d requests got a 5xx, a status outside 200/400/404/413, or no connection", bad);
    CHECK(by_status[200] > N_REQUESTS / 10 && by_status[400] > N_REQUESTS / 10,
          "the mix reached both accepted and refused requests (200 x%d, 400 x%d)", by_status[200], by_status[400]);
    CHECK(fixture_stop(&F) == 0, "server exits 0 on SIGTERM after the fuzzing");
    return test_done("test_server_fuzz");
}
