// cuda/state.cu — a sequence's device state behind cuda/cuda_engine.h (one device allocation: KV cache, recurrent
// state, activations, scratch; pinned host staging; the device tap buffer) and snapshots of its recurrent state.
// Mirrors core/state.c.
#include "cuda/forward_impl.cuh"
#include "cuda/mm_impl.cuh" // bn_cu_mmq_prefill_enabled (bn_cuda_switches)

// mm_scratch_for: largest bn_cu_matmul scratch any weight of the model needs for nb columns.
static size_t mm_scratch_for(const bn_cuda_model *cm, int nb, int head_rows) {
    size_t bytes = bn_cu_matmul_scratch_bytes(&cm->output, head_rows);
    for (int il = 0; il < cm->cfg.n_layer; il++) {
        const cu_layer *L = &cm->layers[il];
        const bn_cu_weight *ws[] = {&L->ffn_gate,  &L->ffn_up,    &L->ffn_down, &L->attn_q,    &L->attn_k,
                                    &L->attn_v,    &L->attn_output, &L->attn_qkv, &L->attn_gate, &L->ssm_beta,
                                    &L->ssm_alpha, &L->ssm_out};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            if (ws[i]->data) bytes = max_sz(bytes, max_sz(bn_cu_matmul_scratch_bytes(ws[i], nb),
                                                          bn_cu_matmul_scratch_bytes(ws[i], 1)));
    }
    return bytes;
}

// layout: assigns every device pointer of s (when c->base != NULL); returns the total bytes.
static size_t layout(bn_cu_carver *c, bn_cuda_state *s) {
    const bn_cuda_model *cm = s->cm;
    const bn_config *cf = &cm->cfg;
    const size_t H = cf->n_embd, F = cf->n_ff, L = cf->n_layer, B = s->n_batch;
    const bn_dims dm = bn_config_dims(cf); // the CPU state's sizes (same recurrent layout)
    const size_t kv_dim = dm.kv_dim, q_rows = dm.q_rows, conv_dim = dm.conv_dim, value_dim = dm.value_dim;
    const size_t conv_floats = dm.conv_floats, ssm_floats = dm.ssm_floats, Hv = cf->ssm_dt_rank;
    const size_t kv_elt = s->kv_type == T_F16 ? 2 : 4;

    int *d_pos = (int *)bn_cu_carve(c, 4 * sizeof(int));
    int32_t *d_tokens = (int32_t *)bn_cu_carve(c, B * sizeof(int32_t));
    float **d_snap_ptrs = (float **)bn_cu_carve(c, MAX_SNAPS * sizeof(float *));
    int32_t *d_argmax = (int32_t *)bn_cu_carve(c, (size_t)s->logit_rows * sizeof(int32_t));
    void **d_cols = (void **)bn_cu_carve(c, col_table_slots(cf->n_layer) * sizeof(void *));
    const size_t topk_n = (size_t)s->logit_rows * BN_FORWARD_TOPK_MAX;
    float *d_topk_vals = (float *)bn_cu_carve(c, topk_n * sizeof(float));
    int32_t *d_topk_ids = (int32_t *)bn_cu_carve(c, topk_n * sizeof(int32_t));
    void *topk_scratch = bn_cu_carve(c, bn_cu_topk_scratch_bytes(cf->n_vocab, BN_FORWARD_TOPK_MAX));
    float *d_lse = (float *)bn_cu_carve(c, (size_t)s->logit_rows * sizeof(float));
    const size_t L0 = (size_t)cm->first_layer; // caches only for the device's layers [L0, L)
    size_t n_rec = 0;
    for (size_t il = L0; il < L; il++)
        if (cf->is_recurrent[il]) n_rec += conv_floats + ssm_floats;
    float *rec = (float *)bn_cu_carve(c, n_rec * sizeof(float));
    if (c->base) {
        s->d_pos = d_pos, s->d_tokens = d_tokens, s->recurrent = rec, s->n_recurrent = n_rec;
        s->d_snap_ptrs = d_snap_ptrs, s->d_argmax = d_argmax, s->d_cols = d_cols;
        s->d_topk_vals = d_topk_vals, s->d_topk_ids = d_topk_ids, s->topk_scratch = topk_scratch, s->d_lse = d_lse;
        float *p = rec;
        for (size_t il = 0; il < L; il++) {
            s->conv[il] = s->ssm[il] = NULL;
            if (!cf->is_recurrent[il] || il < L0) continue;
            s->conv[il] = p;
            p += conv_floats;
            s->ssm[il] = p;
            p += ssm_floats;
        }
    }
    for (size_t il = 0; il < L; il++) {
        void *kc = NULL, *vc = NULL;
        if (!cf->is_recurrent[il] && il >= L0) {
            kc = bn_cu_carve(c, (size_t)s->n_ctx * kv_dim * kv_elt);
            vc = bn_cu_carve(c, (size_t)s->n_ctx * kv_dim * kv_elt);
        }
        if (c->base) s->k_cache[il] = kc, s->v_cache[il] = vc;
    }
    float *x = (float *)bn_cu_carve(c, B * H * 4), *xn = (float *)bn_cu_carve(c, B * H * 4);
    float *mo = (float *)bn_cu_carve(c, B * H * 4);
    float *qg = (float *)bn_cu_carve(c, B * max_sz(q_rows, conv_dim) * 4);
    float *kb = (float *)bn_cu_carve(c, B * kv_dim * 4), *vb = (float *)bn_cu_carve(c, B * kv_dim * 4);
    float *z = (float *)bn_cu_carve(c, B * value_dim * 4);
    float *att = (float *)bn_cu_carve(c, B * max_sz((size_t)cf->n_head * cf->head_dim, value_dim) * 4);
    float *bb = (float *)bn_cu_carve(c, B * Hv * 4), *ab = (float *)bn_cu_carve(c, B * Hv * 4);
    float *gate = (float *)bn_cu_carve(c, B * F * 4), *up = (float *)bn_cu_carve(c, B * F * 4);
    float *logits = (float *)bn_cu_carve(c, (size_t)s->logit_rows * cf->n_vocab * 4);
    const size_t att_floats =
        max_sz(bn_cu_attention_scratch_floats(cf->n_head, cf->head_dim, (int)B, 1),
               bn_cu_attention_scratch_floats(cf->n_head, cf->head_dim, BN_CU_MMVQ_MAX_NB, s->n_splits));
    float *att_scratch = (float *)bn_cu_carve(c, att_floats * 4);
    const bool any_gdn = n_rec > 0;
    const size_t conv_scratch_floats = bn_cu_gdn_conv_scratch_floats((int)conv_dim, cf->ssm_conv_kernel, (int)B);
    float *conv_scratch = any_gdn ? (float *)bn_cu_carve(c, conv_scratch_floats * 4) : NULL;
    void *mm_scratch = bn_cu_carve(c, mm_scratch_for(cm, (int)B, s->logit_rows));
    // LoRA: the column scales and the A·x intermediates
    const size_t lora_rows = cm->lora ? max_sz(B, MAX_BATCH_COLS) : 0;
    float *lora_own = cm->lora ? (float *)bn_cu_carve(c, B * BN_LORA_MAX * 4) : NULL;
    float *lora_cols = cm->lora ? (float *)bn_cu_carve(c, MAX_BATCH_COLS * BN_LORA_MAX * 4) : NULL;
    float *lora_u = cm->lora ? (float *)bn_cu_carve(c, lora_rows * (size_t)cm->lora->max_rank * 4) : NULL;
    if (c->base) {
        s->d_lora_own = lora_own, s->d_lora_cols = lora_cols, s->d_lora_u = lora_u, s->lora_cur = lora_own;
        s->x = x, s->xn = xn, s->mo = mo, s->qg = qg, s->kb = kb, s->vb = vb, s->z = z, s->att = att;
        s->bb = bb, s->ab = ab, s->gate = gate, s->up = up, s->logits = logits, s->att_scratch = att_scratch;
        s->conv_scratch = conv_scratch;
        s->mm_scratch = mm_scratch;
    }
    return c->off;
}

// state_switches: the opt-in kernel switches a new state takes from the environment (cuda/cuda_engine.h,
// bn_cuda_switches describes them with the process-wide ones).
struct state_switches {
    bool no_fuse;   // BONSAI_CUDA_FUSE=0: every product quantizes its own input
    int attn_tiled; // BONSAI_CUDA_ATTN_TILED=1 | mma (mma needs the fp16 self-check; else the tiled kernel)
    bool gdn_norm;  // BONSAI_CUDA_GDN_NORM=1: the GDN recurrence with its output norm in one launch
};

// switches_now: the switches as the environment sets them now.
static state_switches switches_now(void) {
    state_switches sw;
    sw.no_fuse = bn_env_is("BONSAI_CUDA_FUSE", "0");
    sw.attn_tiled = bn_env_is("BONSAI_CUDA_ATTN_TILED", "1")     ? BN_CU_ATTN_TILED
                    : bn_env_is("BONSAI_CUDA_ATTN_TILED", "mma") ? (bn_cuda_attn_mma_ok() ? BN_CU_ATTN_MMA : BN_CU_ATTN_TILED)
                                                                  : BN_CU_ATTN_PER_TOKEN;
    sw.gdn_norm = bn_env_is("BONSAI_CUDA_GDN_NORM", "1");
    return sw;
}

extern "C" const char *bn_cuda_switches(char *buf, size_t len) {
    static const char *const attn[] = {"per-token", "tiled", "tensor cores"};
    const state_switches sw = switches_now();
    snprintf(buf, len,
             "int8 tensor cores %s; programmatic dependent launch %s; Q8-producer fusion %s; GDN norm fusion %s; "
             "prefill attention %s; prefill GEMMs %s",
             bn_cuda_mma_status(), bn_cuda_pdl_in_use() ? "on" : "off", sw.no_fuse ? "off" : "on",
             sw.gdn_norm ? "on" : "off", attn[sw.attn_tiled],
             bn_cu_mmq_prefill_enabled() && bn_cuda_mma_in_use() ? "int8 tensor cores" : "fp16 cuBLAS");
    return buf;
}

bn_cuda_state *bn_cuda_state_new(bn_cuda_model *cm, int n_ctx, int kv_type, char *err, size_t errlen) {
    if (n_ctx < 1) n_ctx = 1;
    bn_cuda_state *s = (bn_cuda_state *)xcalloc(1, sizeof *s);
    const int L = cm->cfg.n_layer;
    s->cm = cm;
    s->n_ctx = n_ctx;
    s->kv_type = kv_type == T_F16 ? T_F16 : T_F32;
    s->n_batch = n_ctx < MAX_PREFILL_BATCH ? n_ctx : MAX_PREFILL_BATCH;
    s->logit_rows = s->n_batch < MAX_LOGIT_ROWS ? s->n_batch : MAX_LOGIT_ROWS;
    s->n_splits = n_ctx / 32 < 1 ? 1 : n_ctx / 32 > MAX_SPLITS ? MAX_SPLITS : n_ctx / 32;
    s->tap_row = -1;
    const state_switches sw = switches_now();
    s->no_fuse = sw.no_fuse;
    s->attn_tiled = sw.attn_tiled;
    s->gdn_norm = sw.gdn_norm;
    s->k_cache = (void **)xcalloc((size_t)L, sizeof(void *));
    s->v_cache = (void **)xcalloc((size_t)L, sizeof(void *));
    s->conv = (float **)xcalloc((size_t)L, sizeof(float *));
    s->ssm = (float **)xcalloc((size_t)L, sizeof(float *));
    s->h_cols = (void **)xcalloc(col_table_slots(L), sizeof(void *));
    bn_cu_carver count = {NULL, 0};
    const size_t total = layout(&count, s);
    int rc = 0;
    if (cudaMalloc(&s->block, total) != cudaSuccess) {
        cudaGetLastError();
        s->block = NULL;
        rc = bn_err(err, errlen, "CUDA: out of device memory for a %d-position state (%zu bytes)", n_ctx, total);
    }
    if (rc == 0) {
        bn_cu_carver fill = {(char *)s->block, 0};
        layout(&fill, s);
    }
    if (rc == 0 && (cudaMallocHost((void **)&s->h_io, 4 * sizeof(int32_t)) != cudaSuccess ||
                    cudaMallocHost((void **)&s->h_snap_ptrs, MAX_SNAPS * sizeof(float *)) != cudaSuccess))
        rc = bn_err(err, errlen, "CUDA: cannot allocate pinned host memory");
    if (rc == 0) rc = bn_cu_stream_blas_new(&s->stream, &s->blas, err, errlen);
    if (rc == 0 && cm->lora) { // adapters: the unfused products (each reads its fp32 input), the global scales
        s->no_fuse = true;
        s->h_lora_cols = (float *)xcalloc((size_t)MAX_BATCH_COLS * BN_LORA_MAX, sizeof(float));
        rc = bn_cuda_state_set_lora(s, cm->lora->scales, cm->lora->n_adapters, err, errlen);
    }
    if (rc != 0) {
        cudaGetLastError();
        bn_cuda_state_free(s);
        return NULL;
    }
    bn_cuda_state_reset(s);
    return s;
}

void bn_cuda_state_free(bn_cuda_state *s) {
    if (!s) return;
    for (int i = 0; i < N_STEP_GRAPHS; i++) drop_graph(&s->graphs[i]);
    for (int n = 0; n <= BN_CU_MMVQ_MAX_NB; n++) drop_graph(&s->verify[n]);
    for (int n = 0; n <= MAX_BATCH_COLS; n++) drop_graph(&s->batch[n]);
    bn_cu_stream_blas_free(s->stream, s->blas);
    if (s->h_io) cudaFreeHost(s->h_io);
    if (s->h_snap_ptrs) cudaFreeHost(s->h_snap_ptrs);
    if (s->block) cudaFree(s->block);
    if (s->dev_taps) cudaFree(s->dev_taps);
    free(s->k_cache);
    free(s->v_cache);
    free(s->conv);
    free(s->ssm);
    free(s->h_cols);
    free(s->h_lora_cols);
    free(s);
}

void bn_cuda_state_reset(bn_cuda_state *s) {
    cudaError_t e = cudaMemsetAsync(s->recurrent, 0, s->n_recurrent * sizeof(float), s->stream);
    if (e == cudaSuccess) e = cudaMemsetAsync(s->d_pos, 0, sizeof(int), s->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s->stream);
    if (e != cudaSuccess) // void API: say so (the next forward reports the sticky error, if any)
        fprintf(stderr, "bn_cuda_state_reset: CUDA error: %s\n", cudaGetErrorString(e));
    s->pos = 0;
}

int bn_cuda_state_pos(const bn_cuda_state *s) { return s->pos; }
int bn_cuda_state_n_ctx(const bn_cuda_state *s) { return s->n_ctx; }

void bn_cuda_state_use_graphs(bn_cuda_state *s, int on) { s->no_graphs = !on; }

void bn_cuda_state_graph_counts(const bn_cuda_state *s, int64_t *replays, int64_t *captures) {
    if (replays) *replays = s->n_replays;
    if (captures) *captures = s->n_captures;
}

int bn_cuda_state_tap_buffer_read(bn_cuda_state *s, float *dst, size_t n_floats, char *err, size_t errlen) {
    if (n_floats > s->dev_tap_floats)
        return bn_err(err, errlen, "tap buffer read of %zu floats (it holds %zu)", n_floats, s->dev_tap_floats);
    if (n_floats == 0) return 0;
    BN_CUDA_TRY(cudaMemcpyAsync(dst, s->dev_taps, n_floats * sizeof(float), cudaMemcpyDeviceToHost, s->stream), err,
                errlen);
    BN_CUDA_TRY(cudaStreamSynchronize(s->stream), err, errlen);
    return 0;
}

float *bn_cuda_state_tap_buffer(bn_cuda_state *s, int n_taps, int rows, char *err, size_t errlen) {
    if (n_taps < 1 || rows < 1) return bn_err(err, errlen, "tap buffer of %d taps x %d rows", n_taps, rows), nullptr;
    const size_t floats = (size_t)n_taps * (size_t)rows * (size_t)s->cm->cfg.n_embd;
    if (floats <= s->dev_tap_floats) return s->dev_taps;
    drop_graph(&s->graphs[STEP_TAPS]); // they write into the buffer freed here
    for (int n = 0; n <= BN_CU_MMVQ_MAX_NB; n++) drop_graph(&s->verify[n]);
    if (s->dev_taps) cudaFree(s->dev_taps);
    s->dev_taps = NULL, s->dev_tap_floats = 0;
    if (cudaMalloc((void **)&s->dev_taps, floats * sizeof(float)) != cudaSuccess) {
        cudaGetLastError();
        s->dev_taps = NULL;
        return bn_err(err, errlen, "CUDA: out of device memory for a %d-row tap buffer", rows), nullptr;
    }
    s->dev_tap_floats = floats;
    return s->dev_taps;
}


bn_cuda_snapshot *bn_cuda_snapshot_new(const bn_cuda_state *s, char *err, size_t errlen) {
    bn_cuda_snapshot *snap = (bn_cuda_snapshot *)xcalloc(1, sizeof *snap);
    snap->n = s->n_recurrent;
    if (cudaMalloc((void **)&snap->data, max_sz(snap->n, 1) * sizeof(float)) != cudaSuccess) {
        cudaGetLastError();
        free(snap);
        bn_err(err, errlen, "CUDA: out of device memory for a snapshot");
        return NULL;
    }
    // on the state's stream (non-blocking: a legacy-stream cudaMemset would not be ordered before its copies)
    cudaError_t e = cudaMemsetAsync(snap->data, 0, max_sz(snap->n, 1) * sizeof(float), s->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cudaFree(snap->data);
        free(snap);
        bn_err(err, errlen, "CUDA error: %s clearing a snapshot", cudaGetErrorString(e));
        return NULL;
    }
    return snap;
}

int bn_cuda_state_snapshot_into(const bn_cuda_state *s, bn_cuda_snapshot *snap, char *err, size_t errlen) {
    if (snap->n != s->n_recurrent) return bn_err(err, errlen, "snapshot belongs to another model");
    BN_CUDA_TRY(cudaMemcpyAsync(snap->data, s->recurrent, s->n_recurrent * sizeof(float), cudaMemcpyDeviceToDevice,
                                s->stream), err, errlen);
    BN_CUDA_TRY(cudaStreamSynchronize(s->stream), err, errlen);
    snap->pos = s->pos;
    return 0;
}

int bn_cuda_state_restore(bn_cuda_state *s, const bn_cuda_snapshot *snap, char *err, size_t errlen) {
    if (snap->n != s->n_recurrent) return bn_err(err, errlen, "snapshot belongs to another model");
    s->h_io[2] = snap->pos;
    BN_CUDA_TRY(cudaMemcpyAsync(s->recurrent, snap->data, s->n_recurrent * sizeof(float), cudaMemcpyDeviceToDevice,
                                s->stream), err, errlen);
    BN_CUDA_TRY(cudaMemcpyAsync(s->d_pos, &s->h_io[2], sizeof(int), cudaMemcpyHostToDevice, s->stream), err, errlen);
    BN_CUDA_TRY(cudaStreamSynchronize(s->stream), err, errlen);
    s->pos = snap->pos;
    return 0;
}

int bn_cuda_snapshot_pos(const bn_cuda_snapshot *snap) { return snap->pos; }

void bn_cuda_snapshot_free(bn_cuda_snapshot *snap) {
    if (!snap) return;
    cudaFree(snap->data);
    free(snap);
}

bn_snapshot *bn_cuda_host_snapshot_new(const bn_cuda_state *s) {
    bn_snapshot *snap = (bn_snapshot *)xcalloc(1, sizeof *snap + s->n_recurrent * sizeof(float));
    snap->n = s->n_recurrent;
    return snap;
}


int bn_cuda_snapshot_to_host(const bn_cuda_snapshot *snap, bn_snapshot *dst, char *err, size_t errlen) {
    if (dst->n != snap->n) return bn_err(err, errlen, "host snapshot of another model");
    BN_CUDA_TRY(cudaMemcpy(dst->data, snap->data, snap->n * sizeof(float), cudaMemcpyDeviceToHost), err, errlen);
    dst->pos = snap->pos;
    return 0;
}
