// quantize/rules.h — llama-quantize's per-tensor type selection (docs/formats.md §4, §5.1–5.5) as
// pure functions on tensor names and shapes, with bonsai's one deliberate difference: for the
// compact low-bit targets (Q1_0, Q2_0, PQ2_0, PTQ1_0) output.weight and token_embd.weight keep
// the target type unless llama_mix is set (the layout of the published Bonsai files).
#ifndef BONSAI_QUANTIZE_RULES_H
#define BONSAI_QUANTIZE_RULES_H
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>

// llama_ftype values stored in general.file_type (docs/formats.md §4).
enum bn_ftype {
    BN_FTYPE_ALL_F32 = 0,
    BN_FTYPE_F16 = 1,
    BN_FTYPE_Q4_0 = 2,
    BN_FTYPE_Q4_1 = 3,
    BN_FTYPE_Q8_0 = 7,
    BN_FTYPE_Q5_0 = 8,
    BN_FTYPE_Q5_1 = 9,
    BN_FTYPE_Q4_K_S = 14,
    BN_FTYPE_Q4_K_M = 15,
    BN_FTYPE_Q5_K_S = 16,
    BN_FTYPE_Q5_K_M = 17,
    BN_FTYPE_Q6_K = 18,
    BN_FTYPE_BF16 = 32,
    BN_FTYPE_TQ1_0 = 36,
    BN_FTYPE_TQ2_0 = 37,
    BN_FTYPE_Q1_0 = 40,
    BN_FTYPE_Q2_0 = 41,
    BN_FTYPE_PQ2_0 = 141,
    BN_FTYPE_PTQ1_0 = 143,
};

#define BN_QUANT_MAX_OVERRIDES 32

// One --tensor-type REGEX=T rule; the compiled regex is owned by bn_quant_rules.
typedef struct {
    char *pattern; // lower-cased, as llama-quantize stores it
    int type;      // bn_type
    void *code;    // pcre2_code *
} bn_tensor_override;

// Everything that decides a tensor's output type. Build with bn_quant_rules_init, then set fields
// and add overrides; free with bn_quant_rules_free.
typedef struct {
    int ftype;            // enum bn_ftype
    int default_type;     // bn_type of the ftype (BN_Q2_0 or BN_PQ2_0 for ftype Q2_0, by layout)
    bool q2_g128;         // Q2_0 requests mean the legacy g128 layout (stored as id 42)
    bool pure;            // --pure: skip the mixture rules
    bool llama_mix;       // --llama-mix: llama-quantize's output/token_embd rules also for Q1_0/Q2_0/PQ2_0
    bool leave_output;    // --leave-output-tensor: output.weight is copied unchanged
    bool tied;            // the model has no output.weight (token_embd doubles as the LM head)
    int output_type;      // --output-tensor-type, or -1
    int token_embd_type;  // --token-embedding-type, or -1
    int n_overrides;
    bn_tensor_override overrides[BN_QUANT_MAX_OVERRIDES];
    // llama-quantize's mixture counters (quantize_state_impl): set by bn_quant_rules_scan, advanced by
    // bn_tensor_choose_type in output order. While n_layer == 0 (no scan) the per-layer bumps are off.
    struct {
        int n_layer;         // <arch>.block_count (llama.cpp's n_layer_all)
        int n_attention_wv;  // tensors whose name holds attn_v / attn_qkv / attn_kv_b ".weight"
        int i_attention_wv;  // attn_v-like tensors seen so far
        int i_ffn_down;      // ffn_down tensors seen so far (the layer index of dense models)
    } mix;
} bn_quant_rules;

// bn_parse_ftype: parses a TYPE argument (name like "Q1_0", "pq2_0", "q4_k", "F16", or a numeric
// llama_ftype) into *ftype and its default bn_type (Q2_0 honours q2_g128); returns 0 or -1 (err).
int bn_parse_ftype(const char *s, bool q2_g128, int *ftype, int *default_type, char *err, size_t errlen);
// bn_ftype_name: display name of an ftype ("Q1_0", "Q4_K - Medium", ...); "?" if unknown.
const char *bn_ftype_name(int ftype);
// bn_parse_tensor_type_name: a type name for the override flags; Q2_0 means g128 when q2_g128.
// Returns the bn_type or -1 with err filled (unknown, or no quantizer for it here).
int bn_parse_tensor_type_name(const char *s, bool q2_g128, char *err, size_t errlen);

// bn_quant_rules_init: zeroes r and sets ftype/default_type, output_type = token_embd_type = -1.
void bn_quant_rules_init(bn_quant_rules *r, int ftype, int default_type, bool q2_g128);
// bn_quant_rules_add_override: parses "REGEX=TYPE" (PCRE2, substring search; the regex is
// lower-cased like llama-quantize); returns 0 or -1 (err: malformed, bad regex, bad type, too many).
int bn_quant_rules_add_override(bn_quant_rules *r, const char *spec, char *err, size_t errlen);
// bn_quant_rules_scan: sets r->tied and the mixture counters from the model's tensor names (all of
// them, in any order) and block count, as llama-quantize does before choosing types.
void bn_quant_rules_scan(bn_quant_rules *r, const char *const *names, size_t n_names, int n_layer);
// bn_quant_rules_free: releases the compiled overrides.
void bn_quant_rules_free(bn_quant_rules *r);

// bn_tensor_allows_quantization: FORMATS §5.1 (≥ 2 dims, name ends in "weight", not a norm, not
// ssm_conv1d, ...); n_dims counts dimensions after dropping trailing 1s.
bool bn_tensor_allows_quantization(const char *name, int n_dims, bool leave_output);

// Outcome of type selection for one tensor.
typedef struct {
    int type;          // chosen bn_type
    bool quantizable;  // §5.1 said yes (else type == source type)
    bool manual;       // a --tensor-type pattern matched
    bool fallback;     // §5.4 shape fallback happened (warning filled)
    char warning[256]; // llama-quantize-style warning line (empty if none)
} bn_tensor_choice;

// bn_type_shape_fallback: the type llama-quantize stores a row of ncols values in when `type` asks for it (§5.4):
// type itself when its block divides ncols, else its fallback (q6_K -> q8_0, q4_K -> q5_0, 2-bit/ternary -> q4_0, ...;
// F16 when that does not divide ncols either); -1 when no fallback is defined (q1_0, the other 128-value types).
int bn_type_shape_fallback(int type, int64_t ncols);

// bn_tensor_choose_type: FORMATS §5.2 order for tensor `name` of shape ne (n_dims after dropping
// trailing 1s) stored as src_type; fills *out and returns 0, or -1 with err filled when no type
// can hold the shape ("no tensor type fallback is defined for type q1_0", or an unsupported fallback).
// Call it once per tensor in output order (§5.5): the Q4_K_M / Q4_K_S layer rules advance r->mix
// (attn_v-like: Q4_K_M / Q5_K_M use_more_bits -> q6_K, Q4_K_S first 4 -> q5_K; ffn_down: Q4_K_M /
// Q5_K_M use_more_bits -> q6_K, Q4_K_S first n_layer/8 -> q5_K).
int bn_tensor_choose_type(bn_quant_rules *r, const char *name, int n_dims, const int64_t *ne, int src_type,
                          bn_tensor_choice *out, char *err, size_t errlen);

// bn_tensor_order_cmp: llama-quantize's output order (§5.5): layer number of "blk.%d." (-1 if
// none) then strcmp; returns <0, 0, >0.
int bn_tensor_order_cmp(const char *a, const char *b);

#endif
