// tests/serve/test_server_hostile.c — bonsai-serve under hostile clients, on loopback (127.0.0.1) only, bounded in
// count and time (docs/server.md §1.2). After each probe the server must still answer a normal request, its RSS stay
// bounded (the peak, VmHWM, less than 256 MiB above the baseline; VmRSS back within 10 % of the baseline), and no
// slot stay busy (/slots, /metrics):
//   flood      1000 idle sockets and 200 slowloris senders (a header line a second): /health and a 32-token
//              completion still answered in < 1 s; the idle sockets are closed after --header-timeout
//   auth       100 unauthenticated requests announcing a 4 MB body: each refused 401 before a body byte is sent;
//              an authenticated one over --max-body: 413 likewise
//   n_probs    {"prompt":"a","n_predict":4000,"n_probs":1000000000,"ignore_eos":true}: 400 before any work; a
//              smaller one that fits: answered within the memory bound; chat with logprobs and n_probs 100000: at
//              most 20 top log-probs per token
//   bodies     valid JSON bodies of 1 MB (token ids, a long string, many messages, many empty arrays and objects,
//              /tokenize with pieces): no 5xx, RSS within the bounds; 4 MB of empty objects: 413 before parsing
//   storms     8 non-streaming and 8 streaming requests for unlimited tokens whose clients go away: the slots are free
//              within 1 s and they generated at most 64 tokens each
//   per-ip     --conn-per-ip 32: of 40 idle sockets 8 are closed at once
//   SIGTERM    4 running streams and 8 queued requests (4 streaming): 4 complete streams (final event, chunked
//              terminator), 8 × 503 JSON, exit 0; with a long request running, a second signal exits at once
// The server runs with --conn-per-ip 0 for the flood, since all its clients share 127.0.0.1.
#include "tests/test.h"
#include "tests/serve/http_client.h"
#include "tests/serve/server_fixture.h"
#include <jansson.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/socket.h>

#define KEY_HDR "Authorization: Bearer K\r\n"
#define RSS_PEAK_KB (256L << 10) // the peak above the baseline
#define N_IDLE 1000
#define N_SLOW 200

static server_fixture F;
static long base_rss;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms) { usleep((useconds_t)ms * 1000); }

static bool sock_send(int fd, const char *s) { return send(fd, s, strlen(s), MSG_NOSIGNAL) == (ssize_t)strlen(s); }

// sock_closed: the server closed fd (EOF or reset) without anything else to read first.
static bool sock_closed(int fd) {
    char c;
    ssize_t k = recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
    return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

// req: a request with the API key to server f; the response's status (0: no answer).
static int req(const server_fixture *f, const char *method, const char *path, const char *body, http_resp *r) {
    if (http_request(f->port, method, path, body, body ? strlen(body) : 0, KEY_HDR, r) != 0) return 0;
    return r->status;
}

// timed: ms a request takes (status in *status).
static double timed(const char *method, const char *path, const char *body, int *status) {
    http_resp r;
    double t0 = now_ms();
    *status = req(&F, method, path, body, &r);
    double ms = now_ms() - t0;
    if (*status) http_resp_free(&r);
    return ms;
}

static bool serves(const server_fixture *f) {
    http_resp r;
    bool ok = req(f, "POST", "/completion", "{\"prompt\":\"ok\",\"n_predict\":4,\"temperature\":0}", &r) == 200;
    if (r.status) http_resp_free(&r);
    return ok;
}

// metric: a /metrics value (llamacpp:NAME), or -1.
static double metric(const server_fixture *f, const char *name) {
    http_resp r;
    double v = -1;
    if (req(f, "GET", "/metrics", NULL, &r) == 200) {
        char key[128];
        snprintf(key, sizeof key, "\nllamacpp:%s ", name);
        const char *at = strstr(r.body, key);
        if (at) v = atof(at + strlen(key));
    }
    if (r.status) http_resp_free(&r);
    return v;
}

// idle_within: true once no slot is busy and nothing is queued, waiting up to ms.
static bool idle_within(const server_fixture *f, int ms) {
    for (double t0 = now_ms(); now_ms() - t0 < ms; sleep_ms(20))
        if (metric(f, "requests_processing") == 0 && metric(f, "requests_deferred") == 0) return true;
    return false;
}

// rss_back: VmRSS within 10 % of the baseline, waiting up to 1 s for freed memory to go back (the server trims its
// single malloc arena; with an arena per thread a 1 MB chat body left ~6 MB per poll thread, 12-17 % in all).
static long worst_after; // the highest RSS seen after a probe, for the log
static char worst_what[96];
static bool rss_back(const char *what) {
    long rss = -1;
    for (int i = 0; i < 20; i++, sleep_ms(50))
        if ((rss = fixture_rss_kb(&F)) >= 0 && rss <= base_rss + base_rss / 10) {
            if (rss > worst_after) worst_after = rss, snprintf(worst_what, sizeof worst_what, "%s", what);
            return true;
        }
    fprintf(stderr, "%s: RSS %ld kB, baseline %ld kB\n", what, rss, base_rss);
    return false;
}

static void check_after(const char *what) {
    CHECK(serves(&F), "%s: the server still answers", what);
    CHECK(idle_within(&F, 2000), "%s: no slot stays busy", what);
    long hwm = fixture_status_kb(&F, "VmHWM");
    CHECK(hwm >= 0 && hwm - base_rss < RSS_PEAK_KB, "%s: peak RSS %ld kB over a baseline of %ld kB", what, hwm,
          base_rss);
    CHECK(rss_back(what), "%s: RSS back within 10 %% of the baseline", what);
}

// ---- flood: idle sockets and slowloris ----------------------------------------------------------------

static atomic_bool slow_stop;
static int slow_fd[N_SLOW];

static void *slowloris(void *arg) {
    int n = (int)(intptr_t)arg;
    for (int k = 0; !atomic_load(&slow_stop); k++) {
        for (int i = 0; i < n; i++)
            if (slow_fd[i] >= 0) sock_send(slow_fd[i], "X-Slow: 1\r\n");
        for (int t = 0; t < 10 && !atomic_load(&slow_stop); t++) sleep_ms(70); // a line every 0.7 s < the 2 s timeout
    }
    return NULL;
}

static void test_flood(int n_idle, int n_slow) {
    static int idle[N_IDLE];
    int opened = 0;
    for (int i = 0; i < n_idle; i++) opened += (idle[i] = http_connect(F.port)) >= 0;
    for (int i = 0; i < n_slow; i++)
        if ((slow_fd[i] = http_connect(F.port)) >= 0) sock_send(slow_fd[i], "POST /completion HTTP/1.1\r\nHost: a\r\n");
    double t_open = now_ms();
    CHECK(opened == n_idle, "flood: %d of %d idle sockets connected", opened, n_idle);
    pthread_t th;
    atomic_store(&slow_stop, false);
    pthread_create(&th, NULL, slowloris, (void *)(intptr_t)n_slow);
    sleep_ms(300);
    double worst_health = 0, worst_cmpl = 0;
    for (int k = 0; k < 3; k++) {
        int st1, st2;
        double a = timed("GET", "/health", NULL, &st1);
        double b = timed("POST", "/completion", "{\"prompt\":\"flood\",\"n_predict\":32,\"ignore_eos\":true}", &st2);
        CHECK(st1 == 200 && st2 == 200, "flood: /health %d, completion %d", st1, st2);
        worst_health = a > worst_health ? a : worst_health;
        worst_cmpl = b > worst_cmpl ? b : worst_cmpl;
        sleep_ms(300);
    }
    printf("flood: %d idle + %d slowloris: /health %.1f ms, 32-token completion %.1f ms (worst of 3)\n", n_idle, n_slow,
           worst_health, worst_cmpl);
    CHECK(worst_health < 1000 && worst_cmpl < 1000, "flood: answers in < 1 s (%.0f, %.0f ms)", worst_health,
          worst_cmpl);
    long rss = fixture_rss_kb(&F);
    CHECK(rss - base_rss < RSS_PEAK_KB, "flood: RSS %ld kB over a baseline of %ld kB", rss, base_rss);
    // the idle sockets sent no header: closed after --header-timeout (2 s); the slowloris ones are still open
    int closed = 0;
    while (now_ms() - t_open < 6000) {
        closed = 0;
        for (int i = 0; i < n_idle; i++) closed += idle[i] >= 0 && sock_closed(idle[i]);
        if (closed == opened) break;
        sleep_ms(100);
    }
    CHECK(closed == opened, "flood: %d of %d idle sockets closed after the header timeout", closed, opened);
    atomic_store(&slow_stop, true);
    pthread_join(th, NULL);
    for (int i = 0; i < n_idle; i++)
        if (idle[i] >= 0) close(idle[i]);
    for (int i = 0; i < n_slow; i++)
        if (slow_fd[i] >= 0) close(slow_fd[i]);
    check_after("flood");
}

// ---- auth and size: refused on the headers ---------------------------------------------------------------

// refused_on_headers: sends only a header announcing a body of `length` bytes (extra headers: hdr); returns the
// status of the answer that comes within 2 s, 0 when none came.
static int refused_on_headers(int fd, const char *hdr, long length) {
    char head[512];
    snprintf(head, sizeof head, "POST /completion HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
             "Content-Length: %ld\r\n%s\r\n", length, hdr);
    if (!sock_send(fd, head)) return 0;
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    char buf[256] = "";
    int status = 0;
    if (poll(&pf, 1, 2000) == 1 && recv(fd, buf, sizeof buf - 1, 0) > 0) sscanf(buf, "HTTP/1.%*d %d", &status);
    return status;
}

static void test_auth(void) {
    enum { N = 100 };
    int fd[N], n401 = 0;
    for (int i = 0; i < N; i++) fd[i] = http_connect(F.port);
    for (int i = 0; i < N; i++) n401 += fd[i] >= 0 && refused_on_headers(fd[i], "", 4000000) == 401;
    CHECK(n401 == N, "auth: %d of %d unauthenticated 4 MB uploads refused 401 on their headers", n401, N);
    for (int i = 0; i < N; i++)
        if (fd[i] >= 0) close(fd[i]);
    int big = http_connect(F.port);
    int st = refused_on_headers(big, KEY_HDR, 5L << 20);
    CHECK(st == 413, "auth: a 5 MiB body over --max-body refused on its headers (%d)", st);
    close(big);
    http_resp r; // OPTIONS (CORS pre-flight) needs no key
    int pre = http_request(F.port, "OPTIONS", "/v1/chat/completions", NULL, 0, NULL, &r) == 0 ? r.status : 0;
    CHECK(pre == 200, "auth: the CORS pre-flight answered without a key (%d)", pre);
    if (pre) http_resp_free(&r);
    check_after("auth");
}

// ---- n_probs ---------------------------------------------------------------------------------------------

static void test_n_probs(void) {
    http_resp r;
    double t0 = now_ms();
    int st = req(&F, "POST", "/completion",
                 "{\"prompt\":\"a\",\"n_predict\":4000,\"n_probs\":1000000000,\"ignore_eos\":true}", &r);
    double ms = now_ms() - t0;
    CHECK(st == 400 && strstr(r.body, "invalid_request_error"), "n_probs bomb: 400 (%d)", st);
    CHECK(ms < 500, "n_probs bomb refused before any work (%.0f ms)", ms);
    if (st) http_resp_free(&r);
    check_after("n_probs bomb");
    // the vocabulary's every token for 400 tokens (~210k entries): allowed, within the bounds
    st = req(&F, "POST", "/completion",
             "{\"prompt\":\"a\",\"n_predict\":400,\"n_probs\":1000000000,\"ignore_eos\":true}", &r);
    CHECK(st == 200, "n_probs within the limit: 200 (%d)", st);
    printf("n_probs: 400 tokens x the whole vocabulary: %zu bytes\n", r.body_len);
    if (st) http_resp_free(&r);
    check_after("n_probs within the limit");
    st = req(&F, "POST", "/v1/chat/completions",
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":6,\"logprobs\":true,"
             "\"n_probs\":100000}", &r);
    json_t *j = st == 200 ? json_loadb(r.body, r.body_len, JSON_ALLOW_NUL, NULL) : NULL; // (a byte token may be NUL)
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    json_t *lc = json_object_get(json_object_get(c0, "logprobs"), "content");
    size_t most = 0;
    for (size_t i = 0; i < json_array_size(lc); i++) {
        size_t k = json_array_size(json_object_get(json_array_get(lc, i), "top_logprobs"));
        most = k > most ? k : most;
    }
    CHECK(json_array_size(lc) > 0 && most <= 20,
          "chat logprobs with n_probs 100000: %zu top log-probs (<= 20); %d %.300s", most, st, st ? r.body : "");
    json_decref(j);
    if (st) http_resp_free(&r);
    check_after("chat n_probs");
}

// ---- valid bodies of 1 MB ------------------------------------------------------------------------------

// body_of: prefix, then item repeated until the body is about `size` bytes (items joined by sep), then suffix
// (malloc'd).
static char *body_of(size_t size, const char *prefix, const char *item, const char *sep, const char *suffix) {
    size_t cap = size + 4096, n = 0;
    char *b = malloc(cap);
    n += (size_t)snprintf(b, cap, "%s", prefix);
    for (int i = 0; n + strlen(item) + strlen(sep) + strlen(suffix) + 1 < size; i++) {
        if (i) n += (size_t)snprintf(b + n, cap - n, "%s", sep);
        n += (size_t)snprintf(b + n, cap - n, "%s", item);
    }
    snprintf(b + n, cap - n, "%s", suffix);
    return b;
}

static void test_bodies(void) {
    struct { const char *path, *prefix, *item, *sep, *suffix; size_t size; } probes[] = {
        {"/completion", "{\"prompt\":[", "7", ",", "]}", 0},
        {"/completion", "{\"prompt\":\"", "ab ", "", "\"}", 0},
        {"/v1/chat/completions", "{\"messages\":[", "{\"role\":\"user\",\"content\":\"q\"}", ",", "]}", 0},
        {"/completion", "{\"prompt\":\"a\",\"n_predict\":1,\"junk\":[", "[]", ",", "]}", 0},
        {"/completion", "{\"prompt\":\"a\",\"n_predict\":1,\"junk\":[", "{}", ",", "]}", 0},
        {"/completion", "{\"prompt\":\"a\",\"n_predict\":1,\"logit_bias\":{\"", "xy", "", "\":1}}", 0},
        {"/tokenize", "{\"with_pieces\":true,\"content\":\"", "a b", "", "\"}", 0},
        {"/apply-template", "{\"messages\":[", "{\"role\":\"user\",\"content\":\"\\u0001\"}", ",", "]}", 0},
        // a body just under --max-body (4 MiB) of 1.4 million empty objects: refused (413) before it is parsed
        {"/completion", "{\"prompt\":\"a\",\"n_predict\":1,\"junk\":[", "{}", ",", "]}", (4u << 20) - 64},
    };
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        size_t size = probes[i].size ? probes[i].size : 1u << 20;
        char *b = body_of(size, probes[i].prefix, probes[i].item, probes[i].sep, probes[i].suffix);
        http_resp r;
        double t0 = now_ms();
        int st = req(&F, "POST", probes[i].path, b, &r);
        char what[96];
        snprintf(what, sizeof what, "%zu kB body %zu (%s %.16s…)", size >> 10, i, probes[i].path, probes[i].prefix);
        printf("%s: %d in %.0f ms, %zu bytes back\n", what, st, now_ms() - t0, st ? r.body_len : 0);
        CHECK(probes[i].size ? st == 413 : st == 200 || st == 400, "%s: answered 200 or 400 (413 when large) (%d)",
              what, st);
        if (st) http_resp_free(&r);
        free(b);
        check_after(what);
    }
}

// ---- disconnect storms ------------------------------------------------------------------------------------

static void test_storms(void) {
    char body[160];
    for (int stream = 0; stream <= 1; stream++) {
        double before = metric(&F, "tokens_predicted_total");
        for (int i = 0; i < 8; i++) {
            snprintf(body, sizeof body,
                     "{\"prompt\":\"storm %d %d\",\"n_predict\":-1,\"ignore_eos\":true,\"stream\":%s}", stream, i,
                     stream ? "true" : "false");
            if (stream) {
                http_stream_first_then_close(F.port, "/completion", body, KEY_HDR);
                continue;
            }
            int fd = http_connect(F.port);
            char head[256];
            snprintf(head, sizeof head, "POST /completion HTTP/1.1\r\nHost: a\r\n%sContent-Length: %zu\r\n\r\n",
                     KEY_HDR, strlen(body));
            sock_send(fd, head);
            sock_send(fd, body);
            close(fd); // gone before any answer
        }
        const char *what = stream ? "streaming disconnect storm" : "disconnect storm";
        double t0 = now_ms();
        bool idle = idle_within(&F, 1000);
        double gen = metric(&F, "tokens_predicted_total") - before;
        printf("%s: slots free after %.0f ms, %.0f tokens generated for 8 abandoned requests\n", what, now_ms() - t0,
               gen);
        CHECK(idle, "%s: the slots are free within 1 s", what);
        CHECK(gen >= 0 && gen <= 8 * 64, "%s: %.0f tokens generated (<= 8 x 64)", what, gen);
        check_after(what);
    }
}

// ---- per-client connection limit, SIGTERM ------------------------------------------------------------------

static void test_per_ip(server_fixture *f) {
    int fd[40], closed = 0;
    for (int i = 0; i < 40; i++) fd[i] = http_connect(f->port);
    sleep_ms(500);
    for (int i = 0; i < 40; i++) closed += fd[i] < 0 || sock_closed(fd[i]);
    CHECK(closed == 8, "per-ip: %d of 40 connections closed at once with --conn-per-ip 32 (8)", closed);
    for (int i = 0; i < 40; i++)
        if (fd[i] >= 0) close(fd[i]);
    sleep_ms(200);
    CHECK(serves(f), "per-ip: the server answers once they are gone");
}

typedef struct {
    server_fixture *f;
    const char *body;
    http_resp r;
    int status;
} call;

static void *call_run(void *arg) {
    call *c = arg;
    c->status = req(c->f, "POST", "/completion", c->body, &c->r);
    return NULL;
}

static void test_sigterm(server_fixture *f) {
    call run[4], queued[8];
    pthread_t th_run[4], th_q[8];
    const char *long_stream = "{\"prompt\":\"running\",\"n_predict\":600,\"ignore_eos\":true,\"stream\":true}";
    for (int i = 0; i < 4; i++) {
        run[i] = (call){.f = f, .body = long_stream};
        pthread_create(&th_run[i], NULL, call_run, &run[i]);
    }
    for (int i = 0; i < 100 && metric(f, "requests_processing") < 4; i++) sleep_ms(10);
    for (int i = 0; i < 8; i++) {
        queued[i] = (call){.f = f, .body = i % 2 ? "{\"prompt\":\"queued\",\"n_predict\":64,\"stream\":true}"
                                                 : "{\"prompt\":\"queued\",\"n_predict\":64}"};
        pthread_create(&th_q[i], NULL, call_run, &queued[i]);
    }
    for (int i = 0; i < 200 && metric(f, "requests_deferred") < 8; i++) sleep_ms(10);
    CHECK(metric(f, "requests_processing") == 4 && metric(f, "requests_deferred") == 8,
          "SIGTERM: 4 running and 8 queued before the signal");
    kill(f->pid, SIGTERM);
    for (int i = 0; i < 4; i++) pthread_join(th_run[i], NULL);
    for (int i = 0; i < 8; i++) pthread_join(th_q[i], NULL);
    int code = fixture_wait(f, 30000);
    int full = 0, n503 = 0;
    for (int i = 0; i < 4; i++) {
        call *c = &run[i];
        bool ok = c->status == 200 && c->r.complete && strstr(c->r.body, "\"stop\":true") &&
                  strstr(c->r.body, "\"tokens_predicted\":600");
        if (!ok) fprintf(stderr, "running %d: status %d, complete %d, %zu bytes\n", i, c->status, c->r.complete,
                         c->r.body_len);
        full += ok;
        if (c->status) http_resp_free(&c->r);
    }
    for (int i = 0; i < 8; i++) {
        call *c = &queued[i];
        json_t *j = c->status ? json_loadb(c->r.body, c->r.body_len, 0, NULL) : NULL;
        const char *type = json_string_value(json_object_get(json_object_get(j, "error"), "type"));
        n503 += c->status == 503 && type && strcmp(type, "unavailable_error") == 0;
        json_decref(j);
        if (c->status) http_resp_free(&c->r);
    }
    CHECK(full == 4, "SIGTERM: %d of 4 running streams complete (final event, chunked terminator)", full);
    CHECK(n503 == 8, "SIGTERM: %d of 8 queued requests answered 503 JSON", n503);
    CHECK(code == 0, "SIGTERM: exit status %d", code);
}

static void *long_request(void *arg) {
    call *c = arg;
    c->status = req(c->f, "POST", "/completion", c->body, &c->r);
    if (c->status) http_resp_free(&c->r);
    return NULL;
}

static void test_second_signal(server_fixture *f) {
    call c = {.f = f, .body = "{\"prompt\":\"long\",\"n_predict\":-1,\"ignore_eos\":true,\"stream\":true}"};
    pthread_t th;
    pthread_create(&th, NULL, long_request, &c);
    for (int i = 0; i < 200 && metric(f, "requests_processing") < 1; i++) sleep_ms(10);
    CHECK(metric(f, "requests_processing") == 1, "second signal: a request runs");
    kill(f->pid, SIGTERM);
    sleep_ms(300);
    int code = fixture_wait(f, 0);
    CHECK(code == -1, "second signal: the first one lets the running request go on (exit status %d)", code);
    double t0 = now_ms();
    if (code == -1) {
        kill(f->pid, SIGTERM);
        code = fixture_wait(f, 2000);
        CHECK(code > 0 && now_ms() - t0 < 2000, "second signal: exits at once (status %d)", code);
    }
    pthread_join(th, NULL);
}

// raise_nofile: the open-file limit raised for the flood; returns the soft limit.
static long raise_nofile(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024;
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
    return (long)rl.rlim_cur;
}

// wanted: whether probe name runs (all when no names are given on the command line).
static bool wanted(int argc, char **argv, const char *name) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0) return true;
    return argc < 2;
}

int main(int argc, char **argv) {
    http_timeout_s = 10; // a server that stops answering fails the probe instead of hanging it
    long nofile = raise_nofile();
    int n_idle = N_IDLE, n_slow = N_SLOW;
    if (nofile < N_IDLE + N_SLOW + 100) { // a smaller flood where the limit is low
        n_idle = (int)(nofile - 100) * 5 / 6;
        n_slow = (int)(nofile - 100) / 6;
        printf("open-file limit %ld: flood of %d + %d\n", nofile, n_idle, n_slow);
    }
    if (fixture_model(&F, "tiny") != 0) return printf("FAIL: cannot generate the tiny model\n"), 1;
    const char *args[] = {"-np", "4", "-c", "2048", "--api-key", "K", "--metrics", "--conn-per-ip", "0",
                          "--header-timeout", "2", "--threads-http", "2", NULL};
    if (fixture_start(&F, args) != 0) {
        CHECK(0, "server did not start");
        return test_done("test_server_hostile");
    }
    CHECK(serves(&F), "the server answers");
    base_rss = fixture_rss_kb(&F);
    printf("baseline RSS %ld kB\n", base_rss);
    if (wanted(argc, argv, "flood")) test_flood(n_idle, n_slow);
    if (wanted(argc, argv, "auth")) test_auth();
    if (wanted(argc, argv, "n_probs")) test_n_probs();
    if (wanted(argc, argv, "bodies")) test_bodies();
    if (wanted(argc, argv, "storms")) test_storms();
    printf("RSS after the probes: at most %ld kB (after %s), baseline %ld kB (+%.1f %%)\n", worst_after, worst_what,
           base_rss, 100.0 * (worst_after - base_rss) / base_rss);
    CHECK(fixture_stop(&F) == 0, "clean exit");
    server_fixture B = F; // the same model, another server
    const char *args_b[] = {"-np", "4", "-c", "1024", "--queue", "16", "--metrics", "--conn-per-ip", "32",
                            "--grace-period", "20", NULL};
    if ((wanted(argc, argv, "per-ip") || wanted(argc, argv, "sigterm")) && fixture_start(&B, args_b) != 0)
        CHECK(0, "server B did not start");
    else if (B.pid > 0) {
        if (wanted(argc, argv, "per-ip")) test_per_ip(&B);
        if (wanted(argc, argv, "sigterm")) test_sigterm(&B);
        else fixture_stop(&B);
    }
    server_fixture C = F;
    const char *args_c[] = {"-np", "1", "-c", "4096", "--metrics", "--grace-period", "30", NULL};
    if (wanted(argc, argv, "second-signal")) {
        if (fixture_start(&C, args_c) == 0) test_second_signal(&C);
        else CHECK(0, "server C did not start");
    }
    return test_done("test_server_hostile");
}
