// serve/http.c — libmicrohttpd glue: daemon, body collection with a size limit, API-key check,
// reply helpers (JSON, errors, SSE streams), and the run loop with clean SIGINT/SIGTERM shutdown.
#include "serve/server.h"
#include "base/util.h"
#include <microhttpd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

// Per-connection request state while the body arrives.
typedef struct {
    char *body;
    size_t len, cap;
    bool too_large;
} req_ctx;

static int add_common_headers(struct MHD_Response *r, const char *ctype) {
    MHD_add_response_header(r, "Content-Type", ctype);
    MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
    MHD_add_response_header(r, "Server", "bonsai-serve");
    return 0;
}

int bn_send_text(struct MHD_Connection *c, int status, const char *ctype, const char *text) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    add_common_headers(r, ctype);
    int ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

int bn_send_json(struct MHD_Connection *c, int status, json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII * 0);
    json_decref(j);
    if (!s) return bn_send_text(c, 500, "application/json; charset=utf-8",
                                "{\"error\":{\"code\":500,\"message\":\"cannot encode response\",\"type\":\"server_error\"}}");
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
    add_common_headers(r, "application/json; charset=utf-8");
    int ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

int bn_send_error(struct MHD_Connection *c, int status, const char *type, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    // messages may quote client bytes: keep only valid UTF-8 for the JSON encoder
    for (char *p = msg; *p; p++)
        if ((unsigned char)*p >= 0x80) *p = '?';
    json_t *e = json_pack("{s:{s:i,s:s,s:s}}", "error", "code", status, "message", msg, "type", type);
    return bn_send_json(c, status, e);
}

// ---- SSE streams ----------------------------------------------------------------------------

typedef struct {
    bn_stream_next next;
    bn_stream_done done;
    void *ctx;
} stream_ctx;

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    stream_ctx *s = cls;
    (void)pos;
    for (;;) {
        long n = s->next(s->ctx, buf, max);
        if (n < 0) return MHD_CONTENT_READER_END_OF_STREAM;
        if (n > 0) return n;
    }
}

static void stream_free(void *cls) {
    stream_ctx *s = cls;
    s->done(s->ctx);
    free(s);
}

int bn_send_stream(struct MHD_Connection *c, bn_stream_next next, bn_stream_done done, void *ctx) {
    stream_ctx *s = xmalloc(sizeof *s);
    s->next = next;
    s->done = done;
    s->ctx = ctx;
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, s, stream_free);
    add_common_headers(r, "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    int ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

// ---- request handling ------------------------------------------------------------------------

static bool key_ok(bn_server *srv, struct MHD_Connection *c) {
    if (srv->p.n_api_keys == 0) return true;
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *xkey = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key");
    for (int i = 0; i < srv->p.n_api_keys; i++) {
        if (auth && strncasecmp(auth, "Bearer ", 7) == 0 && strcmp(auth + 7, srv->p.api_keys[i]) == 0) return true;
        if (xkey && strcmp(xkey, srv->p.api_keys[i]) == 0) return true;
    }
    return false;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size, void **con_cls) {
    bn_server *srv = cls;
    (void)version;
    req_ctx *rq = *con_cls;
    if (!rq) { // headers only: set up the body buffer, check Content-Length early
        rq = xcalloc(1, sizeof *rq);
        *con_cls = rq;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > srv->p.max_body) rq->too_large = true;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!rq->too_large) {
            if (rq->len + *upload_size > srv->p.max_body) {
                rq->too_large = true;
                free(rq->body);
                rq->body = NULL;
                rq->len = rq->cap = 0;
            } else {
                if (rq->len + *upload_size + 1 > rq->cap)
                    rq->body = xrealloc(rq->body, rq->cap = 2 * (rq->len + *upload_size) + 1);
                memcpy(rq->body + rq->len, upload_data, *upload_size);
                rq->len += *upload_size;
                rq->body[rq->len] = 0;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (rq->too_large)
        return (enum MHD_Result)bn_send_error(c, 413, "invalid_request_error",
                                              "request body exceeds the limit of %zu bytes", srv->p.max_body);
    bool open_path = strcmp(url, "/health") == 0 || strcmp(url, "/v1/health") == 0;
    if (!open_path && !key_ok(srv, c))
        return (enum MHD_Result)bn_send_error(c, 401, "authentication_error", "Invalid API Key");
    if (strcmp(method, "OPTIONS") == 0) {
        struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(r, "Access-Control-Allow-Headers", "*");
        int ret = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return (enum MHD_Result)ret;
    }
    return (enum MHD_Result)bn_route(srv, c, method, url, rq->body ? rq->body : "", rq->len);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)c;
    (void)toe;
    req_ctx *rq = *con_cls;
    if (rq) {
        free(rq->body);
        free(rq);
        *con_cls = NULL;
    }
}

// ---- run ------------------------------------------------------------------------------------

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

int bn_server_run(const bn_server_params *params) {
    bn_server srv = {.p = *params};
    char err[512];
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL); // every thread inherits this; main waits with sigwait
    signal(SIGPIPE, SIG_IGN);

    srv.model = bn_model_load(params->model_path, err, sizeof err);
    if (!srv.model) {
        fprintf(stderr, "bonsai-serve: %s\n", err);
        return 1;
    }
    srv.tok = bn_tokenizer_from_gguf(srv.model->gguf, err, sizeof err);
    if (!srv.tok) {
        fprintf(stderr, "bonsai-serve: %s\n", err);
        bn_model_free(srv.model);
        return 1;
    }
    snprintf(srv.model_name, sizeof srv.model_name, "%s", params->alias ? params->alias : base_name(params->model_path));
    if (srv.p.n_ctx <= 0) srv.p.n_ctx = srv.model->cfg.n_ctx_train > 0 && srv.model->cfg.n_ctx_train < 4096
                                            ? srv.model->cfg.n_ctx_train : 4096;
    if (srv.p.draft_path) {
        srv.drafter = bn_drafter_load(srv.p.draft_path, srv.model, err, sizeof err);
        if (!srv.drafter) {
            fprintf(stderr, "bonsai-serve: %s\n", err);
            bn_tokenizer_free(srv.tok);
            bn_model_free(srv.model);
            return 1;
        }
    }
    bn_slots_params sp = {.model = srv.model, .tok = srv.tok, .n_slots = srv.p.n_slots, .n_ctx = srv.p.n_ctx,
                          .n_threads = srv.p.n_threads, .n_gpu_layers = srv.p.n_gpu_layers,
                          .queue_max = srv.p.queue_max, .drafter = srv.drafter,
                          .spec = srv.p.spec};
    srv.slots = bn_slots_start(&sp, err, sizeof err);
    if (!srv.slots) {
        fprintf(stderr, "bonsai-serve: %s\n", err);
        bn_drafter_free(srv.drafter);
        bn_tokenizer_free(srv.tok);
        bn_model_free(srv.model);
        return 1;
    }
    srv.dry_default = bn_dry_breakers_new(srv.tok, NULL, 0); // DRY's "\n", ":", "\"", "*" in this vocabulary
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)srv.p.port)};
    if (inet_pton(AF_INET, srv.p.host, &addr.sin_addr) != 1) {
        fprintf(stderr, "bonsai-serve: --host %s is not an IPv4 address\n", srv.p.host);
        return 1;
    }
    srv.t_start = bn_time_ms();
    srv.start_unix = (long)time(NULL);
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
        on_request, &srv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
        &srv, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600, MHD_OPTION_CONNECTION_LIMIT, (unsigned)256, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "bonsai-serve: cannot listen on %s:%d (port in use?)\n", srv.p.host, srv.p.port);
        bn_slots_stop(srv.slots);
        bn_dry_breakers_free(srv.dry_default);
        bn_drafter_free(srv.drafter);
        bn_tokenizer_free(srv.tok);
        bn_model_free(srv.model);
        return 1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    int port = di ? di->port : srv.p.port;
    char desc[128];
    fprintf(stderr, "bonsai-serve: %s, %d slot(s) x %d ctx, listening on http://%s:%d\n",
            bn_model_describe(srv.model, desc, sizeof desc), srv.p.n_slots, srv.p.n_ctx, srv.p.host, port);
    if (srv.p.ready_file) {
        char line[128];
        snprintf(line, sizeof line, "%s:%d\n", srv.p.host, port);
        bn_write_file_atomic(srv.p.ready_file, line, strlen(line), err, sizeof err);
    }
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "bonsai-serve: %s received, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    MHD_quiesce_daemon(d);          // stop accepting
    bn_slots_cancel_all(srv.slots); // end queued and in-flight work; streams finish
    MHD_stop_daemon(d);             // waits for the connection threads
    bn_slots_stop(srv.slots);
    bn_dry_breakers_free(srv.dry_default);
    bn_drafter_free(srv.drafter);
    bn_tokenizer_free(srv.tok);
    bn_model_free(srv.model);
    return 0;
}
