// serve/server.h — a llama-server-compatible HTTP server on the bonsai engine (docs/server.md).
#ifndef BONSAI_SERVE_SERVER_H
#define BONSAI_SERVE_SERVER_H
#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>
#include "core/model.h"
#include "core/tokenizer.h"
#include "serve/slots.h"
#include "serve/request.h"

#define BN_SERVE_MAX_KEYS 8

#define SYSTEM_FINGERPRINT "b1-bonsai"

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
    int threads_http;           // --threads-http: the HTTP poll threads
    int timeout_s;              // --timeout: read/write inactivity limit of a connection with a request
    int header_timeout_s;       // --header-timeout: ... of one that has not sent a complete header
    int conn_per_ip;            // --conn-per-ip: connections one client address may hold (0 = no limit)
    int grace_s;                // --grace-period: how long running requests may finish after SIGTERM/SIGINT
    const char *chat_template;  // --chat-template chatml|qwen35|qwen3 (NULL: the model's own)
    const char *lora[BN_LORA_MAX]; // --lora / --lora-scaled: adapters loaded at start, applied unmerged
    float lora_scale[BN_LORA_MAX]; // their initial global scales
    int n_lora;
    bool lora_init_without_apply;  // --lora-init-without-apply: every global scale starts at 0
} bn_server_params;

// The running server's shared state (read-only after start except where locked inside slots).
typedef struct {
    bn_server_params p;
    bn_model *model;
    bn_tokenizer *tok;
    bn_slots *slots;
    bn_drafter *drafter;
    bn_dry_breakers *dry_default; // DRY's default sequence breakers in this vocabulary (core/dry.h)
    bn_chat_format chat_format;   // what /v1/chat/completions and /apply-template render
    char model_name[256];
    char ftype_name[64];
    double t_start;
    long start_unix;
} bn_server;

// bn_server_run: loads the model, serves until SIGINT/SIGTERM, then stops gracefully: no new connections, queued
// requests answered 503, running ones finish (at most grace_s), exit; a second signal exits at once. Returns the
// process exit code (0 on a clean stop, 1 with a message on stderr otherwise).
int bn_server_run(const bn_server_params *p);

#endif
