// core/state.c — per-sequence state: one allocation holding the struct, the per-layer views, the
// recurrent region (conv windows + S), the fp32 KV cache and the scratch buffers; snapshots.
#include "core/forward_impl.h"
#include "core/matmul.h"
#include "base/util.h"
#include "quant/quant.h"
#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

// Carves 64-byte aligned pieces out of one block: a first pass with base == NULL only counts.
typedef struct {
    uint8_t *base;
    size_t off;
} carver;

static void *carve(carver *c, size_t bytes) {
    void *p = c->base ? c->base + c->off : NULL;
    c->off += align64(bytes);
    return p;
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

// work_size_for: largest matmul scratch any weight of the model needs for B rows.
static size_t work_size_for(const bn_model *m, int B) {
    size_t ws = bn_matmul_work_size(&m->w.output, B);
    for (int il = 0; il < m->cfg.n_layer; il++) {
        const bn_layer_weights *lw = &m->w.layers[il];
        const bn_weight *ws_list[] = {&lw->ffn_gate, &lw->ffn_up, &lw->ffn_down, &lw->attn_q, &lw->attn_k,
                                      &lw->attn_v, &lw->attn_output, &lw->attn_qkv, &lw->attn_gate, &lw->ssm_beta,
                                      &lw->ssm_alpha, &lw->ssm_out};
        for (size_t i = 0; i < sizeof ws_list / sizeof ws_list[0]; i++)
            if (ws_list[i]->data) ws = max_sz(ws, bn_matmul_work_size(ws_list[i], B));
    }
    return ws;
}

// layout: assigns every pointer of s (when c->base != NULL) and returns the total size; KV cache and
// recurrent state only for layers [0, n_layers).
static size_t layout(carver *c, bn_state *s, const bn_model *m, int n_ctx, int B, int n_threads, int kv_type,
                     int n_layers) {
    const bn_config *cf = &m->cfg;
    const size_t H = cf->n_embd, F = cf->n_ff, L = cf->n_layer, L_run = (size_t)n_layers;
    const bn_dims dm = bn_config_dims(cf);
    const size_t kv_dim = dm.kv_dim, q_rows = dm.q_rows, conv_dim = dm.conv_dim, value_dim = dm.value_dim;
    const size_t conv_floats = dm.conv_floats, ssm_floats = dm.ssm_floats, Hv = cf->ssm_dt_rank;

    bn_state *hdr = carve(c, sizeof(bn_state));
    (void)hdr;
    void **k_cache = carve(c, L * sizeof(void *));
    void **v_cache = carve(c, L * sizeof(void *));
    float **conv = carve(c, L * sizeof(float *));
    float **ssm = carve(c, L * sizeof(float *));
    // recurrent region: contiguous floats (conv and S sizes are multiples of 16 floats in practice;
    // no alignment padding inside so one memcpy covers it)
    size_t n_rec = 0;
    for (size_t il = 0; il < L_run; il++)
        if (cf->is_recurrent[il]) n_rec += conv_floats + ssm_floats;
    float *rec = carve(c, n_rec * sizeof(float));
    if (c->base) {
        s->k_cache = k_cache;
        s->v_cache = v_cache;
        s->conv = conv;
        s->ssm = ssm;
        s->recurrent = rec;
        s->n_recurrent = n_rec;
        float *p = rec;
        for (size_t il = 0; il < L; il++) {
            k_cache[il] = v_cache[il] = NULL;
            conv[il] = ssm[il] = NULL;
            if (!cf->is_recurrent[il] || il >= L_run) continue;
            conv[il] = p;
            p += conv_floats;
            ssm[il] = p;
            p += ssm_floats;
        }
    }
    for (size_t il = 0; il < L_run; il++) {
        if (cf->is_recurrent[il]) continue;
        const size_t kv_elt = kv_type == BN_F16 ? 2 : 4;
        void *kc = carve(c, (size_t)n_ctx * kv_dim * kv_elt);
        void *vc = carve(c, (size_t)n_ctx * kv_dim * kv_elt);
        if (c->base) {
            k_cache[il] = kc;
            v_cache[il] = vc;
        }
    }
    const size_t Bz = (size_t)B;
    float *x = carve(c, Bz * H * 4), *xn = carve(c, Bz * H * 4), *mo = carve(c, Bz * H * 4);
    float *qg = carve(c, Bz * max_sz(q_rows, conv_dim) * 4);
    float *kb = carve(c, Bz * kv_dim * 4), *vb = carve(c, Bz * kv_dim * 4);
    float *z = carve(c, Bz * value_dim * 4);
    float *att = carve(c, Bz * max_sz((size_t)cf->n_head * cf->head_dim, value_dim) * 4);
    float *bb = carve(c, Bz * Hv * 4), *ab = carve(c, Bz * Hv * 4);
    float *gate = carve(c, Bz * F * 4), *up = carve(c, Bz * F * 4);
    const size_t group = (size_t)(cf->n_head / cf->n_head_kv); // query heads per KV head
    float *scores = carve(c, (size_t)n_ctx * (size_t)n_threads * group * 4);
    const size_t ws = work_size_for(m, B);
    void *work = carve(c, ws);
    if (c->base) {
        s->x = x, s->xn = xn, s->mo = mo, s->qg = qg, s->kb = kb, s->vb = vb, s->z = z, s->att = att;
        s->bb = bb, s->ab = ab, s->gate = gate, s->up = up, s->scores = scores, s->work = work;
        s->work_size = ws;
    }
    return c->off;
}

bn_state *bn_state_new(const bn_model *m, int n_ctx, int n_threads) {
    return bn_state_new_kv(m, n_ctx, n_threads, BN_F32);
}

bn_state *bn_state_new_kv(const bn_model *m, int n_ctx, int n_threads, int kv_type) {
    return bn_state_new_front(m, n_ctx, n_threads, kv_type, m->cfg.n_layer);
}

bn_state *bn_state_new_front(const bn_model *m, int n_ctx, int n_threads, int kv_type, int n_layers) {
    if (n_layers < 0 || n_layers > m->cfg.n_layer) n_layers = m->cfg.n_layer;
    if (kv_type != BN_F16) kv_type = BN_F32;
    if (n_threads <= 0) n_threads = bn_n_threads_default();
    if (n_ctx < 1) n_ctx = 1;
    const int B = n_ctx < BN_MAX_BATCH ? n_ctx : BN_MAX_BATCH;
    carver count = {0};
    const size_t total = layout(&count, NULL, m, n_ctx, B, n_threads, kv_type, n_layers);
    // One anonymous mapping: zero-filled and page-aligned without touching it, so KV-cache pages
    // are only committed when positions are actually used.
    uint8_t *block = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (block == MAP_FAILED) bn_die("out of memory allocating a %zu-byte inference state", total);
    bn_state *s = (bn_state *)block;
    carver fill = {.base = block};
    layout(&fill, s, m, n_ctx, B, n_threads, kv_type, n_layers);
    s->kv_type = kv_type;
    s->m = m;
    s->alloc_bytes = total;
    s->n_ctx = n_ctx;
    s->n_batch = B;
    s->n_threads = n_threads;
    s->n_layers = n_layers;
    s->pool = bn_pool_new(n_threads);
    openblas_set_num_threads(n_threads);
    s->pos = 0;
    return s;
}

void bn_state_free(bn_state *s) {
    if (!s) return;
    free(s->lora_u);
    bn_pool_free(s->pool);
    munmap(s, s->alloc_bytes);
}

void bn_state_reset(bn_state *s) {
    memset(s->recurrent, 0, s->n_recurrent * sizeof(float));
    s->pos = 0;
}

int bn_state_pos(const bn_state *s) { return s->pos; }

void bn_state_set_lora(bn_state *s, const bn_lora_set *set) {
    free(s->lora_u);
    s->lora_u = NULL;
    s->lora = bn_lora_set_count(set) > 0 ? set : NULL;
    memset(s->lora_scale, 0, sizeof s->lora_scale);
    if (!s->lora) return;
    s->lora_u = xmalloc(sizeof(float) * (size_t)s->n_batch * (size_t)bn_lora_set_max_rank(set));
    bn_state_set_lora_scales(s, bn_lora_set_scales((bn_lora_set *)set), bn_lora_set_count(set));
}

int bn_state_set_lora_scales(bn_state *s, const float *scales, int n) {
    if (!s->lora || n != bn_lora_set_count(s->lora)) return -1;
    memcpy(s->lora_scale, scales, sizeof(float) * (size_t)n);
    return 0;
}
int bn_state_n_ctx(const bn_state *s) { return s->n_ctx; }

bn_snapshot *bn_snapshot_new(const bn_state *s) {
    bn_snapshot *snap = xcalloc(1, sizeof *snap + s->n_recurrent * sizeof(float));
    snap->n = s->n_recurrent;
    return snap;
}

void bn_state_snapshot_into(const bn_state *s, bn_snapshot *snap) {
    if (snap->n != s->n_recurrent) bn_die("bn_state_snapshot_into: snapshot of a different model");
    snap->pos = s->pos;
    memcpy(snap->data, s->recurrent, s->n_recurrent * sizeof(float));
}

bn_snapshot *bn_state_snapshot(const bn_state *s) {
    bn_snapshot *snap = bn_snapshot_new(s);
    bn_state_snapshot_into(s, snap);
    return snap;
}

void bn_state_restore(bn_state *s, const bn_snapshot *snap) {
    if (snap->n != s->n_recurrent) bn_die("bn_state_restore: snapshot of a different model");
    memcpy(s->recurrent, snap->data, snap->n * sizeof(float));
    s->pos = snap->pos;
}

int bn_snapshot_pos(const bn_snapshot *snap) { return snap->pos; }

void bn_snapshot_free(bn_snapshot *snap) { free(snap); }
