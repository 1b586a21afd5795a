// train/dp.c — the data-parallel interface: the rank record, and the sums routed to the host transport or, once
// every rank trains on a device, to the registered device transport. See dp.h.
#include "train/dp.h"
#include "train/dp_transport.h"
#include <stdio.h>
#include <stdlib.h>
#include "base/util.h"

static const bn_dp_device *g_device;

bn_dp *bn_dp_new(int rank, int world, int local_rank, int local_world, const bn_dp_ops *ops, void *ctx) {
    bn_dp *dp = xcalloc(1, sizeof *dp);
    *dp = (bn_dp){.rank = rank, .world = world, .local_rank = local_rank, .local_world = local_world, .ops = ops,
                  .ctx = ctx};
    return dp;
}

int bn_dp_rank(const bn_dp *dp) { return dp ? dp->rank : 0; }
int bn_dp_world(const bn_dp *dp) { return dp ? dp->world : 1; }
int bn_dp_local_rank(const bn_dp *dp) { return dp ? dp->local_rank : 0; }
int bn_dp_local_world(const bn_dp *dp) { return dp ? dp->local_world : 1; }

const char *bn_dp_transport(const bn_dp *dp) {
    if (!dp) return "none";
    return dp->dev ? dp->dev->name : dp->ops->name;
}

const char *bn_dp_call_name(bool bcast, uint64_t n, char *buf, size_t len) {
    snprintf(buf, len, bcast ? "a broadcast of %llu bytes" : "a sum of %llu elements", (unsigned long long)n);
    return buf;
}

void bn_dp_add(void *dst, const void *src, size_t n, size_t elem_size) {
    if (elem_size == sizeof(double)) {
        double *d = dst;
        const double *s = src;
        for (size_t i = 0; i < n; i++) d[i] += s[i];
    } else {
        float *d = dst;
        const float *s = src;
        for (size_t i = 0; i < n; i++) d[i] += s[i];
    }
}

// dp_sum: the all-reduce of n elements of elem_size bytes; 0 or -1 (err).
static int dp_sum(bn_dp *dp, void *buf, int64_t n, size_t elem_size, char *err, size_t errlen) {
    if (dp && dp->world > 1 && n >= 0 && dp->dev) return dp->dev->sum(dp->dev_ctx, buf, n, elem_size, err, errlen);
    return bn_dp_sum_host(dp, buf, n, elem_size, err, errlen);
}

int bn_dp_sum_host(bn_dp *dp, void *buf, int64_t n, size_t elem_size, char *err, size_t errlen) {
    if (!dp || dp->world == 1) return 0;
    if (n < 0) return bn_err(err, errlen, "data-parallel sum of %lld elements", (long long)n);
    return dp->ops->sum(dp, buf, n, elem_size, err, errlen);
}

int bn_dp_sum_f32(bn_dp *dp, float *buf, int64_t n, char *err, size_t errlen) {
    return dp_sum(dp, buf, n, sizeof(float), err, errlen);
}

int bn_dp_sum_f64(bn_dp *dp, double *buf, int64_t n, char *err, size_t errlen) {
    return dp_sum(dp, buf, n, sizeof(double), err, errlen);
}

int bn_dp_bcast(bn_dp *dp, void *buf, size_t bytes, char *err, size_t errlen) {
    if (!dp || dp->world == 1) return 0;
    return dp->ops->bcast(dp, buf, bytes, err, errlen);
}

void bn_dp_device_register(const bn_dp_device *d) { g_device = d; }

int bn_dp_use_device(bn_dp *dp, int device, char *err, size_t errlen) {
    if (dp && dp->dev) return 1; // taken already
    if (!dp || dp->world == 1 || !g_device) return 0;
    void *ctx = g_device->open(dp, device, err, errlen);
    if (!ctx) return -1;
    dp->dev = g_device;
    dp->dev_ctx = ctx;
    return 1;
}

void bn_dp_free(bn_dp *dp) {
    if (!dp) return;
    if (dp->dev) dp->dev->close(dp->dev_ctx);
    dp->ops->free(dp->ctx);
    free(dp);
}
