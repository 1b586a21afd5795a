// core/threads.c — persistent pthread pool: a generation counter wakes the workers (short spin,
// then a condition variable), a pending counter tells the caller when all ranges are done.
#include "core/threads.h"
#include "core/util.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#define SPIN_ITERS 4000 // a few microseconds of spinning before sleeping

struct bn_pool {
    int n_threads;          // including the caller
    pthread_t *workers;     // [n_threads - 1]
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    atomic_uint gen;        // bumped once per job
    atomic_int pending;     // workers still running the current job
    atomic_bool stop;
    // the current job (written before gen is bumped)
    bn_task_fn fn;
    void *ctx;
    int64_t n_items;
};

typedef struct {
    bn_pool *pool;
    int tid;
} worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

// run_range: runs thread tid's share of the current job.
static void run_range(bn_pool *p, int tid) {
    int64_t n = p->n_items, nt = p->n_threads;
    int64_t i0 = n * tid / nt, i1 = n * (tid + 1) / nt;
    if (i1 > i0) p->fn(p->ctx, i0, i1, tid);
}

static void *worker_main(void *argp) {
    worker_arg *arg = argp;
    bn_pool *p = arg->pool;
    int tid = arg->tid;
    free(arg);
    unsigned seen = 0; // gen at pool creation (a job may already be posted before this thread runs)
    for (;;) {
        int spins = 0;
        while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop) && spins < SPIN_ITERS) {
            cpu_relax();
            spins++;
        }
        if (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) {
            pthread_mutex_lock(&p->mu);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv_work, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) break;
        seen = atomic_load(&p->gen);
        run_range(p, tid);
        if (atomic_fetch_sub(&p->pending, 1) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

bn_pool *bn_pool_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    bn_pool *p = xcalloc(1, sizeof *p);
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    atomic_init(&p->gen, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->stop, false);
    if (n_threads > 1) {
        p->workers = xcalloc((size_t)n_threads - 1, sizeof *p->workers);
        for (int t = 1; t < n_threads; t++) {
            worker_arg *arg = xmalloc(sizeof *arg);
            arg->pool = p;
            arg->tid = t;
            if (pthread_create(&p->workers[t - 1], NULL, worker_main, arg) != 0)
                bn_die("cannot create thread %d of %d", t, n_threads);
        }
    }
    return p;
}

void bn_pool_free(bn_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    for (int t = 1; t < p->n_threads; t++) pthread_join(p->workers[t - 1], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
    free(p->workers);
    free(p);
}

int bn_pool_n_threads(const bn_pool *p) { return p ? p->n_threads : 1; }

void bn_parallel_for(bn_pool *p, int64_t n, bn_task_fn fn, void *ctx) {
    if (n <= 0) return;
    if (!p || p->n_threads == 1 || n == 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_items = n;
    atomic_store(&p->pending, p->n_threads - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->gen, 1);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);

    run_range(p, 0);

    int spins = 0;
    while (atomic_load(&p->pending) > 0 && spins < SPIN_ITERS) {
        cpu_relax();
        spins++;
    }
    if (atomic_load(&p->pending) > 0) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->cv_done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}
