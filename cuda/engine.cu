// cuda/engine.cu — the CUDA backend of core/engine.h (bn_cuda_engine_new), over cuda/cuda_engine.h; it registers
// itself as the device backend of bn_engine_open when the program starts.
#include "cuda/common.cuh"
#include "cuda/cuda_engine.h"
#include "cuda/cuda_dspark.h"
#include "cuda/cuda_backend.h"
#include <mutex>
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

static int cu_forward_multi(void *const *sts, const int32_t *const *tokens, const int *n_tok, int n,
                            bn_forward_out *const *outs, void *const *const *snaps, char *err, size_t errlen) {
    return bn_cuda_forward_multi((bn_cuda_state *const *)sts, tokens, n_tok, n, outs,
                                 (bn_cuda_snapshot *const *const *)snaps, err, errlen);
}

static int cu_set_lora_scales(void *st, const float *scales, int n, char *err, size_t errlen) {
    return bn_cuda_state_set_lora((bn_cuda_state *)st, scales, n, err, errlen);
}
static int cu_attach_lora(void *impl, const bn_lora_set *set, char *err, size_t errlen) {
    return bn_cuda_model_set_lora((bn_cuda_model *)impl, set, err, errlen);
}

static const bn_engine_ops cuda_ops = {"CUDA",         cu_state_new,   cu_state_free,    cu_state_reset,
                                       cu_state_pos,   cu_forward,     cu_impl_free,     cu_state_n_ctx,
                                       cu_snapshot_new, cu_snapshot_into, cu_restore,    cu_snapshot_free,
                                       cu_forward_snaps, cu_forward_multi, cu_set_lora_scales, cu_attach_lora};

// The device drafter behind bn_spec on a CUDA target (spec/dspark.h bn_dev_drafter_ops). The uploaded
// weights are shared by every state of one bn_drafter (e.g. all server slots), refcounted.
struct cu_drafter {
    const bn_drafter *d;
    bn_cuda_drafter *w;
    bn_cuda_dstate *s;
};
static std::mutex uploads_mu;
static struct {
    const bn_drafter *d;
    bn_cuda_drafter *w;
    int refs;
} uploads[8];

// drafter_weights: the device copy of d (uploaded on first use, then shared); NULL with err.
static bn_cuda_drafter *drafter_weights(const bn_drafter *d, char *err, size_t errlen) {
    std::lock_guard<std::mutex> lock(uploads_mu);
    int free_slot = -1;
    for (int i = 0; i < 8; i++) {
        if (uploads[i].d == d && uploads[i].refs > 0) {
            uploads[i].refs++;
            return uploads[i].w;
        }
        if (uploads[i].refs == 0 && free_slot < 0) free_slot = i;
    }
    bn_cuda_drafter *w = bn_cuda_drafter_upload(d, err, errlen);
    if (w && free_slot >= 0) uploads[free_slot].d = d, uploads[free_slot].w = w, uploads[free_slot].refs = 1;
    return w; // with all 8 slots taken: a private copy, freed by its state
}
static void drafter_weights_release(const bn_drafter *d, bn_cuda_drafter *w) {
    std::lock_guard<std::mutex> lock(uploads_mu);
    for (int i = 0; i < 8; i++)
        if (uploads[i].w == w && uploads[i].d == d && uploads[i].refs > 0) {
            if (--uploads[i].refs == 0) bn_cuda_drafter_free(w), uploads[i].d = NULL, uploads[i].w = NULL;
            return;
        }
    bn_cuda_drafter_free(w);
}
static void cd_state_free(void *p) {
    cu_drafter *cd = (cu_drafter *)p;
    if (!cd) return;
    bn_cuda_dstate_free(cd->s);
    if (cd->w) drafter_weights_release(cd->d, cd->w);
    free(cd);
}
static void *cd_state_new(const bn_drafter *d, int n_ctx, char *err, size_t errlen) {
    cu_drafter *cd = (cu_drafter *)xcalloc(1, sizeof *cd);
    cd->d = d;
    cd->w = drafter_weights(d, err, errlen);
    if (cd->w) cd->s = bn_cuda_dstate_new(cd->w, n_ctx, err, errlen);
    if (!cd->s) {
        cd_state_free(cd);
        return NULL;
    }
    return cd;
}
static int cd_truncate(void *p, int n) { return bn_cuda_dstate_truncate(((cu_drafter *)p)->s, n); }
static int cd_process(void *p, const float *taps, int n, int pos0, char *err, size_t errlen) {
    return bn_cuda_drafter_process(((cu_drafter *)p)->s, taps, n, pos0, err, errlen);
}
static int cd_process_start(void *p, const float *taps, bool on_device, int n, int pos0, char *err, size_t errlen) {
    return bn_cuda_drafter_process_start(((cu_drafter *)p)->s, taps, on_device, n, pos0, err, errlen);
}
static int cd_draft_multi(void *const *ps, const int32_t *id_last, const int *n_past, const int *n_max, int n,
                          float p_min, int32_t *const *drafts, int *counts, char *err, size_t errlen) {
    bn_cuda_dstate *ss[64];
    if (n > 64) return bn_err(err, errlen, "drafter: %d states in one batched draft (at most 64)", n);
    for (int i = 0; i < n; i++) ss[i] = ((cu_drafter *)ps[i])->s;
    return bn_cuda_drafter_draft_multi(ss, id_last, n_past, n_max, n, p_min, drafts, counts, err, errlen);
}
static int cd_draft_start(void *p, int32_t id_last, int n_past, int n_max, char *err, size_t errlen) {
    return bn_cuda_drafter_draft_start(((cu_drafter *)p)->s, id_last, n_past, n_max, err, errlen);
}
static int cd_draft_finish(void *p, int n, float p_min, int32_t *drafts, char *err, size_t errlen) {
    return bn_cuda_drafter_draft_finish(((cu_drafter *)p)->s, n, p_min, drafts, NULL, err, errlen);
}
static void *cd_host_alloc(size_t bytes) {
    void *p = NULL;
    if (cudaMallocHost(&p, bytes) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}
static void cd_host_free(void *p) { cudaFreeHost(p); }
static float *cd_target_taps(bn_engine_state *ts, int n_taps, int rows, char *err, size_t errlen) {
    return bn_cuda_state_tap_buffer((bn_cuda_state *)ts->st, n_taps, rows, err, errlen);
}
static int cd_process_dev(void *p, const float *dev_taps, int n, int pos0, char *err, size_t errlen) {
    return bn_cuda_drafter_process_dev(((cu_drafter *)p)->s, dev_taps, n, pos0, err, errlen);
}
static const bn_dev_drafter_ops cuda_drafter_ops = {
    "CUDA",         cd_state_new,  cd_state_free, cd_truncate,    cd_process, cd_draft_start, cd_draft_finish,
    cd_host_alloc,  cd_host_free,  cd_target_taps, cd_process_dev, cd_process_start, cd_draft_multi};
// the same without the device tap hand-over: taps reach the drafter through host memory
static const bn_dev_drafter_ops cuda_drafter_host_taps_ops = {
    "CUDA",         cd_state_new,  cd_state_free, cd_truncate,    cd_process, cd_draft_start, cd_draft_finish,
    cd_host_alloc,  cd_host_free,  NULL,          NULL,           cd_process_start, cd_draft_multi};

extern "C" void bn_cuda_drafter_register(const bn_engine_ops *engine_ops, bool device_taps) {
    bn_dev_drafter_register(engine_ops, device_taps ? &cuda_drafter_ops : &cuda_drafter_host_taps_ops);
}

extern "C" bn_engine *bn_cuda_engine_new(const bn_model *m, char *err, size_t errlen) {
    bn_cuda_model *cm = bn_cuda_model_upload(m, err, errlen);
    if (!cm) return NULL;
    bn_cuda_drafter_register(&cuda_ops, true); // bn_spec drafts on the device for CUDA targets
    return bn_engine_new(&cuda_ops, cm, m);
}

// The device backend of bn_engine_open, registered before main (the CUDA library is linked whole, so this object is in
// every program that links it).
static const bn_engine_device cuda_device = {"CUDA", bn_cuda_device_count, bn_cuda_engine_new, bn_cuda_split_engine_new,
                                             bn_cuda_switches};
__attribute__((constructor)) static void cuda_device_register(void) { bn_engine_device_register(&cuda_device); }
