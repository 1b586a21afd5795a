// train/dp.h — data-parallel training (docs/antidoom.md §20): `world` rank processes each run a share of every
// micro-batch and sum their gradients before the optimizer step, so every rank holds the same adapter.
// The interface is the all-reduce (and a broadcast from rank 0); a transport implements it:
//   loopback  ranks forked on one machine by bn_dp_spawn (`-dp N`), joined through a shared memory mapping;
//   tcp       ranks started by a launcher (torchrun's or mpirun's environment, bn_dp_join_env), joined through
//             sockets to rank 0 (MASTER_ADDR:MASTER_PORT), on one machine or several;
//   device    a registered GPU collective (NCCL, cuda/dp_nccl.cu) that takes over the sums once every rank trains
//             on a device (bn_dp_use_device); the host transport still carries its set-up.
// Both host transports add in rank order 0, 1, … into rank 0's values, so they give the same bits, and every rank
// receives the same bits from every transport.
#ifndef BONSAI_TRAIN_DP_H
#define BONSAI_TRAIN_DP_H
#include <stdint.h>
#include <stddef.h>

typedef struct bn_dp bn_dp;

// bn_dp_rank, bn_dp_world: this process's rank and the number of ranks (0 and 1 for NULL: one process).
int bn_dp_rank(const bn_dp *dp);
int bn_dp_world(const bn_dp *dp);
// bn_dp_local_rank: the rank among those of this machine (LOCAL_RANK under a launcher; the rank for -dp N; 0 for
// NULL): which of the machine's devices the rank takes.
int bn_dp_local_rank(const bn_dp *dp);
// bn_dp_local_world: the ranks on this machine (LOCAL_WORLD_SIZE under a launcher, else the world; 1 for NULL).
int bn_dp_local_world(const bn_dp *dp);
// bn_dp_transport: the name of the transport the sums go through ("loopback", "tcp", "NCCL"; "none" for NULL).
const char *bn_dp_transport(const bn_dp *dp);
// bn_dp_sum_f32, bn_dp_sum_f64: buf[0..n) = the sum over ranks of every rank's buf (identical bits on every rank).
// Every rank must call with the same n. NULL dp: nothing to do. Returns 0 or -1 (err).
int bn_dp_sum_f32(bn_dp *dp, float *buf, int64_t n, char *err, size_t errlen);
int bn_dp_sum_f64(bn_dp *dp, double *buf, int64_t n, char *err, size_t errlen);
// bn_dp_bcast: every rank's buf[0..bytes) = rank 0's, through the host transport (every rank calls it with the
// same bytes). NULL dp: nothing to do. Returns 0 or -1 (err).
int bn_dp_bcast(bn_dp *dp, void *buf, size_t bytes, char *err, size_t errlen);

// bn_dp_spawn: forks `world` rank processes (2..256) on this machine joined by the loopback transport, like fork():
// in each rank it returns 0 with *dp set; in the calling process, which becomes the supervisor, it waits for the
// ranks and returns 1 with *dp NULL and *status the first failing rank's exit status (0 when all succeeded). When a
// rank fails or dies, the supervisor kills the others (a rank alone at a barrier would wait forever); when the
// supervisor dies, the ranks die with it. SIGINT and SIGTERM reach the ranks and not the supervisor. Returns -1
// (err) when the processes cannot be started.
int bn_dp_spawn(int world, bn_dp **dp, int *status, char *err, size_t errlen);

// bn_dp_join_env: joins the ranks a launcher started, from its environment: torchrun's RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, or mpirun's OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}, or Slurm's
// SLURM_{PROCID,NTASKS,LOCALID} (without a local world size: the world's). Rank 0 listens on
// MASTER_ADDR:MASTER_PORT (defaults 127.0.0.1 and 29500, as torch.distributed's) and the others connect to it,
// waiting at most timeout_s seconds for one another there and at every later call. Returns 1 with *dp set (the tcp
// transport), 0 with *dp NULL when no launcher started this process (or one rank in all), -1 (err) on a bad
// variable or ranks that do not meet.
int bn_dp_join_env(bn_dp **dp, int timeout_s, char *err, size_t errlen);

// A device transport: a GPU collective library's all-reduce of host buffers, registered at start-up.
typedef struct bn_dp_device {
    const char *name; // "NCCL"
    // open: a communicator of dp's ranks on `device` (a collective call: every rank opens; the set-up it needs goes
    // through bn_dp_bcast); NULL (err) on failure
    void *(*open)(bn_dp *dp, int device, char *err, size_t errlen);
    // sum: host buf[0..n) of elem_size bytes each (4: f32, 8: f64) = the sum over ranks; 0 or -1 (err)
    int (*sum)(void *ctx, void *buf, int64_t n, size_t elem_size, char *err, size_t errlen);
    // close: frees what open made (NULL is fine)
    void (*close)(void *ctx);
} bn_dp_device;

// bn_dp_device_register: makes d the device transport (the last registration wins).
void bn_dp_device_register(const bn_dp_device *d);
// bn_dp_use_device: every rank calls it once it trains on a device; routes the sums through the registered device
// transport on `device`. Returns 1 when it did, 0 when the program has none or dp is NULL (the sums stay on the
// host), -1 (err).
int bn_dp_use_device(bn_dp *dp, int device, char *err, size_t errlen);

// bn_dp_sum_host: the host transport's sum of n elements of elem_size bytes (4: f32, 8: f64) whichever transport
// bn_dp_sum_* go through (what a device transport may fall back on). Returns 0 or -1 (err).
int bn_dp_sum_host(bn_dp *dp, void *buf, int64_t n, size_t elem_size, char *err, size_t errlen);

// bn_dp_free: detaches a rank from its transports (NULL is fine).
void bn_dp_free(bn_dp *dp);

#endif
