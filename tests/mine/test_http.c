// tests/mine/test_http.c — the HTTP completion source against a fake llama-server on loopback:
// the request carries the prompt ids and raw-logprob settings; the response (plain and chunked
// transfer encoding) becomes ids + top-K; a trailing EOG id is dropped; HTTP errors and bad URLs
// are reported.
#include "tests/test.h"
#include "mine/source_http.h"
#include "synth/mkmodel.h"
#include "core/model.h"
#include "core/tokenizer.h"
#include "base/util.h"
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <signal.h>
#include <sys/wait.h>

// Starts bonsai-serve on a free port with the tiny model; returns its pid (url filled) or -1.
static pid_t start_server(const char *serve, const char *model, const char *ready, char *url, size_t n) {
    pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        freopen("/dev/null", "w", stdout);
        execl(serve, serve, "-m", model, "--port", "0", "-t", "1", "-c", "512", "--ready-file", ready, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 300; i++) { // up to 30 s
        FILE *f = fopen(ready, "r");
        char hp[128] = "";
        if (f) {
            if (fgets(hp, sizeof hp, f) && strchr(hp, ':')) {
                fclose(f);
                hp[strcspn(hp, "\r\n")] = 0;
                snprintf(url, n, "http://%s", hp);
                return pid;
            }
            fclose(f);
        }
        if (waitpid(pid, NULL, WNOHANG) == pid) return -1;
        usleep(100000);
    }
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    return -1;
}

enum { MAX_CONN = 16 };
typedef struct {
    int listen_fd;
    const char *responses[MAX_CONN]; // full HTTP responses, one per connection (NULL: hold it 2 s, answer nothing)
    int n;
    char request[MAX_CONN][8192];
} fake_server;

static void *serve(void *arg) {
    fake_server *f = arg;
    for (int c = 0; c < f->n; c++) {
        int fd = accept(f->listen_fd, NULL, NULL);
        if (fd < 0) return NULL;
        size_t got = 0;
        char *buf = f->request[c];
        for (;;) { // read headers + Content-Length body
            ssize_t r = read(fd, buf + got, sizeof f->request[c] - 1 - got);
            if (r <= 0) break;
            got += (size_t)r;
            buf[got] = 0;
            char *he = strstr(buf, "\r\n\r\n");
            char *cl = strstr(buf, "Content-Length: ");
            if (he && cl && got >= (size_t)(he + 4 - buf) + (size_t)atoi(cl + 16)) break;
        }
        if (!f->responses[c]) sleep(2);
        ssize_t w = f->responses[c] ? write(fd, f->responses[c], strlen(f->responses[c])) : 0;
        (void)w;
        close(fd);
    }
    return NULL;
}

int main(void) {
    char err[1024], dir[] = "/tmp/bonsai-test-http-XXXXXX", path[256];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(path, sizeof path, "%s/tiny.gguf", dir);
    bn_mkmodel_params mk;
    bn_mkmodel_defaults(&mk, "tiny");
    CHECK(bn_mkmodel_write(&mk, path, err, sizeof err) == 0, "mkmodel: %s", err);
    bn_model *m = bn_model_load(path, err, sizeof err);
    bn_tokenizer *tok = m ? bn_tokenizer_from_gguf(m->gguf, err, sizeof err) : NULL;
    CHECK(tok != NULL, "tokenizer: %s", err);
    if (!tok) return test_done("test_http");
    int32_t eog = bn_token_lookup(tok, "<|im_end|>");
    CHECK(eog >= 0 && bn_token_is_eog(tok, eog), "<|im_end|> is EOG");

    static fake_server f = {.n = 3};
    f.listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = 0};
    CHECK(bind(f.listen_fd, (struct sockaddr *)&addr, sizeof addr) == 0 && listen(f.listen_fd, 4) == 0, "listen");
    socklen_t al = sizeof addr;
    getsockname(f.listen_fd, (struct sockaddr *)&addr, &al);
    char body1[1024];
    snprintf(body1, sizeof body1,
             "{\"content\":\"ab\",\"tokens\":[97,98,%d],\"stop\":true,\"stop_type\":\"eos\",\"completion_probabilities\":["
             "{\"id\":97,\"token\":\"a\",\"bytes\":[97],\"logprob\":-0.25,\"top_logprobs\":[{\"id\":97,\"logprob\":-0.25},{\"id\":120,\"logprob\":-1.5}]},"
             "{\"id\":98,\"token\":\"b\",\"bytes\":[98],\"logprob\":-2.0,\"top_logprobs\":[{\"id\":99,\"logprob\":-0.5},{\"id\":98,\"logprob\":-2.0}]},"
             "{\"id\":%d,\"token\":\"\",\"bytes\":[],\"logprob\":-0.1,\"top_logprobs\":[{\"id\":%d,\"logprob\":-0.1},{\"id\":10,\"logprob\":-3.0}]}]}",
             eog, eog, eog);
    char resp1[2048], resp2[2048];
    snprintf(resp1, sizeof resp1, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(body1), body1);
    const char *body2 = "{\"tokens\":[120],\"stop\":true,\"stop_type\":\"limit\",\"completion_probabilities\":["
                        "{\"id\":120,\"logprob\":-0.75,\"top_logprobs\":[{\"id\":120,\"logprob\":-0.75},{\"id\":121,\"logprob\":-0.9}]}]}";
    size_t half = strlen(body2) / 2;
    snprintf(resp2, sizeof resp2, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%zx\r\n%.*s\r\n%zx\r\n%s\r\n0\r\n\r\n",
             half, (int)half, body2, strlen(body2) - half, body2 + half);
    f.responses[0] = resp1;
    f.responses[1] = resp2;
    f.responses[2] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 60\r\n\r\n{\"error\":{\"code\":400,\"message\":\"bad\",\"type\":\"invalid_req\"}}";
    pthread_t th;
    pthread_create(&th, NULL, serve, &f);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", ntohs(addr.sin_port));
    bn_source *src = bn_source_http(url, tok, 30, err, sizeof err);
    CHECK(src != NULL && !strcmp(src->endpoint, url), "source: %s", err);
    int32_t prompt[3] = {5, 6, 7};
    bn_gen_params gp = bn_gen_params_default();
    gp.n_probs = 2;
    gp.n_predict = 16;
    bn_gen_result g;
    CHECK(src->generate(src, prompt, 3, &gp, &g, err, sizeof err) == 0, "generate 1: %s", err);
    CHECK(g.n == 2 && g.ids[0] == 97 && g.ids[1] == 98 && !g.hit_limit, "ids: n %d", g.n);
    CHECK(g.k == 2 && g.topk[0].id == 97 && g.topk[1].id == 120 && g.topk[2].id == 99 && g.topk[1].logprob == -1.5 &&
          g.logprob[1] == -2.0f, "top-K parsed");
    bn_gen_result_free(&g);
    char *body = strstr(f.request[0], "\r\n\r\n");
    json_t *req = body ? json_loads(body + 4, 0, NULL) : NULL;
    CHECK(req && json_array_size(json_object_get(req, "prompt")) == 3 &&
          json_integer_value(json_array_get(json_object_get(req, "prompt"), 2)) == 7 &&
          json_integer_value(json_object_get(req, "n_probs")) == 2 &&
          json_is_false(json_object_get(req, "post_sampling_probs")) && json_is_true(json_object_get(req, "return_tokens")) &&
          json_integer_value(json_object_get(req, "n_predict")) == 16, "request body: %s", body ? body + 4 : "(none)");
    CHECK(strncmp(f.request[0], "POST /completion HTTP/1.1\r\n", 27) == 0, "request line");
    json_decref(req);
    CHECK(src->generate(src, prompt, 3, &gp, &g, err, sizeof err) == 0 && g.n == 1 && g.ids[0] == 120 && g.hit_limit &&
          g.topk[1].id == 121, "chunked response: %s", err);
    bn_gen_result_free(&g);
    CHECK(src->generate(src, prompt, 3, &gp, &g, err, sizeof err) == -1 && strstr(err, "HTTP 400"), "HTTP error: %s", err);
    pthread_join(th, NULL);
    bn_source_free(src);
    // broken and hostile servers: each answer is an error with a message (and nothing crashes)
    char big_id[512], big_top[512];
    snprintf(big_id, sizeof big_id, "HTTP/1.1 200 OK\r\n\r\n{\"tokens\":[1,%d],\"completion_probabilities\":["
             "{\"id\":1,\"top_logprobs\":[{\"id\":1,\"logprob\":-1},{\"id\":2,\"logprob\":-2}]},"
             "{\"id\":%d,\"top_logprobs\":[{\"id\":1,\"logprob\":-1},{\"id\":2,\"logprob\":-2}]}]}",
             bn_tokenizer_n_vocab(tok), bn_tokenizer_n_vocab(tok));
    snprintf(big_top, sizeof big_top, "HTTP/1.1 200 OK\r\n\r\n{\"completion_probabilities\":["
             "{\"id\":1,\"top_logprobs\":[{\"id\":1,\"logprob\":-1},{\"id\":%d,\"logprob\":-2}]}]}",
             bn_tokenizer_n_vocab(tok) + 5);
    const struct { const char *resp, *want; } broken[] = {
        {"", "malformed HTTP response"},
        {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n", "malformed HTTP response"},
        {"HTTP/1.1 200 OK\r\n\r\nnot json", "not a JSON object"},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n{\"tok", "not a JSON object"},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", "not a JSON object"},
        {"HTTP/1.1 200 OK\r\n\r\n{\"completion_probabilities\":[{\"id\":-4}]}", "not a token id"},
        {"HTTP/1.1 200 OK\r\n\r\n{\"completion_probabilities\":[{\"id\":1e3}]}", "not a token id"},
        {"HTTP/1.1 200 OK\r\n\r\n{\"completion_probabilities\":[{\"id\":99999999999}]}", "not a token id"},
        {"HTTP/1.1 200 OK\r\n\r\n{\"completion_probabilities\":{}}", "no completion_probabilities"},
        {big_id, "outside the vocabulary"},
        {big_top, "outside the vocabulary"},
        {"HTTP/1.1 503 Service Unavailable\r\n\r\n", "HTTP 503"},
        {NULL, "reading the response failed"}, // no answer within the 1 s timeout
    };
    const int n_broken = (int)(sizeof broken / sizeof broken[0]);
    f.n = n_broken;
    for (int i = 0; i < n_broken; i++) f.responses[i] = broken[i].resp;
    pthread_create(&th, NULL, serve, &f);
    src = bn_source_http(url, tok, 1, err, sizeof err);
    for (int i = 0; i < n_broken; i++) {
        err[0] = 0;
        int rc = src ? src->generate(src, prompt, 3, &gp, &g, err, sizeof err) : 0;
        CHECK(rc == -1 && strstr(err, broken[i].want), "broken response %d: rc %d, error '%s' (want '%s')", i, rc, err,
              broken[i].want);
        if (rc == 0) bn_gen_result_free(&g);
    }
    pthread_join(th, NULL);
    close(f.listen_fd);
    bn_source_free(src);
    CHECK(bn_source_http("https://x", tok, 0, err, sizeof err) == NULL && strstr(err, "unsupported"), "https refused");
    { // against the project's own server: greedy ids and raw top-K match the in-process source
        const char *build = getenv("BONSAI_BUILD_ROOT");
        char serve[512], ready[256], surl[128];
        snprintf(serve, sizeof serve, "%s/tools/bonsai-serve", build ? build : "build");
        snprintf(ready, sizeof ready, "%s/ready", dir);
        const bool built = access(serve, X_OK) == 0; // (not built without libmicrohttpd)
        pid_t pid = built ? start_server(serve, path, ready, surl, sizeof surl) : -1;
        if (built) CHECK(pid >= 0, "%s did not start", serve);
        if (pid < 0) {
            printf("bonsai-serve not available or did not start: server comparison skipped\n");
        } else {
            bn_source *hs = bn_source_http(surl, tok, 60, err, sizeof err);
            bn_source *ls = bn_source_inprocess(m, tok, 512, 1);
            int32_t *ids;
            int n = bn_tokenize(tok, "hello world, this is a test", 27, false, false, &ids);
            bn_gen_params q = bn_gen_params_default();
            q.temperature = 0;
            q.n_predict = 16;
            q.n_probs = 5;
            bn_gen_result a, b;
            int ra = hs ? hs->generate(hs, ids, n, &q, &a, err, sizeof err) : -1;
            CHECK(ra == 0, "server generate: %s", err);
            CHECK(ls->generate(ls, ids, n, &q, &b, err, sizeof err) == 0, "in-process generate: %s", err);
            if (ra == 0) {
                int same_ids = a.n == b.n;
                double max_lp = 0;
                for (int i = 0; same_ids && i < a.n; i++) {
                    same_ids = a.ids[i] == b.ids[i];
                    for (int j = 0; j < 5; j++) {
                        same_ids = same_ids && a.topk[i * 5 + j].id == b.topk[i * 5 + j].id;
                        max_lp = fmax(max_lp, fabs(a.topk[i * 5 + j].logprob - b.topk[i * 5 + j].logprob));
                    }
                }
                CHECK(same_ids, "server vs in-process: same greedy ids and top-5 ids (n %d vs %d)", a.n, b.n);
                // batch-size dependent float rounding only: tolerance 1e-3 nats
                CHECK(max_lp <= 1e-3, "top-5 logprobs differ by %g", max_lp);
                bn_gen_result_free(&a);
            }
            bn_gen_result_free(&b);
            // repetition penalties (bonsai-eval-loops --presence-penalty ...): the server gets them too (the same
            // ids both ways), and a presence penalty of 1e6 over the whole history leaves no token seen before
            q.presence_penalty = 1e6f, q.repeat_last_n = -1, q.repeat_penalty = 1.3f, q.frequency_penalty = 0.5f;
            q.dry_multiplier = 0.8f, q.dry_penalty_last_n = -1; // (DRY's default breakers both ways)
            q.n_predict = 24;
            ra = hs ? hs->generate(hs, ids, n, &q, &a, err, sizeof err) : -1;
            CHECK(ra == 0, "server generate, penalized: %s", err);
            CHECK(ls->generate(ls, ids, n, &q, &b, err, sizeof err) == 0, "in-process generate, penalized: %s", err);
            bool fresh = b.n > 0, same = ra == 0 && a.n == b.n;
            for (int i = 0; i < b.n; i++) {
                for (int k = 0; k < n; k++) fresh &= b.ids[i] != ids[k];
                for (int k = 0; k < i; k++) fresh &= b.ids[i] != b.ids[k];
                same &= ra == 0 && i < a.n && a.ids[i] == b.ids[i];
            }
            CHECK(fresh, "presence penalty 1e6: %d generated tokens, none seen before", b.n);
            CHECK(same, "penalized: server and in-process give the same ids (n %d vs %d)", ra == 0 ? a.n : -1, b.n);
            if (ra == 0) bn_gen_result_free(&a);
            bn_gen_result_free(&b);
            free(ids);
            bn_source_free(hs);
            bn_source_free(ls);
            kill(pid, SIGTERM);
            waitpid(pid, NULL, 0);
            unlink(ready);
        }
    }
    bn_tokenizer_free(tok);
    bn_model_free(m);
    unlink(path);
    rmdir(dir);
    return test_done("test_http");
}
