// tests/convert/test_convert_import.c — a hand-built HF directory (safetensors + config.json +
// tokenizer.json + tokenizer_config.json written here with known values) converts to the expected
// GGUF: +1 on norms (fp32), ssm_a = −exp(A_log), V-head permutation (Hk 2, Hv 4, dv 2), conv squeeze,
// dt_bias rename, KVs and tokenizer; and clear errors (unsupported architecture, missing shard,
// shape mismatch, corrupt shard).
#include "tests/test.h"
#include "convert/convert.h"
#include "gguf/gguf.h"
#include "convert/safetensors.h"
#include "base/util.h"
#include "core/model.h"
#include "quant/quant.h"
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

// Shapes: H 8, 4 layers (0-2 GDN, 3 attention), nh 2 / nkv 1, hd 4, F 8, Hk 2, Hv 4, dk = dv 2, K 3, V 8.
enum { H = 8, L = 4, F = 8, NH = 2, NKV = 1, HD = 4, HK = 2, HV = 4, DK = 2, DV = 2, K = 3, V = 8 };
enum { CONV = 2 * HK * DK + HV * DV }; // 16

static char dir[256];

// value of element i of tensor with id: distinct, exactly representable in fp32
static float val(int id, int64_t i) { return (float)(id * 1000 + i) / 64.0f; }

typedef struct {
    char names[256][128];
    int nd[256];
    int64_t shapes[256][3];
    float *bufs[256];
    int n;
} builder;

static void add(builder *b, const char *name, int nd, int64_t s0, int64_t s1, int64_t s2) {
    int64_t n = s0 * (nd > 1 ? s1 : 1) * (nd > 2 ? s2 : 1);
    float *d = xmalloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) d[i] = val(b->n, i);
    if (strstr(name, "A_log")) for (int64_t i = 0; i < n; i++) d[i] = 0.25f * (float)(i + 1);
    snprintf(b->names[b->n], sizeof b->names[0], "%s", name);
    b->nd[b->n] = nd;
    b->shapes[b->n][0] = s0, b->shapes[b->n][1] = s1, b->shapes[b->n][2] = s2;
    b->bufs[b->n++] = d;
}

// write_checkpoint: the tensors under prefix ("model." or "model.language_model.") as one
// model.safetensors, or split in two shards plus model.safetensors.index.json.
static void write_checkpoint(const builder *b, const char *d, const char *prefix, int n_shards) {
    char err[256], path[512];
    mkdir(d, 0777);
    bn_st_writer *w[2] = {bn_st_writer_new(), bn_st_writer_new()};
    char *index = xmalloc(65536);
    int len = snprintf(index, 65536, "{\"metadata\":{},\"weight_map\":{");
    for (int i = 0; i < b->n; i++) {
        char name[192];
        int shard = n_shards == 2 && i >= b->n / 2;
        bool global = strncmp(b->names[i], "model.", 6) != 0 || strncmp(b->names[i], "model.visual.", 13) == 0;
        snprintf(name, sizeof name, "%s%s", global ? "" : prefix, global ? b->names[i] : b->names[i] + 6);
        CHECK(bn_st_writer_add(w[shard], name, BN_F32, b->nd[i], b->shapes[i], b->bufs[i], err, sizeof err) >= 0, "%s", err);
        len += snprintf(index + len, 65536 - len, "%s\"%s\":\"model-%05d-of-00002.safetensors\"", i ? "," : "", name, shard + 1);
    }
    snprintf(index + len, 65536 - len, "}}");
    for (int s = 0; s < n_shards; s++) {
        if (n_shards == 1) snprintf(path, sizeof path, "%s/model.safetensors", d);
        else snprintf(path, sizeof path, "%s/model-%05d-of-00002.safetensors", d, s + 1);
        CHECK(bn_st_writer_write(w[s], path, NULL, NULL, err, sizeof err) == 0, "%s", err);
    }
    if (n_shards == 2) {
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", d);
        CHECK(bn_write_file_atomic(path, index, strlen(index), err, sizeof err) == 0, "%s", err);
    }
    free(index);
    bn_st_writer_free(w[0]);
    bn_st_writer_free(w[1]);
}

static void write_text_in(const char *d, const char *name, const char *text) {
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/%s", d, name);
    CHECK(bn_write_file_atomic(path, text, strlen(text), err, sizeof err) == 0, "%s", err);
}

static void write_text(const char *name, const char *text) { write_text_in(dir, name, text); }

static const char *config_fmt =
    "{\"architectures\":[\"%s\"],\"model_type\":\"qwen3_5_text\",\"hidden_size\":8,\"num_hidden_layers\":4,"
    "\"intermediate_size\":8,\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":4,\"rms_norm_eps\":1e-06,"
    "\"max_position_embeddings\":64,\"vocab_size\":8,\"tie_word_embeddings\":true,\"linear_num_key_heads\":2,"
    "\"linear_num_value_heads\":4,\"linear_key_head_dim\":2,\"linear_value_head_dim\":2,\"linear_conv_kernel_dim\":3,"
    "\"full_attention_interval\":4,\"rope_parameters\":{\"rope_theta\":10000000.0,\"partial_rotary_factor\":0.5,"
    "\"mrope_section\":[1,1,0]},\"eos_token_id\":7}";

static float get(const gguf_tensor *t, int64_t i) { return ((const float *)t->data)[i]; }

// qwen2_case: a hand-built Qwen2ForCausalLM (q/k/v biases, untied head, plain norms): names, no +1,
// loads in our engine, and GGUF → HF → GGUF gives the same bytes.
static void qwen2_case(void) {
    char d[300], out[600], hf2[600], back[600], err[512] = "";
    snprintf(d, sizeof d, "%s/qwen2", dir);
    static builder q;
    add(&q, "model.embed_tokens.weight", 2, V, H, 0);
    add(&q, "model.norm.weight", 1, H, 0, 0);
    add(&q, "lm_head.weight", 2, V, H, 0);
    for (int il = 0; il < 2; il++) {
        char n[128];
#define ADD(suffix, nd, a0, a1) (snprintf(n, sizeof n, "model.layers.%d.%s", il, suffix), add(&q, n, nd, a0, a1, 0))
        ADD("input_layernorm.weight", 1, H, 0);
        ADD("post_attention_layernorm.weight", 1, H, 0);
        ADD("mlp.gate_proj.weight", 2, F, H);
        ADD("mlp.up_proj.weight", 2, F, H);
        ADD("mlp.down_proj.weight", 2, H, F);
        ADD("self_attn.q_proj.weight", 2, NH * HD, H);
        ADD("self_attn.q_proj.bias", 1, NH * HD, 0);
        ADD("self_attn.k_proj.weight", 2, NKV * HD, H);
        ADD("self_attn.k_proj.bias", 1, NKV * HD, 0);
        ADD("self_attn.v_proj.weight", 2, NKV * HD, H);
        ADD("self_attn.v_proj.bias", 1, NKV * HD, 0);
        ADD("self_attn.o_proj.weight", 2, H, NH * HD);
#undef ADD
    }
    write_checkpoint(&q, d, "model.", 1);
    write_text_in(d, "config.json",
                  "{\"architectures\":[\"Qwen2ForCausalLM\"],\"hidden_size\":8,\"num_hidden_layers\":2,\"intermediate_size\":8,"
                  "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"rms_norm_eps\":1e-06,\"rope_theta\":1000000.0,"
                  "\"max_position_embeddings\":64,\"vocab_size\":8,\"tie_word_embeddings\":false,\"eos_token_id\":7}");
    char src[600], cmd[1400];
    snprintf(src, sizeof src, "%s/tokenizer.json", dir);
    snprintf(cmd, sizeof cmd, "cp %s %s/", src, d);
    CHECK(system(cmd) == 0, "copy tokenizer.json");
    snprintf(out, sizeof out, "%s/qwen2.gguf", dir);
    bn_convert_opts o = {.outtype = BN_F32, .quiet = true};
    CHECK(bn_convert_hf_to_gguf(d, out, &o, err, sizeof err) == 0, "qwen2 import: %s", err);
    gguf_file *g = gguf_open(out, err, sizeof err);
    CHECK(g != NULL, "%s", err);
    if (!g) return;
    CHECK(g->n_tensors == 3 + 2 * 12, "qwen2 tensors %zu", g->n_tensors);
    const gguf_tensor *t = gguf_find_tensor(g, "blk.1.ffn_norm.weight");
    CHECK(t && ((const float *)t->data)[3] == q.bufs[3 + 12 + 1][3], "qwen2 ffn_norm stored as-is (no +1)");
    t = gguf_find_tensor(g, "blk.0.attn_k.bias");
    CHECK(t && t->type == BN_F32 && t->ne[0] == NKV * HD, "qwen2 k bias");
    CHECK(gguf_find_tensor(g, "output.weight") != NULL, "untied head");
    const char *a = gguf_get_str(g, "general.architecture");
    CHECK(a && strcmp(a, "qwen2") == 0, "arch");
    gguf_close(g);
    bn_model *m = bn_model_load(out, err, sizeof err);
    CHECK(m != NULL, "qwen2 GGUF does not load: %s", err);
    bn_model_free(m);
    snprintf(hf2, sizeof hf2, "%s/qwen2-hf", dir);
    snprintf(back, sizeof back, "%s/qwen2-back.gguf", dir);
    o.outtype = -1;
    CHECK(bn_convert_gguf_to_hf(out, hf2, &o, err, sizeof err) == 0, "qwen2 export: %s", err);
    o.outtype = BN_F32;
    CHECK(bn_convert_hf_to_gguf(hf2, back, &o, err, sizeof err) == 0, "qwen2 reimport: %s", err);
    gguf_file *g1 = gguf_open(out, err, sizeof err), *g2 = gguf_open(back, err, sizeof err);
    int same = 0;
    for (size_t i = 0; g1 && g2 && i < g1->n_tensors; i++) {
        const gguf_tensor *x = &g1->tensors[i], *y = gguf_find_tensor(g2, x->name);
        same += y && y->nbytes == x->nbytes && memcmp(x->data, y->data, x->nbytes) == 0;
    }
    CHECK(g1 && g2 && same == (int)g1->n_tensors, "qwen2 round trip: %d identical", same);
    printf("  qwen2: %d/%zu tensors identical after GGUF -> HF -> GGUF\n", same, g1 ? g1->n_tensors : 0);
    gguf_close(g1);
    gguf_close(g2);
    for (int i = 0; i < q.n; i++) free(q.bufs[i]);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/bonsai-test-cvimport-%d", (int)getpid());
    mkdir(dir, 0777);
    static builder b;
    add(&b, "model.embed_tokens.weight", 2, V, H, 0);   // id 0
    add(&b, "model.norm.weight", 1, H, 0, 0);           // id 1
    int id_qkv = 0, id_z = 0, id_b = 0, id_conv = 0, id_dt = 0, id_out = 0, id_attn_norm0 = 0, id_qn = 0, id_ssmn = 0;
    for (int il = 0; il < L; il++) {
        char n[128];
#define ADD(suffix, nd, a0, a1, a2) (snprintf(n, sizeof n, "model.layers.%d.%s", il, suffix), add(&b, n, nd, a0, a1, a2))
        if (il == 0) id_attn_norm0 = b.n;
        ADD("input_layernorm.weight", 1, H, 0, 0);
        ADD("post_attention_layernorm.weight", 1, H, 0, 0);
        ADD("mlp.gate_proj.weight", 2, F, H, 0);
        ADD("mlp.up_proj.weight", 2, F, H, 0);
        ADD("mlp.down_proj.weight", 2, H, F, 0);
        if (il == 3) {
            ADD("self_attn.q_proj.weight", 2, 2 * NH * HD, H, 0);
            ADD("self_attn.k_proj.weight", 2, NKV * HD, H, 0);
            ADD("self_attn.v_proj.weight", 2, NKV * HD, H, 0);
            ADD("self_attn.o_proj.weight", 2, H, NH * HD, 0);
            id_qn = b.n;
            ADD("self_attn.q_norm.weight", 1, HD, 0, 0);
            ADD("self_attn.k_norm.weight", 1, HD, 0, 0);
        } else {
            if (il == 0) id_qkv = b.n;
            ADD("linear_attn.in_proj_qkv.weight", 2, CONV, H, 0);
            if (il == 0) id_z = b.n;
            ADD("linear_attn.in_proj_z.weight", 2, HV * DV, H, 0);
            if (il == 0) id_b = b.n;
            ADD("linear_attn.in_proj_b.weight", 2, HV, H, 0);
            ADD("linear_attn.in_proj_a.weight", 2, HV, H, 0);
            if (il == 0) id_conv = b.n;
            ADD("linear_attn.conv1d.weight", 3, CONV, 1, K);
            if (il == 0) id_dt = b.n;
            ADD("linear_attn.dt_bias", 1, HV, 0, 0);
            ADD("linear_attn.A_log", 1, HV, 0, 0);
            if (il == 0) id_ssmn = b.n;
            ADD("linear_attn.norm.weight", 1, DV, 0, 0);
            if (il == 0) id_out = b.n;
            ADD("linear_attn.out_proj.weight", 2, H, HV * DV, 0);
        }
#undef ADD
    }
    add(&b, "model.visual.blocks.0.weight", 1, 4, 0, 0); // vision tower: skipped by the importer
    char path[512], out[512], err[512] = "";
    write_checkpoint(&b, dir, "model.", 1);
    char cfg[2048];
    snprintf(cfg, sizeof cfg, config_fmt, "Qwen3_5ForCausalLM");
    write_text("config.json", cfg);
    write_text("tokenizer.json",
               "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":6,\"content\":\"<|im_start|>\",\"special\":true},"
               "{\"id\":7,\"content\":\"<|endoftext|>\",\"special\":true}],"
               "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"[\\\\p{L}\\\\p{M}]+\"}},"
               "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"abc\":4},"
               "\"merges\":[[\"a\",\"b\"],\"ab c\"]}}");
    write_text("tokenizer_config.json", "{\"eos_token\":\"<|endoftext|>\",\"pad_token\":\"<|endoftext|>\",\"bos_token\":null,"
                                        "\"chat_template\":\"{{ messages }}\"}");
    snprintf(out, sizeof out, "%s/out.gguf", dir);
    bn_convert_opts o = {.outtype = BN_F32, .quiet = true};
    CHECK(bn_convert_hf_to_gguf(dir, out, &o, err, sizeof err) == 0, "import: %s", err);
    gguf_file *g = gguf_open(out, err, sizeof err);
    CHECK(g != NULL, "%s", err);
    if (g) {
        CHECK(g->n_tensors == 2 + 3 * 14 + 11, "tensor count %zu (tied: no output.weight)", g->n_tensors);
        CHECK(strcmp(g->tensors[0].name, "token_embd.weight") == 0, "first tensor %s (checkpoint order)", g->tensors[0].name);
        const gguf_tensor *t = gguf_find_tensor(g, "blk.0.attn_norm.weight");
        CHECK(t && get(t, 5) == val(id_attn_norm0, 5) + 1.0f, "+1 on attn_norm");
        t = gguf_find_tensor(g, "blk.3.attn_q_norm.weight");
        CHECK(t && get(t, 2) == val(id_qn, 2) + 1.0f, "+1 on q_norm");
        t = gguf_find_tensor(g, "blk.0.ssm_norm.weight");
        CHECK(t && get(t, 1) == val(id_ssmn, 1), "no +1 on ssm_norm");
        // V-head permutation: GGUF head hg takes HF head bn_vhead_to_hf(hg): 0->0, 1->2, 2->1, 3->3
        CHECK(bn_vhead_to_hf(1, HK, HV) == 2 && bn_vhead_to_hf(2, HK, HV) == 1 && bn_vhead_to_gguf(2, HK, HV) == 1, "perm");
        t = gguf_find_tensor(g, "blk.0.attn_qkv.weight");
        // row (V start 8) + head 1 * dv 2 + 1 = row 11 in GGUF comes from HF row 8 + 2*2 + 1 = 13; element 3 of the row
        CHECK(t && get(t, 11 * H + 3) == val(id_qkv, 13 * H + 3), "qkv V rows permuted");
        CHECK(t && get(t, 5 * H + 3) == val(id_qkv, 5 * H + 3), "qkv Q/K rows untouched");
        t = gguf_find_tensor(g, "blk.0.attn_gate.weight");
        CHECK(t && get(t, 2 * H + 7) == val(id_z, 4 * H + 7), "z rows permuted");
        t = gguf_find_tensor(g, "blk.0.ssm_beta.weight");
        CHECK(t && get(t, 1 * H + 0) == val(id_b, 2 * H + 0), "beta rows permuted");
        t = gguf_find_tensor(g, "blk.0.ssm_conv1d.weight");
        CHECK(t && t->n_dims == 2 && t->ne[0] == K && t->ne[1] == CONV, "conv squeezed to {K, C}");
        CHECK(t && get(t, 10 * K + 2) == val(id_conv, 12 * K + 2), "conv V channels permuted");
        CHECK(t && get(t, 3 * K + 1) == val(id_conv, 3 * K + 1), "conv Q/K channels untouched");
        t = gguf_find_tensor(g, "blk.0.ssm_dt.bias");
        CHECK(t && get(t, 1) == val(id_dt, 2) && get(t, 2) == val(id_dt, 1), "dt_bias renamed + permuted");
        t = gguf_find_tensor(g, "blk.0.ssm_a");
        // A_log = 0.25 (i+1): GGUF element 1 = HF element 2 → −exp(0.75)
        CHECK(t && get(t, 1) == (float)-exp(0.75) && get(t, 0) == (float)-exp(0.25), "ssm_a = -exp(A_log), permuted");
        t = gguf_find_tensor(g, "blk.0.ssm_out.weight");
        // row 4 (output), GGUF column head 2 elem 0 = col 4 ← HF col head 1 elem 0 = col 2
        CHECK(t && get(t, 4 * (HV * DV) + 4) == val(id_out, 4 * (HV * DV) + 2), "ssm_out columns permuted");
        CHECK(gguf_find_tensor(g, "output.weight") == NULL, "tied: no output.weight");
        uint32_t u;
        CHECK(gguf_get_u32(g, "qwen35.ssm.group_count", &u) && u == HK, "group_count");
        CHECK(gguf_get_u32(g, "qwen35.rope.dimension_count", &u) && u == 2, "rope dims = hd * 0.5");
        CHECK(gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &u) && u == 7, "eos id");
        CHECK(gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &u) == false, "no bos (null, not in config)");
        const char *pre = gguf_get_str(g, "tokenizer.ggml.pre");
        CHECK(pre && strcmp(pre, "qwen35") == 0, "pre %s", pre ? pre : "(null)");
        const gguf_kv *tt = gguf_get_arr(g, "tokenizer.ggml.token_type");
        CHECK(tt && tt->n == 8 && ((int32_t *)tt->data)[4] == 1 && ((int32_t *)tt->data)[5] == 5 &&
              ((int32_t *)tt->data)[6] == 3, "token types normal/unused/control");
        const gguf_kv *tk = gguf_get_arr(g, "tokenizer.ggml.tokens");
        CHECK(tk && strcmp(tk->strs[5], "[PAD5]") == 0, "pad row");
        const gguf_kv *mg = gguf_get_arr(g, "tokenizer.ggml.merges");
        CHECK(mg && mg->n == 2 && strcmp(mg->strs[0], "a b") == 0 && strcmp(mg->strs[1], "ab c") == 0, "merges");
        const char *ct = gguf_get_str(g, "tokenizer.chat_template");
        CHECK(ct && strcmp(ct, "{{ messages }}") == 0, "chat template");
        gguf_close(g);
    }
    // the same weights as a Qwen3_5ForConditionalGeneration checkpoint (text_config, model.language_model.
    // prefix, vision tensors) split in two shards: the same GGUF tensors, byte for byte
    {
        char d2[300], out2[600], cfg2[2600], ref[600];
        snprintf(d2, sizeof d2, "%s/vlm", dir);
        write_checkpoint(&b, d2, "model.language_model.", 2);
        char inner[2048];
        snprintf(inner, sizeof inner, config_fmt, "Qwen3_5ForCausalLM");
        snprintf(cfg2, sizeof cfg2, "{\"architectures\":[\"Qwen3_5ForConditionalGeneration\"],\"model_type\":\"qwen3_5\","
                 "\"tie_word_embeddings\":true,\"text_config\":%s}", inner);
        write_text_in(d2, "config.json", cfg2);
        char src[600], dst[600], cmd[2000];
        snprintf(src, sizeof src, "%s/tokenizer.json", dir);
        snprintf(dst, sizeof dst, "%s/tokenizer_config.json", dir);
        snprintf(cmd, sizeof cmd, "cp %s %s %s/", src, dst, d2);
        CHECK(system(cmd) == 0, "copy tokenizer files");
        snprintf(out2, sizeof out2, "%s/vlm.gguf", dir);
        snprintf(ref, sizeof ref, "%s/out.gguf", dir);
        o.outtype = BN_F32;
        CHECK(bn_convert_hf_to_gguf(d2, out2, &o, err, sizeof err) == 0, "vlm import: %s", err);
        gguf_file *g1 = gguf_open(ref, err, sizeof err), *g2 = gguf_open(out2, err, sizeof err);
        CHECK(g1 && g2, "%s", err);
        if (g1 && g2) {
            CHECK(g1->n_tensors == g2->n_tensors, "vlm: %zu vs %zu tensors", g2->n_tensors, g1->n_tensors);
            int same = 0;
            for (size_t i = 0; i < g1->n_tensors; i++) {
                const gguf_tensor *x = &g1->tensors[i], *y = gguf_find_tensor(g2, x->name);
                same += y && y->nbytes == x->nbytes && memcmp(x->data, y->data, x->nbytes) == 0;
            }
            CHECK(same == (int)g1->n_tensors, "vlm/sharded: %d of %zu tensors identical", same, g1->n_tensors);
            printf("  sharded VLM checkpoint: %d/%zu tensors identical to the single-file import\n", same, g1->n_tensors);
        }
        gguf_close(g1);
        gguf_close(g2);
    }
    // f16 outtype: 2-D weights F16, norms stay F32
    snprintf(out, sizeof out, "%s/out16.gguf", dir);
    o.outtype = BN_F16;
    CHECK(bn_convert_hf_to_gguf(dir, out, &o, err, sizeof err) == 0, "import f16: %s", err);
    g = gguf_open(out, err, sizeof err);
    if (g) {
        CHECK(gguf_find_tensor(g, "blk.0.ffn_up.weight")->type == BN_F16, "ffn_up f16");
        CHECK(gguf_find_tensor(g, "blk.0.attn_norm.weight")->type == BN_F32, "norm f32");
        CHECK(gguf_find_tensor(g, "blk.0.ssm_conv1d.weight")->type == BN_F32, "conv f32");
        gguf_close(g);
    }
    qwen2_case();
    // errors
    snprintf(cfg, sizeof cfg, config_fmt, "LlamaForCausalLM");
    write_text("config.json", cfg);
    CHECK(bn_convert_hf_to_gguf(dir, out, &o, err, sizeof err) == -1 && strstr(err, "unsupported architecture"), "arch: %s", err);
    printf("  unsupported arch -> %s\n", err);
    snprintf(cfg, sizeof cfg, config_fmt, "Qwen3_5ForConditionalGeneration"); // expects model.language_model.
    write_text("config.json", cfg);
    CHECK(bn_convert_hf_to_gguf(dir, out, &o, err, sizeof err) == -1 && strstr(err, "missing tensor"), "prefix: %s", err);
    printf("  wrong prefix -> %s\n", err);
    snprintf(cfg, sizeof cfg, config_fmt, "Qwen3_5ForCausalLM");
    char *bad = strstr(cfg, "\"intermediate_size\":8");
    if (bad) bad[20] = '9';
    write_text("config.json", cfg);
    CHECK(bn_convert_hf_to_gguf(dir, out, &o, err, sizeof err) == -1 && strstr(err, "shape"), "shape: %s", err);
    printf("  shape mismatch -> %s\n", err);
    snprintf(cfg, sizeof cfg, config_fmt, "Qwen3_5ForCausalLM");
    write_text("config.json", cfg);
    write_text("model.safetensors.index.json", "{\"weight_map\":{\"model.norm.weight\":\"model-00002-of-00002.safetensors\"}}");
    CHECK(bn_convert_hf_to_gguf(dir, out, &o, err, sizeof err) == -1 && strstr(err, "missing shard"), "shard: %s", err);
    printf("  missing shard -> %s\n", err);
    // a sharded checkpoint whose shard has a corrupt header
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    CHECK(bn_write_file_atomic(path, "\x10\0\0\0\0\0\0\0{not json}      ", 24, err, sizeof err) == 0, "%s", err);
    CHECK(bn_convert_hf_to_gguf(dir, out, &o, err, sizeof err) == -1 && strstr(err, "header"), "corrupt: %s", err);
    printf("  corrupt shard -> %s\n", err);
    for (int i = 0; i < b.n; i++) free(b.bufs[i]);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup failed\n");
    return test_done("test_convert_import");
}
