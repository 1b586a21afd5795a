// cuda/engine_split.cu — the CPU+CUDA engine of core/engine.h for 0 < -ngl N < n_layer (partial offload,
// llama.cpp's meaning of -ngl): the token embedding and layers [0, n_layer − N) run on the CPU (a
// bn_state_new_front state, bn_forward_front), layers [n_layer − N, n_layer) and the output head (final
// norm + lm_head) on the device (bn_cuda_model_upload_from: only those weights are uploaded;
// bn_cuda_forward_hidden). The residual rows {n_embd, n} cross to the device once per forward (per chunk
// of up to SPLIT_ROWS tokens) through page-locked host memory. Both halves keep their KV cache in fp16
// (the CUDA engine's, llama.cpp's default). Snapshots and per-token snapshots hold both halves: a host
// bn_snapshot of the CPU layers and a device one of the rest. DSpark drafts on the device with host taps
// (the CPU layers' taps never are on the device). Batched passes (bn_engine_forward_multi: decode steps, verify passes
// of several sequences) run each half batched: bn_forward_multi_front, then bn_cuda_forward_multi_hidden.
#include "cuda/common.cuh"
#include "cuda/cuda_engine.h"
#include "cuda/cuda_dspark.h"
extern "C" {
#include "core/engine.h"
#include "core/forward_impl.h" // bn_snapshot's layout (host snapshots of the whole model: CPU part, then device part)
}
#include <string.h>

enum { KV_F16 = 1 };     // BN_F16 of quant/quant.h
#define SPLIT_ROWS 512   // tokens per CPU → device hand-over (staging rows)

struct split_model {
    const bn_model *m;
    int n_cpu;         // layers [0, n_cpu) on the CPU
    int n_threads;     // CPU threads (<= 0: all CPUs)
    bn_cuda_model *cm; // layers [n_cpu, n_layer) + head on the device
};

struct split_state {
    const split_model *sm;
    bn_state *cpu;         // layers [0, n_cpu)
    bn_cuda_state *gpu;    // layers [n_cpu, n_layer) + head
    float *x;              // page-locked {n_embd, rows}: residual rows after layer n_cpu − 1
    int rows;
    bn_snapshot *tmp_cpu;  // per-token host snapshots of each half (bn_forward_out.snaps of a whole-model
    bn_snapshot *tmp_gpu;  //   layout are these two concatenated)
};

struct split_snap {
    bn_snapshot *cpu;
    bn_cuda_snapshot *gpu;
};

static void sp_state_free(void *st) {
    split_state *ss = (split_state *)st;
    if (!ss) return;
    bn_state_free(ss->cpu);
    bn_cuda_state_free(ss->gpu);
    if (ss->x) cudaFreeHost(ss->x);
    bn_snapshot_free(ss->tmp_cpu);
    bn_snapshot_free(ss->tmp_gpu);
    free(ss);
}

static void *sp_state_new(void *impl, int n_ctx, char *err, size_t errlen) {
    const split_model *sm = (const split_model *)impl;
    if (n_ctx < 1) n_ctx = 1;
    split_state *ss = (split_state *)xcalloc(1, sizeof *ss);
    ss->sm = sm;
    ss->rows = n_ctx < SPLIT_ROWS ? n_ctx : SPLIT_ROWS;
    ss->gpu = bn_cuda_state_new(sm->cm, n_ctx, KV_F16, err, errlen);
    if (!ss->gpu) return sp_state_free(ss), nullptr;
    const size_t x_bytes = sizeof(float) * (size_t)sm->m->cfg.n_embd * (size_t)ss->rows;
    if (cudaMallocHost((void **)&ss->x, x_bytes) != cudaSuccess) {
        cudaGetLastError();
        ss->x = NULL;
        bn_err(err, errlen, "CUDA: cannot allocate %zu bytes of page-locked host memory", x_bytes);
        return sp_state_free(ss), nullptr;
    }
    ss->cpu = bn_state_new_front(sm->m, n_ctx, sm->n_threads, KV_F16, sm->n_cpu);
    ss->tmp_cpu = bn_snapshot_new(ss->cpu);
    ss->tmp_gpu = bn_cuda_host_snapshot_new(ss->gpu);
    return ss;
}

static void sp_state_reset(void *st) {
    split_state *ss = (split_state *)st;
    bn_state_reset(ss->cpu);
    bn_cuda_state_reset(ss->gpu);
}
static int sp_state_pos(const void *st) { return bn_state_pos(((const split_state *)st)->cpu); }
static int sp_state_n_ctx(const void *st) { return bn_state_n_ctx(((const split_state *)st)->cpu); }

// chunk_out: the part of out for rows [t0, t0 + nb) of an n-row call, for one half: taps (each half writes
// the slots of its own layers), and for the device half the logits / argmax / top-k / hidden rows it produces.
static bn_forward_out chunk_out(const bn_forward_out *out, const bn_config *c, int t0, int nb, int n, bool head) {
    bn_forward_out o = {};
    if (!out) return o;
    if (out->taps) {
        o.tap_layers = out->tap_layers, o.n_taps = out->n_taps;
        o.taps = out->taps + (size_t)t0 * (size_t)out->n_taps * (size_t)c->n_embd;
    }
    if (!head) return o;
    const bool last = t0 + nb == n; // without all_logits only the call's last row has outputs
    o.all_logits = out->all_logits;
    const size_t row = out->all_logits ? (size_t)t0 : 0;
    if (out->logits && (out->all_logits || last)) o.logits = out->logits + row * (size_t)c->n_vocab;
    if (out->hidden && (out->all_logits || last)) o.hidden = out->hidden + row * (size_t)c->n_embd;
    if (out->argmax && (out->all_logits || last)) o.argmax = out->argmax + row;
    if (out->lse && (out->all_logits || last)) o.lse = out->lse + row;
    if (out->topk > 0 && (out->all_logits || last)) {
        o.topk = out->topk;
        o.topk_ids = out->topk_ids + row * (size_t)out->topk;
        o.topk_logits = out->topk_logits + row * (size_t)out->topk;
    }
    return o;
}

// split_forward: n tokens through both halves in chunks: the CPU layers write the residual rows into the
// staging buffer, the device continues from them. snaps (n <= the staging rows, one chunk): per-token
// engine snapshots; out->snaps (whole-model host snapshots): one token per chunk, each half's state
// copied after it. Returns 0 or -1 with err filled (input errors leave both halves unchanged).
static int split_forward(split_state *ss, const int32_t *tokens, int n, bn_forward_out *out,
                         split_snap *const *snaps, char *err, size_t errlen) {
    const bn_model *m = ss->sm->m;
    const bn_config *c = &m->cfg;
    const size_t n_cpu_rec = ss->tmp_cpu->n, n_gpu_rec = ss->tmp_gpu->n;
    if (bn_forward_check(c, bn_state_pos(ss->cpu), bn_state_n_ctx(ss->cpu), n_cpu_rec + n_gpu_rec, tokens, n, out,
                         err, errlen) != 0)
        return -1;
    const bool host_snaps = out && out->snaps;
    if (snaps && host_snaps) return bn_err(err, errlen, "CPU+CUDA forward_snaps: out->snaps must be NULL");
    if (snaps && n > ss->rows)
        return bn_err(err, errlen, "CPU+CUDA forward_snaps: %d tokens exceed the %d staging rows", n, ss->rows);
    bn_snapshot *cpu_snaps[BN_ENGINE_MAX_SNAPS];
    bn_cuda_snapshot *gpu_snaps[BN_ENGINE_MAX_SNAPS];
    for (int t = 0; snaps && t < n; t++) cpu_snaps[t] = snaps[t]->cpu, gpu_snaps[t] = snaps[t]->gpu;

    const int chunk = host_snaps ? 1 : ss->rows;
    for (int t0 = 0; t0 < n; t0 += chunk) {
        const int nb = n - t0 < chunk ? n - t0 : chunk;
        bn_forward_out oc = chunk_out(out, c, t0, nb, n, false), og = chunk_out(out, c, t0, nb, n, true);
        if (host_snaps) oc.snaps = &ss->tmp_cpu, og.snaps = &ss->tmp_gpu;
        if (snaps) oc.snaps = cpu_snaps;
        if (bn_forward_front(m, ss->cpu, tokens + t0, nb, ss->x, &oc, err, errlen) != 0) return -1;
        if (bn_cuda_forward_hidden(ss->gpu, ss->x, nb, &og, snaps ? gpu_snaps : NULL, err, errlen) != 0) return -1;
        if (host_snaps) { // whole-model layout: the CPU layers' recurrent state first (layer order)
            bn_snapshot *dst = out->snaps[t0];
            memcpy(dst->data, ss->tmp_cpu->data, sizeof(float) * n_cpu_rec);
            memcpy(dst->data + n_cpu_rec, ss->tmp_gpu->data, sizeof(float) * n_gpu_rec);
            dst->pos = ss->tmp_cpu->pos;
        }
    }
    return 0;
}

static int sp_forward(void *st, const int32_t *tokens, int n, bn_forward_out *out, char *err, size_t errlen) {
    return split_forward((split_state *)st, tokens, n, out, NULL, err, errlen);
}
static int sp_forward_snaps(void *st, const int32_t *tokens, int n, bn_forward_out *out, void *const *snaps, char *err,
                            size_t errlen) {
    return split_forward((split_state *)st, tokens, n, out, (split_snap *const *)snaps, err, errlen);
}

// sp_forward_multi: a ragged pass (bn_engine_forward_multi): the CPU layers of all sequences as one
// bn_forward_multi_front (the CPU layers' taps and the CPU halves of the snapshots), the residual rows through the
// staging buffer of the pass's first state, then the device layers and the head as one bn_cuda_forward_multi_hidden
// (the device halves); in passes of whole sequences, as many tokens as that state holds (CPU batch rows, staging
// rows, BN_CUDA_BATCH_MAX); a longer sequence runs alone (split_forward). Every sequence's inputs are checked before
// anything runs (bn_engine_forward_multi, the op's caller, has checked the states distinct, of this engine, and
// without host snapshots); after that only a CUDA error can stop a pass (the states are then undefined, as on CUDA).
static int sp_forward_multi(void *const *sts, const int32_t *const *tokens, const int *n_tok, int n,
                            bn_forward_out *const *outs, void *const *const *snaps, char *err, size_t errlen) {
    split_state *const *ss = (split_state *const *)sts;
    const bn_model *m = ss[0]->sm->m;
    for (int i = 0; i < n; i++)
        if (bn_forward_check(&m->cfg, bn_state_pos(ss[i]->cpu), bn_state_n_ctx(ss[i]->cpu),
                             ss[i]->tmp_cpu->n + ss[i]->tmp_gpu->n, tokens[i], n_tok[i], outs[i], err, errlen) != 0)
            return -1;
    // per sequence: the CPU half's out (its taps, the CPU snapshots) and the device snapshots
    bn_forward_out *oc = (bn_forward_out *)xcalloc((size_t)n, sizeof *oc);
    bn_forward_out **ocp = (bn_forward_out **)xcalloc((size_t)n, sizeof *ocp);
    bn_snapshot **cs = (bn_snapshot **)xcalloc((size_t)n * BN_ENGINE_MAX_SNAPS, sizeof *cs);
    bn_cuda_snapshot **gs = (bn_cuda_snapshot **)xcalloc((size_t)n * BN_ENGINE_MAX_SNAPS, sizeof *gs);
    bn_cuda_snapshot ***gsv = (bn_cuda_snapshot ***)xcalloc((size_t)n, sizeof *gsv); // [i]: NULL or gs + i × MAX
    bn_state **cpus = (bn_state **)xcalloc((size_t)n, sizeof *cpus);
    bn_cuda_state **gpus = (bn_cuda_state **)xcalloc((size_t)n, sizeof *gpus);
    for (int i = 0; i < n; i++) {
        split_snap *const *sn = (split_snap *const *)snaps[i];
        oc[i] = chunk_out(outs[i], &m->cfg, 0, n_tok[i], n_tok[i], false);
        for (int j = 0; sn && j < n_tok[i]; j++)
            cs[(size_t)i * BN_ENGINE_MAX_SNAPS + j] = sn[j]->cpu, gs[(size_t)i * BN_ENGINE_MAX_SNAPS + j] = sn[j]->gpu;
        if (sn) oc[i].snaps = cs + (size_t)i * BN_ENGINE_MAX_SNAPS, gsv[i] = gs + (size_t)i * BN_ENGINE_MAX_SNAPS;
        ocp[i] = outs[i] || sn ? &oc[i] : NULL;
        cpus[i] = ss[i]->cpu, gpus[i] = ss[i]->gpu;
    }
    int rc = 0;
    for (int i0 = 0; i0 < n && rc == 0;) {
        int cap = ss[i0]->cpu->n_batch < ss[i0]->rows ? ss[i0]->cpu->n_batch : ss[i0]->rows;
        cap = cap < BN_CUDA_BATCH_MAX ? cap : BN_CUDA_BATCH_MAX;
        int i1 = bn_engine_pass_end(n_tok, n, i0, cap);
        if (i1 == i0) { // one sequence longer than a pass: alone
            rc = split_forward(ss[i0], tokens[i0], n_tok[i0], outs[i0], (split_snap *const *)snaps[i0], err, errlen);
            i1 = i0 + 1;
        } else {
            rc = bn_forward_multi_front(m, cpus + i0, tokens + i0, n_tok + i0, i1 - i0, ss[i0]->x, ocp + i0, err,
                                        errlen);
            if (rc == 0)
                rc = bn_cuda_forward_multi_hidden(gpus + i0, ss[i0]->x, n_tok + i0, i1 - i0, outs + i0,
                                                  (bn_cuda_snapshot *const *const *)(gsv + i0), err, errlen);
        }
        i0 = i1;
    }
    free(oc), free(ocp), free(cs), free(gs), free(gsv), free(cpus), free(gpus);
    return rc;
}

static void sp_snapshot_free(void *p) {
    split_snap *snap = (split_snap *)p;
    if (!snap) return;
    bn_snapshot_free(snap->cpu);
    bn_cuda_snapshot_free(snap->gpu);
    free(snap);
}
static void *sp_snapshot_new(const void *st, char *err, size_t errlen) {
    const split_state *ss = (const split_state *)st;
    split_snap *snap = (split_snap *)xcalloc(1, sizeof *snap);
    snap->cpu = bn_snapshot_new(ss->cpu);
    snap->gpu = bn_cuda_snapshot_new(ss->gpu, err, errlen);
    if (!snap->gpu) return sp_snapshot_free(snap), nullptr;
    return snap;
}
static int sp_snapshot_into(const void *st, void *p, char *err, size_t errlen) {
    const split_state *ss = (const split_state *)st;
    split_snap *snap = (split_snap *)p;
    if (bn_cuda_state_snapshot_into(ss->gpu, snap->gpu, err, errlen) != 0) return -1;
    bn_state_snapshot_into(ss->cpu, snap->cpu);
    return 0;
}
static int sp_restore(void *st, const void *p, char *err, size_t errlen) {
    split_state *ss = (split_state *)st;
    const split_snap *snap = (const split_snap *)p;
    if (bn_cuda_state_restore(ss->gpu, snap->gpu, err, errlen) != 0) return -1;
    bn_state_restore(ss->cpu, snap->cpu);
    return 0;
}

static void sp_impl_free(void *impl) {
    split_model *sm = (split_model *)impl;
    bn_cuda_model_free(sm->cm);
    free(sm);
}

static const bn_engine_ops split_ops = {"CPU+CUDA",      sp_state_new,     sp_state_free, sp_state_reset,
                                        sp_state_pos,    sp_forward,       sp_impl_free,  sp_state_n_ctx,
                                        sp_snapshot_new, sp_snapshot_into, sp_restore,    sp_snapshot_free,
                                        sp_forward_snaps, sp_forward_multi};

extern "C" bn_engine *bn_cuda_split_engine_new(const bn_model *m, int n_gpu_layers, int n_threads, char *err,
                                               size_t errlen) {
    const int n_layer = m->cfg.n_layer;
    if (n_gpu_layers < 1 || n_gpu_layers >= n_layer)
        return bn_err(err, errlen, "CPU+CUDA engine: -ngl %d must be in 1..%d for %d layers", n_gpu_layers,
                      n_layer - 1, n_layer), nullptr;
    split_model *sm = (split_model *)xcalloc(1, sizeof *sm);
    sm->m = m;
    sm->n_cpu = n_layer - n_gpu_layers;
    sm->n_threads = n_threads;
    sm->cm = bn_cuda_model_upload_from(m, sm->n_cpu, err, errlen);
    if (!sm->cm) return free(sm), nullptr;
    bn_cuda_drafter_register(&split_ops, false); // bn_spec drafts on the device, taps through host memory
    bn_engine *e = bn_engine_new(&split_ops, sm, m);
    e->n_threads = n_threads;
    return e;
}
