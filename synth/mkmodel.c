// synth/mkmodel.c — random-weight qwen35 / qwen3 GGUF generator (F32 / F16 / BF16, or Q1_0 / Q2_0 quantized
// as generated). See synth/mkmodel.h.
// Keys: docs/model.md §2 (qwen35), §7 (qwen3), docs/formats.md §8. Tensors: docs/model.md §3. Tensor order:
// docs/formats.md §5.5 (layer number, then strcmp of the name).
#include "synth/mkmodel.h"
#include "base/rng.h"
#include "gguf/gguf.h"
#include "base/util.h"
#include "quant/quant.h"
#include "quantize/rules.h"
#include "base/threads.h"
#include <math.h>
#include <string.h>
#include <stdlib.h>
#include <strings.h>

// ---- presets ------------------------------------------------------------------------------

int bn_mkmodel_defaults(bn_mkmodel_params *p, const char *preset) {
    memset(p, 0, sizeof *p);
    // tiny qwen35 (see the header for why H/F/hd/dk are twice docs/model.md §6.2's tiny model)
    p->arch = "qwen35";
    p->n_embd = 128;
    p->n_layer = 4;
    p->n_ff = 256;
    p->n_head = 4;
    p->n_head_kv = 2;
    p->head_dim = 32;
    p->n_rot = 8;
    p->rope_base = 1e7f;
    p->norm_eps = 1e-6f;
    p->ctx = 4096;
    p->ssm_d_state = 32;
    p->ssm_n_group = 2;
    p->ssm_dt_rank = 4;
    p->ssm_conv_kernel = 4;
    p->full_attn_interval = 4;
    p->tied = false;
    p->vocab = NULL;
    p->n_vocab_small = 512;
    p->seed = 42;
    p->type = BN_F32;
    p->logit_scale = 4.0f;
    p->name = NULL;
    if (!preset || strcasecmp(preset, "tiny") == 0) return 0;
    if (strcasecmp(preset, "small") == 0) {
        p->n_embd = 512;
        p->n_layer = 8;
        p->n_ff = 1536;
        p->head_dim = 128;
        p->n_rot = 32;
        p->ssm_d_state = 128;
        p->n_vocab_small = 4096;
        return 0;
    }
    if (strcasecmp(preset, "mid") == 0) { // Qwen3.5-0.8B shapes (docs/model.md §6.2)
        p->n_embd = 1024;
        p->n_layer = 24;
        p->n_ff = 3584;
        p->n_head = 8;
        p->n_head_kv = 2;
        p->head_dim = 256;
        p->n_rot = 64;
        p->ssm_d_state = 128;
        p->ssm_n_group = 16;
        p->ssm_dt_rank = 16;
        p->tied = true;
        p->n_vocab_small = 248320;
        p->ctx = 262144;
        p->type = BN_F16;
        return 0;
    }
    if (strcasecmp(preset, "27b") == 0) { // Qwen3.5-27B (docs/model.md §2, §6.1)
        p->n_embd = 5120;
        p->n_layer = 64;
        p->n_ff = 17408;
        p->n_head = 24;
        p->n_head_kv = 4;
        p->head_dim = 256;
        p->n_rot = 64;
        p->ssm_d_state = 128;
        p->ssm_n_group = 16;
        p->ssm_dt_rank = 48;
        p->n_vocab_small = 248320;
        p->ctx = 262144;
        p->type = BN_F16;
        return 0;
    }
    if (strcasecmp(preset, "qwen3-tiny") == 0) {
        p->arch = "qwen3";
        p->n_layer = 2;
        p->n_rot = 32;
        p->rope_base = 1e6f;
        p->tied = true;
        return 0;
    }
    if (strcasecmp(preset, "qwen3-1.7b") == 0) { // docs/model.md §6.3
        p->arch = "qwen3";
        p->n_embd = 2048;
        p->n_layer = 28;
        p->n_ff = 6144;
        p->n_head = 16;
        p->n_head_kv = 8;
        p->head_dim = 128;
        p->n_rot = 128;
        p->rope_base = 1e6f;
        p->ctx = 40960;
        p->tied = true;
        p->n_vocab_small = 151936;
        p->type = BN_F16;
        return 0;
    }
    return -1;
}

static bool is_qwen35(const bn_mkmodel_params *p) { return strcmp(p->arch, "qwen35") == 0; }
static int check_blocks(const bn_mkmodel_params *p, char *err, size_t errlen);

int bn_mkmodel_check(const bn_mkmodel_params *p, char *err, size_t errlen) {
    if (!p->arch || (strcmp(p->arch, "qwen35") != 0 && strcmp(p->arch, "qwen3") != 0))
        return bn_err(err, errlen, "mkmodel: arch must be qwen35 or qwen3");
    if (p->n_embd <= 0 || p->n_layer <= 0 || p->n_ff <= 0 || p->n_head <= 0 || p->n_head_kv <= 0 || p->head_dim <= 0)
        return bn_err(err, errlen, "mkmodel: n_embd, n_layer, n_ff, n_head, n_head_kv, head_dim must be > 0");
    if (p->n_head % p->n_head_kv != 0)
        return bn_err(err, errlen, "mkmodel: n_head %d is not a multiple of n_head_kv %d", p->n_head, p->n_head_kv);
    if (p->n_rot <= 0 || p->n_rot > p->head_dim || p->n_rot % 2 != 0)
        return bn_err(err, errlen, "mkmodel: n_rot %d must be even and in 2..head_dim (%d)", p->n_rot, p->head_dim);
    if (p->ctx <= 0) return bn_err(err, errlen, "mkmodel: ctx must be > 0");
    if (p->type != BN_F32 && p->type != BN_F16 && p->type != BN_BF16 && p->type != BN_Q1_0 && p->type != BN_Q2_0)
        return bn_err(err, errlen, "mkmodel: type must be f32, f16, bf16, q1_0 or q2_0");
    if (!p->vocab && p->n_vocab_small < 262)
        return bn_err(err, errlen, "mkmodel: n_vocab_small %d < 262 (256 bytes + 3 specials + merges)",
                      p->n_vocab_small);
    if (is_qwen35(p)) {
        if (p->ssm_d_state <= 0 || p->ssm_n_group <= 0 || p->ssm_dt_rank <= 0 || p->ssm_conv_kernel <= 0)
            return bn_err(err, errlen, "mkmodel: ssm sizes must be > 0");
        if (p->ssm_dt_rank % p->ssm_n_group != 0)
            return bn_err(err, errlen, "mkmodel: ssm_dt_rank (Hv) %d is not a multiple of ssm_n_group (Hk) %d",
                          p->ssm_dt_rank, p->ssm_n_group);
        if (p->full_attn_interval <= 0) return bn_err(err, errlen, "mkmodel: full_attn_interval must be > 0");
    }
    return check_blocks(p, err, errlen);
}

// ---- synthetic byte-level BPE vocabulary --------------------------------------------------

typedef struct {
    char **tokens;
    int32_t *types;
    char **merges;
    int n_tokens, n_merges, cap;
    int eos;
} vocab;

// byte_to_utf8: the GPT-2 bytes_to_unicode char of byte b, UTF-8 encoded into out (NUL-terminated).
static void byte_to_utf8(int b, char *out) {
    int cp;
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) cp = b;
    else {
        int k = 0; // rank of b among the remapped bytes 0-32, 127-160, 173
        for (int x = 0; x < b; x++)
            if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) k++;
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

static int vocab_find(const vocab *v, const char *s) {
    for (int i = 0; i < v->n_tokens; i++)
        if (strcmp(v->tokens[i], s) == 0) return i;
    return -1;
}

static void vocab_push(vocab *v, char *tok, int32_t type) {
    if (v->n_tokens == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 1024;
        v->tokens = xrealloc(v->tokens, v->cap * sizeof(char *));
        v->types = xrealloc(v->types, v->cap * sizeof(int32_t));
        v->merges = xrealloc(v->merges, v->cap * sizeof(char *));
    }
    v->tokens[v->n_tokens] = tok;
    v->types[v->n_tokens++] = type;
}

// try_merge: adds merge "a b" and token a+b if both parts exist and a+b is new; returns 1 if added.
static int try_merge(vocab *v, const char *a, const char *b) {
    char merged[64];
    snprintf(merged, sizeof merged, "%s%s", a, b);
    if (vocab_find(v, a) < 0 || vocab_find(v, b) < 0 || vocab_find(v, merged) >= 0) return 0;
    size_t n = strlen(a) + strlen(b) + 2;
    char *m = xmalloc(n);
    snprintf(m, n, "%s %s", a, b);
    v->merges[v->n_merges++] = m;
    vocab_push(v, xstrdup(merged), 1);
    return 1;
}

#define G "\xc4\xa0" // 'Ġ' = byte-level space

static void vocab_build(vocab *v, int n_vocab) {
    memset(v, 0, sizeof *v);
    for (int b = 0; b < 256; b++) {
        char s[4];
        byte_to_utf8(b, s);
        vocab_push(v, xstrdup(s), 1);
    }
    int max_merges = n_vocab - 256 - 3;
    // ordered so that greedy BPE reaches the word tokens (" the" -> Ġt + he -> Ġthe)
    static const char *const seed_merges[][2] = {
        {G, "t"}, {G, "a"}, {G, "s"}, {G, "w"}, {G, "o"}, {G, "i"}, {G, "b"}, {G, "c"}, {G, "f"}, {G, "h"},
        {"h", "e"}, {"i", "n"}, {"e", "r"}, {"a", "n"}, {"r", "e"}, {"o", "n"}, {"a", "t"}, {"e", "n"}, {"n", "d"},
        {"o", "r"}, {"e", "s"}, {"i", "s"}, {"o", "u"}, {"i", "t"}, {"e", "d"}, {"n", "g"}, {"s", "t"}, {"t", "h"},
        {G "t", "he"}, {G "a", "nd"}, {G "o", "f"}, {G "i", "s"}, {G "i", "t"}, {"in", "g"}, {G "t", "o"},
        {"a", "s"}, {G "w", "as"}, {G, G}, {G "o", "n"}, {G "h", "er"}, {"l", "l"}, {"l", "y"}, {"c", "e"},
        {".", "\xc4\x8a"}, {",", G},
    };
    size_t n_seed = sizeof seed_merges / sizeof seed_merges[0];
    for (size_t i = 0; i < n_seed && v->n_merges < max_merges; i++) try_merge(v, seed_merges[i][0], seed_merges[i][1]);
    // "Ġx" for every lower/upper-case letter, then every letter pair, then "Ġx" + letter
    char a[8], b[8];
    for (int c = 'a'; c <= 'z' && v->n_merges < max_merges; c++) {
        snprintf(b, sizeof b, "%c", c);
        try_merge(v, G, b);
    }
    for (int c = 'A'; c <= 'Z' && v->n_merges < max_merges; c++) {
        snprintf(b, sizeof b, "%c", c);
        try_merge(v, G, b);
    }
    for (int x = 'a'; x <= 'z'; x++)
        for (int y = 'a'; y <= 'z' && v->n_merges < max_merges; y++) {
            snprintf(a, sizeof a, "%c", x);
            snprintf(b, sizeof b, "%c", y);
            try_merge(v, a, b);
        }
    for (int x = 'a'; x <= 'z'; x++)
        for (int y = 'a'; y <= 'z' && v->n_merges < max_merges; y++) {
            snprintf(a, sizeof a, G "%c", x);
            snprintf(b, sizeof b, "%c", y);
            try_merge(v, a, b);
        }
    v->eos = v->n_tokens;
    vocab_push(v, xstrdup("<|endoftext|>"), 3);
    vocab_push(v, xstrdup("<|im_start|>"), 3);
    vocab_push(v, xstrdup("<|im_end|>"), 3);
    while (v->n_tokens < n_vocab) {
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%d]", v->n_tokens);
        vocab_push(v, xstrdup(pad), 5);
    }
}

static void vocab_free(vocab *v) {
    for (int i = 0; i < v->n_tokens; i++) free(v->tokens[i]);
    for (int i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens);
    free(v->types);
    free(v->merges);
}

static const char chatml_template[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

// set_vocab: writes the tokenizer KVs; returns the vocab size or -1 (err filled).
static int64_t set_vocab(gguf_writer *w, const bn_mkmodel_params *p, char *err, size_t errlen) {
    if (p->vocab) {
        char sub[512];
        gguf_file *f = gguf_open(p->vocab, sub, sizeof sub);
        if (!f) return bn_err(err, errlen, "mkmodel: vocab: %s", sub);
        const gguf_kv *toks = gguf_get_arr(f, "tokenizer.ggml.tokens");
        if (!toks || toks->arr_type != GGUF_TYPE_STRING || toks->n == 0) {
            gguf_close(f);
            return bn_err(err, errlen, "mkmodel: vocab %s has no tokenizer.ggml.tokens string array", p->vocab);
        }
        int64_t n = (int64_t)toks->n;
        for (size_t i = 0; i < f->n_kv; i++)
            if (strncmp(f->kv[i].key, "tokenizer.", 10) == 0) gguf_set_kv(w, &f->kv[i]);
        gguf_close(f);
        return n;
    }
    vocab v;
    vocab_build(&v, p->n_vocab_small);
    gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_set_str(w, "tokenizer.ggml.pre", "qwen35");
    gguf_set_arr_str(w, "tokenizer.ggml.tokens", (uint64_t)v.n_tokens, (const char *const *)v.tokens);
    gguf_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, (uint64_t)v.n_tokens, v.types);
    gguf_set_arr_str(w, "tokenizer.ggml.merges", (uint64_t)v.n_merges, (const char *const *)v.merges);
    gguf_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v.eos);
    gguf_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)v.eos);
    gguf_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v.eos);
    gguf_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    gguf_set_str(w, "tokenizer.chat_template", chatml_template);
    int64_t n = v.n_tokens;
    vocab_free(&v);
    return n;
}

// ---- tensor list --------------------------------------------------------------------------

enum init_kind {
    INIT_LINEAR,  // uniform, std 1/sqrt(ne0)
    INIT_EMBD,    // uniform, std 1
    INIT_OUTPUT,  // uniform, std logit_scale/sqrt(ne0)
    INIT_NORM,    // 1 + uniform(-0.05, 0.05)
    INIT_SSM_A,   // -exp(A_log), A in [1, 8]
    INIT_SSM_DT,  // dt_bias = softplus^-1(dt), dt log-uniform in [0.001, 0.1]
    INIT_CONV,    // uniform(-0.5, 0.5)
};

typedef struct {
    char name[GGUF_MAX_NAME + 1];
    int n_dims;
    int64_t ne[2];
    int type;
    int kind;
    int layer; // -1 for global tensors
} tspec;

typedef struct {
    tspec *t;
    int n, cap;
} tlist;

static void add_t(tlist *l, const bn_mkmodel_params *p, int layer, const char *suffix, int n_dims, int64_t ne0,
                  int64_t ne1, int kind) {
    if (l->n == l->cap) l->t = xrealloc(l->t, (l->cap = l->cap ? 2 * l->cap : 64) * sizeof(tspec));
    tspec *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    if (layer >= 0) snprintf(t->name, sizeof t->name, "blk.%d.%s", layer, suffix);
    else snprintf(t->name, sizeof t->name, "%s", suffix);
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->type = n_dims == 2 && kind != INIT_CONV ? p->type : BN_F32;
    t->kind = kind;
    t->layer = layer;
}

static int cmp_tspec(const void *a, const void *b) {
    const tspec *x = a, *y = b;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    return strcmp(x->name, y->name);
}

// build_tensors: the full tensor list of the model in llama-quantize order.
static void build_tensors(tlist *l, const bn_mkmodel_params *p, int64_t n_vocab) {
    const int64_t H = p->n_embd, F = p->n_ff, hd = p->head_dim;
    const int64_t q_rows = (int64_t)p->n_head * hd, kv_rows = (int64_t)p->n_head_kv * hd;
    memset(l, 0, sizeof *l);
    add_t(l, p, -1, "token_embd.weight", 2, H, n_vocab, p->tied ? INIT_OUTPUT : INIT_EMBD);
    add_t(l, p, -1, "output_norm.weight", 1, H, 1, INIT_NORM);
    if (!p->tied) add_t(l, p, -1, "output.weight", 2, H, n_vocab, INIT_OUTPUT);
    for (int il = 0; il < p->n_layer; il++) {
        add_t(l, p, il, "attn_norm.weight", 1, H, 1, INIT_NORM);
        add_t(l, p, il, "ffn_gate.weight", 2, H, F, INIT_LINEAR);
        add_t(l, p, il, "ffn_up.weight", 2, H, F, INIT_LINEAR);
        add_t(l, p, il, "ffn_down.weight", 2, F, H, INIT_LINEAR);
        if (!is_qwen35(p)) { // dense qwen3 (docs/model.md §7)
            add_t(l, p, il, "ffn_norm.weight", 1, H, 1, INIT_NORM);
            add_t(l, p, il, "attn_q.weight", 2, H, q_rows, INIT_LINEAR);
            add_t(l, p, il, "attn_k.weight", 2, H, kv_rows, INIT_LINEAR);
            add_t(l, p, il, "attn_v.weight", 2, H, kv_rows, INIT_LINEAR);
            add_t(l, p, il, "attn_output.weight", 2, q_rows, H, INIT_LINEAR);
            add_t(l, p, il, "attn_q_norm.weight", 1, hd, 1, INIT_NORM);
            add_t(l, p, il, "attn_k_norm.weight", 1, hd, 1, INIT_NORM);
            continue;
        }
        add_t(l, p, il, "post_attention_norm.weight", 1, H, 1, INIT_NORM);
        if ((il + 1) % p->full_attn_interval == 0) { // gated attention (docs/model.md §3)
            add_t(l, p, il, "attn_q.weight", 2, H, 2 * q_rows, INIT_LINEAR);
            add_t(l, p, il, "attn_k.weight", 2, H, kv_rows, INIT_LINEAR);
            add_t(l, p, il, "attn_v.weight", 2, H, kv_rows, INIT_LINEAR);
            add_t(l, p, il, "attn_output.weight", 2, q_rows, H, INIT_LINEAR);
            add_t(l, p, il, "attn_q_norm.weight", 1, hd, 1, INIT_NORM);
            add_t(l, p, il, "attn_k_norm.weight", 1, hd, 1, INIT_NORM);
        } else { // Gated DeltaNet
            const int64_t dk = p->ssm_d_state, Hk = p->ssm_n_group, Hv = p->ssm_dt_rank;
            const int64_t conv_dim = 2 * Hk * dk + Hv * dk;
            add_t(l, p, il, "attn_qkv.weight", 2, H, conv_dim, INIT_LINEAR);
            add_t(l, p, il, "attn_gate.weight", 2, H, Hv * dk, INIT_LINEAR);
            add_t(l, p, il, "ssm_beta.weight", 2, H, Hv, INIT_LINEAR);
            add_t(l, p, il, "ssm_alpha.weight", 2, H, Hv, INIT_LINEAR);
            add_t(l, p, il, "ssm_conv1d.weight", 2, p->ssm_conv_kernel, conv_dim, INIT_CONV);
            add_t(l, p, il, "ssm_dt.bias", 1, Hv, 1, INIT_SSM_DT);
            add_t(l, p, il, "ssm_a", 1, Hv, 1, INIT_SSM_A);
            add_t(l, p, il, "ssm_norm.weight", 1, dk, 1, INIT_NORM);
            add_t(l, p, il, "ssm_out.weight", 2, Hv * dk, H, INIT_LINEAR);
        }
    }
    qsort(l->t, l->n, sizeof(tspec), cmp_tspec);
}

int64_t bn_mkmodel_n_params(const bn_mkmodel_params *p, int64_t n_vocab) {
    tlist l;
    build_tensors(&l, p, n_vocab);
    int64_t n = 0;
    for (int i = 0; i < l.n; i++) n += l.t[i].ne[0] * l.t[i].ne[1];
    free(l.t);
    return n;
}

// check_blocks: every tensor of the weight type has ne0 a multiple of the type's block (the presets' shapes all do;
// a quantized type refuses the others rather than falling back to another type); 0 or -1 with err.
static int check_blocks(const bn_mkmodel_params *p, char *err, size_t errlen) {
    const int blck = bn_type_blck(p->type);
    if (blck <= 1) return 0;
    tlist l;
    build_tensors(&l, p, 1);
    int rc = 0;
    for (int i = 0; i < l.n && rc == 0; i++)
        if (l.t[i].type == p->type && l.t[i].ne[0] % blck != 0)
            rc = bn_err(err, errlen, "mkmodel: %s: ne0 %lld is not a multiple of the %s block (%d)", l.t[i].name,
                        (long long)l.t[i].ne[0], bn_type_name(p->type), blck);
    free(l.t);
    return rc;
}

// ---- random numbers: splitmix64 seeds a xoshiro256** per tensor ------------------------------


// rng_for: the generator of one tensor, from (seed, tensor name) so the order does not matter.
static void rng_for(bn_rng *r, uint64_t seed, const char *name) {
    uint64_t h = 0xcbf29ce484222325ull; // FNV-1a
    for (const char *c = name; *c; c++) h = (h ^ (uint8_t)*c) * 0x100000001b3ull;
    bn_rng_seed(r, seed ^ h);
}

// ---- jumping a tensor's generator ahead ------------------------------------------------------
// Every element takes one draw, so row j of a tensor starts j·ne0 draws into its generator. xoshiro256**'s state update
// is linear over GF(2): a 256×256 bit matrix M, and n draws ahead is M^n (square and multiply, ~60 products of
// 256×256 bits for n ~ 2^31: milliseconds), so a large tensor's rows are made in chunks on several threads and the
// bytes are those of one generator run from the first row to the last.

typedef struct {
    uint64_t c[256][4]; // column j: M applied to the state with bit j alone set
} gf2_mat;

// gf2_apply: out = m · v (out may be v).
static void gf2_apply(const gf2_mat *m, const uint64_t v[4], uint64_t out[4]) {
    uint64_t r[4] = {0, 0, 0, 0};
    for (int j = 0; j < 256; j++)
        if ((v[j >> 6] >> (j & 63)) & 1)
            for (int w = 0; w < 4; w++) r[w] ^= m->c[j][w];
    memcpy(out, r, sizeof r);
}

// gf2_mul: out = a · b (out neither a nor b).
static void gf2_mul(const gf2_mat *a, const gf2_mat *b, gf2_mat *out) {
    for (int j = 0; j < 256; j++) gf2_apply(a, b->c[j], out->c[j]);
}

// rng_jump_matrix: *out = M^n, the state n draws ahead as a function of the state now.
static void rng_jump_matrix(uint64_t n, gf2_mat *out) {
    gf2_mat *base = xmalloc(sizeof *base), *tmp = xmalloc(sizeof *tmp);
    memset(out, 0, sizeof *out);
    for (int j = 0; j < 256; j++) {
        bn_rng r;
        memset(&r, 0, sizeof r);
        r.s[j >> 6] = 1ull << (j & 63);
        bn_rng_next(&r);
        memcpy(base->c[j], r.s, sizeof r.s);
        out->c[j][j >> 6] = 1ull << (j & 63); // the identity
    }
    for (; n; n >>= 1) { // powers of M commute: the order of the products does not matter
        if (n & 1) {
            gf2_mul(base, out, tmp);
            *out = *tmp;
        }
        if (n > 1) {
            gf2_mul(base, base, tmp);
            *base = *tmp;
        }
    }
    free(base);
    free(tmp);
}

// ---- fill ---------------------------------------------------------------------------------
// gguf_writer_write asks for the tensors in file order, one at a time. The first request of a batch generates the
// batch's tensors in parallel, the following requests copy them out. The work items are chunks of rows (at most
// CHUNK_ELEMS elements; with one thread a whole tensor), each starting from its rows' generator state (jumped to), so
// the bytes do not depend on the thread count or on which thread makes which chunk.

#define CHUNK_ELEMS ((int64_t)1 << 20)    // elements per work item (a row more where one row is longer)
#define BATCH_TENSORS 256                 // tensors per batch at most
#define BATCH_BYTES ((size_t)1 << 30)     // bytes per batch (a larger tensor makes a batch of its own)

typedef struct {
    int t;              // tensor index
    int64_t r0, r1;     // rows [r0, r1)
    uint64_t s[4];      // the generator's state at row r0
} gen_chunk;

typedef struct {
    uint64_t n;         // draws
    gf2_mat *m;         // M^n
} jump_entry;

typedef struct {
    const bn_mkmodel_params *p;
    const tlist *l;
    const size_t *nbytes; // [l->n] bytes of each tensor in the file
    bn_progress prog;
    int64_t done;
    bn_pool *pool;
    int n_threads;
    int b0, b1;           // the batch generated: tensors [b0, b1), tensor b0 + k in buf[k]
    uint8_t *buf[BATCH_TENSORS];
    size_t cap[BATCH_TENSORS];
    gen_chunk *chunks;    // the batch's work items
    int64_t n_chunks, chunks_cap;
    jump_entry jumps[16]; // jump matrices by draw count (a shape has a few row lengths)
    int n_jumps;
    float **rows;         // [threads] {max ne0} scratch rows
} fill_ctx;

static void gen_row(bn_rng *r, const tspec *t, float logit_scale, float *row) {
    const int64_t n = t->ne[0];
    const float sqrt3 = 1.7320508f;
    switch (t->kind) {
    case INIT_LINEAR:
    case INIT_EMBD:
    case INIT_OUTPUT: {
        float std = t->kind == INIT_EMBD ? 1.0f : 1.0f / sqrtf((float)n);
        if (t->kind == INIT_OUTPUT) std *= logit_scale;
        float amp = sqrt3 * std; // uniform(-amp, amp) has this std
        for (int64_t i = 0; i < n; i++) row[i] = (2.0f * bn_rng_uniform_f24(r) - 1.0f) * amp;
        break;
    }
    case INIT_NORM:
        for (int64_t i = 0; i < n; i++) row[i] = 1.0f + (2.0f * bn_rng_uniform_f24(r) - 1.0f) * 0.05f;
        break;
    case INIT_SSM_A:
        for (int64_t i = 0; i < n; i++) row[i] = -(1.0f + 7.0f * bn_rng_uniform_f24(r)); // -exp(log(A)), A in [1, 8]
        break;
    case INIT_SSM_DT:
        for (int64_t i = 0; i < n; i++) {
            float dt = expf(logf(0.001f) + bn_rng_uniform_f24(r) * (logf(0.1f) - logf(0.001f)));
            row[i] = dt + logf(-expm1f(-dt)); // inverse softplus
        }
        break;
    case INIT_CONV:
        for (int64_t i = 0; i < n; i++) row[i] = bn_rng_uniform_f24(r) - 0.5f;
        break;
    }
}

// gen_rows: rows [r0, r1) of tensor t into dst (its row r0), continuing generator r; fp32 rows made in row.
static void gen_rows(const tspec *t, bn_rng *r, float logit_scale, int64_t r0, int64_t r1, uint8_t *dst, float *row) {
    const size_t row_bytes = bn_row_size(t->type, t->ne[0]);
    const bn_type_traits *q = bn_type_traits_of(t->type);
    for (int64_t j = r0; j < r1; j++) {
        uint8_t *out = dst + (size_t)(j - r0) * row_bytes;
        float *x = t->type == BN_F32 ? (float *)out : row;
        gen_row(r, t, logit_scale, x);
        if (t->type == BN_F16)
            for (int64_t i = 0; i < t->ne[0]; i++) ((uint16_t *)out)[i] = bn_fp32_to_fp16(x[i]);
        else if (t->type == BN_BF16)
            for (int64_t i = 0; i < t->ne[0]; i++) ((uint16_t *)out)[i] = bn_fp32_to_bf16(x[i]);
        else if (t->type != BN_F32)
            q->from_float_ref(x, out, t->ne[0]); // the reference quantizer, as bonsai-quantize uses from F32
    }
}

// gen_task: bn_task_fn making the batch's chunks [i0, i1) on thread tid.
static void gen_task(void *vctx, int64_t i0, int64_t i1, int tid) {
    fill_ctx *c = vctx;
    for (int64_t k = i0; k < i1; k++) {
        const gen_chunk *ch = &c->chunks[k];
        const tspec *t = &c->l->t[ch->t];
        bn_rng r;
        memcpy(r.s, ch->s, sizeof r.s);
        uint8_t *dst = c->buf[ch->t - c->b0] + (size_t)ch->r0 * bn_row_size(t->type, t->ne[0]);
        gen_rows(t, &r, c->p->logit_scale, ch->r0, ch->r1, dst, c->rows[tid]);
    }
}

// jump_for: M^n, from the context's cache (computed on first use).
static const gf2_mat *jump_for(fill_ctx *c, uint64_t n) {
    for (int i = 0; i < c->n_jumps; i++)
        if (c->jumps[i].n == n) return c->jumps[i].m;
    jump_entry *e = &c->jumps[c->n_jumps < 16 ? c->n_jumps++ : 15]; // more than 16 row lengths: the last slot turns over
    if (e->m) free(e->m);
    e->n = n;
    e->m = xmalloc(sizeof *e->m);
    rng_jump_matrix(n, e->m);
    return e->m;
}

// add_chunks: tensor ti's work items (one with one thread, else chunks of rows of at most CHUNK_ELEMS elements), each
// with the generator state at its first row.
static void add_chunks(fill_ctx *c, int ti) {
    const tspec *t = &c->l->t[ti];
    const int64_t rows = c->n_threads > 1 ? (CHUNK_ELEMS / t->ne[0] > 0 ? CHUNK_ELEMS / t->ne[0] : 1) : t->ne[1];
    bn_rng r;
    rng_for(&r, c->p->seed, t->name);
    const gf2_mat *jump = rows < t->ne[1] ? jump_for(c, (uint64_t)(rows * t->ne[0])) : NULL;
    for (int64_t r0 = 0; r0 < t->ne[1]; r0 += rows) {
        if (c->n_chunks == c->chunks_cap)
            c->chunks = xrealloc(c->chunks, sizeof *c->chunks * (size_t)(c->chunks_cap = c->chunks_cap ? 2 * c->chunks_cap : 256));
        gen_chunk *ch = &c->chunks[c->n_chunks++];
        ch->t = ti, ch->r0 = r0, ch->r1 = r0 + rows < t->ne[1] ? r0 + rows : t->ne[1];
        memcpy(ch->s, r.s, sizeof r.s);
        if (jump && ch->r1 < t->ne[1]) gf2_apply(jump, r.s, r.s);
    }
}

// gen_batch: generates the batch that starts at tensor idx: tensors while the batch holds fewer than BATCH_TENSORS
// and their bytes stay within BATCH_BYTES (always at least idx).
static void gen_batch(fill_ctx *c, int idx) {
    size_t bytes = 0;
    int n = 0;
    while (idx + n < c->l->n && n < BATCH_TENSORS && (n == 0 || bytes + c->nbytes[idx + n] <= BATCH_BYTES))
        bytes += c->nbytes[idx + n++];
    c->n_chunks = 0;
    for (int k = 0; k < n; k++) {
        if (c->cap[k] < c->nbytes[idx + k]) {
            free(c->buf[k]);
            c->buf[k] = xmalloc(c->cap[k] = c->nbytes[idx + k]);
        }
        add_chunks(c, idx + k);
    }
    c->b0 = idx, c->b1 = idx + n;
    bn_parallel_for(c->pool, c->n_chunks, gen_task, c);
}

static int fill_tensor(void *vctx, int idx, void *dst, size_t nbytes, char *err, size_t errlen) {
    fill_ctx *c = vctx;
    const tspec *t = &c->l->t[idx];
    if (nbytes != c->nbytes[idx])
        return bn_err(err, errlen, "mkmodel: tensor '%s': size mismatch (%zu vs %zu bytes)", t->name, c->nbytes[idx],
                      nbytes);
    if (idx < c->b0 || idx >= c->b1) gen_batch(c, idx);
    memcpy(dst, c->buf[idx - c->b0], nbytes);
    c->done += (int64_t)nbytes;
    bn_progress_update(&c->prog, c->done, t->name);
    return 0;
}

// file_type_of: general.file_type of a file whose 2-D weights are of type (llama-quantize's ftype ids).
static uint32_t file_type_of(int type) {
    switch (type) {
    case BN_F32: return BN_FTYPE_ALL_F32;
    case BN_F16: return BN_FTYPE_F16;
    case BN_Q1_0: return BN_FTYPE_Q1_0;
    case BN_Q2_0: return BN_FTYPE_Q2_0;
    default: return BN_FTYPE_BF16;
    }
}

// set_rope_sections: MRoPE sections summing to n_rot/2 with the 4th = 0 (27B: 32 -> [11,11,10,0]).
static void set_rope_sections(gguf_writer *w, const char *key, int n_rot) {
    int s = n_rot / 2;
    int32_t sec[4];
    sec[0] = (s + 2) / 3;
    sec[1] = (s + 2) / 3 < s - sec[0] ? (s + 2) / 3 : s - sec[0];
    sec[2] = s - sec[0] - sec[1];
    sec[3] = 0;
    gguf_set_arr(w, key, GGUF_TYPE_INT32, 4, sec);
}

void bn_synth_set_shape_keys(gguf_writer *w, const char *arch, const bn_synth_shape *s) {
    char key[128];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
    gguf_set_u32(w, KEY("block_count"), (uint32_t)s->n_layer);
    gguf_set_u32(w, KEY("context_length"), (uint32_t)s->ctx);
    gguf_set_u32(w, KEY("embedding_length"), (uint32_t)s->n_embd);
    gguf_set_u32(w, KEY("feed_forward_length"), (uint32_t)s->n_ff);
    gguf_set_u32(w, KEY("attention.head_count"), (uint32_t)s->n_head);
    gguf_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)s->n_head_kv);
    gguf_set_u32(w, KEY("attention.key_length"), (uint32_t)s->head_dim);
    gguf_set_u32(w, KEY("attention.value_length"), (uint32_t)s->head_dim);
    gguf_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), s->norm_eps);
    gguf_set_f32(w, KEY("rope.freq_base"), s->rope_base);
#undef KEY
}

int bn_mkmodel_write(const bn_mkmodel_params *p, const char *path, char *err, size_t errlen) {
    if (bn_mkmodel_check(p, err, errlen) != 0) return -1;
    gguf_writer *w = gguf_writer_new();
    const char *a = p->arch;
    char key[128];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", a, suffix), key)
    gguf_set_str(w, "general.architecture", a);
    gguf_set_str(w, "general.type", "model");
    gguf_set_str(w, "general.name", p->name ? p->name : "bonsai-mkmodel");
    bn_synth_set_shape_keys(w, a, &(bn_synth_shape){p->n_layer, p->ctx, p->n_embd, p->n_ff, p->n_head, p->n_head_kv,
                                                    p->head_dim, p->norm_eps, p->rope_base});
    if (is_qwen35(p) || p->n_rot != p->head_dim) gguf_set_u32(w, KEY("rope.dimension_count"), (uint32_t)p->n_rot);
    if (is_qwen35(p)) {
        set_rope_sections(w, KEY("rope.dimension_sections"), p->n_rot);
        gguf_set_u32(w, KEY("ssm.conv_kernel"), (uint32_t)p->ssm_conv_kernel);
        gguf_set_u32(w, KEY("ssm.state_size"), (uint32_t)p->ssm_d_state);
        gguf_set_u32(w, KEY("ssm.group_count"), (uint32_t)p->ssm_n_group);
        gguf_set_u32(w, KEY("ssm.time_step_rank"), (uint32_t)p->ssm_dt_rank);
        gguf_set_u32(w, KEY("ssm.inner_size"), (uint32_t)(p->ssm_dt_rank * p->ssm_d_state));
        gguf_set_u32(w, KEY("full_attention_interval"), (uint32_t)p->full_attn_interval);
    }
#undef KEY
    if (bn_type_blck(p->type) > 1) gguf_set_u32(w, "general.quantization_version", 2); // as bonsai-quantize writes
    gguf_set_u32(w, "general.file_type", file_type_of(p->type));
    int64_t n_vocab = set_vocab(w, p, err, errlen);
    if (n_vocab < 0) {
        gguf_writer_free(w);
        return -1;
    }
    tlist l;
    build_tensors(&l, p, n_vocab);
    int64_t total = 0, max_ne0 = 0;
    size_t *nbytes = xmalloc(sizeof(size_t) * (size_t)l.n);
    for (int i = 0; i < l.n; i++) {
        const tspec *t = &l.t[i];
        if (gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, (uint32_t)t->type, NULL, err, errlen) < 0) {
            free(nbytes);
            free(l.t);
            gguf_writer_free(w);
            return -1;
        }
        nbytes[i] = gguf_writer_tensor_nbytes(w, i);
        total += (int64_t)nbytes[i];
        if (t->ne[0] > max_ne0) max_ne0 = t->ne[0];
    }
    const int n_threads = p->n_threads > 0 ? p->n_threads : bn_n_threads_default();
    fill_ctx *c = xcalloc(1, sizeof *c);
    c->p = p, c->l = &l, c->nbytes = nbytes, c->pool = bn_pool_new(n_threads), c->n_threads = n_threads;
    c->rows = xmalloc(sizeof *c->rows * (size_t)n_threads);
    for (int i = 0; i < n_threads; i++) c->rows[i] = xmalloc(sizeof(float) * (size_t)max_ne0);
    bn_progress_start(&c->prog, "bytes", total);
    int rc = gguf_writer_write(w, path, fill_tensor, c, err, errlen);
    bn_progress_finish(&c->prog, rc == 0 ? "done" : "failed");
    bn_pool_free(c->pool);
    for (int i = 0; i < BATCH_TENSORS; i++) free(c->buf[i]);
    for (int i = 0; i < n_threads; i++) free(c->rows[i]);
    for (int i = 0; i < c->n_jumps; i++) free(c->jumps[i].m);
    free(c->rows), free(c->chunks), free(c), free(nbytes);
    free(l.t);
    gguf_writer_free(w);
    return rc;
}
