// cuda/lora.cu — LoRA adapters applied unmerged by the CUDA engine (docs/model.md §4.5), the device side of
// core/adapter.h: each adapted weight's A {n_in, r} and Bᵀ {n_out, r}ᵀ uploaded once per model, and after the
// weight's product the two kernels u = s_t·A·x_t, y_t += B·u_t for every column t, s_t = the column's user scale of
// the adapter (read from device memory: captured graphs replay with the scales of the moment) times alpha / r.
#include "cuda/forward_impl.cuh"
extern "C" {
#include "core/adapter.h"
}

#define A_THREADS 128 // threads per (column, rank row) dot of A
#define B_THREADS 256 // output rows per block of the B product

// a_kernel: u[t][k] = s_t · Σ_i A[k][i]·x[t][i] for block (t, k) = (blockIdx.x / r, blockIdx.x % r).
static __global__ void a_kernel(const float *A, const float *x, float *u, int64_t n_in, int r, const float *cols,
                                int adapter, float mult) {
    bn_cu_grid_begin();
    BN_SHARED(float, red, 32);
    const int t = (int)(blockIdx.x / (unsigned)r), k = (int)(blockIdx.x % (unsigned)r);
    const float *a = A + (size_t)k * n_in, *xr = x + (size_t)t * n_in;
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < n_in; i += blockDim.x) sum += a[i] * xr[i];
    sum = bn_block_sum(sum, red);
    if (threadIdx.x == 0) u[(size_t)t * r + k] = sum * cols[(size_t)t * BN_LORA_MAX + adapter] * mult;
}

// b_kernel: y[t][j] += Σ_k u[t][k]·Bᵀ[k][j] for column t = blockIdx.x / n_blocks, j of block blockIdx.x % n_blocks.
static __global__ void b_kernel(const float *Bt, const float *u, float *y, int64_t n_out, int r, int n_blocks) {
    bn_cu_grid_begin();
    const int t = (int)(blockIdx.x / (unsigned)n_blocks);
    const int64_t j = (int64_t)(blockIdx.x % (unsigned)n_blocks) * blockDim.x + threadIdx.x;
    if (j >= n_out) return;
    const float *ut = u + (size_t)t * r;
    float acc = 0.0f;
    for (int k = 0; k < r; k++) acc += ut[k] * Bt[(size_t)k * n_out + j];
    y[(size_t)t * n_out + j] += acc;
}

cudaError_t fw_lora(bn_cuda_state *s, const bn_cu_weight *w, const float *x, float *y, int nb) {
    const cu_lora *L = s->cm->lora;
    for (int i = 0; L && i < L->n_refs; i++) {
        const cu_lora_ref *ref = &L->refs[i];
        if (ref->w != w) continue;
        BN_LAUNCH(a_kernel, (unsigned)(nb * ref->r), A_THREADS, 0, s->stream, ref->A, x, s->d_lora_u, ref->n_in,
                  ref->r, s->lora_cur, ref->adapter, ref->mult);
        const int n_blocks = (int)((ref->n_out + B_THREADS - 1) / B_THREADS);
        BN_LAUNCH(b_kernel, (unsigned)(nb * n_blocks), B_THREADS, 0, s->stream, ref->Bt, s->d_lora_u, y, ref->n_out,
                  ref->r, n_blocks);
        const cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

// cu_weight_of: the device weight of cm that base tensor `name` names ("blk.N.<stem>.weight", "output.weight"), or
// NULL.
static const bn_cu_weight *cu_weight_of(const bn_cuda_model *cm, const char *name) {
    if (strcmp(name, "output.weight") == 0) return &cm->output;
    static const struct {
        const char *stem;
        size_t off;
    } stems[] = {
        {"attn_q", offsetof(cu_layer, attn_q)},       {"attn_k", offsetof(cu_layer, attn_k)},
        {"attn_v", offsetof(cu_layer, attn_v)},       {"attn_output", offsetof(cu_layer, attn_output)},
        {"ffn_gate", offsetof(cu_layer, ffn_gate)},   {"ffn_up", offsetof(cu_layer, ffn_up)},
        {"ffn_down", offsetof(cu_layer, ffn_down)},   {"attn_qkv", offsetof(cu_layer, attn_qkv)},
        {"attn_gate", offsetof(cu_layer, attn_gate)}, {"ssm_beta", offsetof(cu_layer, ssm_beta)},
        {"ssm_alpha", offsetof(cu_layer, ssm_alpha)}, {"ssm_out", offsetof(cu_layer, ssm_out)},
    };
    int il, nch = 0;
    char stem[64];
    if (sscanf(name, "blk.%d.%63[^.].weight%n", &il, stem, &nch) != 2 || name[nch] != '\0') return NULL;
    if (il < cm->first_layer || il >= cm->cfg.n_layer) return NULL;
    for (size_t k = 0; k < sizeof stems / sizeof stems[0]; k++)
        if (strcmp(stem, stems[k].stem) == 0)
            return (const bn_cu_weight *)((const char *)&cm->layers[il] + stems[k].off);
    return NULL;
}

int bn_cuda_model_set_lora(bn_cuda_model *cm, const bn_lora_set *set, char *err, size_t errlen) {
    const int n = bn_lora_set_count(set);
    if (n == 0) return 0;
    if (cm->first_layer != 0) return bn_err(err, errlen, "LoRA adapters need every layer on the device");
    cu_lora *L = (cu_lora *)xcalloc(1, sizeof *L);
    cm->lora = L;
    L->n_adapters = n;
    memcpy(L->scales, bn_lora_set_scales((bn_lora_set *)set), sizeof(float) * (size_t)n);
    for (int i = 0; i < n; i++) L->n_refs += bn_lora_set_adapter(set, i)->n_tensors;
    L->refs = (cu_lora_ref *)xcalloc((size_t)L->n_refs + 1, sizeof *L->refs);
    int k = 0;
    for (int i = 0; i < n; i++) {
        const bn_adapter *a = bn_lora_set_adapter(set, i);
        for (int j = 0; j < a->n_tensors; j++, k++) {
            const bn_adapter_tensor *t = &a->t[j];
            cu_lora_ref *ref = &L->refs[k];
            ref->w = cu_weight_of(cm, t->name);
            if (!ref->w) return bn_err(err, errlen, "%s: no device weight for %s", a->path ? a->path : "adapter", t->name);
            ref->adapter = i, ref->r = t->r, ref->n_in = t->n_in, ref->n_out = t->n_out;
            ref->mult = bn_adapter_tensor_scale(a, t, 1.0f);
            if (t->r > L->max_rank) L->max_rank = t->r;
            float *bt = (float *)xmalloc(sizeof(float) * (size_t)(t->n_out * t->r));
            for (int64_t o = 0; o < t->n_out; o++)
                for (int q = 0; q < t->r; q++) bt[(size_t)q * t->n_out + o] = t->B[(size_t)o * t->r + q];
            float *dA = NULL, *dB = NULL;
            int rc = bn_cu_upload_floats(&cm->allocs, t->A, (size_t)(t->n_in * t->r), &dA, err, errlen);
            if (rc == 0) rc = bn_cu_upload_floats(&cm->allocs, bt, (size_t)(t->n_out * t->r), &dB, err, errlen);
            free(bt);
            if (rc != 0) return -1;
            ref->A = dA, ref->Bt = dB;
        }
    }
    return cudaDeviceSynchronize() == cudaSuccess ? 0 : bn_err(err, errlen, "CUDA: adapter upload failed");
}

void bn_cuda_lora_free(cu_lora *L) {
    if (!L) return;
    free(L->refs);
    free(L);
}

int bn_cuda_state_set_lora(bn_cuda_state *s, const float *scales, int n, char *err, size_t errlen) {
    const cu_lora *L = s->cm->lora;
    if (!L || n != L->n_adapters)
        return bn_err(err, errlen, "%d LoRA scales for the engine's %d adapters", n, L ? L->n_adapters : 0);
    memcpy(s->h_lora, scales, sizeof(float) * (size_t)n);
    cudaStreamSynchronize(s->stream); // no queued pass reads d_lora_own any more
    float *rows = (float *)xcalloc((size_t)s->n_batch * BN_LORA_MAX, sizeof(float));
    for (int t = 0; t < s->n_batch; t++) memcpy(rows + (size_t)t * BN_LORA_MAX, scales, sizeof(float) * (size_t)n);
    const cudaError_t e = cudaMemcpy(s->d_lora_own, rows, sizeof(float) * (size_t)s->n_batch * BN_LORA_MAX,
                                     cudaMemcpyHostToDevice);
    free(rows);
    return e == cudaSuccess ? 0 : bn_err(err, errlen, "CUDA: %s", cudaGetErrorString(e));
}
