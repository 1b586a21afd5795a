// serve/server.c — bn_server_run: model, slots and the HTTP layer put together, and the graceful stop on
// SIGINT/SIGTERM (docs/server.md §1).
#include "serve/server.h"
#include "serve/http.h"
#include "serve/routes.h"
#include "base/util.h"
#include <malloc.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

// How often the main thread looks whether free memory should go back to the system (bn_http_trim_due).
#define TRIM_POLL_MS 200
// Once every task has ended, unfinished replies get this much longer before the connections close.
#define STOP_EXTRA_MS 5000.0

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

// server_free: what server_load built (any part may be missing).
static void server_free(bn_server *srv) {
    bn_slots_stop(srv->slots);
    bn_dry_breakers_free(srv->dry_default);
    bn_drafter_free(srv->drafter);
    bn_tokenizer_free(srv->tok);
    bn_model_free(srv->model);
}

// server_load: model, tokenizer, drafter, slots and the chat format; returns 0 or -1 with a message on stderr.
static int server_load(bn_server *srv) {
    char err[512];
    const bn_server_params *p = &srv->p;
    srv->model = bn_model_load(p->model_path, err, sizeof err);
    if (srv->model) srv->tok = bn_tokenizer_from_gguf(srv->model->gguf, err, sizeof err);
    if (!srv->tok) goto fail;
    snprintf(srv->model_name, sizeof srv->model_name, "%s", p->alias ? p->alias : base_name(p->model_path));
    if (srv->p.n_ctx <= 0) srv->p.n_ctx = srv->model->cfg.n_ctx_train > 0 && srv->model->cfg.n_ctx_train < 4096
                                              ? srv->model->cfg.n_ctx_train : 4096;
    if (p->draft_path && !(srv->drafter = bn_drafter_load(p->draft_path, srv->model, err, sizeof err))) goto fail;
    bn_lora_set *lora = NULL;
    if (p->n_lora > 0) {
        const float zeros[BN_LORA_MAX] = {0};
        lora = bn_lora_set_open(srv->model, p->lora, p->lora_init_without_apply ? zeros : p->lora_scale, p->n_lora,
                                err, sizeof err);
        if (!lora) goto fail;
    }
    bn_slots_params sp = {.model = srv->model, .tok = srv->tok, .n_slots = p->n_slots, .n_ctx = srv->p.n_ctx,
                          .n_threads = p->n_threads, .n_gpu_layers = p->n_gpu_layers, .queue_max = p->queue_max,
                          .drafter = srv->drafter, .spec = p->spec, .lora = lora};
    if (!(srv->slots = bn_slots_start(&sp, err, sizeof err))) goto fail;
    srv->dry_default = bn_dry_breakers_new(srv->tok, NULL, 0); // DRY's "\n", ":", "\"", "*" in this vocabulary
    if (p->chat_template) srv->chat_format = (bn_chat_format)bn_chat_format_parse(p->chat_template);
    else
        srv->chat_format = bn_chat_format_for_model(gguf_get_str(srv->model->gguf, "general.architecture"),
                                                    gguf_get_str(srv->model->gguf, "tokenizer.chat_template"));
    return 0;
fail:
    fprintf(stderr, "bonsai-serve: %s\n", err);
    server_free(srv);
    return -1;
}

// wait_while: waits while busy(arg) > 0 and the clock is before deadline (ms); a signal on the way exits the process
// at once (the second signal). Returns busy's last value.
static int wait_while(int (*busy)(void *), void *arg, double deadline, const sigset_t *sigs) {
    int n;
    while ((n = busy(arg)) > 0 && bn_time_ms() < deadline) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        int sig = sigtimedwait(sigs, NULL, &ts);
        if (sig > 0) {
            fprintf(stderr, "bonsai-serve: second %s: exiting now\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
            _exit(1);
        }
    }
    return n;
}

static int slots_busy(void *s) { return bn_slots_running(s); }
static int http_busy(void *h) { return bn_http_active(h); }

// graceful_stop: stop accepting, answer the queued requests 503, let the running ones finish within the grace
// period (then cancel them: 503), let their replies go out, close.
static void graceful_stop(bn_server *srv, bn_http *http, const sigset_t *sigs) {
    bn_http_quiesce(http);
    bn_slots_drain(srv->slots);
    double deadline = bn_time_ms() + 1e3 * srv->p.grace_s;
    int left = wait_while(slots_busy, srv->slots, deadline, sigs);
    if (left > 0) fprintf(stderr, "bonsai-serve: grace period over: cancelling %d running request(s)\n", left);
    bn_slots_cancel_all(srv->slots);
    // cancelled tasks end at their next step (no deadline: no connection may stay set aside for a running task)
    wait_while(slots_busy, srv->slots, INFINITY, sigs);
    wait_while(http_busy, http, bn_time_ms() + STOP_EXTRA_MS, sigs);
    bn_http_stop(http);
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
    // One malloc arena for every thread: what a request's parse tree and prompt leave behind in a thread's own
    // arena is not given back by malloc_trim (a 1 MB chat body left ~6 MB per poll thread), in the single arena it
    // is. The hot paths (the engines) do not allocate per token, so the shared arena costs no throughput
    // (bench/serve-load.sh).
    mallopt(M_ARENA_MAX, 1);
    if (server_load(&srv) != 0) return 1;
    srv.t_start = bn_time_ms();
    srv.start_unix = (long)time(NULL);
    const bn_server_params *p = &srv.p;
    bn_http_params hp = {.host = p->host, .port = p->port, .threads = p->threads_http,
                         .timeout_s = (unsigned)p->timeout_s, .header_timeout_s = (unsigned)p->header_timeout_s,
                         .conn_per_ip = (unsigned)p->conn_per_ip, .max_body = p->max_body, .api_keys = p->api_keys,
                         .n_api_keys = p->n_api_keys, .route = bn_route, .route_ctx = &srv};
    bn_http *http = bn_http_start(&hp, err, sizeof err);
    if (!http) {
        fprintf(stderr, "bonsai-serve: %s\n", err);
        server_free(&srv);
        return 1;
    }
    int port = bn_http_port(http);
    char desc[128];
    fprintf(stderr, "bonsai-serve: %s, %d slot(s) x %d ctx, chat format %s, listening on http://%s:%d (%d HTTP "
            "thread(s), up to %u connections)\n", bn_model_describe(srv.model, desc, sizeof desc), p->n_slots, p->n_ctx,
            bn_chat_format_name(srv.chat_format), p->host, port, p->threads_http, bn_http_conn_max(http));
    if (p->ready_file) {
        char line[128];
        snprintf(line, sizeof line, "%s:%d\n", p->host, port);
        bn_write_file_atomic(p->ready_file, line, strlen(line), err, sizeof err);
    }
    int sig;
    for (;;) { // memory let go by connections and requests goes back to the system here, off the poll threads
        struct timespec ts = {0, TRIM_POLL_MS * 1000 * 1000};
        if ((sig = sigtimedwait(&sigs, NULL, &ts)) > 0) break;
        if (bn_http_trim_due(http)) malloc_trim(0);
    }
    fprintf(stderr, "bonsai-serve: %s received, shutting down (running requests may finish within %d s; a second "
            "signal exits at once)\n", sig == SIGINT ? "SIGINT" : "SIGTERM", p->grace_s);
    graceful_stop(&srv, http, &sigs);
    server_free(&srv);
    return 0;
}
