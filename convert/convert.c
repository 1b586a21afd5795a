// convert/convert.c — the HF ↔ GGUF tensor name table with transforms (docs/model.md §5, §7) and the
// row-streaming transform shared by import, export and the LoRA converters.
#include "convert/convert.h"
#include "convert/convert_impl.h"
#include "base/util.h"
#include "quant/quant.h"
#include "convert/safetensors.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int bn_vhead_to_gguf(int h_hf, int Hk, int Hv) {
    if (Hk <= 0 || Hk == Hv || Hv % Hk != 0) return h_hf;
    int r = Hv / Hk;
    int g = h_hf / r, j = h_hf % r;
    return j * Hk + g;
}

int bn_vhead_to_hf(int h_gg, int Hk, int Hv) {
    if (Hk <= 0 || Hk == Hv || Hv % Hk != 0) return h_gg;
    int r = Hv / Hk;
    return (h_gg % Hk) * r + h_gg / Hk;
}

int cv_arch_from_name(const char *arch) {
    if (!arch) return -1;
    if (strcmp(arch, "qwen35") == 0) return CV_QWEN35;
    if (strcmp(arch, "qwen3") == 0) return CV_QWEN3;
    if (strcmp(arch, "qwen2") == 0) return CV_QWEN2;
    return -1;
}

const char *cv_arch_name(int arch) { return arch == CV_QWEN35 ? "qwen35" : arch == CV_QWEN3 ? "qwen3" : "qwen2"; }

size_t cv_dtype_bytes(int type) { return type == BN_F32 ? 4 : 2; }

// ---- name table ---------------------------------------------------------------------------

enum { F_NORM = 1, F_F32 = 2, F_ROWS_V = 4, F_ROWS_ZV = 8, F_ROWS_H = 16, F_COLS_V = 32, F_NEGEXP = 64, F_CONV = 128,
       F_Q35 = 256, F_DENSE = 512, F_QWEN2 = 1024 };

typedef struct {
    const char *hf, *gguf;
    int flags;
} entry;

// Per-layer tensors (HF suffix after "layers.N.", GGUF suffix after "blk.N.").
static const entry layer_tab[] = {
    {"input_layernorm.weight", "attn_norm.weight", F_NORM},
    {"post_attention_layernorm.weight", "post_attention_norm.weight", F_NORM | F_Q35},
    {"post_attention_layernorm.weight", "ffn_norm.weight", F_NORM | F_DENSE},
    {"mlp.gate_proj.weight", "ffn_gate.weight", 0},
    {"mlp.up_proj.weight", "ffn_up.weight", 0},
    {"mlp.down_proj.weight", "ffn_down.weight", 0},
    {"self_attn.q_proj.weight", "attn_q.weight", 0},
    {"self_attn.k_proj.weight", "attn_k.weight", 0},
    {"self_attn.v_proj.weight", "attn_v.weight", 0},
    {"self_attn.o_proj.weight", "attn_output.weight", 0},
    {"self_attn.q_proj.bias", "attn_q.bias", F_F32 | F_QWEN2},
    {"self_attn.k_proj.bias", "attn_k.bias", F_F32 | F_QWEN2},
    {"self_attn.v_proj.bias", "attn_v.bias", F_F32 | F_QWEN2},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", F_NORM},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", F_NORM},
    {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight", F_ROWS_V | F_Q35},
    {"linear_attn.in_proj_z.weight", "attn_gate.weight", F_ROWS_ZV | F_Q35},
    {"linear_attn.in_proj_b.weight", "ssm_beta.weight", F_ROWS_H | F_Q35},
    {"linear_attn.in_proj_a.weight", "ssm_alpha.weight", F_ROWS_H | F_Q35},
    {"linear_attn.conv1d.weight", "ssm_conv1d.weight", F_ROWS_V | F_CONV | F_F32 | F_Q35},
    {"linear_attn.dt_bias", "ssm_dt.bias", F_ROWS_H | F_F32 | F_Q35},
    {"linear_attn.A_log", "ssm_a", F_ROWS_H | F_NEGEXP | F_F32 | F_Q35},
    {"linear_attn.norm.weight", "ssm_norm.weight", F_F32 | F_Q35},
    {"linear_attn.out_proj.weight", "ssm_out.weight", F_COLS_V | F_Q35},
};

static const entry global_tab[] = {
    {"embed_tokens.weight", "token_embd.weight", 0},
    {"norm.weight", "output_norm.weight", F_NORM},
    {"lm_head.weight", "output.weight", 0},
};

static bool entry_applies(const cv_params *p, int flags) {
    if ((flags & F_Q35) && p->arch != CV_QWEN35) return false;
    if ((flags & F_DENSE) && p->arch == CV_QWEN35) return false;
    if ((flags & F_QWEN2) && p->arch != CV_QWEN2) return false;
    return true;
}

static void fill_map(const cv_params *p, const entry *e, int layer, cv_map *m) {
    memset(m, 0, sizeof *m);
    m->layer = layer;
    if (layer >= 0) {
        snprintf(m->hf, sizeof m->hf, "layers.%d.%s", layer, e->hf);
        snprintf(m->gguf, sizeof m->gguf, "blk.%d.%s", layer, e->gguf);
    } else {
        snprintf(m->hf, sizeof m->hf, "%s", e->hf);
        snprintf(m->gguf, sizeof m->gguf, "%s", e->gguf);
    }
    int f = e->flags;
    m->plus1 = (f & F_NORM) && p->arch == CV_QWEN35;
    m->force_f32 = (f & (F_NORM | F_F32)) != 0;
    m->neg_exp = (f & F_NEGEXP) != 0;
    m->conv = (f & F_CONV) != 0;
    bool permute = p->Hk > 0 && p->Hv != p->Hk;
    if (permute && (f & (F_ROWS_V | F_ROWS_ZV | F_ROWS_H))) {
        m->perm_rows = true;
        m->row0 = (f & F_ROWS_V) ? 2 * (int64_t)p->Hk * p->dk : 0;
        m->blk = (f & F_ROWS_H) ? 1 : p->dv;
    }
    if (permute && (f & F_COLS_V)) {
        m->perm_cols = true;
        m->blk = p->dv;
    }
}

int cv_map_from_hf(const cv_params *p, const char *hf, cv_map *m) {
    int layer = -1, n = 0;
    if (sscanf(hf, "layers.%d.%n", &layer, &n) == 1 && n > 0) {
        for (size_t i = 0; i < sizeof layer_tab / sizeof *layer_tab; i++)
            if (entry_applies(p, layer_tab[i].flags) && strcmp(hf + n, layer_tab[i].hf) == 0) {
                fill_map(p, &layer_tab[i], layer, m);
                return 0;
            }
        return -1;
    }
    for (size_t i = 0; i < sizeof global_tab / sizeof *global_tab; i++)
        if (strcmp(hf, global_tab[i].hf) == 0) {
            fill_map(p, &global_tab[i], -1, m);
            return 0;
        }
    return -1;
}

int cv_map_from_gguf(const cv_params *p, const char *gguf, cv_map *m) {
    int layer = -1, n = 0;
    if (sscanf(gguf, "blk.%d.%n", &layer, &n) == 1 && n > 0) {
        for (size_t i = 0; i < sizeof layer_tab / sizeof *layer_tab; i++)
            if (entry_applies(p, layer_tab[i].flags) && strcmp(gguf + n, layer_tab[i].gguf) == 0) {
                fill_map(p, &layer_tab[i], layer, m);
                return 0;
            }
        return -1;
    }
    for (size_t i = 0; i < sizeof global_tab / sizeof *global_tab; i++)
        if (strcmp(gguf, global_tab[i].gguf) == 0) {
            fill_map(p, &global_tab[i], -1, m);
            return 0;
        }
    return -1;
}

// ---- transform ----------------------------------------------------------------------------

// neg_exp_f32: ssm_a from A_log as the importer computes it (fp32 result of −exp in double).
static float neg_exp_f32(float a_log) { return (float)-exp((double)a_log); }

// a_log_of: an fp32 A_log whose neg_exp_f32 is exactly a when one exists near log(−a) (so that
// export → import reproduces ssm_a bit for bit), else the closest candidate.
static float a_log_of(float a) {
    if (!(a < 0)) return (float)log(-(double)a); // NaN / -inf for a >= 0: garbage in, garbage out
    float best = (float)log(-(double)a), x = best;
    double best_d = fabs((double)neg_exp_f32(best) - a);
    for (int k = 1; k <= 8 && best_d != 0; k++) {
        float up = x, dn = x;
        for (int s = 0; s < k; s++) {
            up = nextafterf(up, INFINITY);
            dn = nextafterf(dn, -INFINITY);
        }
        double du = fabs((double)neg_exp_f32(up) - a), dd = fabs((double)neg_exp_f32(dn) - a);
        if (du < best_d) best_d = du, best = up;
        if (dd < best_d) best_d = dd, best = dn;
    }
    return best;
}

// load_row: n elements of the source starting at element `first` (row-aligned for block types) as f32.
static int load_elems(const cv_job *j, int64_t first, int64_t n, float *out, char *err, size_t errlen) {
    int type = j->src_type;
    if (type == BN_F32 || type == BN_F16 || type == BN_BF16) {
        const uint8_t *s = (const uint8_t *)j->src + (size_t)first * cv_dtype_bytes(type);
        bn_st_to_f32(type, s, out, n);
        return 0;
    }
    int blck = bn_type_blck(type), bsz = bn_type_size(type);
    if (blck <= 0 || first % blck != 0 || n % blck != 0)
        return bn_err(err, errlen, "tensor %s: cannot dequantize type %s in rows of %lld", j->m->gguf,
                      bn_type_name(type), (long long)n);
    const uint8_t *s = (const uint8_t *)j->src + (size_t)(first / blck) * (size_t)bsz;
    if (bn_dequantize(type, s, out, n) != 0)
        return bn_err(err, errlen, "tensor %s: cannot dequantize type %s", j->m->gguf, bn_type_name(type));
    return 0;
}

// src_index: the source head-block index for destination index i within a permuted range.
static int64_t perm_src(const cv_job *j, int64_t i, int64_t start) {
    const cv_params *p = j->p;
    int64_t span = (int64_t)p->Hv * j->m->blk;
    if (i < start || i >= start + span) return i;
    int64_t h = (i - start) / j->m->blk, e = (i - start) % j->m->blk;
    int64_t hs = j->dir > 0 ? bn_vhead_to_hf((int)h, p->Hk, p->Hv) : bn_vhead_to_gguf((int)h, p->Hk, p->Hv);
    return start + hs * j->m->blk + e;
}

int cv_transform(const cv_job *j, void *dst, char *err, size_t errlen) {
    const cv_map *m = j->m;
    const bool one_d_perm = m->perm_rows && j->ne0 == j->n_el; // 1-D: permute elements
    const int64_t rowlen = one_d_perm ? 1 : j->ne0;
    const int64_t nrows = j->n_el / rowlen;
    const size_t dsz = cv_dtype_bytes(j->dst_type);
    int64_t buflen = one_d_perm ? j->n_el : rowlen;
    float *in = xmalloc(sizeof(float) * (size_t)buflen), *out = xmalloc(sizeof(float) * (size_t)rowlen);
    int rc = 0;
    if (one_d_perm) rc = load_elems(j, 0, j->n_el, in, err, errlen);
    for (int64_t r = 0; r < nrows && rc == 0; r++) {
        int64_t sr = m->perm_rows ? perm_src(j, r, m->row0) : r;
        const float *row;
        if (one_d_perm) row = in + sr;
        else {
            if (load_elems(j, sr * rowlen, rowlen, in, err, errlen) != 0) {
                rc = -1;
                break;
            }
            row = in;
        }
        for (int64_t c = 0; c < rowlen; c++) {
            int64_t sc = m->perm_cols ? perm_src(j, c, 0) : c;
            float x = row[sc];
            if (m->plus1) x = j->dir > 0 ? x + 1.0f : x - 1.0f;
            if (m->neg_exp) x = j->dir > 0 ? neg_exp_f32(x) : a_log_of(x);
            out[c] = x;
        }
        bn_st_from_f32(j->dst_type, out, (uint8_t *)dst + (size_t)(r * rowlen) * dsz, rowlen);
    }
    free(in);
    free(out);
    return rc;
}
