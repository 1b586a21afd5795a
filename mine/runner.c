// mine/runner.c — worker threads + in-order delivery (see runner.h).
#include "mine/runner.h"
#include "core/tokenizer.h"
#include "base/util.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    bool done;
    int rc;
    bn_mine_result r;
    char err[512];
} slot;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int next_take, last, first;
    bool stop;
    slot *slots; // {last - first}
    const bn_tokenizer *tok;
    const bn_prompt *prompts;
    const bn_mine_opts *o;
} shared;

typedef struct {
    shared *sh;
    bn_source *src;
} worker_arg;

static void *worker(void *va) {
    worker_arg *wa = va;
    shared *sh = wa->sh;
    for (;;) {
        pthread_mutex_lock(&sh->mu);
        int i = sh->stop || sh->next_take >= sh->last ? -1 : sh->next_take++;
        pthread_mutex_unlock(&sh->mu);
        if (i < 0) break;
        slot *s = &sh->slots[i - sh->first];
        bn_mine_params mp = bn_mine_opts_for_prompt(sh->o, i);
        int rc = bn_mine_one(wa->src, sh->tok, &sh->prompts[i], i, &mp, &s->r, s->err, sizeof s->err);
        pthread_mutex_lock(&sh->mu);
        s->rc = rc;
        s->done = true;
        pthread_cond_broadcast(&sh->cv);
        pthread_mutex_unlock(&sh->mu);
    }
    return NULL;
}

int bn_mine_run(bn_source **srcs, int n_src, const bn_tokenizer *tok, const bn_prompt *prompts, int first, int last,
                const bn_mine_opts *o, bn_run_cb cb, void *ctx) {
    if (last <= first) return 0;
    shared sh = {.next_take = first, .last = last, .first = first, .tok = tok, .prompts = prompts, .o = o};
    pthread_mutex_init(&sh.mu, NULL);
    pthread_cond_init(&sh.cv, NULL);
    sh.slots = xcalloc((size_t)(last - first), sizeof *sh.slots);
    pthread_t *th = xmalloc((size_t)n_src * sizeof *th);
    worker_arg *wa = xmalloc((size_t)n_src * sizeof *wa);
    for (int k = 0; k < n_src; k++) {
        wa[k] = (worker_arg){&sh, srcs[k]};
        pthread_create(&th[k], NULL, worker, &wa[k]);
    }
    int delivered = 0;
    for (int i = first; i < last; i++) {
        slot *s = &sh.slots[i - first];
        pthread_mutex_lock(&sh.mu);
        while (!s->done && !(sh.stop)) pthread_cond_wait(&sh.cv, &sh.mu);
        pthread_mutex_unlock(&sh.mu);
        bool more = cb(ctx, i, s->rc, &s->r, s->err);
        if (s->rc == 0) bn_mine_result_free(&s->r);
        delivered++;
        if (!more) {
            pthread_mutex_lock(&sh.mu);
            sh.stop = true;
            pthread_mutex_unlock(&sh.mu);
            break;
        }
    }
    for (int k = 0; k < n_src; k++) pthread_join(th[k], NULL);
    // results computed after a stop are dropped
    for (int i = first + delivered; i < last; i++) {
        slot *s = &sh.slots[i - first];
        if (s->done && s->rc == 0) bn_mine_result_free(&s->r);
    }
    free(th);
    free(wa);
    free(sh.slots);
    pthread_mutex_destroy(&sh.mu);
    pthread_cond_destroy(&sh.cv);
    return delivered;
}
