// tests/quantize/test_rules.c — llama-quantize type selection (docs/formats.md §5.1–5.5) on qwen35
// tensor names and shapes: quantizable set, mixture rules, bonsai's compact default, --pure,
// explicit types, --tensor-type regexes, shape fallbacks and errors, ftype parsing, tensor order.
#include "tests/test.h"
#include "quantize/rules.h"
#include "quant/quant.h"
#include <string.h>
#include <stdlib.h>

static const int64_t SH_EMB[4] = {5120, 248320, 1, 1};
static const int64_t SH_QKV[4] = {5120, 10240, 1, 1};
static const int64_t SH_NORM[4] = {5120, 1, 1, 1};
static const int64_t SH_CONV[4] = {4, 10240, 1, 1};

// choose: type chosen for a 2-D tensor (or a given shape); -1 on error (err printed by caller).
static int choose(bn_quant_rules *r, const char *name, const int64_t *ne, int src, bn_tensor_choice *c) {
    char err[256] = "";
    int n_dims = ne[1] > 1 ? 2 : 1;
    bn_tensor_choice tmp;
    if (!c) c = &tmp;
    if (bn_tensor_choose_type(r, name, n_dims, ne, src, c, err, sizeof err) != 0) return -1;
    return c->type;
}

static void rules_for(bn_quant_rules *r, const char *type, bool g128) {
    int ftype, def;
    char err[256];
    int rc = bn_parse_ftype(type, g128, &ftype, &def, err, sizeof err);
    CHECK(rc == 0, "parse %s: %s", type, err);
    bn_quant_rules_init(r, ftype, def, g128);
}

static void test_allows(void) {
    CHECK(bn_tensor_allows_quantization("token_embd.weight", 2, false), "token_embd");
    CHECK(bn_tensor_allows_quantization("output.weight", 2, false), "output");
    CHECK(!bn_tensor_allows_quantization("output.weight", 2, true), "--leave-output-tensor");
    CHECK(bn_tensor_allows_quantization("blk.0.ssm_alpha.weight", 2, false), "ssm_alpha");
    CHECK(bn_tensor_allows_quantization("blk.0.attn_qkv.weight", 2, false), "attn_qkv");
    CHECK(!bn_tensor_allows_quantization("blk.0.ssm_conv1d.weight", 2, false), "ssm_conv1d is 2-D but never quantized");
    CHECK(!bn_tensor_allows_quantization("blk.3.attn_q_norm.weight", 2, false), "norms");
    CHECK(!bn_tensor_allows_quantization("blk.0.ssm_norm.weight", 1, false), "ssm_norm");
    CHECK(!bn_tensor_allows_quantization("output_norm.weight", 1, false), "output_norm");
    CHECK(!bn_tensor_allows_quantization("blk.0.ssm_a", 1, false), "ssm_a (1-D, no .weight)");
    CHECK(!bn_tensor_allows_quantization("blk.0.ssm_dt.bias", 1, false), "bias");
    CHECK(!bn_tensor_allows_quantization("blk.0.some.bias", 2, false), "2-D bias does not end in weight");
    CHECK(!bn_tensor_allows_quantization("blk.0.ffn_gate_inp.weight", 2, false), "expert gate");
    CHECK(!bn_tensor_allows_quantization("blk.0.attn_k.weight", 1, false), "1-D weight");
}

static void test_compact_default(void) {
    bn_quant_rules r;
    // Q1_0: bonsai default keeps output + token_embd in Q1_0; non-quantizable tensors keep their type
    rules_for(&r, "Q1_0", false);
    CHECK(choose(&r, "output.weight", SH_EMB, BN_F16, NULL) == BN_Q1_0, "Q1_0 output compact");
    CHECK(choose(&r, "token_embd.weight", SH_EMB, BN_F16, NULL) == BN_Q1_0, "Q1_0 token_embd");
    CHECK(choose(&r, "blk.0.attn_qkv.weight", SH_QKV, BN_F16, NULL) == BN_Q1_0, "Q1_0 qkv");
    CHECK(choose(&r, "blk.0.attn_norm.weight", SH_NORM, BN_F32, NULL) == BN_F32, "norm copied");
    CHECK(choose(&r, "blk.0.ssm_conv1d.weight", SH_CONV, BN_F32, NULL) == BN_F32, "conv copied");
    bn_tensor_choice c;
    choose(&r, "blk.0.ssm_conv1d.weight", SH_CONV, BN_F32, &c);
    CHECK(!c.quantizable && !c.fallback, "conv1d not quantizable, no fallback warning");
    // --llama-mix restores llama-quantize: Q6_K output, token_embd stays Q1_0
    r.llama_mix = true;
    CHECK(choose(&r, "output.weight", SH_EMB, BN_F16, NULL) == BN_Q6_K, "Q1_0 llama-mix output Q6_K");
    CHECK(choose(&r, "token_embd.weight", SH_EMB, BN_F16, NULL) == BN_Q1_0, "Q1_0 llama-mix token_embd Q1_0");
    // --pure wins over --llama-mix
    r.pure = true;
    CHECK(choose(&r, "output.weight", SH_EMB, BN_F16, NULL) == BN_Q1_0, "pure output");

    // Q2_0 g64 and g128
    rules_for(&r, "Q2_0", false);
    CHECK(r.default_type == BN_Q2_0 && r.ftype == 41, "Q2_0 → g64, ftype 41");
    CHECK(choose(&r, "output.weight", SH_EMB, BN_F16, NULL) == BN_Q2_0, "Q2_0 output compact");
    CHECK(choose(&r, "token_embd.weight", SH_EMB, BN_F16, NULL) == BN_Q2_0, "Q2_0 token_embd compact");
    r.llama_mix = true;
    CHECK(choose(&r, "output.weight", SH_EMB, BN_F16, NULL) == BN_Q6_K, "Q2_0 llama-mix output");
    CHECK(choose(&r, "token_embd.weight", SH_EMB, BN_F16, NULL) == BN_Q4_K, "Q2_0 llama-mix token_embd Q4_K");
    CHECK(choose(&r, "blk.0.ffn_down.weight", SH_QKV, BN_F16, NULL) == BN_Q2_0, "Q2_0 ffn_down");
    rules_for(&r, "Q2_0", true);
    CHECK(r.default_type == BN_PQ2_0 && r.ftype == 41, "Q2_0 g128 → PQ2_0 layout, ftype 41");
    rules_for(&r, "PQ2_0", false);
    CHECK(r.default_type == BN_PQ2_0 && r.ftype == 141, "PQ2_0 ftype 141");
    CHECK(choose(&r, "output.weight", SH_EMB, BN_F16, NULL) == BN_PQ2_0, "PQ2_0 compact output");
    r.llama_mix = true;
    CHECK(choose(&r, "token_embd.weight", SH_EMB, BN_F16, NULL) == BN_Q4_K, "PQ2_0 llama-mix token_embd");
}

static void test_llama_mixture(void) {
    bn_quant_rules r;
    rules_for(&r, "TQ1_0", false); // not a compact type: llama-quantize's rules by default
    CHECK(choose(&r, "output.weight", SH_EMB, BN_F16, NULL) == BN_Q6_K, "TQ1_0 output Q6_K");
    CHECK(choose(&r, "token_embd.weight", SH_EMB, BN_F16, NULL) == BN_Q4_K, "TQ1_0 token_embd Q4_K");
    int64_t odd_out[4] = {384, 1000, 1, 1}; // 384 % 256 != 0 → the output rule picks Q8_0
    CHECK(choose(&r, "output.weight", odd_out, BN_F16, NULL) == BN_Q8_0, "output ne0 %% blck → Q8_0");
    rules_for(&r, "Q4_0", false);
    CHECK(choose(&r, "output.weight", SH_EMB, BN_F16, NULL) == BN_Q6_K, "Q4_0 output Q6_K");
    CHECK(choose(&r, "token_embd.weight", SH_EMB, BN_F16, NULL) == BN_Q4_0, "Q4_0 token_embd unchanged");
    r.tied = true; // no output.weight: token_embd is the head and takes the output rule
    CHECK(choose(&r, "token_embd.weight", SH_EMB, BN_F16, NULL) == BN_Q6_K, "tied token_embd Q6_K");
    rules_for(&r, "Q8_0", false);
    CHECK(choose(&r, "output.weight", SH_EMB, BN_F16, NULL) == BN_Q8_0, "Q8_0 output stays Q8_0");
    rules_for(&r, "Q4_K", false);
    CHECK(r.ftype == 15 && r.default_type == BN_Q4_K, "Q4_K → ftype 15");
    CHECK(choose(&r, "output.weight", SH_EMB, BN_F16, NULL) == BN_Q6_K, "Q4_K output");
    // plain-float ftypes: every quantizable tensor takes the type, overrides do not apply
    rules_for(&r, "F16", false);
    char err[256];
    CHECK(bn_quant_rules_add_override(&r, "attn=q8_0", err, sizeof err) == 0, "%s", err);
    CHECK(choose(&r, "blk.3.attn_q.weight", SH_QKV, BN_Q1_0, NULL) == BN_F16, "F16 unpack ignores overrides");
    CHECK(choose(&r, "output.weight", SH_EMB, BN_Q1_0, NULL) == BN_F16, "F16 output");
    CHECK(choose(&r, "output_norm.weight", SH_NORM, BN_F32, NULL) == BN_F32, "F16 keeps norms F32");
    bn_quant_rules_free(&r);
}

static void test_explicit_types(void) {
    bn_quant_rules r;
    rules_for(&r, "Q2_0", false);
    r.llama_mix = true;
    r.output_type = BN_Q8_0;
    r.token_embd_type = BN_F16;
    CHECK(choose(&r, "output.weight", SH_EMB, BN_F32, NULL) == BN_Q8_0, "--output-tensor-type");
    CHECK(choose(&r, "token_embd.weight", SH_EMB, BN_F32, NULL) == BN_F16, "--token-embedding-type");
    int64_t odd[4] = {100, 7, 1, 1};
    CHECK(choose(&r, "token_embd.weight", odd, BN_F32, NULL) == BN_F16, "explicit type: no fallback step");
    // the explicit output type applies even with --pure
    r.pure = true;
    CHECK(choose(&r, "output.weight", SH_EMB, BN_F32, NULL) == BN_Q8_0, "--output-tensor-type with --pure");
    char err[256];
    CHECK(bn_parse_tensor_type_name("q2_0", true, err, sizeof err) == BN_PQ2_0, "q2_0 with g128 layout");
    CHECK(bn_parse_tensor_type_name("Q6_K", false, err, sizeof err) == BN_Q6_K, "q6_K");
    CHECK(bn_parse_tensor_type_name("q5_0", false, err, sizeof err) == BN_Q5_0, "q5_0");
    CHECK(bn_parse_tensor_type_name("q3_K", false, err, sizeof err) < 0, "q3_K unknown here");
}

static void test_overrides(void) {
    bn_quant_rules r;
    char err[256];
    rules_for(&r, "Q2_0", false);
    r.llama_mix = true;
    CHECK(bn_quant_rules_add_override(&r, "FFN_.*=q8_0", err, sizeof err) == 0, "%s", err); // regex lower-cased
    CHECK(bn_quant_rules_add_override(&r, "ffn_down=q4_0", err, sizeof err) == 0, "%s", err);
    CHECK(bn_quant_rules_add_override(&r, "^blk\\.1\\.attn=q1_0", err, sizeof err) == 0, "%s", err);
    CHECK(bn_quant_rules_add_override(&r, "output=q2_0", err, sizeof err) == 0, "%s", err);
    bn_tensor_choice c;
    CHECK(choose(&r, "blk.5.ffn_down.weight", SH_QKV, BN_F16, &c) == BN_Q8_0 && c.manual, "first match wins");
    CHECK(strstr(c.warning, "manual override") != NULL, "override warning: %s", c.warning);
    CHECK(choose(&r, "blk.1.attn_qkv.weight", SH_QKV, BN_F16, NULL) == BN_Q1_0, "anchored regex matches blk.1");
    CHECK(choose(&r, "blk.11.attn_qkv.weight", SH_QKV, BN_F16, NULL) == BN_Q2_0, "anchored regex skips blk.11");
    CHECK(choose(&r, "output.weight", SH_EMB, BN_F16, NULL) == BN_Q2_0, "manual override skips the Q6_K mixture rule");
    CHECK(choose(&r, "blk.3.attn_output.weight", SH_QKV, BN_F16, NULL) == BN_Q2_0, "substring search");
    CHECK(choose(&r, "token_embd.weight", SH_EMB, BN_F16, NULL) == BN_Q4_K, "unmatched → mixture");
    // an override is still subject to the shape fallback
    int64_t ne40[4] = {40, 8, 1, 1};
    CHECK(choose(&r, "blk.0.ffn_up.weight", ne40, BN_F16, &c) == BN_F16 && c.fallback, "q8_0 override, ne0 40 → F16");
    CHECK(bn_quant_rules_add_override(&r, "a=q9_9", err, sizeof err) != 0, "bad type refused");
    CHECK(bn_quant_rules_add_override(&r, "(unclosed=q8_0", err, sizeof err) != 0, "bad regex refused");
    CHECK(strstr(err, "regex") != NULL, "bad regex message: %s", err);
    CHECK(bn_quant_rules_add_override(&r, "noequals", err, sizeof err) != 0, "malformed refused");
    bn_quant_rules_free(&r);
}

static void test_fallbacks(void) {
    bn_quant_rules r;
    bn_tensor_choice c;
    rules_for(&r, "Q2_0", false);
    int64_t ne96[4] = {96, 4, 1, 1}, ne80[4] = {80, 4, 1, 1}, ne160[4] = {160, 4, 1, 1}, ne192[4] = {192, 4, 1, 1};
    CHECK(choose(&r, "blk.0.ffn_up.weight", ne96, BN_F32, &c) == BN_Q4_0 && c.fallback, "Q2_0 ncols 96 → Q4_0");
    CHECK(strstr(c.warning, "not divisible by  64") && strstr(c.warning, "falling back to    q4_0"), "%s", c.warning);
    CHECK(choose(&r, "blk.0.ffn_up.weight", ne80, BN_F32, &c) == BN_F16, "Q2_0 ncols 80 → F16");
    CHECK(strstr(c.warning, "must use F16") != NULL, "%s", c.warning);
    rules_for(&r, "PQ2_0", false);
    CHECK(choose(&r, "blk.0.ffn_up.weight", ne192, BN_F32, NULL) == BN_Q4_0, "PQ2_0 ncols 192 → Q4_0");
    rules_for(&r, "Q6_K", false);
    CHECK(choose(&r, "blk.0.ffn_up.weight", ne160, BN_F32, NULL) == BN_Q8_0, "Q6_K ncols 160 → Q8_0");
    rules_for(&r, "TQ2_0", false);
    CHECK(choose(&r, "blk.0.ffn_up.weight", ne160, BN_F32, NULL) == BN_Q4_0, "TQ2_0 ncols 160 → Q4_0");
    rules_for(&r, "Q4_0", false);
    CHECK(choose(&r, "blk.0.ffn_up.weight", ne80, BN_F32, NULL) == BN_F16, "Q4_0 ncols 80 → F16");
    rules_for(&r, "Q1_0", false);
    CHECK(choose(&r, "blk.0.ffn_up.weight", ne192, BN_F32, NULL) == -1, "Q1_0 ncols 192 → error");
    char err[256];
    bn_tensor_choose_type(&r, "blk.0.ffn_up.weight", 2, ne192, BN_F32, &c, err, sizeof err);
    CHECK(strstr(err, "no tensor type fallback") != NULL, "%s", err);
    rules_for(&r, "Q4_K", false);
    CHECK(choose(&r, "blk.0.ffn_up.weight", ne160, BN_F32, &c) == BN_Q5_0 && c.fallback, "Q4_K ncols 160 → Q5_0");
    // norms are never touched even if their shape does not fit
    CHECK(choose(&r, "blk.0.attn_norm.weight", ne80, BN_F32, &c) == BN_F32 && !c.fallback, "norm with odd shape");
    // the same table asked directly (bonsai-antidoom fits its head type with it)
    CHECK(bn_type_shape_fallback(BN_Q6_K, 256) == BN_Q6_K, "q6_K fits 256");
    CHECK(bn_type_shape_fallback(BN_Q6_K, 128) == BN_Q8_0, "q6_K at 128 → q8_0");
    CHECK(bn_type_shape_fallback(BN_Q6_K, 48) == BN_F16, "q6_K at 48 → F16");
    CHECK(bn_type_shape_fallback(BN_Q2_0, 96) == BN_Q4_0, "Q2_0 at 96 → Q4_0");
    CHECK(bn_type_shape_fallback(BN_Q1_0, 192) == -1, "Q1_0 at 192: none");
    CHECK(bn_type_shape_fallback(BN_Q8_0, 40) == BN_F16, "q8_0 at 40 → F16");
}

static void test_ftype_parse(void) {
    int ftype, def;
    char err[256];
    struct { const char *s; int ftype, type; } ok[] = {
        {"q1_0", 40, BN_Q1_0}, {"Q2_0", 41, BN_Q2_0}, {"41", 41, BN_Q2_0}, {"pq2_0", 141, BN_PQ2_0},
        {"141", 141, BN_PQ2_0}, {"Q4_0", 2, BN_Q4_0}, {"Q4_1", 3, BN_Q4_1}, {"q8_0", 7, BN_Q8_0}, {"7", 7, BN_Q8_0},
        {"Q6_K", 18, BN_Q6_K}, {"Q4_K", 15, BN_Q4_K}, {"Q4_K_M", 15, BN_Q4_K}, {"q4_k_s", 14, BN_Q4_K},
        {"Q5_0", 8, BN_Q5_0}, {"9", 9, BN_Q5_1}, {"TQ1_0", 36, BN_TQ1_0}, {"TQ2_0", 37, BN_TQ2_0},
        {"F16", 1, BN_F16}, {"bf16", 32, BN_BF16}, {"F32", 0, BN_F32}, {"0", 0, BN_F32}, {"40", 40, BN_Q1_0},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int rc = bn_parse_ftype(ok[i].s, false, &ftype, &def, err, sizeof err);
        CHECK(rc == 0 && ftype == ok[i].ftype && def == ok[i].type, "%s → %d/%d", ok[i].s, ftype, def);
    }
    CHECK(bn_parse_ftype("Q3_K_M", false, &ftype, &def, err, sizeof err) != 0, "unsupported ftype refused");
    CHECK(bn_parse_ftype("99", false, &ftype, &def, err, sizeof err) != 0, "unknown number refused");
    CHECK(strcmp(bn_ftype_name(15), "Q4_K - Medium") == 0 && strcmp(bn_ftype_name(0), "all F32") == 0, "names");
}

static int cmp_names(const void *a, const void *b) { return bn_tensor_order_cmp(*(char *const *)a, *(char *const *)b); }

static void test_order(void) {
    const char *names[] = {"blk.10.attn_q.weight", "token_embd.weight", "blk.9.ssm_a", "blk.9.ffn_up.weight",
                           "output_norm.weight", "blk.9.attn_gate.weight", "output.weight", "blk.2.attn_k.weight",
                           "blk.9.post_attention_norm.weight"};
    const char *want[] = {"output.weight", "output_norm.weight", "token_embd.weight", "blk.2.attn_k.weight",
                          "blk.9.attn_gate.weight", "blk.9.ffn_up.weight", "blk.9.post_attention_norm.weight",
                          "blk.9.ssm_a", "blk.10.attn_q.weight"};
    size_t n = sizeof names / sizeof names[0];
    qsort(names, n, sizeof names[0], cmp_names);
    for (size_t i = 0; i < n; i++) CHECK(strcmp(names[i], want[i]) == 0, "order[%zu] = %s, want %s", i, names[i], want[i]);
}

int main(void) {
    test_allows();
    test_compact_default();
    test_llama_mixture();
    test_explicit_types();
    test_overrides();
    test_fallbacks();
    test_ftype_parse();
    test_order();
    return test_done("quantize_rules");
}
