// train/memplan.c — the memory plan of FTPO LoRA training. See memplan.h and docs/antidoom.md §19.
#include "train/memplan.h"
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "base/util.h"
#include "quant/quant.h"
#include "train/device.h"
#include "train/lora.h"

// One 2-D weight of a layer: the LoRA target it is, its shape.
typedef struct {
    int target;
    int64_t n_in, n_out;
} proj_t;

// Element counts of one layer kind, per token unless named otherwise.
typedef struct {
    proj_t p[8];
    int n_p;
    int64_t vec_elems;    // F32 vectors and the conv kernel (per layer, not per token)
    int64_t acts;         // layer_fwd's intermediates (norms, mixer, FFN), without the LoRA terms
    int64_t lora_keep;    // A·x of every adapted projection (+ dropout masks)
    int64_t mixer_bwd;    // the mixer backward's gradient buffers
} kind_t;

#define CHUNK_FLOATS ((int64_t)4 << 20)  // train/backward.c: rows of a weight dequantized per chunk
#define CHUNK_BF16 ((int64_t)8 << 20)    // cuda/linear.cuh: bf16 values of a weight's chunk (16 MiB)
#define LAYER_F32_MAX ((int64_t)512 << 20) // train/graph.c: the largest dequantized layer copy
#define GDN_CKPT 32                      // train/backward_gdn.c: recurrence steps between state checkpoints

static bool is_recurrent(const bn_config *c, int il) {
    if (c->arch != BN_ARCH_QWEN35) return false;
    if (c->is_recurrent) return c->is_recurrent[il];
    int interval = c->full_attn_interval > 0 ? c->full_attn_interval : 4;
    return (il + 1) % interval != 0;
}

// kind_of: the weights and per-token element counts of a GDN (recurrent) or attention layer (graph.c's buffers).
static kind_t kind_of(const bn_config *c, bool recurrent, const bn_memplan_cfg *pc) {
    kind_t k = {0};
    const int64_t H = c->n_embd, F = c->n_ff, dk = c->ssm_d_state, Hk = c->ssm_n_group, Hv = c->ssm_dt_rank;
    const int64_t KD = Hk * dk, VD = Hv * dk, C = 2 * KD + VD;
    const int64_t ND = (int64_t)c->n_head * c->head_dim, KV = (int64_t)c->n_head_kv * c->head_dim;
    const int64_t QS = ND * (c->arch == BN_ARCH_QWEN35 ? 2 : 1);
    k.vec_elems = 2 * H; // attn_norm, post_attention_norm
    k.acts = 4 * H + 3 * F; // n, mo, h, mm; ga, up, act
    if (recurrent) {
        proj_t g[] = {{BN_LORA_QKV, H, C}, {BN_LORA_Z, H, VD}, {BN_LORA_BETA, H, Hv}, {BN_LORA_ALPHA, H, Hv},
                      {BN_LORA_SSM_OUT, VD, H}};
        memcpy(k.p, g, sizeof g);
        k.n_p = 5;
        k.vec_elems += (int64_t)c->ssm_conv_kernel * C + 2 * Hv + dk; // conv1d, dt, a, ssm_norm
        k.acts += 2 * C + 4 * Hv + 4 * KD + 4 * VD;   // mix, conv; b, a, beta, g; q, k, qn, kn; z, v, o, y
        k.mixer_bwd = 4 * VD + 5 * KD + 4 * Hv + 2 * C; // dy, do, dz, dv; dqn, dkn, dq, dk, dqs; dg..da; dconv, dmix
    } else {
        proj_t a[] = {{BN_LORA_Q, H, QS}, {BN_LORA_K, H, KV}, {BN_LORA_V, H, KV}, {BN_LORA_O, ND, H}};
        memcpy(k.p, a, sizeof a);
        k.n_p = 4;
        if (c->arch == BN_ARCH_QWEN35 || c->arch == BN_ARCH_QWEN3) k.vec_elems += 2 * c->head_dim; // q/k norms
        if (c->arch == BN_ARCH_QWEN2) k.vec_elems += QS + 2 * KV;                                 // biases
        k.acts += QS + 3 * KV + 5 * ND;          // qg; kr, vr, ka; qr, gate, qa, att, og
        k.mixer_bwd = 6 * ND + 4 * KV + QS;      // dog, datt, dgate, dqa, dqn, dqr; dka, dvr, dkn, dkr; dqg
    }
    proj_t f[] = {{BN_LORA_GATE, H, F}, {BN_LORA_UP, H, F}, {BN_LORA_DOWN, F, H}};
    memcpy(k.p + k.n_p, f, sizeof f);
    k.n_p += 3;
    for (int i = 0; i < k.n_p; i++)
        if (pc->targets & (unsigned)k.p[i].target) k.lora_keep += pc->rank + (pc->dropout > 0 ? k.p[i].n_in : 0);
    return k;
}

// weight_bytes: stored bytes of a {n_in, n_out} weight of type t; -1 when unknown or not whole blocks.
static int64_t weight_bytes(int t, int64_t n_in, int64_t n_out) {
    int blck = bn_type_blck(t);
    if (blck <= 0 || n_in % blck != 0) return -1;
    return (int64_t)bn_row_size(t, n_in) * n_out;
}

int64_t bn_memplan_base_bytes(const bn_memshape *s) {
    const bn_config *c = &s->cfg;
    const int64_t H = c->n_embd, V = c->n_vocab;
    int64_t embd = weight_bytes(s->type_embd, H, V), head = c->tied_output ? 0 : weight_bytes(s->type_head, H, V);
    if (embd < 0 || head < 0) return -1;
    int64_t total = embd + head + H * 4; // + output_norm
    bn_memplan_cfg none = {0};
    for (int il = 0; il < c->n_layer; il++) {
        kind_t k = kind_of(c, is_recurrent(c, il), &none);
        total += k.vec_elems * 4;
        for (int i = 0; i < k.n_p; i++) {
            int64_t b = weight_bytes(s->type_layer, k.p[i].n_in, k.p[i].n_out);
            if (b < 0) return -1;
            total += b;
        }
    }
    return total;
}

bn_memshape bn_memshape_of_model(const bn_model *m) {
    bn_memshape s = {.cfg = m->cfg, .type_layer = m->w.layers[0].ffn_up.type, .type_embd = m->w.token_embd.type,
                     .type_head = m->w.output.type};
    for (size_t i = 0; i < m->gguf->n_tensors; i++) s.base_bytes += (int64_t)m->gguf->tensors[i].nbytes;
    return s;
}

bn_memplan_cfg bn_memplan_cfg_default(int ctx) {
    return (bn_memplan_cfg){.targets = BN_LORA_ATTN | BN_LORA_FFN, .rank = 32, .ctx = ctx, .batch = 4,
                            .grad_accum = 4, .act_bytes = 4, .gemm_bytes = 2, .tether_batch = 2,
                            .tether_cache_mb = 512};
}

// layer_f32_bytes: the dequantized copy graph.c makes of a layer's non-F32 weights (0 when F32 or over the cap).
static int64_t layer_f32_bytes(const bn_memshape *s, const kind_t *k) {
    if (s->type_layer == BN_F32) return 0;
    int64_t n = 0;
    for (int i = 0; i < k->n_p; i++) n += k->p[i].n_in * k->p[i].n_out;
    return n * 4 > LAYER_F32_MAX ? 0 : n * 4;
}

// chunk_bytes: the linear's dequantization buffer for one weight (train/backward.c chunk_rows).
static int64_t chunk_bytes(int type, int64_t n_in, int64_t n_out) {
    if (type == BN_F32) return 0;
    int64_t rows = CHUNK_FLOATS / (n_in > 0 ? n_in : 1);
    rows = rows < 1 ? 1 : rows > n_out ? n_out : rows;
    return rows * n_in * 4;
}

// plan_lora: adapter parameters and tensors (bn_lora_from_model's: each adapted weight that exists; no tied head).
static void plan_lora(const bn_memshape *s, const bn_memplan_cfg *c, bn_memplan *p) {
    const bn_config *cf = &s->cfg;
    for (int il = 0; il < cf->n_layer; il++) {
        kind_t k = kind_of(cf, is_recurrent(cf, il), c);
        for (int i = 0; i < k.n_p; i++)
            if (c->targets & (unsigned)k.p[i].target) {
                p->lora_params += (int64_t)c->rank * (k.p[i].n_in + k.p[i].n_out);
                p->lora_tensors++;
            }
    }
    if ((c->targets & BN_LORA_HEAD) && !cf->tied_output) {
        p->lora_params += (int64_t)c->rank * (cf->n_embd + cf->n_vocab);
        p->lora_tensors++;
    }
}

// plan_acts: kept activations and the backward's working sets, per kind of layer present.
static void plan_acts(const bn_memshape *s, const bn_memplan_cfg *c, bn_memplan *p) {
    const bn_config *cf = &s->cfg;
    const int64_t H = cf->n_embd, F = cf->n_ff, T = c->ctx, ab = c->act_bytes, L = cf->n_layer;
    const bool head_mask = (c->targets & BN_LORA_HEAD) && !cf->tied_output && c->dropout > 0;
    p->keep_layer_in = H;
    int64_t per_row_full = 0;
    for (int kind = 0; kind < 2; kind++) {
        int n = kind ? p->n_gdn : p->n_attn;
        if (n == 0) continue;
        kind_t k = kind_of(cf, kind == 1, c);
        int64_t full = H + k.acts + k.lora_keep;
        if (kind) p->keep_gdn_full = full; else p->keep_attn_full = full;
        per_row_full += n * full * T * ab;
        int64_t bwd = 3 * H + 3 * F + k.mixer_bwd + 2 * H; // layer_bwd's dh..dn, the mixer's, dx and dx_prev
        int64_t ws = (k.acts + k.lora_keep + bwd) * T * ab + layer_f32_bytes(s, &k);
        if (ws > p->layer_ws) p->layer_ws = ws;
        if (bwd * T * ab > p->layer_ws_full) p->layer_ws_full = bwd * T * ab;
    }
    int64_t per_row_tail = (H + (head_mask ? H : 0)) * ab; // x_last (+ the head's dropout mask)
    p->kept = (int64_t)c->batch * (L * H * T * ab + per_row_tail);
    p->kept_full = (int64_t)c->batch * (per_row_full + per_row_tail);
}

// plan_scratch: what the kernels allocate beside the graph's buffers: the largest dequantization chunk, the LoRA
// backward's {r, T} (and dropout) buffers, attention probability rows and the GDN state checkpoints of every value
// head at once.
static int64_t plan_scratch(const bn_memshape *s, const bn_memplan_cfg *c, const bn_memplan *p) {
    const bn_config *cf = &s->cfg;
    const int64_t T = c->ctx;
    int64_t chunk = cf->tied_output ? 0 : chunk_bytes(s->type_head, cf->n_embd, cf->n_vocab), max_in = 0;
    for (int kind = 0; kind < 2; kind++) {
        if ((kind ? p->n_gdn : p->n_attn) == 0) continue;
        kind_t k = kind_of(cf, kind == 1, c);
        for (int i = 0; i < k.n_p; i++) {
            int64_t b = layer_f32_bytes(s, &k) ? 0 : chunk_bytes(s->type_layer, k.p[i].n_in, k.p[i].n_out);
            chunk = b > chunk ? b : chunk;
            if ((c->targets & (unsigned)k.p[i].target) && k.p[i].n_in > max_in) max_in = k.p[i].n_in;
        }
    }
    int64_t lora = ((int64_t)2 * c->rank * T + (c->dropout > 0 ? 2 * max_in * T : 0)) * 4;
    int64_t attn = p->n_attn ? (int64_t)2 * T * cf->n_head * 4 : 0;
    const int64_t dk = cf->ssm_d_state, ssz = dk * dk;
    const int64_t n_ck = (T + GDN_CKPT - 1) / GDN_CKPT + 1;
    int64_t gdn = p->n_gdn ? (int64_t)cf->ssm_dt_rank * ((n_ck + GDN_CKPT + 2) * ssz + 5 * dk + 2 * dk) * 4 : 0;
    return chunk + lora + (attn > gdn ? attn : gdn);
}

// The GPU trainer's layout (cuda/train_graph.cu, cuda/linear.cuh, cuda/bwd_gdn.cu, cuda/bwd_attn.cu).
#define DEV_ALIGN_FLOATS 64 // train_graph.cu take(): every buffer of the layer arena starts 256-byte aligned
#define DEV_ATTN_QB 256     // bwd_attn.cu ATTN_QB: query positions per block of scores

// dev_aligned: n floats rounded up to the arena's alignment.
static int64_t dev_aligned(int64_t n) { return (n + DEV_ALIGN_FLOATS - 1) / DEV_ALIGN_FLOATS * DEV_ALIGN_FLOATS; }

// dev_span: the device's tokens per FFN pass over T tokens: min(T, c->ffn_chunk or BN_TRAIN_FFN_CHUNK).
static int64_t dev_span(const bn_memplan_cfg *c, int64_t T) {
    const int64_t chunk = c->ffn_chunk > 0 ? c->ffn_chunk : BN_TRAIN_FFN_CHUNK;
    return T < chunk ? T : chunk;
}

// dev_layer_bytes: the one-layer arena of train_graph.cu bufs_carve for T tokens at rank r: the buffers every layer
// has (the FFN block's for a span of S tokens; the fp32 layer input when the kept ones are bf16), the larger of the
// two layer kinds' (Gated DeltaNet, only for qwen35, and attention share their part), and A·x for every target,
// whichever are adapted. Buffers bufs_carve lays over one another count once.
static int64_t dev_layer_bytes(const bn_config *cf, int64_t T, int r, int64_t S, bool kept16) {
    const bool q35 = cf->arch == BN_ARCH_QWEN35;
    const int64_t dk = cf->ssm_d_state, H = cf->n_embd * T, Hs = cf->n_embd * S, Fs = cf->n_ff * S;
    const int64_t Qd = q35 ? cf->ssm_n_group * dk * T : 0, Vd = q35 ? cf->ssm_dt_rank * dk * T : 0;
    const int64_t C = 2 * Qd + Vd, Hv = q35 ? cf->ssm_dt_rank * T : 0;
    const int64_t nq = (int64_t)cf->n_head * cf->head_dim * T, nk = (int64_t)cf->n_head_kv * cf->head_dim * T;
    const int64_t gdn = 3 * dev_aligned(C) + 7 * dev_aligned(Qd) + 6 * dev_aligned(Vd) +
                        2 * dev_aligned(Vd > Qd ? Vd : Qd) + 8 * dev_aligned(Hv);
    const int64_t attn = 11 * dev_aligned(nq) + 7 * dev_aligned(nk) + dev_aligned(q35 ? 2 * nq : nq);
    const int64_t floats = (kept16 ? 5 : 4) * dev_aligned(H) + 2 * dev_aligned(Hs) + 6 * dev_aligned(Fs) +
                           (gdn > attn ? gdn : attn) + BN_LORA_N_TARGETS * dev_aligned((int64_t)r * T);
    return floats * 4;
}

// dev_bf16_floats: workspace floats of n bf16 values (cuda/linear.cuh bf16_floats: in whole DEV_ALIGN_FLOATS).
static int64_t dev_bf16_floats(int64_t n) { return dev_aligned((n + 1) / 2); }

// dev_chunk_bf16_floats: the workspace floats of a weight's bf16 chunk (cuda/linear.cuh chunk_rows_bf16: CHUNK_BF16
// values in whole 8s of rows), any stored type.
static int64_t dev_chunk_bf16_floats(int64_t n_in, int64_t n_out) {
    int64_t rows = CHUNK_BF16 / (n_in > 0 ? n_in : 1);
    if (rows >= 8) rows -= rows % 8;
    rows = rows < 1 ? 1 : rows > n_out ? n_out : rows;
    return dev_bf16_floats(rows * n_in);
}

// dev_linear_bytes: a linear's workspace over T tokens (its backward's, the larger): the base product's part (fp32:
// the weight's fp32 chunk; bf16: its bf16 chunk and dy's bf16 copy {n_out, T}), the input's two copies and two
// {r, T} rows.
static int64_t dev_linear_bytes(int type, int64_t n_in, int64_t n_out, int64_t T, int r, bool bf16) {
    const int64_t base = bf16 ? (dev_chunk_bf16_floats(n_in, n_out) + dev_bf16_floats(n_out * T)) * 4
                              : chunk_bytes(type, n_in, n_out);
    return base + (2 * n_in * T + 2 * (int64_t)r * T) * 4;
}

// dev_tokens: the length the trainer's per-length buffers grow to: the rows' or the tether's windows', the longer.
static int64_t dev_tokens(const bn_memplan_cfg *c) { return c->tether_ctx > c->ctx ? c->tether_ctx : c->ctx; }

// is_ffn: whether a layer weight of LoRA target `target` belongs to the FFN block (the device runs it over spans).
static bool is_ffn(int target) {
    return target == BN_LORA_GATE || target == BN_LORA_UP || target == BN_LORA_DOWN;
}

// dev_scratch_bytes: train_graph.cu ws_need: the largest workspace of the head's linear (sized for every position, as
// an all-position graph needs; its product fp32 whatever the GEMMs), the layers' linears (their products bf16 when
// c->gemm_bytes is 2; the FFN block's over one span), the attention's score blocks and the gated delta rule's backward
// (its checkpoints every bn_train_gdn_ckpt(T) steps).
static int64_t dev_scratch_bytes(const bn_memshape *s, const bn_memplan_cfg *c, const bn_memplan *p) {
    const bn_config *cf = &s->cfg;
    const int64_t T = dev_tokens(c), dk = cf->ssm_d_state;
    const int head_type = cf->tied_output ? s->type_embd : s->type_head;
    int64_t need = dev_linear_bytes(head_type, cf->n_embd, cf->n_vocab, T, c->rank, false);
    for (int kind = 0; kind < 2; kind++) {
        if ((kind ? p->n_gdn : p->n_attn) == 0) continue;
        kind_t k = kind_of(cf, kind == 1, c);
        for (int i = 0; i < k.n_p; i++) {
            const int64_t Ti = is_ffn(k.p[i].target) ? dev_span(c, T) : T;
            int64_t b = dev_linear_bytes(s->type_layer, k.p[i].n_in, k.p[i].n_out, Ti, c->rank, c->gemm_bytes == 2);
            need = b > need ? b : need;
        }
        const int64_t ck = bn_train_gdn_ckpt((int)T), n_ck = (T + ck - 1) / ck;
        const int64_t grp = cf->n_head / (cf->n_head_kv > 0 ? cf->n_head_kv : 1);
        const int64_t qb = T < DEV_ATTN_QB ? T : DEV_ATTN_QB;
        int64_t b = kind ? cf->ssm_dt_rank * ((n_ck + ck + 2) * dk * dk + 2 * T * (dk + 1)) * 4 : 2 * grp * qb * T * 4;
        need = b > need ? b : need;
    }
    return need;
}

// dev_ref_bytes: the reference's own context of an STE run (train_graph.cu opened without an adapter): the weights,
// the head's buffers, the layer arena (bufs_carve's A·x rows at rank 1) and the workspace at rank 0.
static int64_t dev_ref_bytes(const bn_memshape *s, const bn_memplan_cfg *c, const bn_memplan *p) {
    const bn_config *cf = &s->cfg;
    const int64_t T = dev_tokens(c);
    bn_memplan_cfg c0 = *c;
    c0.rank = 0;
    return p->base + (2 * (int64_t)cf->n_vocab + 2 * (int64_t)cf->n_embd) * 4 +
           dev_layer_bytes(cf, T, 1, dev_span(c, T), c->gemm_bytes == 2) + dev_scratch_bytes(s, &c0, p);
}

// plan_device: what a GPU run holds on the device (bn_memplan_device); p's other terms are computed.
static void plan_device(const bn_memshape *s, const bn_memplan_cfg *c, bn_memplan *p) {
    const bn_config *cf = &s->cfg;
    const int64_t T = c->ctx, H = cf->n_embd, L = cf->n_layer;
    bn_memplan_device *d = &p->dev;
    d->base = p->base;
    d->adapter = d->grads = p->lora_params * 4;
    const int64_t V = cf->n_vocab, Tt = c->tether_ctx;
    const bool kept16 = c->gemm_bytes == 2;
    const int64_t kb = kept16 ? 2 : 4; // bytes of a kept layer input's element
    d->kept = (int64_t)c->batch * (L * H * T * kb + H * 4 + T * 4);
    d->layer = dev_layer_bytes(cf, dev_tokens(c), c->rank, dev_span(c, dev_tokens(c)), kept16);
    d->scratch = dev_scratch_bytes(s, c, p);
    d->head = (2 * V + 2 * H) * 4;
    d->tether = Tt > 0 ? L * H * Tt * kb + (H * Tt + 2 * H * Tt + V * Tt) * 4 + Tt * 4 : 0;
    d->ref = c->ste ? dev_ref_bytes(s, c, p) : 0;
    d->total = d->base + d->adapter + d->grads + d->kept + d->layer + d->scratch + d->head + d->tether + d->ref;
}

int bn_memplan_compute(const bn_memshape *s, const bn_memplan_cfg *c, bn_memplan *p, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    const bn_config *cf = &s->cfg;
    if (cf->arch < BN_ARCH_QWEN35 || cf->arch > BN_ARCH_QWEN2)
        return bn_err(err, errlen, "memory plan: unsupported architecture %d", cf->arch);
    if (cf->n_layer <= 0 || cf->n_embd <= 0 || cf->n_vocab <= 0 || cf->n_ff <= 0)
        return bn_err(err, errlen, "memory plan: the model's shape is empty");
    if (c->rank <= 0 || c->ctx <= 0 || c->batch <= 0 || c->grad_accum <= 0 || c->tether_ctx < 0)
        return bn_err(err, errlen, "memory plan: rank, context, batch and accumulation must be positive");
    if (c->act_bytes != 2 && c->act_bytes != 4) return bn_err(err, errlen, "memory plan: activations are 2 or 4 bytes");
    if (c->gemm_bytes != 2 && c->gemm_bytes != 4)
        return bn_err(err, errlen, "memory plan: GEMM inputs are 2 (bf16) or 4 (fp32) bytes");
    if (c->ffn_chunk < 0) return bn_err(err, errlen, "memory plan: FFN span of %d tokens", c->ffn_chunk);
    for (int il = 0; il < cf->n_layer; il++) *(is_recurrent(cf, il) ? &p->n_gdn : &p->n_attn) += 1;
    p->base = s->base_bytes > 0 ? s->base_bytes : bn_memplan_base_bytes(s);
    if (p->base < 0)
        return bn_err(err, errlen, "memory plan: cannot size the weights (types %s / %s / %s, H %d)",
                      bn_type_name(s->type_layer), bn_type_name(s->type_embd), bn_type_name(s->type_head), cf->n_embd);
    plan_lora(s, c, p);
    if (p->lora_tensors == 0) return bn_err(err, errlen, "memory plan: no model weight matches the LoRA targets");
    p->adapter = p->grads = p->lora_params * 4;
    p->adamw = 2 * p->lora_params * 4;
    plan_acts(s, c, p);
    p->scratch = plan_scratch(s, c, p);
    const int64_t V = cf->n_vocab, H = cf->n_embd, Tt = c->tether_ctx;
    p->logits = (2 * (int64_t)c->batch + 1) * V * 4; // z and dz per row, and the reference forward's row
    p->ref_cache = c->n_rows * V * 4;
    if (Tt > 0)
        p->tether = 3 * V * Tt * 4 + ((int64_t)cf->n_layer + 1) * H * Tt * c->act_bytes +
                    (int64_t)c->tether_cache_mb * (1 << 20);
    int64_t common = p->base + p->adapter + p->grads + p->adamw + p->scratch + p->logits + p->ref_cache + p->tether;
    p->total = common + p->kept + p->layer_ws;
    p->total_full = common + p->kept_full + p->layer_ws_full;
    plan_device(s, c, p);
    return 0;
}

// targets_str: the target names of mask, comma-separated, into buf; returns buf.
static const char *targets_str(unsigned mask, char *buf, size_t n) {
    static const char *const short_names[BN_LORA_N_TARGETS] = {"q", "k", "v", "o", "gate", "up", "down", "qkv", "z",
                                                               "beta", "alpha", "ssm_out", "lm_head"};
    size_t len = 0;
    buf[0] = 0;
    for (int b = 0; b < BN_LORA_N_TARGETS && len < n; b++)
        if (mask & (1u << b)) len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? "," : "", short_names[b]);
    return buf;
}

// row: one term of the table: the recomputing plan's bytes a, the keep-all plan's b, the device's dev.
static void row(FILE *f, const char *name, int64_t a, int64_t b, int64_t dev) {
    fprintf(f, "%-44s %16lld %9.3f %16lld %9.3f %16lld %9.3f\n", name, (long long)a, a / 1073741824.0, (long long)b,
            b / 1073741824.0, (long long)dev, dev / 1073741824.0);
}

void bn_memplan_print(FILE *f, const bn_memshape *s, const bn_memplan_cfg *c, const bn_memplan *p) {
    const bn_config *cf = &s->cfg;
    static const char *const arch[] = {"qwen35", "qwen3", "llama", "qwen2"};
    char tg[128];
    fprintf(f, "memory plan: %s, %d layers (%d Gated DeltaNet, %d attention), H %d, F %d, vocab %d; weights %s "
            "(token_embd %s, output %s)\n", arch[cf->arch], cf->n_layer, p->n_gdn, p->n_attn, cf->n_embd, cf->n_ff,
            cf->n_vocab, bn_type_name(s->type_layer), bn_type_name(s->type_embd),
            cf->tied_output ? "tied" : bn_type_name(s->type_head));
    fprintf(f, "LoRA r %d on %s: %d tensors, %lld parameters; %d tokens per row, batch %d x %d, dropout %g, "
            "activations %s; the device's base-weight GEMMs %s\n", c->rank, targets_str(c->targets, tg, sizeof tg),
            p->lora_tensors, (long long)p->lora_params, c->ctx, c->batch, c->grad_accum, c->dropout,
            c->act_bytes == 4 ? "fp32" : "16-bit", c->gemm_bytes == 4 ? "fp32" : "bf16");
    fprintf(f, "kept per token per layer (elements): %lld with per-layer recomputation; without it %lld per Gated "
            "DeltaNet layer, %lld per attention layer\n", (long long)p->keep_layer_in, (long long)p->keep_gdn_full,
            (long long)p->keep_attn_full);
    fprintf(f, "%-44s %16s %9s %16s %9s %16s %9s\n", "term", "recompute B", "GiB", "keep-all B", "GiB", "device B",
            "GiB");
    const bn_memplan_device *d = &p->dev;
    row(f, "base weights (stored types)", p->base, p->base, d->base);
    row(f, "adapter A, B (fp32)", p->adapter, p->adapter, d->adapter);
    row(f, "adapter gradients (fp32)", p->grads, p->grads, d->grads);
    row(f, "AdamW m, v (fp32)", p->adamw, p->adamw, 0);
    row(f, "activations kept (batch rows)", p->kept, p->kept_full, d->kept);
    row(f, "backward working set (one layer)", p->layer_ws, p->layer_ws_full, d->layer);
    row(f, "kernel scratch", p->scratch, p->scratch, d->scratch);
    row(f, "logits and gradients (vocab x rows)", p->logits, p->logits, d->head);
    row(f, "reference logits cache (vocab x rows)", p->ref_cache, p->ref_cache, 0);
    if (p->tether) row(f, "tether window and cache", p->tether, p->tether, d->tether);
    if (d->ref) row(f, "reference model's context (--ste-type)", 0, 0, d->ref);
    row(f, "total", p->total, p->total_full, d->total);
    if (c->n_rows == 0) fprintf(f, "(rows unknown: the reference logits cache, vocab x 4 B per row, is not counted)\n");
    char margin[32];
    fprintf(f, "(device: what -ngl holds on the GPU: the kept layer inputs %s, the other activations fp32, the FFN's "
            "over %d-token spans; AdamW, the reference cache and the tether's cache stay on the host; a run there also "
            "needs a %s margin for cuBLAS and the driver)\n", c->gemm_bytes == 2 ? "bf16" : "fp32",
            c->ffn_chunk > 0 ? c->ffn_chunk : BN_TRAIN_FFN_CHUNK,
            bn_format_bytes(margin, sizeof margin, (double)BN_MEMPLAN_DEVICE_MARGIN));
}

const char *bn_memplan_device_parts(const bn_memplan *p, char *buf, size_t n) {
    const bn_memplan_device *d = &p->dev;
    char w[32], a[32], k[32], l[32], s[32], h[32], t[48] = "", r[48] = "";
    if (d->tether) snprintf(t, sizeof t, ", tether %s", bn_format_bytes(h, sizeof h, (double)d->tether));
    if (d->ref) snprintf(r, sizeof r, ", reference model %s", bn_format_bytes(h, sizeof h, (double)d->ref));
    snprintf(buf, n,
             "weights %s, adapter + gradients %s, kept activations %s, layer buffers %s, scratch %s, head %s%s%s",
             bn_format_bytes(w, sizeof w, (double)d->base),
             bn_format_bytes(a, sizeof a, (double)(d->adapter + d->grads)),
             bn_format_bytes(k, sizeof k, (double)d->kept), bn_format_bytes(l, sizeof l, (double)d->layer),
             bn_format_bytes(s, sizeof s, (double)d->scratch), bn_format_bytes(h, sizeof h, (double)d->head), t, r);
    return buf;
}

int bn_memplan_device_fits(const bn_memplan *p, const bn_memplan_cfg *c, int ranks, int device, int64_t free_bytes,
                           int64_t total_bytes, char *err, size_t errlen) {
    const int64_t need = (int64_t)ranks * (p->dev.total + BN_MEMPLAN_DEVICE_MARGIN);
    if (need <= free_bytes) return 0;
    char parts[256], fr[32], tot[32], nd[32], pl[32], mg[32], times[24] = "";
    if (ranks > 1) snprintf(times, sizeof times, "%d ranks x (", ranks);
    return bn_err(err, errlen, "device %d: %s free of %s (%lld B), this run needs %s (%lld B): %sthe plan's %s (%s; "
                  "batch %d x %d tokens) + %s margin%s; lower --max-seq or -c (tokens per row), --batch (raise "
                  "--grad-accum to keep the step), --rank or --targets, or use -ngl 0", device,
                  bn_format_bytes(fr, sizeof fr, (double)free_bytes),
                  bn_format_bytes(tot, sizeof tot, (double)total_bytes),
                  (long long)free_bytes, bn_format_bytes(nd, sizeof nd, (double)need), (long long)need, times,
                  bn_format_bytes(pl, sizeof pl, (double)p->dev.total), bn_memplan_device_parts(p, parts, sizeof parts),
                  c->batch, c->ctx, bn_format_bytes(mg, sizeof mg, (double)BN_MEMPLAN_DEVICE_MARGIN),
                  ranks > 1 ? ")" : "");
}

int bn_parse_bytes(const char *s, int64_t *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v > 0) || !isfinite(v)) return -1;
    double mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mul = 0x1p10; end++; break;
    case 'M': mul = 0x1p20; end++; break;
    case 'G': mul = 0x1p30; end++; break;
    case 'T': mul = 0x1p40; end++; break;
    default: break;
    }
    if (mul > 1 && toupper((unsigned char)*end) == 'I') end++;
    if (toupper((unsigned char)*end) == 'B') end++;
    if (*end || v * mul >= 0x1p62) return -1;
    *out = (int64_t)(v * mul);
    return *out > 0 ? 0 : -1;
}
