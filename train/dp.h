// train/dp.h — data-parallel training (docs/antidoom.md §20): `world` rank processes each run a share of every
// micro-batch and sum their gradients before the optimizer step, so every rank holds the same adapter.
// The interface is the all-reduce; a transport implements it. The loopback transport here joins rank processes of
// one machine through a shared memory mapping (the CPU trainer's, and the stand-in for a GPU transport in tests).
// Every rank receives the same bits: the sum runs in rank order 0, 1, … on every rank.
#ifndef BONSAI_TRAIN_DP_H
#define BONSAI_TRAIN_DP_H
#include <stdint.h>
#include <stddef.h>

typedef struct bn_dp bn_dp;

// bn_dp_rank, bn_dp_world: this process's rank and the number of ranks (0 and 1 for NULL: one process).
int bn_dp_rank(const bn_dp *dp);
int bn_dp_world(const bn_dp *dp);
// bn_dp_sum_f32, bn_dp_sum_f64: buf[0..n) = the sum over ranks of every rank's buf, in rank order (identical bits on
// every rank). Every rank must call with the same n. NULL dp: nothing to do. Returns 0 or -1 (err).
int bn_dp_sum_f32(bn_dp *dp, float *buf, int64_t n, char *err, size_t errlen);
int bn_dp_sum_f64(bn_dp *dp, double *buf, int64_t n, char *err, size_t errlen);

// bn_dp_spawn: forks `world` rank processes (2..256) on this machine joined by the loopback transport, like fork():
// in each rank it returns 0 with *dp set; in the calling process, which becomes the supervisor, it waits for the
// ranks and returns 1 with *dp NULL and *status the first failing rank's exit status (0 when all succeeded). When a
// rank fails or dies, the supervisor kills the others (a rank alone at a barrier would wait forever); when the
// supervisor dies, the ranks die with it. SIGINT and SIGTERM reach the ranks and not the supervisor. Returns -1
// (err) when the processes cannot be started.
int bn_dp_spawn(int world, bn_dp **dp, int *status, char *err, size_t errlen);
// bn_dp_free: detaches a rank from its transport (NULL is fine).
void bn_dp_free(bn_dp *dp);

#endif
