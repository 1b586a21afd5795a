// serve/server.h — a llama-server-compatible HTTP server on the bonsai engine (docs/server.md).
#ifndef BONSAI_SERVE_SERVER_H
#define BONSAI_SERVE_SERVER_H
#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>
#include "core/model.h"
#include "core/tokenizer.h"
#include "serve/slots.h"

#define BN_SERVE_MAX_KEYS 8

typedef struct {
    const char *model_path;
    const char *alias;          // model name in responses (default: file name)
    const char *host;           // default 127.0.0.1
    int port;                   // default 8080 (0 = pick a free port; printed)
    int n_ctx;                  // per slot; 0 = from the model (capped)
    int n_slots;                // -np
    int n_threads;
    int n_gpu_layers;           // -ngl: > 0 decodes with the CUDA engine (CUDA builds), 0 on the CPU
    int queue_max;              // waiting requests beyond the slots
    size_t max_body;            // bytes; larger bodies get 413
    const char *api_keys[BN_SERVE_MAX_KEYS];
    int n_api_keys;
    bool metrics;               // enable /metrics
    bool slots_endpoint;        // /slots (default on; --no-slots)
    const char *ready_file;     // if set, "host:port\n" is written there once listening (tests)
    const char *draft_path;     // -md: DSpark drafter GGUF (NULL = no speculative decoding)
    bn_spec_params spec;        // --spec-type, --spec-draft-n-max, ...
} bn_server_params;

// The running server's shared state (read-only after start except where locked inside slots).
typedef struct {
    bn_server_params p;
    bn_model *model;
    bn_tokenizer *tok;
    bn_slots *slots;
    bn_drafter *drafter;
    bn_dry_breakers *dry_default; // DRY's default sequence breakers in this vocabulary (core/dry.h)
    char model_name[256];
    char ftype_name[64];
    double t_start;
    long start_unix;
} bn_server;

// bn_server_run: loads the model, serves until SIGINT/SIGTERM, shuts down cleanly. Returns the
// process exit code (0 on a clean stop, 1 with a message on stderr otherwise).
int bn_server_run(const bn_server_params *p);

// ---- used between the server's files -------------------------------------------------------
// An HTTP reply: status + body (JSON text or SSE producer).
typedef struct bn_reply bn_reply;
// bn_route: handles one request; fills a JSON reply or starts a stream. Implemented in routes.c.
struct MHD_Connection;
int bn_route(bn_server *srv, struct MHD_Connection *c, const char *method, const char *url, const char *body,
             size_t body_len);
// bn_send_json: sends a JSON reply (takes the reference of j); returns the MHD result.
int bn_send_json(struct MHD_Connection *c, int status, json_t *j);
// bn_send_error: {"error":{"code","message","type"}} with the given status.
int bn_send_error(struct MHD_Connection *c, int status, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
// bn_send_text: plain text reply with a content type.
int bn_send_text(struct MHD_Connection *c, int status, const char *ctype, const char *text);
// bn_send_stream: streams SSE produced by `next` (returns bytes written into buf, 0 = nothing yet
// but not finished (it may block), -1 = end); `done` is called once when the response ends
// (normally or because the client went away).
typedef long (*bn_stream_next)(void *ctx, char *buf, size_t cap);
typedef void (*bn_stream_done)(void *ctx);
int bn_send_stream(struct MHD_Connection *c, bn_stream_next next, bn_stream_done done, void *ctx);

#endif
