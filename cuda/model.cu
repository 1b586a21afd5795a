// cuda/model.cu — the device model behind cuda/cuda_engine.h: the GGUF's weights uploaded once (matrices in their
// stored type, repacked where the decode kernels want it; norms, conv and SSM vectors as fp32), whole or from a later
// layer (partial offload). Mirrors core/model.c.
#include "cuda/forward_impl.cuh"

// upload_vector: a 1-/2-D parameter converted to fp32 on the device; *out NULL when absent.
static int upload_vector(bn_cuda_model *cm, const bn_weight *w, float **out, char *err, size_t errlen) {
    *out = NULL;
    if (!w->data) return 0;
    const int64_t n = w->ne[0] * w->ne[1] * w->ne[2] * w->ne[3];
    float *host = (float *)xmalloc(sizeof(float) * (size_t)n);
    int rc = bn_dequantize(w->type, w->data, host, n) != 0
                 ? bn_err(err, errlen, "CUDA: parameter %s has type %s, which cannot be converted to fp32", w->name,
                          bn_type_name(w->type))
                 : bn_cu_upload_floats(&cm->allocs, host, (size_t)n, out, err, errlen);
    free(host);
    return rc;
}

// check_shapes: the kernels' limits (head sizes, conv kernel); 0 or -1.
static int check_shapes(const bn_config *c, char *err, size_t errlen) {
    if (c->head_dim > BN_CU_MAX_HEAD_DIM)
        return bn_err(err, errlen, "CUDA: head_dim %d exceeds the kernels' limit %d", c->head_dim, BN_CU_MAX_HEAD_DIM);
    if (c->arch == BN_ARCH_QWEN35) {
        if (c->ssm_d_state > BN_CU_MAX_HEAD_DIM)
            return bn_err(err, errlen, "CUDA: ssm_d_state %d exceeds the kernels' limit %d", c->ssm_d_state,
                          BN_CU_MAX_HEAD_DIM);
        if (c->ssm_conv_kernel < 1 || c->ssm_conv_kernel > BN_CU_MAX_CONV_K)
            return bn_err(err, errlen, "CUDA: ssm_conv_kernel %d outside 1..%d", c->ssm_conv_kernel, BN_CU_MAX_CONV_K);
    }
    return 0;
}

// upload_layer: every weight of layer il; 0 or -1.
static int upload_layer(bn_cuda_model *cm, int il, char *err, size_t errlen) {
    const bn_layer_weights *lw = &cm->m->w.layers[il];
    cu_layer *L = &cm->layers[il];
    const struct {
        const bn_weight *w;
        bn_cu_weight *out;
    } mats[] = {{&lw->ffn_gate, &L->ffn_gate},   {&lw->ffn_up, &L->ffn_up},         {&lw->ffn_down, &L->ffn_down},
                {&lw->attn_q, &L->attn_q},       {&lw->attn_k, &L->attn_k},         {&lw->attn_v, &L->attn_v},
                {&lw->attn_output, &L->attn_output}, {&lw->attn_qkv, &L->attn_qkv}, {&lw->attn_gate, &L->attn_gate},
                {&lw->ssm_beta, &L->ssm_beta},   {&lw->ssm_alpha, &L->ssm_alpha},   {&lw->ssm_out, &L->ssm_out}};
    for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
        if (bn_cu_upload_weight(&cm->allocs, mats[i].w, mats[i].out, err, errlen) != 0) return -1;
    const struct {
        const bn_weight *w;
        float **out;
    } vecs[] = {{&lw->attn_norm, &L->attn_norm},     {&lw->post_attention_norm, &L->post_norm},
                {&lw->attn_q_norm, &L->q_norm},      {&lw->attn_k_norm, &L->k_norm},
                {&lw->attn_q_bias, &L->q_bias},      {&lw->attn_k_bias, &L->k_bias},
                {&lw->attn_v_bias, &L->v_bias},      {&lw->ssm_conv1d, &L->conv1d},
                {&lw->ssm_dt, &L->ssm_dt},           {&lw->ssm_a, &L->ssm_a},
                {&lw->ssm_norm, &L->ssm_norm}};
    for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; i++)
        if (upload_vector(cm, vecs[i].w, vecs[i].out, err, errlen) != 0) return -1;
    return 0;
}

bn_cuda_model *bn_cuda_model_upload(const bn_model *m, char *err, size_t errlen) {
    return bn_cuda_model_upload_from(m, 0, err, errlen);
}

bn_cuda_model *bn_cuda_model_upload_from(const bn_model *m, int first_layer, char *err, size_t errlen) {
    if (first_layer < 0 || first_layer >= m->cfg.n_layer)
        return bn_err(err, errlen, "CUDA: first layer %d outside 0..%d", first_layer, m->cfg.n_layer - 1), nullptr;
    if (!bn_cuda_available(err, errlen)) return NULL;
    if (check_shapes(&m->cfg, err, errlen) != 0) return NULL;
    bn_cuda_mma_in_use(); // the tensor-core self-check runs before anything is captured
    bn_cuda_model *cm = (bn_cuda_model *)xcalloc(1, sizeof *cm);
    cm->m = m;
    cm->cfg = m->cfg;
    cm->first_layer = first_layer;
    cm->layers = (cu_layer *)xcalloc((size_t)m->cfg.n_layer, sizeof(cu_layer));
    const bool embed = first_layer == 0; // the token embedding runs where layer 0 does
    int rc = embed ? bn_cu_upload_weight(&cm->allocs, &m->w.token_embd, &cm->token_embd, err, errlen) : 0;
    if (rc == 0 && embed && m->w.output.data == m->w.token_embd.data) cm->output = cm->token_embd; // tied head
    else if (rc == 0) rc = bn_cu_upload_weight(&cm->allocs, &m->w.output, &cm->output, err, errlen);
    if (rc == 0) rc = upload_vector(cm, &m->w.output_norm, &cm->output_norm, err, errlen);
    for (int il = first_layer; rc == 0 && il < m->cfg.n_layer; il++) rc = upload_layer(cm, il, err, errlen);
    if (rc == 0 && cudaDeviceSynchronize() != cudaSuccess)
        rc = bn_err(err, errlen, "CUDA error: %s after the upload", cudaGetErrorString(cudaGetLastError()));
    if (rc != 0) {
        bn_cuda_model_free(cm);
        return NULL;
    }
    return cm;
}

void bn_cuda_model_free(bn_cuda_model *cm) {
    if (!cm) return;
    bn_cu_allocs_free(&cm->allocs);
    bn_cuda_lora_free(cm->lora);
    free(cm->layers);
    free(cm);
}

size_t bn_cuda_model_bytes(const bn_cuda_model *cm) { return cm->allocs.bytes; }

int bn_cuda_available(char *err, size_t errlen) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
        cudaGetLastError();
        bn_err(err, errlen, "no CUDA device");
        return 0;
    }
    return 1;
}
