// tests/serve/test_server_fields.c — request fields and answers of bonsai-serve that follow llama-server
// (docs/server.md §3–§9) on a generated tiny model: logit_bias in its forms (ids and strings, [[id, bias]] and
// {"id": bias}, false = ban) steering greedy output, the n_predict aliases (-2 refused, n_predict first),
// llama-server's error types and fields (exceed_context_size_error with n_prompt_tokens / n_ctx, a bad id_slot an
// invalid_request_error), HEAD, and the chat formats: the model's own template (plain ChatML for the tiny model,
// whose template has no <think>), --chat-template qwen35 with chat_template_kwargs.enable_thinking, /props showing
// the template in use; with the default flags, a connection that sends no header is closed after 10 s.
#include "tests/test.h"
#include "tests/serve/http_client.h"
#include "tests/serve/server_fixture.h"
#include <jansson.h>
#include <poll.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>

static server_fixture F;

static json_t *call(const char *method, const char *path, const char *body, int *status) {
    return http_json(F.port, method, path, body, status);
}

// greedy: the ids of a greedy /completion of 8 tokens with extra fields (",…" or ""), into ids; returns the count.
static int greedy(const char *extra, int32_t *ids) {
    char body[512];
    snprintf(body, sizeof body, "{\"prompt\":\"Once upon a time\",\"n_predict\":8,\"temperature\":0%s}", extra);
    int st;
    json_t *j = call("POST", "/completion", body, &st);
    json_t *t = json_object_get(j, "tokens");
    int n = st == 200 ? (int)json_array_size(t) : -1;
    for (int i = 0; i < n && i < 8; i++) ids[i] = (int32_t)json_integer_value(json_array_get(t, i));
    json_decref(j);
    return n;
}

static bool all_are(const int32_t *ids, int n, int32_t id) {
    for (int i = 0; i < n; i++)
        if (ids[i] != id) return false;
    return n > 0;
}

// round_trip: a token id from 300 on, not `avoid`, whose piece (into piece) tokenizes to that id alone; -1 if none.
static int32_t round_trip(int32_t avoid, char *piece, size_t n) {
    for (int32_t x = 300; x < 340; x++) {
        char body[128];
        int st;
        snprintf(body, sizeof body, "{\"tokens\":[%d]}", x);
        json_t *d = call("POST", "/detokenize", body, &st);
        const char *p = json_string_value(json_object_get(d, "content"));
        json_t *q = p ? json_pack("{s:s}", "content", p) : NULL;
        char *qs = q ? json_dumps(q, 0) : NULL;
        json_t *tk = qs ? call("POST", "/tokenize", qs, &st) : NULL, *t = json_object_get(tk, "tokens");
        bool ok = x != avoid && json_array_size(t) == 1 && json_integer_value(json_array_get(t, 0)) == x &&
                  strlen(p) < n;
        if (ok) snprintf(piece, n, "%s", p);
        free(qs);
        json_decref(q);
        json_decref(tk);
        json_decref(d);
        if (ok) return x;
    }
    return -1;
}

static void test_logit_bias(void) {
    int32_t plain[8], ids[8];
    int n = greedy("", plain);
    CHECK(n == 8, "a greedy completion (%d tokens)", n);
    if (n != 8) return;
    char extra[256];
    snprintf(extra, sizeof extra, ",\"logit_bias\":[[%d,false]]", plain[0]);
    CHECK(greedy(extra, ids) == 8 && ids[0] != plain[0], "[[id, false]] bans the greedy first token %d", plain[0]);
    char piece[64];
    int32_t x = round_trip(plain[0], piece, sizeof piece); // another token, pushed to the top
    CHECK(x >= 0, "a token whose piece is itself again");
    if (x < 0) return;
    snprintf(extra, sizeof extra, ",\"logit_bias\":[[%d,100]]", x);
    CHECK(greedy(extra, ids) == 8 && all_are(ids, 8, x), "[[id, 100]] makes token %d every pick", x);
    snprintf(extra, sizeof extra, ",\"logit_bias\":{\"%d\":100}", x);
    CHECK(greedy(extra, ids) == 8 && all_are(ids, 8, x), "{\"id\": 100} likewise");
    snprintf(extra, sizeof extra, ",\"logit_bias\":[[%d,60],[%d,40]]", x, x);
    CHECK(greedy(extra, ids) == 8 && all_are(ids, 8, x), "two biases of one token add up");
    // a string: each of its tokens gets the bias (here a one-token string: the piece of x)
    json_t *lb = json_pack("{s:[[s,i]]}", "logit_bias", piece, 100);
    json_t *ob = json_pack("{s:{s:i}}", "logit_bias", piece, 100);
    char *lbs = json_dumps(lb, 0), *obs = json_dumps(ob, 0);
    lbs[strlen(lbs) - 1] = 0, obs[strlen(obs) - 1] = 0; // {"logit_bias": …} → ,"logit_bias": …
    lbs[0] = ',', obs[0] = ',';
    CHECK(greedy(lbs, ids) == 8 && all_are(ids, 8, x), "[[\"string\", 100]] biases its token");
    CHECK(greedy(obs, ids) == 8 && all_are(ids, 8, x), "{\"string\": 100} biases its token");
    free(lbs), free(obs);
    json_decref(lb), json_decref(ob);
    char body[128];
    int st;
    // generation_settings shows the bias, a ban as null
    snprintf(body, sizeof body, "{\"prompt\":\"a\",\"n_predict\":1,\"logit_bias\":[[%d,false],[5,1.5]]}", x);
    json_t *j = call("POST", "/completion", body, &st);
    json_t *gb = json_object_get(json_object_get(j, "generation_settings"), "logit_bias");
    CHECK(json_array_size(gb) == 2 && json_integer_value(json_object_get(json_array_get(gb, 0), "token")) == 5 &&
              json_real_value(json_object_get(json_array_get(gb, 0), "bias")) == 1.5 &&
              json_is_null(json_object_get(json_array_get(gb, 1), "bias")),
          "generation_settings.logit_bias");
    json_decref(j);
    const char *bad[] = {"\"logit_bias\":3", "\"logit_bias\":[[1]]", "\"logit_bias\":[[1,true]]",
                         "\"logit_bias\":[[100000,1]]", "\"logit_bias\":{\"1\":\"x\"}", NULL};
    for (int i = 0; bad[i]; i++) {
        snprintf(body, sizeof body, "{\"prompt\":\"a\",\"n_predict\":1,%s}", bad[i]);
        json_t *e = call("POST", "/completion", body, &st);
        CHECK(st == 400, "%s refused (%d)", bad[i], st);
        json_decref(e);
    }
}

static void test_fields_and_errors(void) {
    int st;
    json_t *j = call("POST", "/completion", "{\"prompt\":\"a\",\"max_tokens\":-2}", &st);
    CHECK(st == 400, "max_tokens -2 refused (%d)", st);
    json_decref(j);
    j = call("POST", "/completion", "{\"prompt\":\"a\",\"n_predict\":3,\"max_tokens\":9,\"ignore_eos\":true}", &st);
    CHECK(st == 200 && json_integer_value(json_object_get(j, "tokens_predicted")) == 3,
          "n_predict wins over max_tokens");
    json_decref(j);
    j = call("POST", "/completion", "{\"prompt\":\"a\",\"id_slot\":7}", &st);
    const char *type = json_string_value(json_object_get(json_object_get(j, "error"), "type"));
    CHECK(st == 400 && type && !strcmp(type, "invalid_request_error"), "a bad id_slot: invalid_request_error (%s)",
          type ? type : "?");
    json_decref(j);
    char body[4096];
    int k = snprintf(body, sizeof body, "{\"prompt\":[");
    for (int i = 0; i < 300; i++) k += snprintf(body + k, sizeof body - (size_t)k, "%s7", i ? "," : "");
    snprintf(body + k, sizeof body - (size_t)k, "]}");
    j = call("POST", "/completion", body, &st);
    json_t *e = json_object_get(j, "error");
    type = json_string_value(json_object_get(e, "type"));
    CHECK(st == 400 && type && !strcmp(type, "exceed_context_size_error") &&
              json_integer_value(json_object_get(e, "n_prompt_tokens")) == 300 &&
              json_integer_value(json_object_get(e, "n_ctx")) == 256,
          "context overflow: exceed_context_size_error with n_prompt_tokens and n_ctx");
    json_decref(j);
    http_resp r;
    int hs = http_request(F.port, "HEAD", "/health", NULL, 0, NULL, &r) == 0 ? r.status : 0;
    CHECK(hs == 200 && r.body_len == 0, "HEAD /health: 200 without a body (%d)", hs);
    if (hs) http_resp_free(&r);
}

static char *apply_template(const char *extra) {
    char body[256];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]%s}", extra);
    int st;
    json_t *j = call("POST", "/apply-template", body, &st);
    const char *p = json_string_value(json_object_get(j, "prompt"));
    char *out = p ? strdup(p) : NULL;
    json_decref(j);
    return out;
}

static void test_chat_formats(bool qwen35) {
    int st;
    json_t *props = call("GET", "/props", NULL, &st);
    const char *fmt = json_string_value(json_object_get(props, "chat_format"));
    const char *tmpl = json_string_value(json_object_get(props, "chat_template"));
    char *on = apply_template(""), *off = apply_template(",\"chat_template_kwargs\":{\"enable_thinking\":false}");
    const char *user = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
    if (!qwen35) {
        CHECK(fmt && !strcmp(fmt, "chatml"), "the model's template without <think>: chat format chatml (%s)", fmt);
        CHECK(tmpl && strstr(tmpl, "im_start"), "/props shows the model's template");
        CHECK(on && !strcmp(on, user) && off && !strcmp(off, user), "plain ChatML, no <think> either way");
    } else {
        CHECK(fmt && !strcmp(fmt, "qwen35") && tmpl && !strcmp(tmpl, "qwen35"), "--chat-template qwen35 in /props");
        CHECK(on && strstr(on, user) && !strcmp(on + strlen(user), "<think>\n"), "qwen35: thinking on by default");
        CHECK(off && strstr(off, user) && !strcmp(off + strlen(user), "<think>\n\n</think>\n\n"),
              "qwen35: enable_thinking false closes the think block");
        json_t *j = call("POST", "/apply-template", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                                                    "\"chat_template_kwargs\":{\"enable_thinking\":1}}", &st);
        CHECK(st == 400, "enable_thinking must be a boolean (%d)", st);
        json_decref(j);
    }
    free(on);
    free(off);
    json_decref(props);
}

int main(void) {
    if (fixture_model(&F, "tiny") != 0) return printf("FAIL: cannot generate the tiny model\n"), 1;
    const char *args[] = {"-np", "2", "-c", "256", NULL};
    if (fixture_start(&F, args) != 0) {
        CHECK(0, "server did not start");
        return test_done("test_server_fields");
    }
    int idle = http_connect(F.port); // sends nothing: closed after the default --header-timeout (10 s)
    time_t t_idle = time(NULL);
    test_logit_bias();
    test_fields_and_errors();
    test_chat_formats(false);
    struct pollfd pf = {.fd = idle, .events = POLLIN};
    int left = 13 - (int)(time(NULL) - t_idle);
    char c;
    bool closed = poll(&pf, 1, left > 0 ? left * 1000 : 0) == 1 && recv(idle, &c, 1, 0) <= 0;
    CHECK(idle >= 0 && closed, "an idle connection closed by the default header timeout (after %ld s)",
          (long)(time(NULL) - t_idle));
    if (idle >= 0) close(idle);
    CHECK(fixture_stop(&F) == 0, "clean exit");
    const char *args2[] = {"-np", "1", "-c", "256", "--chat-template", "qwen35", NULL};
    if (fixture_start(&F, args2) == 0) {
        test_chat_formats(true);
        CHECK(fixture_stop(&F) == 0, "clean exit");
    } else CHECK(0, "server with --chat-template did not start");
    return test_done("test_server_fields");
}
