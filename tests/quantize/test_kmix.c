// tests/quantize/test_kmix.c — the K-quant mixtures' per-tensor types for a 4-layer and a 64-layer qwen35
// (full attention every 4th layer, every weight row a multiple of 256) against tables taken from
// `llama-quantize --dry-run` on bonsai-mkmodel files of those shapes (llama.cpp de3ff81): every
// quantizable tensor is q4_K except the listed ones. Also the counters' reset by bn_quant_rules_scan
// and the shape fallbacks of the mixture types. No files, runs everywhere.
#include "quantize/rules.h"
#include "quant/quant.h"
#include "tests/test.h"
#include <stdlib.h>
#include <string.h>

enum { MAX_NAMES = 1024 };
static char names[MAX_NAMES][48];
static const char *name_ptrs[MAX_NAMES];

static int cmp_names(const void *a, const void *b) {
    return bn_tensor_order_cmp(*(const char *const *)a, *(const char *const *)b);
}

// qwen35_names: the 2-D weight names of a qwen35 with n_layer layers (full attention at i % 4 == 3), in
// llama-quantize's order; returns the count.
static int qwen35_names(int n_layer) {
    static const char *const linear[] = {"attn_gate", "attn_qkv", "ffn_down", "ffn_gate", "ffn_up", "ssm_alpha",
                                         "ssm_beta", "ssm_out"};
    static const char *const full[] = {"attn_k", "attn_output", "attn_q", "attn_v", "ffn_down", "ffn_gate", "ffn_up"};
    int n = 0;
    snprintf(names[n++], 48, "output.weight");
    snprintf(names[n++], 48, "token_embd.weight");
    for (int i = 0; i < n_layer; i++) {
        bool is_full = i % 4 == 3;
        int k = is_full ? 7 : 8;
        for (int j = 0; j < k; j++) snprintf(names[n++], 48, "blk.%d.%s.weight", i, is_full ? full[j] : linear[j]);
    }
    for (int i = 0; i < n; i++) name_ptrs[i] = names[i];
    qsort(name_ptrs, (size_t)n, sizeof name_ptrs[0], cmp_names);
    return n;
}

// expected_type: the type listed for name in the "name=type;" table, else q4_K.
static int expected_type(const char *table, const char *name) {
    char key[64];
    snprintf(key, sizeof key, ";%s=", name);
    const char *hit = strstr(table, key);
    if (!hit) return BN_Q4_K;
    char type[16] = "";
    sscanf(hit + strlen(key), "%15[^;]", type);
    return bn_type_from_name(type);
}

// check_table: every tensor's chosen type equals the dry-run table.
static void check_table(const char *ftype_name, int n_layer, const char *table) {
    int n = qwen35_names(n_layer);
    int ftype, def;
    char err[256];
    CHECK(bn_parse_ftype(ftype_name, false, &ftype, &def, err, sizeof err) == 0, "%s", err);
    bn_quant_rules r;
    bn_quant_rules_init(&r, ftype, def, false);
    bn_quant_rules_scan(&r, name_ptrs, (size_t)n, n_layer);
    CHECK(!r.tied && r.mix.n_attention_wv == n_layer, "%s/%d: scan found %d attn_v-like", ftype_name, n_layer,
          r.mix.n_attention_wv);
    int64_t ne[4] = {256, 512, 1, 1};
    int mismatches = 0, bumped = 0;
    for (int i = 0; i < n; i++) {
        bn_tensor_choice c;
        int rc = bn_tensor_choose_type(&r, name_ptrs[i], 2, ne, BN_F16, &c, err, sizeof err);
        int want = expected_type(table, name_ptrs[i]);
        if (rc != 0 || c.type != want) {
            mismatches++;
            CHECK(0, "%s/%d layers: %s -> %s, llama-quantize %s", ftype_name, n_layer, name_ptrs[i],
                  rc ? err : bn_type_name(c.type), bn_type_name(want));
        }
        if (want != BN_Q4_K) bumped++;
    }
    CHECK(mismatches == 0, "%s/%d: %d of %d tensors differ", ftype_name, n_layer, mismatches, n);
    printf("%-6s %2d layers: %3d tensors, %2d not q4_K, %d differ from llama-quantize --dry-run\n", ftype_name, n_layer,
           n, bumped, mismatches);
}

// Tables: ";name=type;" for every tensor that llama-quantize --dry-run did not make q4_K.
static const char q4km_4[] = ";output.weight=q6_K;blk.2.attn_qkv.weight=q6_K;blk.2.ffn_down.weight=q6_K;"
                             "blk.3.attn_v.weight=q6_K;blk.3.ffn_down.weight=q6_K;";
static const char q4ks_4[] = ";output.weight=q6_K;blk.0.attn_qkv.weight=q5_K;blk.1.attn_qkv.weight=q5_K;"
                             "blk.2.attn_qkv.weight=q5_K;blk.3.attn_v.weight=q5_K;";
static const char q4ks_64[] = ";output.weight=q6_K;blk.0.attn_qkv.weight=q5_K;blk.0.ffn_down.weight=q5_K;"
                              "blk.1.attn_qkv.weight=q5_K;blk.1.ffn_down.weight=q5_K;blk.2.attn_qkv.weight=q5_K;"
                              "blk.2.ffn_down.weight=q5_K;blk.3.attn_v.weight=q5_K;blk.3.ffn_down.weight=q5_K;"
                              "blk.4.ffn_down.weight=q5_K;blk.5.ffn_down.weight=q5_K;blk.6.ffn_down.weight=q5_K;"
                              "blk.7.ffn_down.weight=q5_K;";
// Q4_K_M, 64 layers: attn_v-like and ffn_down are q6_K in the same layers (listed once, expanded below).
static const int q4km_64_layers[] = {0,  1,  2,  3,  4,  5,  6,  7,  10, 13, 16, 19, 22, 25, 28, 31, 34,
                                     37, 40, 43, 46, 49, 52, 55, 56, 57, 58, 59, 60, 61, 62, 63};

static void test_tables(void) {
    check_table("Q4_K_M", 4, q4km_4);
    check_table("Q4_K", 4, q4km_4);
    check_table("Q4_K_S", 4, q4ks_4);
    check_table("Q4_K_S", 64, q4ks_64);
    static char q4km_64[8192];
    int k = snprintf(q4km_64, sizeof q4km_64, ";output.weight=q6_K;");
    for (size_t i = 0; i < sizeof q4km_64_layers / sizeof q4km_64_layers[0]; i++) {
        int l = q4km_64_layers[i];
        k += snprintf(q4km_64 + k, sizeof q4km_64 - k, "blk.%d.%s.weight=q6_K;blk.%d.ffn_down.weight=q6_K;", l,
                      l % 4 == 3 ? "attn_v" : "attn_qkv", l);
    }
    check_table("Q4_K_M", 64, q4km_64);
}

// test_fallbacks: mixture types on rows that are not a multiple of 256 (as llama-quantize: q6_K -> q8_0,
// q5_K -> q5_1, q4_K -> q5_0), and --pure / no scan turning the layer rules off.
static void test_fallbacks(void) {
    const char *ff[] = {"blk.0.attn_qkv.weight", "blk.0.ffn_down.weight", "blk.0.ffn_up.weight"};
    int ftype, def;
    char err[256];
    bn_quant_rules r;
    int64_t ne[4] = {320, 64, 1, 1};
    bn_tensor_choice c;
    bn_parse_ftype("Q4_K_M", false, &ftype, &def, err, sizeof err);
    bn_quant_rules_init(&r, ftype, def, false);
    bn_quant_rules_scan(&r, ff, 3, 1);
    CHECK(bn_tensor_choose_type(&r, ff[0], 2, ne, BN_F16, &c, err, sizeof err) == 0 && c.type == BN_Q8_0 && c.fallback,
          "Q4_K_M attn_qkv (q6_K) ncols 320 -> q8_0: %s", bn_type_name(c.type));
    CHECK(bn_tensor_choose_type(&r, ff[2], 2, ne, BN_F16, &c, err, sizeof err) == 0 && c.type == BN_Q5_0,
          "q4_K ncols 320 -> q5_0: %s", bn_type_name(c.type));
    bn_parse_ftype("Q4_K_S", false, &ftype, &def, err, sizeof err);
    bn_quant_rules_init(&r, ftype, def, false);
    bn_quant_rules_scan(&r, ff, 3, 8);
    CHECK(bn_tensor_choose_type(&r, ff[1], 2, ne, BN_F16, &c, err, sizeof err) == 0 && c.type == BN_Q5_1,
          "Q4_K_S ffn_down layer 0 (q5_K) ncols 320 -> q5_1: %s", bn_type_name(c.type));
    // no scan (single-tensor callers): the layer rules stay off
    bn_quant_rules_init(&r, ftype, def, false);
    int64_t ne256[4] = {256, 64, 1, 1};
    CHECK(bn_tensor_choose_type(&r, ff[1], 2, ne256, BN_F16, &c, err, sizeof err) == 0 && c.type == BN_Q4_K,
          "unscanned rules: ffn_down stays q4_K");
    // --pure: plain q4_K, output too
    bn_quant_rules_scan(&r, ff, 3, 8);
    r.pure = true;
    CHECK(bn_tensor_choose_type(&r, ff[1], 2, ne256, BN_F16, &c, err, sizeof err) == 0 && c.type == BN_Q4_K,
          "--pure: ffn_down q4_K");
    CHECK(bn_tensor_choose_type(&r, "output.weight", 2, ne256, BN_F16, &c, err, sizeof err) == 0 && c.type == BN_Q4_K,
          "--pure: output q4_K");
}

int main(void) {
    test_tables();
    test_fallbacks();
    return test_done("quantize_kmix");
}
