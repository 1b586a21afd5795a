// base/threads.h — a persistent pthread pool. Workers spin briefly then sleep on a condition
// variable, so a parallel_for costs a few microseconds when called back to back (decode).
// Work is claimed in chunks, so a busy machine's descheduled worker does not stall a job.
#ifndef BONSAI_THREADS_H
#define BONSAI_THREADS_H
#include <stdint.h>

typedef struct bn_pool bn_pool;

// bn_task_fn: processes items [i0, i1) on thread tid (0 = the calling thread, < n_threads).
typedef void (*bn_task_fn)(void *ctx, int64_t i0, int64_t i1, int tid);

// bn_pool_new: a pool of n_threads (the caller counts as one; n_threads <= 1 creates no threads).
// Returns a pool (never NULL; dies on OOM).
bn_pool *bn_pool_new(int n_threads);
// bn_pool_free: joins the workers and frees the pool (NULL is fine).
void bn_pool_free(bn_pool *pool);
// bn_pool_n_threads: number of threads including the caller (1 for a NULL pool).
int bn_pool_n_threads(const bn_pool *pool);

// bn_parallel_for: runs fn over [0, n) in contiguous chunks (about 4 per thread, multiples of 16
// items when n is large) claimed dynamically by the pool's threads and the caller, and returns
// when all are done. Which thread runs which chunk is not fixed (a descheduled worker's share is
// taken by the others); fn must give the same result for an item whatever chunk it is in.
// pool may be NULL (runs inline as one range). Not reentrant: fn must not call bn_parallel_for on
// the same pool.
void bn_parallel_for(bn_pool *pool, int64_t n, bn_task_fn fn, void *ctx);

#endif
