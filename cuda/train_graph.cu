// cuda/train_graph.cu — the training forward and backward of train/graph.c in LoRA mode (last-position logits, adapter
// gradients) on the device, composed of the trainer's device ops (cuda/cuda_fwd_ops.h, cuda/cuda_bwd_ops.h,
// cuda/cuda_bwd_seq.h) function by function as graph.c composes the CPU ones: the input of every layer is kept (as
// bf16 with bf16 GEMMs), each layer is recomputed from it during the backward, the FFN block runs over spans of at
// most ffn_chunk tokens, layer 0 skips the mixer's input gradient and the LM head runs on the last position only.
// Weights stay in their stored types; the linear ops make a weight of another type than F32 fp32 (bit-identically to
// the CPU), or with bf16 GEMMs every weight bf16, a chunk of rows at a time in their workspace. This file holds the
// trainer (its weights, adapter and buffers), the passes over the whole model and the head; one layer's forward and
// backward are cuda/train_layer.cu's (cuda/train_impl.cuh). Registered as the bn_train_device backend of
// train/device.h from a constructor, as cuda/engine.cu registers its engine device.
#include "cuda/train_impl.cuh"

using namespace bn_train;

struct bn_cuda_train_graph {
    bn_cuda_trainer *t;
    bool adapter;
    int T;
    int *tokens; // device {T}
    float *x;    // device: the input {H, T} of each layer (unless x16 holds them), then the final residual of the last
                 // position {H} (all: of every position {H, T})
    uint16_t *x16; // device, with kept_bf16: the input {H, T} of each layer as bf16 (NULL: they are in x)
    bool all;    // every position's logits (the tether's forward), not only the last one's
    float *hx;   // all: device {H, T}, the final norm's output (the head's input)
    float *zbuf; // all: device {V, T}, the logits, then their gradients
    float *hdx;  // all: device {H, T}, the gradient of the head's input
};

namespace bn_train {

// zero: p[0..n) = 0 on the trainer's stream.
int zero(const run *r, float *p, size_t n) {
    BN_CUDA_TRY(cudaMemsetAsync(p, 0, n * sizeof(float), r->t->stream), r->err, r->errlen);
    return 0;
}

// copy: dst[0..n) = src[0..n), device to device on the trainer's stream.
int copy(const run *r, float *dst, const float *src, size_t n) {
    BN_CUDA_TRY(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, r->t->stream), r->err,
                r->errlen);
    return 0;
}

// dev_weight: the device copy of weight w of the trainer's model.
const void *dev_weight(const bn_cuda_trainer *t, const bn_weight *w) {
    const bn_weights *mw = &t->m->w;
    if (w == &mw->token_embd) return t->embd;
    if (w == &mw->output_norm) return t->out_norm;
    if (w == &mw->output) return t->out;
    return t->layer_w[w - (const bn_weight *)mw->layers];
}

// F: the device fp32 data of a vector weight (checked F32 at open).
const float *F(const run *r, const bn_weight *w) { return (const float *)dev_weight(r->t, w); }

} // namespace bn_train

namespace {

// ---- device memory -------------------------------------------------------------------------------------------------
// dev_alloc: n bytes of device memory into *p; 0 or -1 (err).
int dev_alloc(void **p, size_t n, char *err, size_t errlen) {
    *p = NULL;
    BN_CUDA_TRY(cudaMalloc(p, n ? n : 1), err, errlen);
    return 0;
}

// dev_free: frees device memory (NULL is fine).
void dev_free(void *p) {
    if (p) cudaFree(p);
}

// weight_rows: rows of a weight (ne of absent dimensions may be 0 or 1).
int64_t weight_rows(const bn_weight *w) {
    int64_t n = 1;
    for (int d = 1; d < 4; d++) n *= w->ne[d] > 0 ? w->ne[d] : 1;
    return n;
}

// weight_bytes: stored bytes of a weight.
size_t weight_bytes(const bn_weight *w) { return bn_row_size(w->type, w->ne[0]) * (size_t)weight_rows(w); }

// upload_weight: *dev = a device copy of w's stored bytes; 0 or -1 (err).
int upload_weight(const bn_weight *w, void **dev, char *err, size_t errlen) {
    const size_t n = weight_bytes(w);
    if (dev_alloc(dev, n, err, errlen)) return -1;
    BN_CUDA_TRY(cudaMemcpy(*dev, w->data, n, cudaMemcpyHostToDevice), err, errlen);
    return 0;
}


// ---- the trainer's buffers ----------------------------------------------------------------------------------------
// take: the next n floats (256-byte aligned) of an arena at base (NULL: only counted); *off advances.
float *take(float *base, size_t *off, size_t n) {
    float *p = base ? base + *off : NULL;
    *off += (n + 63) / 64 * 64;
    return p;
}

// bufs_carve: lays a layer's buffers for T tokens out in base (NULL: only counted): the FFN block's for spans of
// min(T, chunk) tokens, x_in only when the layer inputs are kept as bf16 (kept16); returns the floats they take.
size_t bufs_carve(layer_bufs *b, float *base, const bn_config *cf, int T, int r, int chunk, bool kept16) {
    const size_t t = (size_t)T, H = (size_t)cf->n_embd * t, c = (size_t)(T < chunk ? T : chunk);
    const size_t Hc = (size_t)cf->n_embd * c, Fc = (size_t)cf->n_ff * c;
    const bool qwen35 = cf->arch == BN_ARCH_QWEN35;
    const gdn_dims g = gdn_dims_of(cf);
    const size_t C = qwen35 ? (size_t)g.C * t : 0, Qd = qwen35 ? (size_t)g.Hk * g.dk * t : 0;
    const size_t Vd = qwen35 ? (size_t)g.Hv * g.dk * t : 0, Hv = qwen35 ? (size_t)g.Hv * t : 0;
    const attn_dims d = attn_dims_of(cf);
    const size_t nq = (size_t)d.nq * t, nk = (size_t)d.kv_dim * t, qs = (size_t)d.q_stride * t;
    size_t off = 0;
    for (float **p : {&b->n, &b->mo, &b->dx, &b->dx_prev}) *p = take(base, &off, H);
    b->h = b->dn = b->mo;
    b->x_in = kept16 ? take(base, &off, H) : NULL;
    for (float **p : {&b->mm, &b->dmm}) *p = take(base, &off, Hc);
    for (float **p : {&b->ga, &b->up, &b->act, &b->dact, &b->dga, &b->dup}) *p = take(base, &off, Fc);
    // A layer is either Gated DeltaNet or attention: the two kinds' buffers share the rest of the arena.
    const size_t kinds = off;
    for (float **p : {&b->mix, &b->dconv, &b->dmix}) *p = take(base, &off, C);
    b->conv = b->dconv;
    for (float **p : {&b->q, &b->k, &b->qn, &b->kn, &b->dqn, &b->dkn, &b->dqs}) *p = take(base, &off, Qd);
    for (float **p : {&b->z, &b->v, &b->o, &b->y, &b->dz, &b->dvv}) *p = take(base, &off, Vd);
    for (float **p : {&b->dy, &b->d_o}) *p = take(base, &off, Vd > Qd ? Vd : Qd);
    b->dk = b->dy, b->dq = b->d_o;
    for (float **p : {&b->b, &b->a, &b->beta, &b->g, &b->dg, &b->dbeta, &b->db, &b->da}) *p = take(base, &off, Hv);
    const size_t gdn_end = off;
    off = kinds;
    for (float **p : {&b->qr, &b->gate, &b->qa, &b->att, &b->og, &b->dog, &b->datt, &b->dgate, &b->dqa, &b->dqrot,
                      &b->dqr})
        *p = take(base, &off, nq);
    for (float **p : {&b->kr, &b->vr, &b->ka, &b->dka, &b->dvr, &b->dkrot, &b->dkr}) *p = take(base, &off, nk);
    b->qg = b->dqg = take(base, &off, qs);
    if (gdn_end > off) off = gdn_end;
    for (int i = 0; i < BN_LORA_N_TARGETS; i++) b->ax[i] = take(base, &off, (size_t)(r > 0 ? r : 1) * t);
    return off;
}

// layer_linears: the 2-D weights of layer lw the linears read (absent ones have no data); returns their count.
int layer_linears(const bn_layer_weights *lw, const bn_weight **out) {
    const bn_weight *all[] = {&lw->attn_q, &lw->attn_k, &lw->attn_v, &lw->attn_output, &lw->ffn_gate,
                              &lw->ffn_up, &lw->ffn_down, &lw->attn_qkv, &lw->attn_gate, &lw->ssm_beta,
                              &lw->ssm_alpha, &lw->ssm_out};
    int n = 0;
    for (const bn_weight *w : all)
        if (w->data) out[n++] = w;
    return n;
}

// is_ffn: whether W is one of the FFN block's weights of layer lw (run over spans of ffn_chunk tokens).
bool is_ffn(const bn_layer_weights *lw, const bn_weight *W) {
    return W == &lw->ffn_gate || W == &lw->ffn_up || W == &lw->ffn_down;
}

// lin_ws: workspace floats of a linear's forward and backward over W for T tokens, in layer `layer` (−1: the head).
size_t lin_ws(const bn_cuda_trainer *t, int layer, const bn_weight *W, int T) {
    const int type = W->type;
    const bool bf16 = gemm16(t, layer);
    const size_t f = bn_cuda_linear_lora_fwd_workspace_floats(bf16, type, W->ne[0], W->ne[1], t->r, T);
    const size_t b = bn_cuda_linear_lora_bwd_workspace_floats(bf16, type, W->ne[0], W->ne[1], t->r, T);
    return f > b ? f : b;
}

// ws_need: workspace floats for T tokens: the largest of every linear's (the FFN block's over one span), the
// attention's and the delta rule's.
size_t ws_need(const bn_cuda_trainer *t, int T) {
    const bn_config *cf = &t->m->cfg;
    size_t need = lin_ws(t, -1, &t->m->w.output, T), n; // the head: one position, or T in an all-position graph
    const int span_len = T < t->ffn_chunk ? T : t->ffn_chunk;
    for (int il = 0; il < cf->n_layer; il++) {
        const bn_weight *lins[12];
        const int k = layer_linears(&t->m->w.layers[il], lins);
        for (int i = 0; i < k; i++)
            if ((n = lin_ws(t, il, lins[i], is_ffn(&t->m->w.layers[il], lins[i]) ? span_len : T)) > need) need = n;
        n = is_gdn(cf, il) ? bn_cuda_gdn_bwd_workspace_floats(T, cf->ssm_dt_rank, cf->ssm_d_state, cf->ssm_d_state,
                                                              bn_train_gdn_ckpt(T))
                           : bn_cuda_attn_workspace_floats(T, cf->n_head, cf->n_head_kv);
        if (n > need) need = n;
    }
    return need;
}

// ensure_capacity: the trainer's per-length buffers hold sequences of T tokens; 0 or -1 (err).
int ensure_capacity(bn_cuda_trainer *t, int T, char *err, size_t errlen) {
    if (T <= t->T_cap) return 0;
    BN_CUDA_TRY(cudaStreamSynchronize(t->stream), err, errlen);
    dev_free(t->arena);
    dev_free(t->ws);
    t->arena = t->ws = NULL;
    t->T_cap = 0;
    const size_t floats = bufs_carve(&t->b, NULL, &t->m->cfg, T, t->r, t->ffn_chunk, t->kept_bf16);
    t->ws_floats = ws_need(t, T);
    if (dev_alloc((void **)&t->arena, floats * sizeof(float), err, errlen) ||
        dev_alloc((void **)&t->ws, (t->ws_floats ? t->ws_floats : 1) * sizeof(float), err, errlen))
        return -1;
    bufs_carve(&t->b, t->arena, &t->m->cfg, T, t->r, t->ffn_chunk, t->kept_bf16);
    t->T_cap = T;
    return 0;
}

// ---- opening: checks, weights, adapter ----------------------------------------------------------------------------
// check_model: what train/graph.c trains (architecture; norms and small tensors F32) and the device kernels' limits.
int check_model(const bn_model *m, char *err, size_t errlen) {
    const bn_config *cf = &m->cfg;
    if (cf->arch != BN_ARCH_QWEN35 && cf->arch != BN_ARCH_QWEN3 && cf->arch != BN_ARCH_LLAMA &&
        cf->arch != BN_ARCH_QWEN2)
        return bn_err(err, errlen, "device training: unsupported architecture %d", cf->arch);
    if (m->w.output_norm.type != BN_CU_F32) return bn_err(err, errlen, "device training: output_norm must be f32");
    if (cf->arch == BN_ARCH_QWEN35 && (cf->ssm_d_state > 256 || cf->ssm_conv_kernel > 8))
        return bn_err(err, errlen, "device training: GDN d_state %d / conv kernel %d over the device's 256 / 8",
                      cf->ssm_d_state, cf->ssm_conv_kernel);
    for (int il = 0; il < cf->n_layer; il++) {
        const bn_layer_weights *lw = &m->w.layers[il];
        const bn_weight *vecs[] = {&lw->attn_norm, &lw->post_attention_norm, &lw->attn_q_norm, &lw->attn_k_norm,
                                   &lw->attn_q_bias, &lw->attn_k_bias, &lw->attn_v_bias, &lw->ssm_conv1d,
                                   &lw->ssm_dt, &lw->ssm_a, &lw->ssm_norm};
        for (const bn_weight *v : vecs)
            if (v->data && v->type != BN_CU_F32)
                return bn_err(err, errlen, "device training: %s must be f32 (is %s)", v->name ? v->name : "vector",
                              bn_type_name(v->type));
    }
    return 0;
}

// check_adapter: what the device path does not do: dropout.
int check_adapter(const bn_lora *l, char *err, size_t errlen) {
    if (l && l->dropout > 0)
        return bn_err(err, errlen, "device training: LoRA dropout %g is not supported (use 0)", (double)l->dropout);
    return 0;
}

// upload_weights: every weight of m on the device in its stored type; 0 or -1.
int upload_weights(bn_cuda_trainer *t, char *err, size_t errlen) {
    const bn_model *m = t->m;
    const int L = m->cfg.n_layer;
    t->layer_w = (void **)xcalloc((size_t)L * t->per, sizeof(void *));
    for (int il = 0; il < L; il++) {
        const bn_weight *w = (const bn_weight *)&m->w.layers[il];
        for (int i = 0; i < t->per; i++)
            if (w[i].data && upload_weight(&w[i], &t->layer_w[il * t->per + i], err, errlen)) return -1;
    }
    if (upload_weight(&m->w.token_embd, &t->embd, err, errlen) ||
        upload_weight(&m->w.output_norm, &t->out_norm, err, errlen))
        return -1;
    const bn_weight *out = &m->w.output;
    if (out->data == m->w.token_embd.data) t->out = t->embd;
    else if (upload_weight(out, &t->out, err, errlen)) return -1;
    return 0;
}

// copy_layout: the adapter's layout (rank, scale, (layer, target) → tensor, offsets) and its device arrays.
int copy_layout(bn_cuda_trainer *t, const bn_lora *l, char *err, size_t errlen) {
    const int L = t->m->cfg.n_layer;
    t->index = (int *)xmalloc(sizeof(int) * (size_t)(L + 1) * BN_LORA_N_TARGETS);
    for (int i = 0; i < (L + 1) * BN_LORA_N_TARGETS; i++) t->index[i] = -1;
    if (!l) return 0;
    t->ste = l->ste;
    t->r = l->r;
    t->scale = bn_lora_scale(l);
    t->n_params = l->n_params;
    t->n_tensors = l->n_tensors;
    t->off_a = (int64_t *)xmalloc(sizeof(int64_t) * (size_t)(l->n_tensors + 1));
    t->off_b = (int64_t *)xmalloc(sizeof(int64_t) * (size_t)(l->n_tensors + 1));
    for (int i = 0; i < l->n_tensors; i++) {
        const bn_lora_tensor *lt = &l->t[i];
        const int il = lt->layer < 0 ? L : lt->layer;
        if (il > L) return bn_err(err, errlen, "device training: adapter tensor %s of layer %d", lt->name, lt->layer);
        t->index[il * BN_LORA_N_TARGETS + target_slot(lt->target)] = i;
        t->off_a[i] = lt->off_a;
        t->off_b[i] = lt->off_b;
    }
    const size_t n = (size_t)(l->n_params > 0 ? l->n_params : 1) * sizeof(float);
    if (dev_alloc((void **)&t->params, n, err, errlen) || dev_alloc((void **)&t->grads, n, err, errlen)) return -1;
    BN_CUDA_TRY(cudaMemset(t->grads, 0, n), err, errlen);
    return bn_cuda_trainer_load_params(t, l, err, errlen);
}

// open_runtime: the device, a stream, the cuBLAS handle and the head's buffers; 0 or -1.
int open_runtime(bn_cuda_trainer *t, int device, char *err, size_t errlen) {
    BN_CUDA_TRY(cudaSetDevice(device), err, errlen);
    t->device = device;
    BN_CUDA_TRY(cudaStreamCreateWithFlags(&t->stream, cudaStreamNonBlocking), err, errlen);
    t->blas = bn_cuda_blas_new(err, errlen);
    if (!t->blas) return -1;
    const size_t H = (size_t)t->m->cfg.n_embd, V = (size_t)t->m->cfg.n_vocab;
    return dev_alloc((void **)&t->head_x, H * sizeof(float), err, errlen) ||
                   dev_alloc((void **)&t->head_dx, H * sizeof(float), err, errlen) ||
                   dev_alloc((void **)&t->logits, V * sizeof(float), err, errlen) ||
                   dev_alloc((void **)&t->dlogits, V * sizeof(float), err, errlen)
               ? -1 : 0;
}

// ---- the whole model ----------------------------------------------------------------------------------------------
// graph_x_in: the saved fp32 input {H, T} of layer il (a graph without x16).
float *graph_x_in(const bn_cuda_train_graph *g, int il) {
    return g->x + (size_t)il * g->t->m->cfg.n_embd * g->T;
}

// graph_x16_in: the saved bf16 input {H, T} of layer il (a graph with x16).
uint16_t *graph_x16_in(const bn_cuda_train_graph *g, int il) {
    return g->x16 + (size_t)il * g->t->m->cfg.n_embd * g->T;
}

// graph_x_last: the final residual {H} of the last position ({H, T} of every position in an all-position graph).
float *graph_x_last(const bn_cuda_train_graph *g) { return g->x16 ? g->x : graph_x_in(g, g->t->m->cfg.n_layer); }

// check_tokens: a non-empty sequence of ids in the vocabulary, within the attention kernels' length.
int check_tokens(const bn_cuda_trainer *t, const int32_t *tokens, int n, char *err, size_t errlen) {
    const bn_config *cf = &t->m->cfg;
    if (n <= 0) return bn_err(err, errlen, "device training: empty token sequence");
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= cf->n_vocab)
            return bn_err(err, errlen, "device training: token %d out of range", tokens[i]);
    bool attn = false;
    for (int il = 0; il < cf->n_layer; il++) attn = attn || !is_gdn(cf, il);
    if (attn && n > bn_cuda_attn_max_T())
        return bn_err(err, errlen, "device training: %d tokens over the attention kernels' %d", n,
                      bn_cuda_attn_max_T());
    return 0;
}

// graph_head_alloc: an all-position graph's head buffers (hx, zbuf, hdx); 0 or -1 (err).
int graph_head_alloc(bn_cuda_train_graph *g, char *err, size_t errlen) {
    if (!g->all) return 0;
    const size_t H = (size_t)g->t->m->cfg.n_embd, V = (size_t)g->t->m->cfg.n_vocab, T = (size_t)g->T;
    return dev_alloc((void **)&g->hx, sizeof(float) * H * T, err, errlen) ||
           dev_alloc((void **)&g->zbuf, sizeof(float) * V * T, err, errlen) ||
           dev_alloc((void **)&g->hdx, sizeof(float) * H * T, err, errlen);
}

// graph_new: a graph of T tokens (device copies of the tokens, room for the layer inputs; all: every position's
// logits); NULL (err).
bn_cuda_train_graph *graph_new(bn_cuda_trainer *t, bool adapter, const int32_t *tokens, int T, bool all, char *err,
                               size_t errlen) {
    bn_cuda_train_graph *g = (bn_cuda_train_graph *)xcalloc(1, sizeof *g);
    g->t = t;
    g->adapter = adapter;
    g->T = T;
    g->all = all;
    const size_t H = (size_t)t->m->cfg.n_embd, L = (size_t)t->m->cfg.n_layer, LHT = L * H * (size_t)T;
    const size_t x_floats = (t->kept_bf16 ? 0 : LHT) + H * (all ? (size_t)T : 1);
    if (dev_alloc((void **)&g->tokens, sizeof(int) * (size_t)T, err, errlen) ||
        (t->kept_bf16 && dev_alloc((void **)&g->x16, sizeof(uint16_t) * LHT, err, errlen)) ||
        dev_alloc((void **)&g->x, sizeof(float) * x_floats, err, errlen) ||
        graph_head_alloc(g, err, errlen) ||
        cudaMemcpyAsync(g->tokens, tokens, sizeof(int) * (size_t)T, cudaMemcpyHostToDevice, t->stream) != cudaSuccess) {
        if (g->tokens && g->x) bn_err(err, errlen, "device training: cannot upload the tokens");
        bn_cuda_train_graph_free(g);
        return NULL;
    }
    return g;
}

// forward_layers: the embedding rows, then every layer, each one's input kept in g (as bf16 with x16: the layers then
// run on fp32 residuals in the arena's dx and dx_prev, each rounded only in its kept copy; the last layer's output
// goes to one of them either way); the last position's final residual (every position's in an all-position graph).
int forward_layers(const run *r, bn_cuda_train_graph *g) {
    const bn_model *m = r->t->m;
    layer_bufs *b = &r->t->b;
    const int L = m->cfg.n_layer, H = m->cfg.n_embd;
    const int64_t HT = (int64_t)H * r->T;
    float *x = g->x16 ? b->dx : graph_x_in(g, 0);
    if (bn_cuda_get_rows_f32(m->w.token_embd.type, r->t->embd, H, m->w.token_embd.ne[1], g->tokens, r->T, x,
                             r->t->stream, r->err, r->errlen))
        return -1;
    for (int il = 0; il < L; il++) {
        if (g->x16 && bn_cuda_to_bf16(x, HT, graph_x16_in(g, il), r->t->stream, r->err, r->errlen)) return -1;
        float *x_out = il + 1 < L && !g->x16 ? graph_x_in(g, il + 1) : x == b->dx ? b->dx_prev : b->dx;
        if (layer_fwd(r, il, x, x_out)) return -1;
        x = x_out;
    }
    if (g->all) return copy(r, graph_x_last(g), x, (size_t)HT);
    return copy(r, graph_x_last(g), x + (size_t)(r->T - 1) * H, (size_t)H);
}

// layer_input: the fp32 input {H, T} of layer il for its recomputation: the kept copy, or the bf16 one widened into
// the arena's x_in; NULL (err).
const float *layer_input(const run *r, const bn_cuda_train_graph *g, int il) {
    if (!g->x16) return graph_x_in(g, il);
    float *x = r->t->b.x_in;
    const int64_t HT = (int64_t)r->t->m->cfg.n_embd * r->T;
    return bn_cuda_from_bf16(graph_x16_in(g, il), HT, x, r->t->stream, r->err, r->errlen) ? NULL : x;
}

// head_pass: where graph g's LM head works: its positions (the last one, or every one in an all-position graph), the
// run over them, and its buffers: the normed input, the logits, their gradient and the input's gradient (the
// trainer's one-position buffers, or the graph's own).
struct head_pass {
    run h;
    float *hx, *z, *dz, *hdx;
};
head_pass head_of(const run *r, const bn_cuda_train_graph *g) {
    bn_cuda_trainer *t = r->t;
    head_pass p = {*r, t->head_x, t->logits, t->dlogits, t->head_dx};
    if (g->all) p = {*r, g->hx, g->zbuf, g->zbuf, g->hdx};
    else p.h.T = 1;
    return p;
}

// head_norm: p.hx = RMSNorm of the final residuals of the head's positions.
int head_norm(const head_pass &p, const bn_cuda_train_graph *g) {
    const bn_model *m = p.h.t->m;
    return bn_cuda_rmsnorm_fwd(graph_x_last(g), F(&p.h, &m->w.output_norm), m->cfg.n_embd, p.h.T, m->cfg.norm_eps,
                               p.hx, p.h.t->stream, p.h.err, p.h.errlen);
}

// head_fwd: host logits {V, positions} = output · RMSNorm(x) (+ the head's LoRA) at the head's positions.
int head_fwd(const run *r, const bn_cuda_train_graph *g, float *logits) {
    const head_pass p = head_of(r, g);
    bn_cuda_trainer *t = r->t;
    if (head_norm(p, g) || lin_fwd(&p.h, -1, BN_LORA_HEAD, &t->m->w.output, NULL, p.hx, p.z, NULL)) return -1;
    BN_CUDA_TRY(cudaMemcpyAsync(logits, p.z, sizeof(float) * (size_t)t->m->cfg.n_vocab * p.h.T,
                                cudaMemcpyDeviceToHost, t->stream), r->err, r->errlen);
    BN_CUDA_TRY(cudaStreamSynchronize(t->stream), r->err, r->errlen);
    return 0;
}

// head_bwd: dx {H, T} = the gradient of the residual stream from host dlogits {V, positions} (zero at the positions
// the head does not cover). The norm is recomputed: the one-position buffers are shared by the trainer's graphs.
int head_bwd(const run *r, const bn_cuda_train_graph *g, const float *dlogits, float *dx) {
    const head_pass p = head_of(r, g);
    bn_cuda_trainer *t = r->t;
    const bn_model *m = t->m;
    const int H = m->cfg.n_embd, cols = p.h.T;
    BN_CUDA_TRY(cudaMemcpyAsync(p.dz, dlogits, sizeof(float) * (size_t)m->cfg.n_vocab * cols, cudaMemcpyHostToDevice,
                                t->stream), r->err, r->errlen);
    return head_norm(p, g) || zero(r, p.hdx, (size_t)H * cols) ||
                   lin_bwd(&p.h, -1, BN_LORA_HEAD, &m->w.output, p.hx, NULL, p.dz, p.hdx) ||
                   zero(r, dx, (size_t)H * r->T) ||
                   bn_cuda_rmsnorm_bwd(graph_x_last(g), F(r, &m->w.output_norm), H, cols, m->cfg.norm_eps, p.hdx,
                                       dx + (size_t)(r->T - cols) * H, t->stream, r->err, r->errlen)
               ? -1 : 0;
}

// backward_layers: from the residual's gradient dx, each layer's mixer recomputed from its input and then the layer
// run backward (its FFN block recomputed span by span there).
int backward_layers(const run *r, const bn_cuda_train_graph *g) {
    layer_bufs *b = &r->t->b;
    float *dx = b->dx, *dx_prev = b->dx_prev;
    for (int il = r->t->m->cfg.n_layer - 1; il >= 0; il--) {
        const float *x_in = layer_input(r, g, il);
        if (!x_in || layer_mixer_fwd(r, il, x_in) || layer_bwd(r, il, x_in, dx, dx_prev)) return -1;
        float *tmp = dx;
        dx = dx_prev;
        dx_prev = tmp;
    }
    BN_CUDA_TRY(cudaStreamSynchronize(r->t->stream), r->err, r->errlen);
    return 0;
}

// ---- the bn_train_device backend ----------------------------------------------------------------------------------
void *device_open(const bn_model *m, const bn_lora *l, int device, const bn_train_device_opts *opts, char *err,
                  size_t errlen) {
    return bn_cuda_trainer_new(m, l, device, opts, err, errlen);
}
void device_close(void *ctx) { bn_cuda_trainer_free((bn_cuda_trainer *)ctx); }
int device_load_params(void *ctx, const bn_lora *l, char *err, size_t errlen) {
    return bn_cuda_trainer_load_params((bn_cuda_trainer *)ctx, l, err, errlen);
}
void *device_forward(void *ctx, bool use_adapter, const int32_t *tokens, int n, float *logits, char *err,
                     size_t errlen) {
    return bn_cuda_train_forward((bn_cuda_trainer *)ctx, use_adapter, tokens, n, logits, err, errlen);
}
void *device_forward_all(void *ctx, bool use_adapter, const int32_t *tokens, int n, float *logits, char *err,
                         size_t errlen) {
    return bn_cuda_train_forward_all((bn_cuda_trainer *)ctx, use_adapter, tokens, n, logits, err, errlen);
}
int device_backward(void *graph, const float *dlogits, char *err, size_t errlen) {
    return bn_cuda_train_backward((bn_cuda_train_graph *)graph, dlogits, err, errlen);
}
void device_graph_free(void *graph) { bn_cuda_train_graph_free((bn_cuda_train_graph *)graph); }
int device_take_grads(void *ctx, float *grads, char *err, size_t errlen) {
    return bn_cuda_trainer_take_grads((bn_cuda_trainer *)ctx, grads, err, errlen);
}
size_t device_mem_in_use(void *ctx) { return bn_cuda_trainer_mem_in_use((bn_cuda_trainer *)ctx); }
int device_mem_info(int device, size_t *free_bytes, size_t *total_bytes, char *err, size_t errlen) {
    return bn_cuda_train_mem_info(device, free_bytes, total_bytes, err, errlen);
}
void device_set_profile(void *ctx, bool on) {
    bn_cuda_trainer *t = (bn_cuda_trainer *)ctx;
    if (!t->prof) t->prof = (train_prof *)xcalloc(1, sizeof *t->prof);
    t->prof->on = on;
    t->prof->n = 0; // a window left open by a failed pass is dropped
}
int device_take_profile(void *ctx, double ms[BN_TRAIN_PARTS], char *err, size_t errlen) {
    bn_cuda_trainer *t = (bn_cuda_trainer *)ctx;
    for (int i = 0; i < BN_TRAIN_PARTS; i++) ms[i] = 0;
    if (!t->prof) return 0;
    if (prof_flush(t->prof, t->stream, err, errlen)) return -1;
    prof_take(t->prof, ms);
    return 0;
}

const bn_train_device cuda_train_device = {"CUDA",         bn_cuda_device_count, device_open,      device_close,
                                           device_load_params, device_forward,   device_backward,  device_graph_free,
                                           device_take_grads, device_mem_in_use, device_forward_all,
                                           device_mem_info,   device_set_profile, device_take_profile};

} // namespace

// The device backend of FTPO training, registered before main (the dependencies pull this object in: cuda/meson.build).
__attribute__((constructor)) static void cuda_train_device_register(void) {
    bn_train_device_register(&cuda_train_device);
}

extern "C" bn_cuda_trainer *bn_cuda_trainer_new(const bn_model *m, const bn_lora *l, int device,
                                                const bn_train_device_opts *opts, char *err, size_t errlen) {
    if (check_model(m, err, errlen) || check_adapter(l, err, errlen)) return NULL;
    if (opts && opts->gemm != BN_TRAIN_GEMM_BF16 && opts->gemm != BN_TRAIN_GEMM_F32) {
        bn_err(err, errlen, "device training: unknown base-weight GEMM %d", (int)opts->gemm);
        return NULL;
    }
    if (opts && opts->ffn_chunk < 0) {
        bn_err(err, errlen, "device training: FFN span of %d tokens (positive, or 0 for %d)", opts->ffn_chunk,
               BN_TRAIN_FFN_CHUNK);
        return NULL;
    }
    bn_cuda_trainer *t = (bn_cuda_trainer *)xcalloc(1, sizeof *t);
    t->m = m;
    t->gemm_bf16 = t->kept_bf16 = !opts || opts->gemm == BN_TRAIN_GEMM_BF16;
    t->ffn_chunk = opts && opts->ffn_chunk > 0 ? opts->ffn_chunk : BN_TRAIN_FFN_CHUNK;
    t->per = (int)(sizeof(bn_layer_weights) / sizeof(bn_weight));
    if (open_runtime(t, device, err, errlen) || upload_weights(t, err, errlen) || copy_layout(t, l, err, errlen)) {
        bn_cuda_trainer_free(t);
        return NULL;
    }
    return t;
}

extern "C" void bn_cuda_trainer_free(bn_cuda_trainer *t) {
    if (!t) return;
    if (t->stream) cudaStreamSynchronize(t->stream);
    if (t->layer_w)
        for (int i = 0; i < t->m->cfg.n_layer * t->per; i++) dev_free(t->layer_w[i]);
    free(t->layer_w);
    if (t->out != t->embd) dev_free(t->out);
    for (void *p : {t->embd, t->out_norm, (void *)t->params, (void *)t->grads, (void *)t->arena,
                    (void *)t->ws, (void *)t->head_x, (void *)t->head_dx, (void *)t->logits, (void *)t->dlogits})
        dev_free(p);
    free(t->index);
    free(t->off_a);
    free(t->off_b);
    bn_cuda_blas_free(t->blas);
    if (t->prof) prof_free(t->prof);
    free(t->prof);
    if (t->stream) cudaStreamDestroy(t->stream);
    free(t);
}

// adapted_weight: the weight of t's model the adapter's tensor lt adapts.
static const bn_weight *adapted_weight(const bn_cuda_trainer *t, const bn_lora_tensor *lt) {
    return lt->layer < 0 ? &t->m->w.output : bn_lora_layer_weight(&t->m->w.layers[lt->layer], lt->target);
}

// upload_adapted: the adapted weights of t's model (W_eff, their host buffers read again) over their device copies,
// the same types and shapes; 0 or -1 (err).
static int upload_adapted(bn_cuda_trainer *t, const bn_lora *l, char *err, size_t errlen) {
    for (int i = 0; i < l->n_tensors; i++) {
        const bn_weight *w = adapted_weight(t, &l->t[i]);
        BN_CUDA_TRY(cudaMemcpyAsync((void *)dev_weight(t, w), w->data, weight_bytes(w), cudaMemcpyHostToDevice,
                                    t->stream), err, errlen);
    }
    return 0;
}

extern "C" int bn_cuda_trainer_load_params(bn_cuda_trainer *t, const bn_lora *l, char *err, size_t errlen) {
    if (!l || !t->params || l->n_params != t->n_params || l->n_tensors != t->n_tensors || l->r != t->r)
        return bn_err(err, errlen, "device training: the adapter's layout differs from the one opened");
    for (int i = 0; i < l->n_tensors; i++)
        if (l->t[i].off_a != t->off_a[i] || l->t[i].off_b != t->off_b[i])
            return bn_err(err, errlen, "device training: the adapter's layout differs from the one opened");
    BN_CUDA_TRY(cudaMemcpyAsync(t->params, l->params, sizeof(float) * (size_t)l->n_params, cudaMemcpyHostToDevice,
                                t->stream), err, errlen);
    if (t->ste && upload_adapted(t, l, err, errlen)) return -1;
    BN_CUDA_TRY(cudaStreamSynchronize(t->stream), err, errlen);
    return 0;
}

// pass_end: the end of a forward or backward pass that returned rc: when the trainer times its parts, the pass's marks
// summed, or dropped after a failure; rc, or -1 when the sums fail (err).
static int pass_end(bn_cuda_trainer *t, int rc, char *err, size_t errlen) {
    if (!t->prof) return rc;
    if (rc == 0 && prof_flush(t->prof, t->stream, err, errlen) == 0) return 0;
    t->prof->n = 0; // a failed pass's marks are not timed
    return -1;
}

// train_forward: the forward of tokens[0..n) into host logits (all: every position's {V, n}, else the last's {V});
// the graph, or NULL (err).
static bn_cuda_train_graph *train_forward(bn_cuda_trainer *t, bool use_adapter, bool all, const int32_t *tokens, int n,
                                          float *logits, char *err, size_t errlen) {
    if (check_tokens(t, tokens, n, err, errlen) || ensure_capacity(t, n, err, errlen)) return NULL;
    bn_cuda_train_graph *g = graph_new(t, use_adapter && t->params, tokens, n, all, err, errlen);
    if (!g) return NULL;
    const run r = {t, g->adapter, n, err, errlen};
    const int rc = mark(&r, BN_TRAIN_PART_OTHER) || forward_layers(&r, g) || head_fwd(&r, g, logits) ? -1 : 0;
    if (pass_end(t, rc, err, errlen)) {
        cudaStreamSynchronize(t->stream);
        bn_cuda_train_graph_free(g);
        return NULL;
    }
    return g;
}

extern "C" bn_cuda_train_graph *bn_cuda_train_forward(bn_cuda_trainer *t, bool use_adapter, const int32_t *tokens,
                                                      int n, float *logits, char *err, size_t errlen) {
    return train_forward(t, use_adapter, false, tokens, n, logits, err, errlen);
}

extern "C" bn_cuda_train_graph *bn_cuda_train_forward_all(bn_cuda_trainer *t, bool use_adapter,
                                                          const int32_t *tokens, int n, float *logits, char *err,
                                                          size_t errlen) {
    return train_forward(t, use_adapter, true, tokens, n, logits, err, errlen);
}

extern "C" int bn_cuda_train_backward(bn_cuda_train_graph *g, const float *dlogits, char *err, size_t errlen) {
    if (!g->adapter) return bn_err(err, errlen, "device training: the backward needs a forward with the adapter");
    bn_cuda_trainer *t = g->t;
    if (ensure_capacity(t, g->T, err, errlen)) return -1;
    const run r = {t, true, g->T, err, errlen};
    const int rc =
        mark(&r, BN_TRAIN_PART_OTHER) || head_bwd(&r, g, dlogits, t->b.dx) || backward_layers(&r, g) ? -1 : 0;
    return pass_end(t, rc, err, errlen);
}

extern "C" void bn_cuda_train_graph_free(bn_cuda_train_graph *g) {
    if (!g) return;
    cudaStreamSynchronize(g->t->stream);
    for (void *p : {(void *)g->tokens, (void *)g->x, (void *)g->x16, (void *)g->hx, (void *)g->zbuf, (void *)g->hdx})
        dev_free(p);
    free(g);
}

extern "C" int bn_cuda_trainer_take_grads(bn_cuda_trainer *t, float *grads, char *err, size_t errlen) {
    if (!t->grads || t->n_params == 0) return 0;
    const size_t n = (size_t)t->n_params;
    float *host = (float *)xmalloc(n * sizeof(float));
    cudaError_t e = cudaMemcpyAsync(host, t->grads, n * sizeof(float), cudaMemcpyDeviceToHost, t->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(t->stream);
    if (e == cudaSuccess) e = cudaMemsetAsync(t->grads, 0, n * sizeof(float), t->stream);
    if (e == cudaSuccess)
        for (size_t i = 0; i < n; i++) grads[i] += host[i];
    free(host);
    BN_CUDA_TRY(e, err, errlen);
    return 0;
}

extern "C" size_t bn_cuda_trainer_mem_in_use(bn_cuda_trainer *t) {
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaSetDevice(t->device) != cudaSuccess || cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return 0;
    return total_bytes > free_bytes ? total_bytes - free_bytes : 0;
}

extern "C" int bn_cuda_train_mem_info(int device, size_t *free_bytes, size_t *total_bytes, char *err, size_t errlen) {
    *free_bytes = *total_bytes = 0;
    BN_CUDA_TRY(cudaSetDevice(device), err, errlen);
    BN_CUDA_TRY(cudaMemGetInfo(free_bytes, total_bytes), err, errlen);
    return 0;
}
