// base/threads.c — persistent pthread pool with dynamic chunk claiming.
//
// A job is published as one 64-bit word (generation << 32 | next unclaimed item). Every thread,
// the caller included, claims chunks with a CAS on that word until the items run out, and the
// caller waits only for the chunks actually claimed. So a worker that the OS has not scheduled
// (a busy machine) never holds the job up: the others take its share.
//
// Safety of late workers: the caller marks the word (g+1, ~0) BEFORE rewriting the job fields and
// publishes (g+1, 0) after; a worker that read stale fields can only claim with a CAS on the word
// it read, which has changed by then, so it never runs a chunk with another job's fields.
// Workers spin briefly on the wake counter, then sleep on a condition variable.
#include "base/threads.h"
#include "base/util.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#define SPIN_ITERS 4000       // pause-loop iterations before sleeping / yielding
#define CHUNKS_PER_THREAD 4   // dynamic chunks per thread and job
#define CHUNK_ALIGN 16        // chunks are multiples of this when n is large (no false sharing)
#define WORD_SETUP 0xffffffffu

struct bn_pool {
    int n_threads;           // including the caller
    pthread_t *workers;      // [n_threads - 1]
    pthread_mutex_t mu;
    pthread_cond_t cv_work;
    atomic_uint wake_gen;    // bumped once per job to wake workers
    atomic_int n_sleeping;   // workers blocked on cv_work
    atomic_bool stop;
    uint32_t job_gen;        // caller side generation counter
    _Atomic uint64_t word;   // (generation << 32) | next unclaimed item
    atomic_llong done;       // items finished in the current job
    // the current job's fields (valid while the word carries its generation)
    _Atomic(bn_task_fn) fn;
    _Atomic(void *) ctx;
    atomic_llong n, chunk;
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

// claim_and_run: claims chunks of the published job until none are left.
static void claim_and_run(bn_pool *p, int tid) {
    for (;;) {
        uint64_t w = atomic_load_explicit(&p->word, memory_order_acquire);
        const uint32_t next = (uint32_t)w;
        if (next == WORD_SETUP) return;
        const int64_t n = atomic_load_explicit(&p->n, memory_order_relaxed);
        const int64_t chunk = atomic_load_explicit(&p->chunk, memory_order_relaxed);
        bn_task_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&p->ctx, memory_order_relaxed);
        if ((int64_t)next >= n) return;
        const int64_t end = (int64_t)next + chunk < n ? (int64_t)next + chunk : n;
        const uint64_t claimed = (w & 0xffffffff00000000ull) | (uint64_t)end;
        if (!atomic_compare_exchange_weak_explicit(&p->word, &w, claimed, memory_order_acq_rel, memory_order_acquire))
            continue; // someone else claimed, or the job changed: re-read everything
        fn(ctx, next, end, tid);
        atomic_fetch_add_explicit(&p->done, end - (int64_t)next, memory_order_release);
    }
}

static void *worker_main(void *argp) {
    worker_arg *arg = argp;
    bn_pool *p = arg->pool;
    const int tid = arg->tid;
    free(arg);
    unsigned seen = 0; // wake_gen at creation (a job may be posted before this thread runs)
    for (;;) {
        int spins = 0;
        while (atomic_load(&p->wake_gen) == seen && !atomic_load(&p->stop) && spins < SPIN_ITERS) {
            cpu_relax();
            spins++;
        }
        if (atomic_load(&p->wake_gen) == seen && !atomic_load(&p->stop)) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->n_sleeping, 1);
            while (atomic_load(&p->wake_gen) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv_work, &p->mu);
            atomic_fetch_sub(&p->n_sleeping, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) break;
        seen = atomic_load(&p->wake_gen);
        claim_and_run(p, tid);
    }
    return NULL;
}

bn_pool *bn_pool_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    bn_pool *p = xcalloc(1, sizeof *p);
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    atomic_init(&p->wake_gen, 0);
    atomic_init(&p->n_sleeping, 0);
    atomic_init(&p->stop, false);
    atomic_init(&p->word, (uint64_t)WORD_SETUP);
    atomic_init(&p->done, 0);
    atomic_init(&p->fn, NULL);
    atomic_init(&p->ctx, NULL);
    atomic_init(&p->n, 0);
    atomic_init(&p->chunk, 1);
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
    free(p->workers);
    free(p);
}

int bn_pool_n_threads(const bn_pool *p) { return p ? p->n_threads : 1; }

void bn_parallel_for(bn_pool *p, int64_t n, bn_task_fn fn, void *ctx) {
    if (n <= 0) return;
    if (!p || p->n_threads == 1 || n == 1 || n >= (int64_t)WORD_SETUP) {
        fn(ctx, 0, n, 0);
        return;
    }
    int64_t chunk = (n + (int64_t)p->n_threads * CHUNKS_PER_THREAD - 1) / ((int64_t)p->n_threads * CHUNKS_PER_THREAD);
    if (n >= (int64_t)p->n_threads * CHUNKS_PER_THREAD * CHUNK_ALIGN)
        chunk = (chunk + CHUNK_ALIGN - 1) / CHUNK_ALIGN * CHUNK_ALIGN;

    const uint64_t gen = (uint64_t)++p->job_gen << 32;
    atomic_store_explicit(&p->word, gen | WORD_SETUP, memory_order_release); // fields being rewritten
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&p->n, n, memory_order_relaxed);
    atomic_store_explicit(&p->chunk, chunk, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_store_explicit(&p->word, gen, memory_order_release); // published: item 0 is next

    atomic_fetch_add(&p->wake_gen, 1);
    if (atomic_load(&p->n_sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv_work);
        pthread_mutex_unlock(&p->mu);
    }

    claim_and_run(p, 0);

    int spins = 0;
    while (atomic_load_explicit(&p->done, memory_order_acquire) < n) {
        if (++spins < SPIN_ITERS)
            cpu_relax();
        else
            sched_yield(); // a claimed chunk is still running on a (possibly descheduled) worker
    }
}
