// serve/slots.h — the server's generation engine: N slots (one bn_state each) served by worker
// threads, a bounded wait queue, per-slot prompt cache, and a per-task event channel that the
// HTTP side reads (streaming or not) without blocking: a reader that finds nothing new parks
// (its hooks set the connection aside) and is woken by the slot. Forward passes of different slots
// interleave token by token under one engine lock (the CPU is shared; no oversubscription).
#ifndef BONSAI_SERVE_SLOTS_H
#define BONSAI_SERVE_SLOTS_H
#include <stdint.h>
#include <stdbool.h>
#include <pthread.h>
#include "core/model.h"
#include "core/tokenizer.h"
#include "core/sampler.h"
#include "spec/dspark.h"
#include "core/adapter.h"

#define BN_MAX_STOP 8

// What a request asks for (docs/server.md §3.1 fields we implement).
typedef struct {
    int32_t *prompt;       // token ids (owned)
    int n_prompt;
    int n_predict;         // -1 = until EOG / context end
    bn_sampler_params sp;  // temperature, top_k, top_p, min_p, seed
    bool seed_random;      // seed was -1
    char *stop[BN_MAX_STOP];
    int n_stop;
    int n_probs;           // 0 = none
    bool post_sampling_probs;
    bool cache_prompt;
    bool ignore_eos;
    bool stream;
    int id_slot;           // -1 = any
    char **dry_strs;       // dry_sequence_breakers as asked (owned; NULL: the server's defaults)
    int n_dry_strs;
    bn_dry_breakers *dry_own; // their token sequences (owned; sp.dry_breakers points here or to the defaults)
    bn_logit_bias *logit_bias; // logit_bias as asked (owned; sp.logit_bias points here)
    int n_logit_bias;
    bool has_lora;             // the request's "lora" field: these user scales for this request only (else the
    float lora[BN_LORA_MAX];   // server's global scales when the task starts)
} bn_task_params;

// One generated token as the HTTP side sees it.
typedef struct {
    int32_t id;
    char *text;        // UTF-8-complete text released by this token (may be "" while bytes are pending)
    float logprob;     // raw logprob of the sampled token (n_probs > 0)
    int n_top;
    int32_t *top_ids;  // [n_top]
    float *top_lp;     // [n_top] logprobs (or probs with post_sampling_probs)
} bn_tok_event;

enum bn_stop_type { BN_STOP_NONE = 0, BN_STOP_EOS, BN_STOP_LIMIT, BN_STOP_WORD };
// Why a task was cancelled: its client went away (it ends quietly), or the server stops (it fails with 503).
enum bn_cancel { BN_CANCEL_NONE = 0, BN_CANCEL_CLIENT, BN_CANCEL_SHUTDOWN };

// The reader's side of a task (the HTTP connection waiting for it). Each hook is called with the task's lock held
// and must not call back into the task.
typedef struct {
    void (*park)(void *ctx); // the reader is set aside until wake (bn_task_ready_or_park found nothing)
    void (*wake)(void *ctx); // what the parked reader waits for arrived
    bool (*gone)(void *ctx); // true when the client went away (asked before a task starts and between decode steps)
    void *ctx;
} bn_task_hooks;

// A task: created by the HTTP side, run by a slot, read back through the channel.
typedef struct bn_task {
    bn_task_params p;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bn_tok_event *ev;       // events produced so far
    int n_ev, cap_ev;
    bool done, failed;
    int cancel;             // enum bn_cancel
    bn_task_hooks hooks;    // the reader's (zero: none)
    bool parked;            // the reader is parked until event park_ev exists or the task is done
    int park_ev;
    char err[256];
    int err_code;           // HTTP status on failure
    // results
    int id_slot;
    int stop_type;
    char stopping_word[256];
    int n_cached;           // prompt tokens reused from the slot's cache
    int n_predicted;
    bool truncated;
    double t_prompt_ms, t_gen_ms;
    int64_t draft_n, draft_n_accepted; // speculative decoding in this task (0 when off)
    int refs;               // HTTP side + slot side
} bn_task;

typedef struct bn_slots bn_slots;

typedef struct {
    const bn_model *model;
    const bn_tokenizer *tok;
    int n_slots;
    int n_ctx;             // per slot
    int n_threads;
    int n_gpu_layers;      // -ngl: > 0 runs the slots on the CUDA engine (core/engine.h), 0 on the CPU
    int queue_max;         // waiting tasks beyond the slots (bounded queue)
    const bn_drafter *drafter;  // speculative decoding (NULL = off); shared read-only by all slots
    bn_spec_params spec;        // type, n_max, adaptive ... (used when drafter or type ORACLE)
    bn_lora_set *lora;          // LoRA adapters applied unmerged (NULL: none); bn_slots_start takes ownership
} bn_slots_params;

// bn_slots_start: starts the worker threads; returns NULL with err on failure.
bn_slots *bn_slots_start(const bn_slots_params *p, char *err, size_t errlen);
// bn_slots_drain: refuses new tasks (503) and ends the queued ones (503); running ones go on.
void bn_slots_drain(bn_slots *s);
// bn_slots_cancel_all: bn_slots_drain, and cancels the running tasks (they fail with 503 at their next step); the
// workers keep running until bn_slots_stop.
void bn_slots_cancel_all(bn_slots *s);
// bn_slots_running: how many slots are running a task.
int bn_slots_running(bn_slots *s);
// bn_slots_stop: cancels queued and running tasks, joins the workers, frees everything.
void bn_slots_stop(bn_slots *s);
// bn_slots_submit: queues a task (takes ownership of params' allocations; hooks: the reader's, or NULL). Returns the
// task (caller holds one reference) or NULL with err and code: 503 when the queue is full (queued tasks whose client
// went away are dropped first) or the server stops, 400 for a prompt that does not fit or an id_slot that does not
// exist.
bn_task *bn_slots_submit(bn_slots *s, bn_task_params *params, const bn_task_hooks *hooks, char *err, size_t errlen,
                         int *code);
// bn_task_ready_or_park: true when event i exists or the task is done (i = INT_MAX: when it is done); else the reader
// parks (hooks.park, or without hooks a blocking wait) and it returns false: hooks.wake follows once that holds.
bool bn_task_ready_or_park(bn_task *t, int i);
// bn_task_events: how many events the task has produced so far.
int bn_task_events(bn_task *t);
// bn_task_unhook: drops the reader's hooks (before its connection goes); the task no longer asks or wakes it.
void bn_task_unhook(bn_task *t);
// bn_task_cancel: asks the slot to stop for reason (enum bn_cancel); the slot frees at its next token.
void bn_task_cancel(bn_task *t, int reason);
// bn_task_retain: adds a reference; returns t.
bn_task *bn_task_retain(bn_task *t);
// bn_task_release: drops the caller's reference (the task is freed with the last one).
void bn_task_release(bn_task *t);

// Live numbers for /slots, /metrics, /health.
typedef struct {
    int id;
    bool busy;
    int n_ctx;
    int n_prompt, n_cache, n_decoded;
    bool speculative;
} bn_slot_info;
typedef struct {
    uint64_t prompt_tokens_total, prompt_tokens_cached_total, tokens_predicted_total, n_decode_total;
    double prompt_seconds_total, predicted_seconds_total;
    int requests_processing, requests_deferred, n_tokens_max;
    uint64_t spec_draft_tokens, spec_accepted_tokens, spec_drafts; // speculative counters
    uint64_t spec_accepted_pos[8];                                 // rounds with >= i+1 accepted
    uint64_t decode_steps, decode_step_seqs; // batched decode calls of plain slots, and the sequences they carried
    uint64_t draft_calls, draft_call_seqs;   // batched beginnings of speculative rounds (drafting), and their slots
} bn_slots_metrics;
// bn_slots_info: fills up to n infos; returns the slot count.
int bn_slots_info(bn_slots *s, bn_slot_info *info, int n);
// bn_slots_get_metrics: a consistent copy of the counters.
void bn_slots_get_metrics(bn_slots *s, bn_slots_metrics *m);
// bn_slots_backend: the engine the slots decode on: "CPU", "CUDA" or "CPU+CUDA" (bn_engine_name).
const char *bn_slots_backend(const bn_slots *s);
// bn_slots_lora: the number of LoRA adapters (0: none); with scales, their global scales copied there; with path
// and i < count, adapter i's file into *path.
int bn_slots_lora(bn_slots *s, float *scales, int i, const char **path);
// bn_slots_set_lora: new global scales of the n adapters (the tasks that start from now on take them); 0 or -1 when n
// is not their count.
int bn_slots_set_lora(bn_slots *s, const float *scales, int n);

#endif
