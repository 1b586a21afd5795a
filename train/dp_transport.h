// train/dp_transport.h — what a host transport of train/dp.h provides, and the rank record they share (private to
// train/dp*.c).
#ifndef BONSAI_TRAIN_DP_TRANSPORT_H
#define BONSAI_TRAIN_DP_TRANSPORT_H
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>

typedef struct bn_dp bn_dp; // as train/dp.h names them (this header stays below it: dp.c includes both)
struct bn_dp_device;

typedef struct bn_dp_ops {
    const char *name;
    // sum: buf[0..n) of elem_size bytes (4: f32, 8: f64) = the sum over ranks in rank order; 0 or -1 (err)
    int (*sum)(bn_dp *dp, void *buf, int64_t n, size_t elem_size, char *err, size_t errlen);
    // bcast: buf[0..bytes) = rank 0's on every rank; 0 or -1 (err)
    int (*bcast)(bn_dp *dp, void *buf, size_t bytes, char *err, size_t errlen);
    // free: frees the transport's ctx
    void (*free)(void *ctx);
} bn_dp_ops;

struct bn_dp {
    int rank, world;                // this rank, the ranks
    int local_rank, local_world;    // on this machine
    const bn_dp_ops *ops;           // the host transport
    void *ctx;                      // its state
    const struct bn_dp_device *dev; // the device transport the sums go through, or NULL
    void *dev_ctx;                  // its state
};

// bn_dp_new: a rank record on a host transport (ctx is the transport's own, freed by ops->free).
bn_dp *bn_dp_new(int rank, int world, int local_rank, int local_world, const bn_dp_ops *ops, void *ctx);
// bn_dp_call_name: "a sum of n elements" or "a broadcast of n bytes" in buf (for the errors of calls that differ
// between ranks); returns buf.
const char *bn_dp_call_name(bool bcast, uint64_t n, char *buf, size_t len);
// bn_dp_add: dst[0..n) += src[0..n), elements of elem_size bytes (4: float, 8: double).
void bn_dp_add(void *dst, const void *src, size_t n, size_t elem_size);

#endif
