// cuda/engine.cu — the CUDA backend of core/engine.h (bn_cuda_engine_new), over cuda/cuda_engine.h.
#include "cuda/common.cuh"
#include "cuda/cuda_engine.h"
extern "C" {
#include "core/engine.h"
}

enum { KV_F16 = 1 }; // BN_F16 of quant/quant.h: llama.cpp's default KV type

static void *cu_state_new(void *impl, int n_ctx, char *err, size_t errlen) {
    return bn_cuda_state_new((bn_cuda_model *)impl, n_ctx, KV_F16, err, errlen);
}
static void cu_state_free(void *st) { bn_cuda_state_free((bn_cuda_state *)st); }
static void cu_state_reset(void *st) { bn_cuda_state_reset((bn_cuda_state *)st); }
static int cu_state_pos(const void *st) { return bn_cuda_state_pos((const bn_cuda_state *)st); }
static int cu_forward(void *st, const int32_t *tokens, int n, bn_forward_out *out, char *err, size_t errlen) {
    return bn_cuda_forward((bn_cuda_state *)st, tokens, n, out, err, errlen);
}
static void cu_impl_free(void *impl) { bn_cuda_model_free((bn_cuda_model *)impl); }
static int cu_state_n_ctx(const void *st) { return bn_cuda_state_n_ctx((const bn_cuda_state *)st); }
static void *cu_snapshot_new(const void *st, char *err, size_t errlen) {
    return bn_cuda_snapshot_new((const bn_cuda_state *)st, err, errlen);
}
static int cu_snapshot_into(const void *st, void *snap, char *err, size_t errlen) {
    return bn_cuda_state_snapshot_into((const bn_cuda_state *)st, (bn_cuda_snapshot *)snap, err, errlen);
}
static int cu_restore(void *st, const void *snap, char *err, size_t errlen) {
    return bn_cuda_state_restore((bn_cuda_state *)st, (const bn_cuda_snapshot *)snap, err, errlen);
}
static void cu_snapshot_free(void *snap) { bn_cuda_snapshot_free((bn_cuda_snapshot *)snap); }
static int cu_forward_snaps(void *st, const int32_t *tokens, int n, bn_forward_out *out, void *const *snaps, char *err,
                            size_t errlen) {
    return bn_cuda_forward_snaps((bn_cuda_state *)st, tokens, n, out, (bn_cuda_snapshot *const *)snaps, err, errlen);
}

static const bn_engine_ops cuda_ops = {"CUDA",         cu_state_new,   cu_state_free,    cu_state_reset,
                                       cu_state_pos,   cu_forward,     cu_impl_free,     cu_state_n_ctx,
                                       cu_snapshot_new, cu_snapshot_into, cu_restore,    cu_snapshot_free,
                                       cu_forward_snaps};

extern "C" bn_engine *bn_cuda_engine_new(const bn_model *m, char *err, size_t errlen) {
    bn_cuda_model *cm = bn_cuda_model_upload(m, err, errlen);
    if (!cm) return NULL;
    return bn_engine_new(&cuda_ops, cm, m);
}
