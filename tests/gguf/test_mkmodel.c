// tests/gguf/test_mkmodel.c — the random model generator: exact qwen35/qwen3 keys, tensor names, shapes,
// llama-quantize order, value ranges, reproducibility (also across thread counts), synthetic vocab validity, preset
// parameter counts, and the Q1_0 / Q2_0 files written directly (= bonsai-quantize --pure of the F32 file).
#include "tests/test.h"
#include "synth/mkmodel.h"
#include "quantize/quantize.h"
#include "core/model.h"
#include "gguf/gguf.h"
#include "base/util.h"
#include "quant/quant.h"
#include <string.h>
#include <unistd.h>

static char path_a[256], path_b[256], path_c[256];

static int64_t geti(const gguf_file *f, const char *key) {
    int64_t v = -1;
    CHECK(gguf_get_int(f, key, &v), "key %s present and integer", key);
    return v;
}

// layer_of: N of "blk.N." or -1.
static int layer_of(const char *name) { return strncmp(name, "blk.", 4) == 0 ? atoi(name + 4) : -1; }

static void check_order(const gguf_file *f) {
    for (size_t i = 1; i < f->n_tensors; i++) {
        const char *a = f->tensors[i - 1].name, *b = f->tensors[i].name;
        int la = layer_of(a), lb = layer_of(b);
        CHECK(la < lb || (la == lb && strcmp(a, b) < 0), "tensor order: %s before %s", a, b);
    }
}

static void check_shape(const gguf_file *f, const char *name, int64_t ne0, int64_t ne1, int type) {
    const gguf_tensor *t = gguf_find_tensor(f, name);
    CHECK(t != NULL, "tensor %s present", name);
    if (!t) return;
    CHECK(t->ne[0] == ne0 && t->ne[1] == ne1, "%s: ne {%lld, %lld} want {%lld, %lld}", name, (long long)t->ne[0],
          (long long)t->ne[1], (long long)ne0, (long long)ne1);
    CHECK(t->type == type, "%s: type %s want %s", name, bn_type_name(t->type), bn_type_name(type));
}

static void check_tiny_qwen35(void) {
    bn_mkmodel_params p;
    char err[512];
    CHECK(bn_mkmodel_defaults(&p, "tiny") == 0, "tiny preset");
    CHECK(bn_mkmodel_write(&p, path_a, err, sizeof err) == 0, "write tiny: %s", err);
    gguf_file *f = gguf_open(path_a, err, sizeof err);
    CHECK(f != NULL, "open tiny: %s", err);
    if (!f) return;
    CHECK(gguf_get_str(f, "general.architecture") && strcmp(gguf_get_str(f, "general.architecture"), "qwen35") == 0,
          "arch qwen35");
    CHECK(geti(f, "qwen35.block_count") == 4, "block_count");
    CHECK(geti(f, "qwen35.embedding_length") == 128, "embedding_length");
    CHECK(geti(f, "qwen35.feed_forward_length") == 256, "feed_forward_length");
    CHECK(geti(f, "qwen35.attention.head_count") == 4, "head_count");
    CHECK(geti(f, "qwen35.attention.head_count_kv") == 2, "head_count_kv");
    CHECK(geti(f, "qwen35.attention.key_length") == 32 && geti(f, "qwen35.attention.value_length") == 32, "kv len");
    CHECK(geti(f, "qwen35.rope.dimension_count") == 8, "rope dims");
    CHECK(geti(f, "qwen35.ssm.conv_kernel") == 4 && geti(f, "qwen35.ssm.state_size") == 32, "ssm conv/state");
    CHECK(geti(f, "qwen35.ssm.group_count") == 2 && geti(f, "qwen35.ssm.time_step_rank") == 4, "ssm Hk/Hv");
    CHECK(geti(f, "qwen35.ssm.inner_size") == 128, "ssm inner");
    CHECK(geti(f, "qwen35.full_attention_interval") == 4, "interval");
    CHECK(geti(f, "qwen35.context_length") == 4096, "ctx");
    CHECK(geti(f, "general.file_type") == 0, "file_type all F32");
    CHECK(gguf_find_key(f, "general.quantization_version") < 0, "no quantization_version when not quantized");
    float eps = 0, base = 0;
    CHECK(gguf_get_f32(f, "qwen35.attention.layer_norm_rms_epsilon", &eps) && eps == 1e-6f, "eps");
    CHECK(gguf_get_f32(f, "qwen35.rope.freq_base", &base) && base == 1e7f, "rope base");
    const gguf_kv *sec = gguf_get_arr(f, "qwen35.rope.dimension_sections");
    CHECK(sec && sec->arr_type == GGUF_TYPE_INT32 && sec->n == 4, "rope sections i32[4]");
    if (sec && sec->n == 4) {
        const int32_t *s = sec->data;
        CHECK(s[0] == 2 && s[1] == 2 && s[2] == 0 && s[3] == 0, "sections [2,2,0,0] got [%d,%d,%d,%d]", s[0], s[1],
              s[2], s[3]);
    }
    // 3 global + 3 GDN layers x 14 + 1 attention layer x 11
    CHECK(f->n_tensors == 3 + 3 * 14 + 11, "n_tensors %zu", f->n_tensors);
    CHECK(strcmp(f->tensors[0].name, "output.weight") == 0 && strcmp(f->tensors[2].name, "token_embd.weight") == 0,
          "global tensors first in llama-quantize order");
    check_order(f);
    check_shape(f, "token_embd.weight", 128, 512, BN_F32);
    check_shape(f, "output.weight", 128, 512, BN_F32);
    check_shape(f, "output_norm.weight", 128, 1, BN_F32);
    check_shape(f, "blk.0.attn_qkv.weight", 128, 256, BN_F32);
    check_shape(f, "blk.0.attn_gate.weight", 128, 128, BN_F32);
    check_shape(f, "blk.0.ssm_beta.weight", 128, 4, BN_F32);
    check_shape(f, "blk.0.ssm_alpha.weight", 128, 4, BN_F32);
    check_shape(f, "blk.0.ssm_conv1d.weight", 4, 256, BN_F32);
    check_shape(f, "blk.0.ssm_dt.bias", 4, 1, BN_F32);
    check_shape(f, "blk.0.ssm_a", 4, 1, BN_F32);
    check_shape(f, "blk.0.ssm_norm.weight", 32, 1, BN_F32);
    check_shape(f, "blk.0.ssm_out.weight", 128, 128, BN_F32);
    check_shape(f, "blk.2.ffn_down.weight", 256, 128, BN_F32);
    check_shape(f, "blk.3.attn_q.weight", 128, 256, BN_F32);
    check_shape(f, "blk.3.attn_k.weight", 128, 64, BN_F32);
    check_shape(f, "blk.3.attn_v.weight", 128, 64, BN_F32);
    check_shape(f, "blk.3.attn_output.weight", 128, 128, BN_F32);
    check_shape(f, "blk.3.attn_q_norm.weight", 32, 1, BN_F32);
    check_shape(f, "blk.3.post_attention_norm.weight", 128, 1, BN_F32);
    CHECK(gguf_find_tensor(f, "blk.3.attn_qkv.weight") == NULL, "attention layer has no attn_qkv");
    CHECK(gguf_find_tensor(f, "blk.2.attn_q.weight") == NULL, "GDN layer has no attn_q");
    for (size_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        const float *x = t->data;
        int64_t n = gguf_tensor_nelements(t);
        if (t->n_dims == 2 && !strstr(t->name, "ssm_conv1d"))
            CHECK(t->ne[0] % 128 == 0, "%s: ne0 %lld multiple of 128 (Q1_0/PQ2_0 apply)", t->name, (long long)t->ne[0]);
        double lo = 1e30, hi = -1e30;
        for (int64_t j = 0; j < n; j++) {
            lo = x[j] < lo ? x[j] : lo;
            hi = x[j] > hi ? x[j] : hi;
        }
        if (strstr(t->name, "norm.weight"))
            CHECK(lo >= 0.95 && hi <= 1.05, "%s: norm in [0.95, 1.05] got [%g, %g]", t->name, lo, hi);
        size_t nl = strlen(t->name);
        if (nl > 6 && strcmp(t->name + nl - 6, ".ssm_a") == 0)
            CHECK(lo >= -8.0 && hi <= -1.0, "%s: ssm_a = -A in [-8, -1] got [%g, %g]", t->name, lo, hi);
        if (strstr(t->name, "ssm_dt.bias")) // softplus^-1 of dt in [0.001, 0.1]
            CHECK(lo >= -7.0 && hi <= -2.2, "%s: dt bias in [-7, -2.2] got [%g, %g]", t->name, lo, hi);
        if (strstr(t->name, "ssm_conv1d"))
            CHECK(lo >= -0.5 && hi <= 0.5, "%s: conv taps in [-0.5, 0.5]", t->name);
        if (strcmp(t->name, "blk.0.ffn_up.weight") == 0) { // uniform with std 1/sqrt(128): |x| <= sqrt(3/128)
            double s2 = 0;
            for (int64_t j = 0; j < n; j++) s2 += (double)x[j] * x[j];
            CHECK_NEAR(sqrt(s2 / n), 1.0 / sqrt(128.0), 0.01 / sqrt(128.0) * 10, "ffn_up std ~ 1/sqrt(128) (10%)");
            CHECK(hi <= sqrt(3.0 / 128) + 1e-6, "ffn_up bound");
        }
    }
    // synthetic vocab: 512 rows, every merge "a b" has tokens a, b and a+b; specials are control
    const gguf_kv *tok = gguf_get_arr(f, "tokenizer.ggml.tokens");
    const gguf_kv *typ = gguf_get_arr(f, "tokenizer.ggml.token_type");
    const gguf_kv *mer = gguf_get_arr(f, "tokenizer.ggml.merges");
    CHECK(tok && tok->n == 512 && typ && typ->n == 512 && typ->arr_type == GGUF_TYPE_INT32, "tokens/types 512 rows");
    CHECK(mer && mer->n == 512 - 259, "merges fill the vocab (%llu)", mer ? (unsigned long long)mer->n : 0ull);
    CHECK(gguf_get_str(f, "tokenizer.ggml.model") && strcmp(gguf_get_str(f, "tokenizer.ggml.model"), "gpt2") == 0,
          "model gpt2");
    CHECK(gguf_get_str(f, "tokenizer.ggml.pre") && strcmp(gguf_get_str(f, "tokenizer.ggml.pre"), "qwen35") == 0,
          "pre qwen35");
    if (tok && mer && typ && tok->n == 512) {
        CHECK(strcmp(tok->strs[32], "\xc4\xa0") == 0 && strcmp(tok->strs[10], "\xc4\x8a") == 0 &&
                  strcmp(tok->strs[65], "A") == 0 && strcmp(tok->strs[173], "\xc5\x83") == 0,
              "GPT-2 byte map: space->U+0120, \\n->U+010A, A->A, 0xAD->U+0143");
        int bad = 0;
        for (uint64_t i = 0; i < mer->n; i++) {
            const char *m = mer->strs[i], *sp = strchr(m + 1, ' ');
            if (!sp) { bad++; continue; }
            char left[64], joined[128];
            snprintf(left, sizeof left, "%.*s", (int)(sp - m), m);
            snprintf(joined, sizeof joined, "%s%s", left, sp + 1);
            int found = 0;
            for (uint64_t j = 0; j < tok->n; j++) found += strcmp(tok->strs[j], joined) == 0;
            bad += found != 1;
        }
        CHECK(bad == 0, "%d merges without exactly one merged token", bad);
        const int32_t *ty = typ->data;
        CHECK(strcmp(tok->strs[509], "<|endoftext|>") == 0 && ty[509] == 3, "endoftext control at 509");
        CHECK(strcmp(tok->strs[511], "<|im_end|>") == 0 && ty[511] == 3, "im_end control at 511");
        CHECK(geti(f, "tokenizer.ggml.eos_token_id") == 509, "eos id");
    }
    gguf_close(f);
}

static void check_reproducible(void) {
    bn_mkmodel_params p;
    char err[512];
    bn_mkmodel_defaults(&p, "qwen3-tiny");
    CHECK(bn_mkmodel_write(&p, path_a, err, sizeof err) == 0, "write: %s", err);
    CHECK(bn_mkmodel_write(&p, path_b, err, sizeof err) == 0, "write: %s", err);
    size_t na = 0, nb = 0;
    char *a = bn_read_file(path_a, &na, err, sizeof err), *b = bn_read_file(path_b, &nb, err, sizeof err);
    CHECK(a && b && na == nb && memcmp(a, b, na) == 0, "same seed -> byte-identical files");
    free(b);
    p.seed = 43;
    CHECK(bn_mkmodel_write(&p, path_b, err, sizeof err) == 0, "write: %s", err);
    b = bn_read_file(path_b, &nb, err, sizeof err);
    CHECK(a && b && na == nb && memcmp(a, b, na) != 0, "other seed -> same size, different bytes");
    free(a);
    free(b);
    gguf_file *f = gguf_open(path_b, err, sizeof err);
    CHECK(f != NULL, "open qwen3-tiny: %s", err);
    if (!f) return;
    CHECK(strcmp(gguf_get_str(f, "general.architecture"), "qwen3") == 0, "arch qwen3");
    CHECK(f->n_tensors == 2 + 2 * 11, "qwen3-tiny tied: 24 tensors, got %zu", f->n_tensors);
    CHECK(gguf_find_tensor(f, "output.weight") == NULL, "tied: no output.weight");
    check_order(f);
    check_shape(f, "blk.1.attn_q.weight", 128, 128, BN_F32);
    check_shape(f, "blk.1.attn_k.weight", 128, 64, BN_F32);
    check_shape(f, "blk.1.ffn_norm.weight", 128, 1, BN_F32);
    check_shape(f, "blk.1.attn_k_norm.weight", 32, 1, BN_F32);
    CHECK(gguf_find_key(f, "qwen3.rope.dimension_count") < 0, "qwen3: no rope.dimension_count when n_rot == hd");
    CHECK(gguf_find_key(f, "qwen3.ssm.state_size") < 0, "qwen3: no ssm keys");
    gguf_close(f);
}

static void check_types(void) {
    bn_mkmodel_params p;
    char err[512];
    bn_mkmodel_defaults(&p, "tiny");
    p.type = BN_BF16;
    CHECK(bn_mkmodel_write(&p, path_a, err, sizeof err) == 0, "write bf16: %s", err);
    p.type = BN_F32;
    CHECK(bn_mkmodel_write(&p, path_b, err, sizeof err) == 0, "write f32: %s", err);
    gguf_file *a = gguf_open(path_a, err, sizeof err), *b = gguf_open(path_b, err, sizeof err);
    CHECK(a && b, "open: %s", err);
    if (a && b) {
        CHECK(geti(a, "general.file_type") == 32, "file_type MOSTLY_BF16 = 32");
        check_shape(a, "blk.0.ffn_gate.weight", 128, 256, BN_BF16);
        check_shape(a, "blk.0.ssm_conv1d.weight", 4, 256, BN_F32);
        check_shape(a, "blk.0.ssm_norm.weight", 32, 1, BN_F32);
        // same seed: bf16 values are the f32 values rounded (relative error <= 2^-8)
        const gguf_tensor *ta = gguf_find_tensor(a, "blk.0.ffn_gate.weight"), *tb = gguf_find_tensor(b, "blk.0.ffn_gate.weight");
        double worst = 0;
        for (int64_t i = 0; ta && tb && i < gguf_tensor_nelements(ta); i++) {
            float x = ((const float *)tb->data)[i], y = bn_bf16_to_fp32(((const uint16_t *)ta->data)[i]);
            double rel = fabs(x - y) / (fabs(x) + 1e-30);
            worst = rel > worst ? rel : worst;
        }
        CHECK(worst <= 1.0 / 256, "bf16 = rounded f32 (worst rel err %g <= 2^-8)", worst);
    }
    gguf_close(a);
    gguf_close(b);
}

// check_threads: the same file whatever the thread count, F16 and Q1_0. With one thread each tensor is one
// generator run; with several, tensors of more than 2^20 elements are made in chunks of rows whose generators are
// jumped ahead (here the 128 x 20000 embedding and head: 3 chunks each), so a wrong jump changes their bytes.
static void check_threads(void) {
    bn_mkmodel_params p;
    char err[512];
    const int types[] = {BN_F16, BN_Q1_0};
    for (int k = 0; k < 2; k++) {
        bn_mkmodel_defaults(&p, "tiny");
        p.n_vocab_small = 20000;
        p.type = types[k];
        p.n_threads = 1;
        CHECK(bn_mkmodel_write(&p, path_a, err, sizeof err) == 0, "write 1 thread: %s", err);
        p.n_threads = 5;
        CHECK(bn_mkmodel_write(&p, path_b, err, sizeof err) == 0, "write 5 threads: %s", err);
        size_t na = 0, nb = 0;
        char *a = bn_read_file(path_a, &na, err, sizeof err), *b = bn_read_file(path_b, &nb, err, sizeof err);
        CHECK(a && b && na == nb && memcmp(a, b, na) == 0, "%s: 1 and 5 threads write byte-identical files",
              bn_type_name(types[k]));
        free(a);
        free(b);
    }
}

// check_quantized: --type q1_0 / q2_0 against quantizing the F32 file of the same seed with bonsai-quantize's
// driver (--pure): the same tensors, types and bytes, the file type KVs, and the file loads as a model. Bytes that
// differ in any tensor (another generator, rounding before the quantizer, another quantizer) fail it.
static void check_quantized(void) {
    const int types[] = {BN_Q1_0, BN_Q2_0};
    const uint32_t ftypes[] = {40, 41};
    for (int k = 0; k < 2; k++) {
        const int type = types[k];
        bn_mkmodel_params p;
        char err[512];
        bn_mkmodel_defaults(&p, "tiny");
        p.type = type;
        p.n_threads = 3;
        CHECK(bn_mkmodel_write(&p, path_a, err, sizeof err) == 0, "write %s: %s", bn_type_name(type), err);
        p.type = BN_F32;
        CHECK(bn_mkmodel_write(&p, path_b, err, sizeof err) == 0, "write f32: %s", err);
        bn_quantize_params qp = bn_quantize_params_default();
        qp.type = type == BN_Q1_0 ? "Q1_0" : "Q2_0";
        qp.pure = true;
        qp.n_threads = 2;
        qp.log = NULL;
        CHECK(bn_quantize_file(&qp, path_b, path_c, err, sizeof err) == 0, "quantize f32 -> %s: %s", qp.type, err);
        gguf_file *a = gguf_open(path_a, err, sizeof err), *c = gguf_open(path_c, err, sizeof err);
        CHECK(a && c, "open: %s", err);
        if (a && c) {
            CHECK(geti(a, "general.file_type") == ftypes[k], "%s: general.file_type %u", qp.type, ftypes[k]);
            CHECK(geti(a, "general.quantization_version") == 2, "%s: quantization_version 2", qp.type);
            check_shape(a, "token_embd.weight", 128, 512, type);
            check_shape(a, "output.weight", 128, 512, type);
            check_shape(a, "blk.0.ffn_gate.weight", 128, 256, type);
            check_shape(a, "blk.0.ssm_beta.weight", 128, 4, type);
            check_shape(a, "blk.3.attn_q.weight", 128, 256, type);
            check_shape(a, "blk.0.ssm_conv1d.weight", 4, 256, BN_F32);
            check_shape(a, "blk.0.ssm_norm.weight", 32, 1, BN_F32);
            check_shape(a, "blk.0.ssm_a", 4, 1, BN_F32);
            check_shape(a, "output_norm.weight", 128, 1, BN_F32);
            CHECK(a->n_tensors == c->n_tensors, "%s: %zu tensors, quantized f32 file %zu", qp.type, a->n_tensors,
                  c->n_tensors);
            int differ = 0, n_quant = 0;
            for (size_t i = 0; i < a->n_tensors && i < c->n_tensors; i++) {
                const gguf_tensor *x = &a->tensors[i], *y = &c->tensors[i];
                bool same = strcmp(x->name, y->name) == 0 && x->type == y->type && x->ne[0] == y->ne[0] &&
                            x->ne[1] == y->ne[1] && x->nbytes == y->nbytes && memcmp(x->data, y->data, x->nbytes) == 0;
                if (!same && differ++ < 3) printf("  %s differs from the quantized f32 file's %s\n", x->name, y->name);
                n_quant += x->type == type;
            }
            CHECK(differ == 0, "%s: %d tensors differ from bonsai-quantize --pure of the f32 file", qp.type, differ);
            CHECK(n_quant == 2 + 3 * 8 + 7, "%s: %d tensors of the type (embedding, head, 8 per GDN layer, 7 in the "
                  "attention layer)", qp.type, n_quant);
        }
        gguf_close(a);
        gguf_close(c);
        bn_model *m = bn_model_load(path_a, err, sizeof err);
        CHECK(m != NULL, "%s file loads as a model: %s", qp.type, err);
        bn_model_free(m);
    }
    bn_mkmodel_params p;
    char err[512];
    bn_mkmodel_defaults(&p, "tiny");
    p.type = BN_Q1_0;
    p.n_ff = 320; // ffn_down's ne0: not a multiple of 128
    CHECK(bn_mkmodel_check(&p, err, sizeof err) != 0 && strstr(err, "ffn_down") && strstr(err, "not a multiple"),
          "q1_0 with ne0 320 refused: %s", err);
    p.type = BN_Q2_0; // block 64: 320 fits
    CHECK(bn_mkmodel_check(&p, err, sizeof err) == 0, "q2_0 with ne0 320 accepted: %s", err);
    p.type = BN_Q4_0;
    CHECK(bn_mkmodel_check(&p, err, sizeof err) != 0 && strstr(err, "type"), "q4_0 refused: %s", err);
}

static void check_presets(void) {
    bn_mkmodel_params p;
    char err[256];
    // docs/model.md §3: Qwen3.5-27B has 26,895,998,464 parameters (V 248320, untied)
    CHECK(bn_mkmodel_defaults(&p, "27b") == 0, "27b preset");
    CHECK(bn_mkmodel_check(&p, err, sizeof err) == 0, "27b valid: %s", err);
    CHECK(bn_mkmodel_n_params(&p, 248320) == 26895998464LL, "27b params %lld", (long long)bn_mkmodel_n_params(&p, 248320));
    CHECK(bn_mkmodel_defaults(&p, "small") == 0, "small");
    int64_t n = bn_mkmodel_n_params(&p, p.n_vocab_small);
    CHECK(n > 20000000 && n < 40000000, "small ~30M params: %lld", (long long)n);
    CHECK(bn_mkmodel_defaults(&p, "mid") == 0, "mid");
    n = bn_mkmodel_n_params(&p, p.n_vocab_small);
    CHECK(n > 500000000 && n < 1000000000, "mid 0.5-1B params: %lld", (long long)n);
    CHECK(bn_mkmodel_defaults(&p, "qwen3-1.7b") == 0, "qwen3-1.7b");
    n = bn_mkmodel_n_params(&p, p.n_vocab_small);
    CHECK(n > 1600000000 && n < 2100000000, "qwen3-1.7b ~1.7-2.0B params: %lld", (long long)n);
    CHECK(bn_mkmodel_defaults(&p, "nonsense") != 0, "unknown preset rejected");
    bn_mkmodel_defaults(&p, "tiny");
    p.n_head_kv = 3;
    CHECK(bn_mkmodel_check(&p, err, sizeof err) != 0 && strstr(err, "n_head_kv"), "bad nkv rejected: %s", err);
    CHECK(bn_mkmodel_write(&p, path_a, err, sizeof err) != 0, "write refuses bad params");
}

static void check_vocab_copy(void) {
    char vpath[512], err[512];
    test_third_party(vpath, sizeof vpath, "llama.cpp/models/ggml-vocab-qwen35.gguf");
    if (access(vpath, R_OK) != 0) {
        printf("note: %s missing, vocab-copy check skipped\n", vpath);
        return;
    }
    bn_mkmodel_params p;
    bn_mkmodel_defaults(&p, "qwen3-tiny");
    p.vocab = vpath;
    p.type = BN_F16;
    CHECK(bn_mkmodel_write(&p, path_a, err, sizeof err) == 0, "write with vocab: %s", err);
    gguf_file *f = gguf_open(path_a, err, sizeof err), *v = gguf_open(vpath, err, sizeof err);
    CHECK(f && v, "open: %s", err);
    if (f && v) {
        const gguf_kv *tok = gguf_get_arr(f, "tokenizer.ggml.tokens");
        CHECK(tok && tok->n == 151936, "151936 tokens copied");
        check_shape(f, "token_embd.weight", 128, 151936, BN_F16);
        int n_tok_keys = 0, copied = 0;
        for (size_t i = 0; i < v->n_kv; i++)
            if (strncmp(v->kv[i].key, "tokenizer.", 10) == 0) {
                n_tok_keys++;
                copied += gguf_find_key(f, v->kv[i].key) >= 0;
            }
        CHECK(n_tok_keys > 5 && copied == n_tok_keys, "all %d tokenizer.* KVs copied (%d)", n_tok_keys, copied);
        CHECK(strcmp(gguf_get_str(f, "tokenizer.ggml.pre"), "qwen35") == 0, "pre qwen35");
    }
    gguf_close(f);
    gguf_close(v);
}

int main(void) {
    snprintf(path_a, sizeof path_a, "/tmp/bonsai-test-mkmodel-a-%d.gguf", (int)getpid());
    snprintf(path_b, sizeof path_b, "/tmp/bonsai-test-mkmodel-b-%d.gguf", (int)getpid());
    snprintf(path_c, sizeof path_c, "/tmp/bonsai-test-mkmodel-c-%d.gguf", (int)getpid());
    check_tiny_qwen35();
    check_reproducible();
    check_types();
    check_threads();
    check_quantized();
    check_presets();
    check_vocab_copy();
    unlink(path_a);
    unlink(path_b);
    unlink(path_c);
    return test_done("test_mkmodel");
}
