// spec/step_batch.c — see step_batch.h.
#include "spec/step_batch.h"
#include "base/util.h"
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

// A pass waiting for its batch (on the stack of the thread that wants it).
typedef struct step_req {
    bn_engine_seq seq;        // the pass (a round's: set by the leader when the round begins)
    bn_spec_round *round;     // a speculative round to begin first (NULL: seq as given)
    double ms;                // the time of the forward that ran the pass
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
    uint64_t batches, batched;   // counters: batches run and the passes they carried,
    uint64_t round_batches, rounds; //   batches that began speculative rounds and those rounds
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

void bn_step_batcher_counts(bn_step_batcher *b, uint64_t *batches, uint64_t *steps, uint64_t *round_batches,
                            uint64_t *rounds) {
    pthread_mutex_lock(&b->mu);
    *batches = b->batches, *steps = b->batched;
    *round_batches = b->round_batches, *rounds = b->rounds;
    pthread_mutex_unlock(&b->mu);
}

// begin_rounds: under the engine lock, the speculative rounds among the n requests reqs begin together
// (bn_spec_rounds_begin: their drafting batched); a round that fails ends its request (rc, err). Their passes into
// the requests' seq.
static void begin_rounds(bn_step_batcher *b, step_req **reqs, int n) {
    bn_spec_round rounds[BN_DRAFT_MULTI_MAX];
    step_req *of[BN_DRAFT_MULTI_MAX];
    int nr = 0;
    for (int i = 0; i < n; i++)
        if (reqs[i]->round) rounds[nr] = *reqs[i]->round, of[nr++] = reqs[i];
    if (nr == 0) return;
    bn_spec_rounds_begin(rounds, nr);
    pthread_mutex_lock(&b->mu);
    b->round_batches++, b->rounds += (uint64_t)nr;
    pthread_mutex_unlock(&b->mu);
    for (int i = 0; i < nr; i++) {
        *of[i]->round = rounds[i];
        of[i]->seq = rounds[i].pass;
        of[i]->rc = rounds[i].rc;
        if (rounds[i].rc) snprintf(of[i]->err, sizeof of[i]->err, "%s", rounds[i].err);
    }
}

// run_list: the requests of list in batches of up to MAX_STEPS, each under the engine lock: its speculative rounds
// begin (begin_rounds), then its passes run as one bn_engine_forward_multi (results into the requests; done is set
// by the caller).
static void run_list(bn_step_batcher *b, step_req *list) {
    enum { MAX_STEPS = BN_DRAFT_MULTI_MAX };
    bn_engine_seq seqs[MAX_STEPS];
    step_req *reqs[MAX_STEPS];
    while (list) {
        int n = 0;
        for (; list && n < MAX_STEPS; list = list->next) reqs[n++] = list;
        char err[256] = "";
        bn_step_batcher_lock(b);
        begin_rounds(b, reqs, n);
        int ns = 0;
        for (int i = 0; i < n; i++)
            if (reqs[i]->rc == 0) seqs[ns++] = reqs[i]->seq; // not a failed round
        const double t0 = bn_time_ms();
        const int rc = ns ? bn_engine_forward_multi(seqs, ns, err, sizeof err) : 0;
        const double ms = bn_time_ms() - t0;
        bn_step_batcher_unlock(b);
        for (int i = 0; i < n; i++) {
            step_req *r = reqs[i];
            if (r->rc) continue; // its round failed: that error
            r->rc = rc, r->ms = ms;
            if (rc) snprintf(r->err, sizeof r->err, "%s", err);
        }
        pthread_mutex_lock(&b->mu);
        b->batches += ns > 0, b->batched += (uint64_t)ns;
        pthread_mutex_unlock(&b->mu);
    }
}

int bn_step_batcher_step(bn_step_batcher *b, bn_engine_state *st, int32_t tok, bn_forward_out *out, char *err,
                         size_t errlen) {
    const bn_engine_seq seq = {.state = st, .tokens = &tok, .n = 1, .out = out};
    return bn_step_batcher_pass(b, &seq, err, errlen);
}

// submit: rq joins the waiting list; returns once its batch ran (the leader's work when rq finds no batch running).
static void submit(bn_step_batcher *b, step_req *rq) {
    pthread_mutex_lock(&b->mu);
    *b->tail = rq, b->tail = &rq->next;
    b->n_steps++;
    pthread_cond_broadcast(&b->cv);
    while (!rq->done) {
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
}

int bn_step_batcher_pass(bn_step_batcher *b, const bn_engine_seq *seq, char *err, size_t errlen) {
    step_req r = {.seq = *seq};
    submit(b, &r);
    if (r.rc) snprintf(err, errlen, "%s", r.err);
    return r.rc;
}

int bn_step_batcher_round(bn_step_batcher *b, bn_spec_round *round, double *ms) {
    step_req r = {.round = round};
    submit(b, &r);
    if (r.rc && round->rc == 0) round->rc = -1, snprintf(round->err, sizeof round->err, "%s", r.err); // the pass's
    *ms = r.ms;
    return round->rc;
}
