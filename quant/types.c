// quant/types.c — the type table: names, block sizes, traits (docs/formats.md §2.1).
#include "quant/quant_impl.h"
#include <string.h>
#include <strings.h>

// vec_dot entries are thin wrappers over the runtime dispatch in dot.c (AVX2 kernel or scalar reference).
#define DOT_WRAPPER(t, id) \
    static void dot_##t(int n, float *s, const void *x, const void *y) { bn_dot_dispatch(id, n, s, x, y); }
DOT_WRAPPER(f32, BN_F32)
DOT_WRAPPER(f16, BN_F16)
DOT_WRAPPER(bf16, BN_BF16)
DOT_WRAPPER(q4_0, BN_Q4_0)
DOT_WRAPPER(q4_1, BN_Q4_1)
DOT_WRAPPER(q8_0, BN_Q8_0)
DOT_WRAPPER(q4_K, BN_Q4_K)
DOT_WRAPPER(q6_K, BN_Q6_K)
DOT_WRAPPER(tq1_0, BN_TQ1_0)
DOT_WRAPPER(tq2_0, BN_TQ2_0)
DOT_WRAPPER(q1_0, BN_Q1_0)
DOT_WRAPPER(q2_0, BN_Q2_0)
DOT_WRAPPER(pq2_0, BN_PQ2_0)
DOT_WRAPPER(ptq1_0, BN_PTQ1_0)

#define FMT(t) bn_##t##_to_float, bn_##t##_from_float_ref
// Q8_1 and Q8_K are activation-only types: no vec_dot of their own.
static const bn_type_traits traits[BN_TYPE_MAX] = {
    [BN_F32] = {"f32", 1, 4, false, FMT(f32), BN_F32, dot_f32},
    [BN_F16] = {"f16", 1, 2, false, FMT(f16), BN_F16, dot_f16},
    [BN_Q4_0] = {"q4_0", 32, 18, true, FMT(q4_0), BN_Q8_0, dot_q4_0},
    [BN_Q4_1] = {"q4_1", 32, 20, true, FMT(q4_1), BN_Q8_1, dot_q4_1},
    [BN_Q5_0] = {"q5_0", 32, 22, true, FMT(q5_0), BN_Q8_0, bn_dot_q5_0_ref}, // scalar only
    [BN_Q5_1] = {"q5_1", 32, 24, true, FMT(q5_1), BN_Q8_1, bn_dot_q5_1_ref}, // scalar only
    [BN_Q8_0] = {"q8_0", 32, 34, true, FMT(q8_0), BN_Q8_0, dot_q8_0},
    [BN_Q8_1] = {"q8_1", 32, 36, true, FMT(q8_1), BN_Q8_1, 0},
    [BN_Q4_K] = {"q4_K", 256, 144, true, FMT(q4_K), BN_Q8_K, dot_q4_K},
    [BN_Q5_K] = {"q5_K", 256, 176, true, FMT(q5_K), BN_Q8_K, bn_dot_q5_K_ref}, // scalar only
    [BN_Q6_K] = {"q6_K", 256, 210, true, FMT(q6_K), BN_Q8_K, dot_q6_K},
    [BN_Q8_K] = {"q8_K", 256, 292, true, FMT(q8_K), BN_Q8_K, 0},
    [BN_I32] = {"i32", 1, 4, false, 0, 0, BN_I32, 0},
    [BN_BF16] = {"bf16", 1, 2, false, FMT(bf16), BN_BF16, dot_bf16},
    [BN_TQ1_0] = {"tq1_0", 256, 54, true, FMT(tq1_0), BN_Q8_K, dot_tq1_0},
    [BN_TQ2_0] = {"tq2_0", 256, 66, true, FMT(tq2_0), BN_Q8_K, dot_tq2_0},
    [BN_Q1_0] = {"q1_0", 128, 18, true, FMT(q1_0), BN_Q8_0, dot_q1_0},
    [BN_Q2_0] = {"q2_0", 64, 18, true, FMT(q2_0), BN_Q8_0, dot_q2_0},
    [BN_PQ2_0] = {"pq2_0", 128, 34, true, FMT(pq2_0), BN_Q8_0, dot_pq2_0},
    [BN_PTQ1_0] = {"ptq1_0", 128, 28, true, FMT(ptq1_0), BN_Q8_0, dot_ptq1_0},
};

const bn_type_traits *bn_type_traits_of(int type) {
    if (type < 0 || type >= BN_TYPE_MAX || traits[type].blck == 0) return NULL;
    return &traits[type];
}

const char *bn_type_name(int type) {
    const bn_type_traits *t = bn_type_traits_of(type);
    return t ? t->name : "?";
}

int bn_type_from_name(const char *name) {
    if (strcasecmp(name, "q2_0_g128") == 0) return BN_PQ2_0;
    if (strcasecmp(name, "q2_0_g64") == 0) return BN_Q2_0;
    for (int i = 0; i < BN_TYPE_MAX; i++)
        if (traits[i].blck && strcasecmp(traits[i].name, name) == 0) return i;
    return -1;
}

int bn_type_blck(int type) {
    const bn_type_traits *t = bn_type_traits_of(type);
    return t ? t->blck : 0;
}

int bn_type_size(int type) {
    const bn_type_traits *t = bn_type_traits_of(type);
    return t ? t->type_size : 0;
}

size_t bn_row_size(int type, int64_t ne0) {
    const bn_type_traits *t = bn_type_traits_of(type);
    return t ? (size_t)(ne0 / t->blck) * t->type_size : 0;
}
