// quantize/rules.c — per-tensor type selection of llama-quantize (docs/formats.md §5), pure logic.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "quantize/rules.h"
#include "quant/quant.h"
#include "base/util.h"
#include <pcre2.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

// ---- ftype table ---------------------------------------------------------------------------

typedef struct {
    const char *name;    // TYPE argument spelling (case-insensitive)
    int ftype;
    int type;            // default bn_type
    const char *display; // llama.cpp's ftype display name
} ftype_row;

static const ftype_row ftype_rows[] = {
    {"Q1_0", BN_FTYPE_Q1_0, BN_Q1_0, "Q1_0"},
    {"Q2_0", BN_FTYPE_Q2_0, BN_Q2_0, "Q2_0"},
    {"PQ2_0", BN_FTYPE_PQ2_0, BN_PQ2_0, "PQ2_0"},
    {"Q2_0_G128", BN_FTYPE_PQ2_0, BN_PQ2_0, "PQ2_0"},
    {"PTQ1_0", BN_FTYPE_PTQ1_0, BN_PTQ1_0, "PTQ1_0"},
    {"Q4_0", BN_FTYPE_Q4_0, BN_Q4_0, "Q4_0"},
    {"Q4_1", BN_FTYPE_Q4_1, BN_Q4_1, "Q4_1"},
    {"Q8_0", BN_FTYPE_Q8_0, BN_Q8_0, "Q8_0"},
    {"Q6_K", BN_FTYPE_Q6_K, BN_Q6_K, "Q6_K"},
    {"Q5_0", BN_FTYPE_Q5_0, BN_Q5_0, "Q5_0"},
    {"Q5_1", BN_FTYPE_Q5_1, BN_Q5_1, "Q5_1"},
    {"Q4_K_M", BN_FTYPE_Q4_K_M, BN_Q4_K, "Q4_K - Medium"},
    {"Q4_K", BN_FTYPE_Q4_K_M, BN_Q4_K, "Q4_K - Medium"},   // llama-quantize's alias of Q4_K_M
    {"Q4_K_S", BN_FTYPE_Q4_K_S, BN_Q4_K, "Q4_K - Small"},
    {"Q5_K_M", BN_FTYPE_Q5_K_M, BN_Q5_K, "Q5_K - Medium"},
    {"Q5_K", BN_FTYPE_Q5_K_M, BN_Q5_K, "Q5_K - Medium"},   // llama-quantize's alias of Q5_K_M
    {"Q5_K_S", BN_FTYPE_Q5_K_S, BN_Q5_K, "Q5_K - Small"},
    {"TQ1_0", BN_FTYPE_TQ1_0, BN_TQ1_0, "TQ1_0 - 1.69 bpw ternary"},
    {"TQ2_0", BN_FTYPE_TQ2_0, BN_TQ2_0, "TQ2_0 - 2.06 bpw ternary"},
    {"F16", BN_FTYPE_F16, BN_F16, "F16"},
    {"BF16", BN_FTYPE_BF16, BN_BF16, "BF16"},
    {"F32", BN_FTYPE_ALL_F32, BN_F32, "all F32"},
};
#define N_FTYPE_ROWS (sizeof ftype_rows / sizeof ftype_rows[0])

// type_has_codec: true if this build can produce tensors of the type (plain or quantizer present).
static bool type_has_codec(int type) {
    if (type == BN_F32 || type == BN_F16 || type == BN_BF16) return true;
    const bn_type_traits *t = bn_type_traits_of(type);
    return t && t->from_float_ref;
}

int bn_parse_ftype(const char *s, bool q2_g128, int *ftype, int *default_type, char *err, size_t errlen) {
    const ftype_row *row = NULL;
    char *end = NULL;
    long num = strtol(s, &end, 10);
    bool numeric = end != s && *end == 0;
    for (size_t i = 0; i < N_FTYPE_ROWS && !row; i++)
        if (numeric ? ftype_rows[i].ftype == num : strcasecmp(ftype_rows[i].name, s) == 0) row = &ftype_rows[i];
    if (!row) return bn_err(err, errlen, "unknown output type '%s' (see --help for the list)", s);
    int type = row->type;
    if (type == BN_Q2_0 && q2_g128) type = BN_PQ2_0;
    *ftype = row->ftype;
    *default_type = type;
    return 0;
}

const char *bn_ftype_name(int ftype) {
    for (size_t i = 0; i < N_FTYPE_ROWS; i++)
        if (ftype_rows[i].ftype == ftype) return ftype_rows[i].display;
    switch (ftype) { // display only: types this build reads but does not produce
    case 10: return "Q2_K - Medium";
    default: return "?";
    }
}

int bn_parse_tensor_type_name(const char *s, bool q2_g128, char *err, size_t errlen) {
    int type = bn_type_from_name(s);
    if (type < 0) return bn_err(err, errlen, "unknown tensor type '%s'", s);
    if (type == BN_Q2_0 && q2_g128) type = BN_PQ2_0;
    if (!type_has_codec(type)) return bn_err(err, errlen, "tensor type '%s' has no quantizer in this build", s);
    return type;
}

// ---- rules object --------------------------------------------------------------------------

void bn_quant_rules_init(bn_quant_rules *r, int ftype, int default_type, bool q2_g128) {
    memset(r, 0, sizeof *r);
    r->ftype = ftype;
    r->default_type = default_type;
    r->q2_g128 = q2_g128;
    r->output_type = -1;
    r->token_embd_type = -1;
}

int bn_quant_rules_add_override(bn_quant_rules *r, const char *spec, char *err, size_t errlen) {
    const char *eq = strrchr(spec, '=');
    if (!eq || eq == spec || eq[1] == 0) return bn_err(err, errlen, "malformed --tensor-type '%s' (want REGEX=TYPE)", spec);
    if (r->n_overrides >= BN_QUANT_MAX_OVERRIDES)
        return bn_err(err, errlen, "too many --tensor-type rules (max %d)", BN_QUANT_MAX_OVERRIDES);
    int type = bn_parse_tensor_type_name(eq + 1, r->q2_g128, err, errlen);
    if (type < 0) return -1;
    size_t plen = (size_t)(eq - spec);
    char *pattern = xmalloc(plen + 1);
    for (size_t i = 0; i < plen; i++) pattern[i] = (char)tolower((unsigned char)spec[i]);
    pattern[plen] = 0;
    int errcode = 0;
    PCRE2_SIZE erroff = 0;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, 0, &errcode, &erroff, NULL);
    if (!code) {
        PCRE2_UCHAR msg[128];
        pcre2_get_error_message(errcode, msg, sizeof msg);
        bn_err(err, errlen, "bad --tensor-type regex '%s' at offset %zu: %s", pattern, (size_t)erroff, (char *)msg);
        free(pattern);
        return -1;
    }
    bn_tensor_override *o = &r->overrides[r->n_overrides++];
    o->pattern = pattern;
    o->type = type;
    o->code = code;
    return 0;
}

// is_attn_v_like: llama.cpp's category_is_attn_v (ATTENTION_V / QKV / KV_B by substring).
static bool is_attn_v_like(const char *name) {
    return strstr(name, "attn_qkv.weight") || strstr(name, "attn_kv_b.weight") || strstr(name, "attn_v.weight");
}

void bn_quant_rules_scan(bn_quant_rules *r, const char *const *names, size_t n_names, int n_layer) {
    r->tied = true;
    r->mix.n_layer = n_layer;
    r->mix.n_attention_wv = r->mix.i_attention_wv = r->mix.i_ffn_down = 0;
    for (size_t i = 0; i < n_names; i++) {
        if (strcmp(names[i], "output.weight") == 0) r->tied = false;
        else if (strcmp(names[i], "token_embd.weight") && strcmp(names[i], "per_layer_token_embd.weight") &&
                 is_attn_v_like(names[i]))
            r->mix.n_attention_wv++;
    }
}

void bn_quant_rules_free(bn_quant_rules *r) {
    for (int i = 0; i < r->n_overrides; i++) {
        free(r->overrides[i].pattern);
        pcre2_code_free((pcre2_code *)r->overrides[i].code);
    }
    r->n_overrides = 0;
}

// regex_search: true if the compiled pattern matches anywhere in s.
static bool regex_search(void *code, const char *s) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern((pcre2_code *)code, NULL);
    int rc = pcre2_match((pcre2_code *)code, (PCRE2_SPTR)s, strlen(s), 0, 0, md, NULL);
    pcre2_match_data_free(md);
    return rc >= 0;
}

// ---- §5.1 which tensors may be quantized --------------------------------------------------

static bool contains(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

bool bn_tensor_allows_quantization(const char *name, int n_dims, bool leave_output) {
    static const char *const never[] = {
        "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj",
        "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight",
        "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
        "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight",
        "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight",
        "time_mix_decay_w1.weight", "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight",
        ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger",
        "a.rvq.codebook", "mm.a.code_embd",
    };
    if (n_dims < 2 || !ends_with(name, "weight")) return false;
    if (leave_output && strcmp(name, "output.weight") == 0) return false;
    if (strcmp(name, "position_embd.weight") == 0 || strcmp(name, "token_types.weight") == 0) return false;
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        if (contains(name, never[i])) return false;
    return true;
}

// ---- §5.2–5.4 type selection --------------------------------------------------------------

static bool is_token_embd(const char *name) {
    return strcmp(name, "token_embd.weight") == 0 || strcmp(name, "per_layer_token_embd.weight") == 0;
}

static bool is_output(const char *name) { return strcmp(name, "output.weight") == 0; }

// is_compact_ftype: targets whose default keeps output/token_embd low-bit (bonsai's rule).
static bool is_compact_ftype(int ftype) {
    return ftype == BN_FTYPE_Q1_0 || ftype == BN_FTYPE_Q2_0 || ftype == BN_FTYPE_PQ2_0 || ftype == BN_FTYPE_PTQ1_0;
}

static bool is_quantized_type(int type) {
    const bn_type_traits *t = bn_type_traits_of(type);
    return t && t->is_quantized;
}

// use_more_bits: llama.cpp's layer pattern (first and last eighth, every third layer between).
static bool use_more_bits(int i_layer, int n_layers) {
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

// layer_mixture_type: the attn_v-like and ffn_down rules of llama-quantize for the ftypes bonsai
// produces (Q4_K_M / Q5_K_M / Q4_K_S bumps; MoE, 70B and falcon special cases are not modelled); advances
// the counters for every ftype, as llama.cpp does.
static int layer_mixture_type(bn_quant_rules *r, const char *name, int type) {
    bool scanned = r->mix.n_layer > 0;
    if (is_attn_v_like(name)) {
        int i = r->mix.i_attention_wv++;
        if (!scanned) return type;
        bool km = r->ftype == BN_FTYPE_Q4_K_M || r->ftype == BN_FTYPE_Q5_K_M;
        if (km && use_more_bits(i, r->mix.n_attention_wv)) return BN_Q6_K;
        if (r->ftype == BN_FTYPE_Q4_K_S && i < 4) return BN_Q5_K;
        return type;
    }
    if (strstr(name, "attn_k.weight") || strstr(name, "attn_q.weight") || strstr(name, "attn_output.weight"))
        return type;   // categories checked before ffn_down in llama.cpp: no rule for these ftypes
    if (!strstr(name, "ffn_up") && !strstr(name, "ffn_gate") && strstr(name, "ffn_down")) {
        int i_layer = r->mix.i_ffn_down++, n_layer = r->mix.n_layer;
        if (!scanned) return type;
        bool km = r->ftype == BN_FTYPE_Q4_K_M || r->ftype == BN_FTYPE_Q5_K_M;
        if (km && use_more_bits(i_layer, n_layer)) return BN_Q6_K;
        if (r->ftype == BN_FTYPE_Q4_K_S && i_layer < n_layer / 8) return BN_Q5_K;
    }
    return type;
}

// mixture_type: §5.3 for the ftypes bonsai supports.
static int mixture_type(bn_quant_rules *r, const char *name, const int64_t *ne, int type) {
    bool llama_rules = r->llama_mix || !is_compact_ftype(r->ftype);
    if (is_output(name) || (r->tied && is_token_embd(name))) {
        if (r->output_type >= 0) return r->output_type;
        if (!llama_rules) return type;
        if (ne[0] % bn_type_blck(type) != 0) return BN_Q8_0;
        return type != BN_Q8_0 ? BN_Q6_K : type;
    }
    if (is_token_embd(name)) {
        if (r->token_embd_type >= 0) return r->token_embd_type;
        bool q4k_embd = r->ftype == BN_FTYPE_TQ1_0 || r->ftype == BN_FTYPE_TQ2_0 || r->ftype == BN_FTYPE_Q2_0 ||
                        r->ftype == BN_FTYPE_PQ2_0 || r->ftype == BN_FTYPE_PTQ1_0;
        if (llama_rules && q4k_embd) return BN_Q4_K;
        return type;
    }
    return layer_mixture_type(r, name, type);
}

int bn_type_shape_fallback(int type, int64_t ncols) {
    int blck = bn_type_blck(type);
    if (blck == 0) return -1;
    if (ncols % blck == 0) return type;
    int ret;
    switch (type) {
    case BN_Q2_0:
    case BN_PQ2_0:
    case BN_PTQ1_0:
    case BN_TQ1_0:
    case BN_TQ2_0: ret = BN_Q4_0; break;
    case BN_Q6_K: ret = BN_Q8_0; break;
    case BN_Q4_K: ret = BN_Q5_0; break;
    case BN_Q5_K: ret = BN_Q5_1; break;
    default:
        if (blck > 32) return -1;
        ret = type;
    }
    return ncols % bn_type_blck(ret) == 0 ? ret : BN_F16;
}

// fallback_type: §5.4; returns the type to use, or -1 with err filled.
static int fallback_type(const char *name, int64_t ncols, int type, bn_tensor_choice *out, char *err, size_t errlen) {
    int blck = bn_type_blck(type);
    if (blck == 0)
        return bn_err(err, errlen, "%s: the mixture asks for type %d, which this build does not implement", name, type);
    int ret = bn_type_shape_fallback(type, ncols);
    if (ret == type) return type;
    if (ret < 0)
        return bn_err(err, errlen, "%s: ncols %lld not divisible by %d (required for type %s): no tensor type fallback "
                      "is defined for type %s", name, (long long)ncols, blck, bn_type_name(type), bn_type_name(type));
    const char *f16_note = ret == BN_F16 ? "(WARNING: must use F16 due to unusual shape) " : "";
    out->fallback = true;
    snprintf(out->warning, sizeof out->warning, "warning: %-36s - ncols %6lld not divisible by %3d (required for type %7s) "
             "%s-> falling back to %7s", name, (long long)ncols, blck, bn_type_name(type), f16_note, bn_type_name(ret));
    return ret;
}

int bn_tensor_choose_type(bn_quant_rules *r, const char *name, int n_dims, const int64_t *ne, int src_type,
                          bn_tensor_choice *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->type = src_type;
    if (!bn_tensor_allows_quantization(name, n_dims, r->leave_output)) return 0;
    out->quantizable = true;
    // 1–2: explicit token-embedding / output types, no shape fallback
    if (r->token_embd_type >= 0 && is_token_embd(name)) {
        out->type = r->token_embd_type;
        return 0;
    }
    if (r->output_type >= 0 && is_output(name)) {
        out->type = r->output_type;
        return 0;
    }
    // 3: plain-float ftypes take every quantizable tensor as is
    int type = r->default_type;
    if (!is_quantized_type(type)) {
        out->type = type;
        return 0;
    }
    // 4: first matching --tensor-type pattern
    for (int i = 0; i < r->n_overrides && !out->manual; i++) {
        if (!regex_search(r->overrides[i].code, name)) continue;
        if (r->overrides[i].type != type)
            snprintf(out->warning, sizeof out->warning, "%-36s - applying manual override: %s -> %s", name,
                     bn_type_name(type), bn_type_name(r->overrides[i].type));
        type = r->overrides[i].type;
        out->manual = true;
    }
    // 5: mixture rules
    if (!out->manual && !r->pure) type = mixture_type(r, name, ne, type);
    // 6: shape fallback (plain-float targets never need one)
    if (is_quantized_type(type)) {
        type = fallback_type(name, ne[0], type, out, err, errlen);
        if (type < 0) return -1;
    }
    out->type = type;
    return 0;
}

// ---- §5.5 tensor order ---------------------------------------------------------------------

static int layer_of(const char *name) {
    int layer = -1;
    sscanf(name, "blk.%d.", &layer);
    return layer;
}

int bn_tensor_order_cmp(const char *a, const char *b) {
    int la = layer_of(a), lb = layer_of(b);
    if (la != lb) return la < lb ? -1 : 1;
    return strcmp(a, b);
}
