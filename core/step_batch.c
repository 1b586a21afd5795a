// core/step_batch.c — see step_batch.h.
#include "core/step_batch.h"
#include "core/util.h"
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

// A pass waiting for its batch (on the stack of the thread that wants it).
typedef struct step_req {
    bn_engine_seq seq;
    int rc;
    bool done;
    char err[256];
    struct step_req *next;
} step_req;

struct bn_step_batcher {
    pthread_mutex_t mu;          // everything below
    pthread_cond_t cv;           // a step arrived, a sequence left its decode loop, a batch finished
    step_req *steps, **tail;     // waiting steps, in arrival order
    int n_steps;                 // their count
    int n_decoding;              // sequences inside their decode loop
    bool running;                // a leader is gathering or running a batch
    pthread_mutex_t lk;          // the engine's ticket lock (bn_step_batcher_lock): next ticket, ticket served
    pthread_cond_t lk_cv;
    uint64_t next_ticket, serving;
    int gather_us;
    uint64_t batches, batched;   // counters
};

bn_step_batcher *bn_step_batcher_new(int gather_us) {
    bn_step_batcher *b = xcalloc(1, sizeof *b);
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    pthread_mutex_init(&b->lk, NULL);
    pthread_cond_init(&b->lk_cv, NULL);
    b->tail = &b->steps;
    b->gather_us = gather_us;
    return b;
}

void bn_step_batcher_free(bn_step_batcher *b) {
    if (!b) return;
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->lk);
    pthread_cond_destroy(&b->lk_cv);
    free(b);
}

void bn_step_batcher_lock(bn_step_batcher *b) {
    pthread_mutex_lock(&b->lk);
    const uint64_t ticket = b->next_ticket++;
    while (b->serving != ticket) pthread_cond_wait(&b->lk_cv, &b->lk);
    pthread_mutex_unlock(&b->lk);
}

void bn_step_batcher_unlock(bn_step_batcher *b) {
    pthread_mutex_lock(&b->lk);
    b->serving++;
    pthread_cond_broadcast(&b->lk_cv);
    pthread_mutex_unlock(&b->lk);
}

void bn_step_batcher_decoding(bn_step_batcher *b, int delta) {
    pthread_mutex_lock(&b->mu);
    b->n_decoding += delta;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

void bn_step_batcher_counts(bn_step_batcher *b, uint64_t *batches, uint64_t *steps) {
    pthread_mutex_lock(&b->mu);
    *batches = b->batches, *steps = b->batched;
    pthread_mutex_unlock(&b->mu);
}

// run_list: the passes of list as bn_engine_forward_multi calls of up to MAX_STEPS under the engine lock (results
// into the passes; done is set by the caller).
static void run_list(bn_step_batcher *b, step_req *list) {
    enum { MAX_STEPS = 64 };
    bn_engine_seq seqs[MAX_STEPS];
    while (list) {
        int n = 0;
        step_req *first = list;
        for (; list && n < MAX_STEPS; list = list->next, n++) seqs[n] = list->seq;
        char err[256] = "";
        bn_step_batcher_lock(b);
        const int rc = bn_engine_forward_multi(seqs, n, err, sizeof err);
        bn_step_batcher_unlock(b);
        for (step_req *r = first; r != list; r = r->next) {
            r->rc = rc;
            if (rc) snprintf(r->err, sizeof r->err, "%s", err);
        }
        pthread_mutex_lock(&b->mu);
        b->batches++, b->batched += (uint64_t)n;
        pthread_mutex_unlock(&b->mu);
    }
}

int bn_step_batcher_step(bn_step_batcher *b, bn_engine_state *st, int32_t tok, bn_forward_out *out, char *err,
                         size_t errlen) {
    const bn_engine_seq seq = {.state = st, .tokens = &tok, .n = 1, .out = out};
    return bn_step_batcher_pass(b, &seq, err, errlen);
}

int bn_step_batcher_pass(bn_step_batcher *b, const bn_engine_seq *seq, char *err, size_t errlen) {
    step_req r = {.seq = *seq};
    pthread_mutex_lock(&b->mu);
    *b->tail = &r, b->tail = &r.next;
    b->n_steps++;
    pthread_cond_broadcast(&b->cv);
    while (!r.done) {
        if (b->running) {
            pthread_cond_wait(&b->cv, &b->mu);
            continue;
        }
        b->running = true; // the leader: gather, then run
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += b->gather_us * 1000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        while (b->n_steps < b->n_decoding && pthread_cond_timedwait(&b->cv, &b->mu, &until) == 0) {}
        step_req *list = b->steps;
        b->steps = NULL, b->tail = &b->steps, b->n_steps = 0;
        pthread_mutex_unlock(&b->mu);
        run_list(b, list);
        pthread_mutex_lock(&b->mu);
        for (step_req *q = list; q; q = q->next) q->done = true; // their owners wait for mu: q stays valid here
        b->running = false;
        pthread_cond_broadcast(&b->cv);
    }
    pthread_mutex_unlock(&b->mu);
    if (r.rc) snprintf(err, errlen, "%s", r.err);
    return r.rc;
}
