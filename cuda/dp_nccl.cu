// cuda/dp_nccl.cu — the NCCL device transport of train/dp.h (docs/antidoom.md §20): once every rank trains on a
// GPU, the gradient sums go through ncclAllReduce between the ranks' devices (NVLink, InfiniBand or sockets, as
// NCCL finds them) instead of through the host transport. Rank 0 makes the communicator's id and broadcasts it over
// the host transport; every rank then joins with ncclCommInitRank on its device.
// The trainer keeps its gradients on the host (train/device.h), so a sum stages host → device → all-reduce → host,
// STAGE_BYTES at a time. NCCL gives every rank the same bits; its order of addition is its own (not rank order),
// so a run differs from the loopback or tcp transport's by rounding.
// Built only by nvcc when the toolkit has NCCL (cuda/meson.build); the emulator has no NCCL, and the tests check
// the same interface with the host transports and a stand-in device transport (tests/train/test_dp_device.c).
#include "cuda/common.cuh"
#include <nccl.h>
#include <stdlib.h>
extern "C" {
#include "train/dp.h"
#include "base/util.h"
}

#define STAGE_BYTES ((size_t)256 << 20)

struct nccl_dp {
    ncclComm_t comm;
    cudaStream_t stream;
    int device;
    void *stage; // STAGE_BYTES on the device
};

// nccl_fail: err = "NCCL error: <what> (<call>)"; returns -1.
static int nccl_fail(char *err, size_t errlen, ncclResult_t r, const char *call) {
    return bn_err(err, errlen, "NCCL error: %s (%s)", ncclGetErrorString(r), call);
}

#define NCCL_TRY(call, err, errlen)                                                                                   \
    do {                                                                                                              \
        ncclResult_t bn_r_ = (call);                                                                                  \
        if (bn_r_ != ncclSuccess) return nccl_fail((err), (errlen), bn_r_, #call);                                    \
    } while (0)

// nccl_close: the communicator, the stream and the staging buffer freed (NULL is fine).
static void nccl_close(void *ctx) {
    nccl_dp *c = (nccl_dp *)ctx;
    if (!c) return;
    cudaSetDevice(c->device);
    if (c->comm) ncclCommDestroy(c->comm);
    if (c->stream) cudaStreamDestroy(c->stream);
    if (c->stage) cudaFree(c->stage);
    free(c);
}

// id_from_rank0: the communicator's id, made by rank 0 and broadcast over the host transport; 0 or -1 (err).
static int id_from_rank0(bn_dp *dp, ncclUniqueId *id, char *err, size_t errlen) {
    struct {
        int ok;
        ncclUniqueId id;
    } msg;
    memset(&msg, 0, sizeof msg);
    if (bn_dp_rank(dp) == 0) msg.ok = ncclGetUniqueId(&msg.id) == ncclSuccess;
    if (bn_dp_bcast(dp, &msg, sizeof msg, err, errlen)) return -1;
    if (!msg.ok) return bn_err(err, errlen, "NCCL: rank 0 could not make the communicator's id (ncclGetUniqueId)");
    *id = msg.id;
    return 0;
}

// nccl_join: the device's stream, staging buffer and communicator; 0 or -1 (err).
static int nccl_join(nccl_dp *c, bn_dp *dp, char *err, size_t errlen) {
    ncclUniqueId id;
    if (id_from_rank0(dp, &id, err, errlen)) return -1;
    BN_CUDA_TRY(cudaSetDevice(c->device), err, errlen);
    BN_CUDA_TRY(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), err, errlen);
    BN_CUDA_TRY(cudaMalloc(&c->stage, STAGE_BYTES), err, errlen);
    NCCL_TRY(ncclCommInitRank(&c->comm, bn_dp_world(dp), id, bn_dp_rank(dp)), err, errlen);
    return 0;
}

// nccl_open: this rank's communicator on `device`; NULL (err).
static void *nccl_open(bn_dp *dp, int device, char *err, size_t errlen) {
    nccl_dp *c = (nccl_dp *)xcalloc(1, sizeof *c);
    c->device = device;
    if (nccl_join(c, dp, err, errlen)) {
        nccl_close(c);
        return NULL;
    }
    return c;
}

// nccl_sum: host buf[0..n) summed over the ranks through the staging buffer; 0 or -1 (err).
static int nccl_sum(void *ctx, void *buf, int64_t n, size_t elem_size, char *err, size_t errlen) {
    nccl_dp *c = (nccl_dp *)ctx;
    const ncclDataType_t type = elem_size == sizeof(double) ? ncclFloat64 : ncclFloat32;
    const size_t per = STAGE_BYTES / elem_size;
    BN_CUDA_TRY(cudaSetDevice(c->device), err, errlen);
    for (int64_t off = 0; off < n; off += (int64_t)per) {
        const size_t k = (size_t)(n - off) < per ? (size_t)(n - off) : per;
        char *host = (char *)buf + (size_t)off * elem_size;
        BN_CUDA_TRY(cudaMemcpyAsync(c->stage, host, k * elem_size, cudaMemcpyHostToDevice, c->stream), err, errlen);
        NCCL_TRY(ncclAllReduce(c->stage, c->stage, k, type, ncclSum, c->comm, c->stream), err, errlen);
        BN_CUDA_TRY(cudaMemcpyAsync(host, c->stage, k * elem_size, cudaMemcpyDeviceToHost, c->stream), err, errlen);
        BN_CUDA_TRY(cudaStreamSynchronize(c->stream), err, errlen);
    }
    return 0;
}

static const bn_dp_device nccl_device = {"NCCL", nccl_open, nccl_sum, nccl_close};

// bn_cuda_dp_nccl_register: makes NCCL the device transport of train/dp.h (also from the constructor below; the
// symbol is what the link pulls, cuda/meson.build).
extern "C" void bn_cuda_dp_nccl_register(void) { bn_dp_device_register(&nccl_device); }

__attribute__((constructor)) static void nccl_register_at_start(void) { bn_cuda_dp_nccl_register(); }
