// tests/quantize/test_roundtrip.c — the requantize driver on small generated GGUFs:
// - F32 → Q1_0 → F16 → Q1_0 gives a byte-identical file (FORMATS §3.10), same for Q2_0 g64, Q2_0 g128
//   (legacy id 42) and PQ2_0 (id 142);
// - quantized tensors equal the reference quantizer applied row by row (threads 1 and 3, fp32 and fp16 input);
// - KV order (input order, split.* dropped, quantization_version + file_type last), tensor order (§5.5),
//   non-quantizable tensors copied byte-exact;
// - refusals: requantizing without --allow-requantize, Q1_0 with ne0 % 128 != 0, split inputs; fallbacks
//   counted; dry run;
// - the fused fp16/fp32 → Q1_0/Q2_0/PQ2_0 kernels equal dequantize + reference bit for bit, NaN/Inf included.
#include "tests/test.h"
#include "quantize/quantize.h"
#include "quantize/fast.h"
#include "quant/quant.h"
#include "gguf/gguf.h"
#include "base/util.h"
#include <string.h>
#include <stdlib.h>
#include <unistd.h>
#include <math.h>

typedef struct {
    const char *name;
    int n_dims;
    int64_t ne[2];
} spec;

// Scrambled on purpose: the driver must sort them (§5.5).
static const spec model_specs[] = {
    {"blk.1.attn_q.weight", 2, {256, 8}},     {"token_embd.weight", 2, {256, 16}},
    {"blk.10.ffn_up.weight", 2, {256, 4}},    {"output_norm.weight", 1, {256, 1}},
    {"blk.0.ssm_conv1d.weight", 2, {4, 256}}, {"output.weight", 2, {256, 16}},
    {"blk.0.ffn_down.weight", 2, {512, 4}},   {"blk.0.ssm_a", 1, {16, 1}},
    {"blk.0.attn_norm.weight", 1, {256, 1}},  {"blk.2.ssm_alpha.weight", 2, {256, 2}},
};
#define N_SPECS (sizeof model_specs / sizeof model_specs[0])

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) { // uniform in [-1, 1)
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

static char dir[256];
static const char *path_of(const char *name) {
    static char bufs[8][320];
    static int k;
    char *b = bufs[k++ & 7];
    snprintf(b, 320, "%s/%s", dir, name);
    return b;
}

static float *inputs[N_SPECS]; // fp32 data of each spec
static uint32_t split_count;    // if > 0, write_model stores split.count = this (u32 scalar)

// write_model: the test model; 2-D weights (not ssm_conv1d) in wtype (F32 or F16), the rest F32;
// extra (may be NULL) is one more random 2-D weight.
static void write_model(const char *path, int wtype, const spec *extra) {
    gguf_writer *w = gguf_writer_new();
    gguf_set_str(w, "general.architecture", "qwen35");
    gguf_set_u32(w, "general.file_type", 0);            // must move to the end
    gguf_set_u32(w, "general.quantization_version", 2); // must move to the end
    uint16_t one = 1;
    gguf_set_arr(w, "split.count", GGUF_TYPE_UINT16, 1, &one); // must be dropped
    if (split_count) gguf_set_u32(w, "split.count", split_count);
    gguf_set_str(w, "general.name", "roundtrip");
    gguf_set_u32(w, "qwen35.block_count", 11);
    const char *toks[] = {"a", "b", "c"};
    gguf_set_arr_str(w, "tokenizer.ggml.tokens", 3, toks);
    char err[256];
    void *owned[2 * (N_SPECS + 1)] = {0};
    int n_owned = 0;
    for (size_t i = 0; i < N_SPECS + (extra ? 1 : 0); i++) {
        const spec *s = i < N_SPECS ? &model_specs[i] : extra;
        int64_t n = s->ne[0] * s->ne[1];
        float *x = i < N_SPECS ? inputs[i] : NULL;
        if (!x) {
            x = owned[n_owned++] = xmalloc((size_t)n * sizeof(float));
            for (int64_t j = 0; j < n; j++) x[j] = frand();
        }
        int type = s->n_dims == 2 && !strstr(s->name, "conv1d") ? wtype : BN_F32;
        const void *data = x;
        if (type == BN_F16) {
            uint16_t *hx = owned[n_owned++] = xmalloc((size_t)n * 2);
            bn_fp32_to_fp16_row(x, hx, n);
            data = hx;
        }
        int rc = gguf_writer_add_tensor(w, s->name, s->n_dims, s->ne, type, (uint32_t)type, data, err, sizeof err);
        CHECK(rc >= 0, "add %s: %s", s->name, err);
    }
    CHECK(gguf_writer_write(w, path, NULL, NULL, err, sizeof err) == 0, "write %s: %s", path, err);
    gguf_writer_free(w);
    for (int i = 0; i < n_owned; i++) free(owned[i]);
}

static void init_inputs(void) {
    for (size_t i = 0; i < N_SPECS; i++) {
        int64_t n = model_specs[i].ne[0] * model_specs[i].ne[1];
        inputs[i] = xmalloc((size_t)n * sizeof(float));
        for (int64_t j = 0; j < n; j++) inputs[i][j] = frand() * (1.0f + (float)(j % 7));
    }
    // an all-zero row (d = 0 block) in attn_q, and a row of exact ±0.5-multiples (Q2_0 ties) in output
    memset(inputs[0] + 256, 0, 256 * sizeof(float));
    for (int j = 0; j < 256; j++) inputs[5][j] = (float)((j % 5) - 2) * 0.5f;
}

static int run_q(const char *in, const char *out, const char *type, bool g128, bool allow, int threads,
                 bn_quantize_stats *st, char *err, size_t errlen) {
    bn_quantize_params p = bn_quantize_params_default();
    p.type = type;
    p.q2_g128 = g128;
    p.allow_requantize = allow;
    p.n_threads = threads;
    p.log = NULL;
    return bn_quantize_file_stats(&p, in, out, st, err, errlen);
}

static bool files_equal(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    char err[256];
    char *da = bn_read_file(a, &na, err, sizeof err), *db = bn_read_file(b, &nb, err, sizeof err);
    bool eq = da && db && na == nb && memcmp(da, db, na) == 0;
    free(da);
    free(db);
    return eq;
}

static const spec *spec_named(const char *name, int *idx) {
    for (size_t i = 0; i < N_SPECS; i++)
        if (!strcmp(model_specs[i].name, name)) {
            *idx = (int)i;
            return &model_specs[i];
        }
    return NULL;
}

// check_file: KV order, tensor order, types, copies and quantized bytes vs the reference quantizer.
static void check_file(const char *path, int qtype, uint32_t file_id, uint32_t ftype, int src_wtype) {
    char err[256];
    gguf_file *f = gguf_open(path, err, sizeof err);
    CHECK(f != NULL, "open %s: %s", path, err);
    if (!f) return;
    const char *want_keys[] = {"general.architecture", "general.name", "qwen35.block_count", "tokenizer.ggml.tokens",
                               "general.quantization_version", "general.file_type"};
    CHECK(f->n_kv == 6, "%s: %zu KVs", path, f->n_kv);
    for (size_t i = 0; i < 6 && i < f->n_kv; i++)
        CHECK(!strcmp(f->kv[i].key, want_keys[i]), "%s: kv[%zu] = %s, want %s", path, i, f->kv[i].key, want_keys[i]);
    uint32_t v = 0;
    CHECK(gguf_get_u32(f, "general.file_type", &v) && v == ftype, "%s: file_type %u, want %u", path, v, ftype);
    CHECK(gguf_get_u32(f, "general.quantization_version", &v) && v == 2, "quantization_version %u", v);
    CHECK(f->alignment == 32, "alignment %u", f->alignment);
    const char *want_order[] = {"output.weight", "output_norm.weight", "token_embd.weight", "blk.0.attn_norm.weight",
                                "blk.0.ffn_down.weight", "blk.0.ssm_a", "blk.0.ssm_conv1d.weight",
                                "blk.1.attn_q.weight", "blk.2.ssm_alpha.weight", "blk.10.ffn_up.weight"};
    CHECK(f->n_tensors == N_SPECS, "%zu tensors", f->n_tensors);
    for (size_t i = 0; i < f->n_tensors && i < N_SPECS; i++) {
        const gguf_tensor *t = &f->tensors[i];
        CHECK(!strcmp(t->name, want_order[i]), "%s: tensor[%zu] = %s, want %s", path, i, t->name, want_order[i]);
        int si = 0;
        const spec *s = spec_named(t->name, &si);
        if (!s) continue;
        int64_t n = s->ne[0] * s->ne[1];
        bool quantizable = s->n_dims == 2 && !strstr(s->name, "conv1d");
        if (!quantizable) {
            CHECK(t->type == BN_F32 && t->nbytes == (size_t)n * 4 && !memcmp(t->data, inputs[si], t->nbytes),
                  "%s: %s copied byte-exact", path, t->name);
            continue;
        }
        CHECK(t->type == qtype && t->file_type == file_id, "%s: %s type %d/%u, want %d/%u", path, t->name, t->type,
              t->file_type, qtype, file_id);
        // reference: (fp16-rounded if the source was F16) rows through the reference quantizer
        float *x = xmalloc((size_t)n * sizeof(float));
        memcpy(x, inputs[si], (size_t)n * sizeof(float));
        if (src_wtype == BN_F16)
            for (int64_t j = 0; j < n; j++) x[j] = bn_fp16_to_fp32(bn_fp32_to_fp16(x[j]));
        size_t nb = bn_row_size(qtype, s->ne[0]) * (size_t)s->ne[1];
        uint8_t *ref = xmalloc(nb);
        if (qtype == BN_F16) bn_fp32_to_fp16_row(x, (uint16_t *)ref, n);
        else bn_quantize_ref(qtype, x, ref, n);
        CHECK(t->nbytes == nb && !memcmp(t->data, ref, nb), "%s: %s equals the reference quantizer", path, t->name);
        free(ref);
        free(x);
    }
    gguf_close(f);
}

// roundtrip: F32 → T → F16 → T byte-identical, plus content checks.
static void roundtrip(const char *type, bool g128, int qtype, uint32_t file_id, uint32_t ftype) {
    char err[512];
    char tag[64];
    snprintf(tag, sizeof tag, "%s%s", type, g128 ? "-g128" : "");
    char a1[512], a2[512], a3[512], a1b[512];
    snprintf(a1, sizeof a1, "%s/%s.1.gguf", dir, tag);
    snprintf(a2, sizeof a2, "%s/%s.2.f16.gguf", dir, tag);
    snprintf(a3, sizeof a3, "%s/%s.3.gguf", dir, tag);
    snprintf(a1b, sizeof a1b, "%s/%s.1.t1.gguf", dir, tag);
    bn_quantize_stats st;
    CHECK(run_q(path_of("f32.gguf"), a1, type, g128, false, 3, &st, err, sizeof err) == 0, "%s: %s", tag, err);
    CHECK(st.n_quantized == 6 && st.n_copied == 4 && st.n_fallback == 0, "%s: stats %d/%d/%d", tag, st.n_quantized,
          st.n_copied, st.n_fallback);
    check_file(a1, qtype, file_id, ftype, BN_F32);
    CHECK(run_q(path_of("f32.gguf"), a1b, type, g128, false, 1, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(files_equal(a1, a1b), "%s: 1 thread and 3 threads give the same file", tag);
    CHECK(run_q(a1, a2, "F16", false, false, 2, NULL, err, sizeof err) == 0, "%s unpack: %s", tag, err);
    CHECK(run_q(a2, a3, type, g128, false, 2, NULL, err, sizeof err) == 0, "%s requant: %s", tag, err);
    CHECK(files_equal(a1, a3), "%s: F32 → %s → F16 → %s is byte-identical (FORMATS §3.10)", tag, tag, tag);
    // the fp16 source model goes through the fused kernels; compare with the reference
    char h1[512];
    snprintf(h1, sizeof h1, "%s/%s.from-f16.gguf", dir, tag);
    CHECK(run_q(path_of("f16.gguf"), h1, type, g128, false, 2, NULL, err, sizeof err) == 0, "%s", err);
    check_file(h1, qtype, file_id, ftype, BN_F16);
}

static void test_refusals(void) {
    char err[512];
    bn_quantize_stats st;
    // requantize Q1_0 → Q2_0 needs the flag
    unlink(path_of("rq.gguf"));
    CHECK(run_q(path_of("Q1_0.1.gguf"), path_of("rq.gguf"), "Q2_0", false, false, 2, NULL, err, sizeof err) != 0,
          "requantize refused");
    CHECK(strstr(err, "--allow-requantize") != NULL, "message: %s", err);
    CHECK(access(path_of("rq.gguf"), F_OK) != 0, "no file left after refusal");
    CHECK(run_q(path_of("Q1_0.1.gguf"), path_of("rq.gguf"), "Q2_0", false, true, 2, NULL, err, sizeof err) == 0,
          "requantize allowed: %s", err);
    // a tensor with ne0 = 192: Q1_0 has no fallback (error, no file); Q2_0 falls back to Q4_0
    spec odd = {"blk.3.ffn_gate.weight", 2, {192, 4}};
    write_model(path_of("odd.gguf"), BN_F32, &odd);
    CHECK(run_q(path_of("odd.gguf"), path_of("odd.q1.gguf"), "Q1_0", false, false, 2, NULL, err, sizeof err) != 0,
          "Q1_0 refuses ne0 192");
    CHECK(strstr(err, "no tensor type fallback") != NULL, "message: %s", err);
    CHECK(access(path_of("odd.q1.gguf"), F_OK) != 0, "no file left after error");
    CHECK(run_q(path_of("odd.gguf"), path_of("odd.q2.gguf"), "PQ2_0", false, false, 2, &st, err, sizeof err) == 0,
          "PQ2_0 with fallback: %s", err);
    CHECK(st.n_fallback == 1, "one fallback, got %d", st.n_fallback);
    gguf_file *f = gguf_open(path_of("odd.q2.gguf"), err, sizeof err);
    const gguf_tensor *t = f ? gguf_find_tensor(f, "blk.3.ffn_gate.weight") : NULL;
    CHECK(t && t->type == BN_Q4_0, "ne0 192 → q4_0");
    gguf_close(f);
    // part of a split model: refused with a clear message
    split_count = 2;
    write_model(path_of("split.gguf"), BN_F32, NULL);
    split_count = 0;
    CHECK(run_q(path_of("split.gguf"), path_of("split.q1.gguf"), "Q1_0", false, false, 1, NULL, err, sizeof err) != 0,
          "split input refused");
    CHECK(strstr(err, "split") != NULL, "message: %s", err);
    // dry run writes nothing
    bn_quantize_params p = bn_quantize_params_default();
    p.type = "Q8_0";
    p.dry_run = true;
    p.log = NULL;
    CHECK(bn_quantize_file_stats(&p, path_of("f32.gguf"), path_of("dry.gguf"), &st, err, sizeof err) == 0, "%s", err);
    CHECK(access(path_of("dry.gguf"), F_OK) != 0 && st.n_quantized == 6, "dry run: no file, 6 tensors planned");
    // unknown type
    CHECK(run_q(path_of("f32.gguf"), path_of("x.gguf"), "Q9_9", false, false, 1, NULL, err, sizeof err) != 0,
          "unknown type refused");
}

// test_fast_kernels: fused kernels == dequantize + reference, over random rows with specials.
static void test_fast_kernels(void) {
    const int64_t n = 128 * 40; // 40 Q1_0 blocks: 5 groups of 8, tails exercised below with n - 3 blocks
    float *x = xmalloc(n * sizeof(float));
    uint16_t *h = xmalloc(n * 2);
    uint8_t *a = xmalloc(n), *b = xmalloc(n);
    for (int round = 0; round < 4; round++) {
        for (int64_t j = 0; j < n; j++) x[j] = frand() * (round == 3 ? 1e-6f : 3.0f);
        if (round == 1) { // ties and specials in some blocks
            for (int j = 0; j < 128; j++) x[j] = (float)((j % 5) - 2) * 0.25f;
            x[200] = NAN;
            x[700] = INFINITY;
            x[900] = -INFINITY;
            for (int j = 1024; j < 1152; j++) x[j] = 0.0f;
            x[1300] = -0.0f;
            x[2000] = 1e-40f; // subnormal
            // Q1_0 block 4: Σ|x| in element order lands exactly on an fp16 tie for d = Σ/128 (rounds to
            // even); any other summation order keeps some of the tiny terms and rounds up instead.
            x[512] = 1.0f + 0x1p-11f;
            for (int j = 513; j < 640; j++) x[j] = 0x1p-25f;
        }
        if (round == 2)
            for (int j = 0; j < 64; j++) x[3000 + j] = 1e-39f * (float)(j - 30); // tiny amax: 1/d overflows
        bn_fp32_to_fp16_row(x, h, n);
        const int dsts[] = {BN_Q1_0, BN_Q2_0, BN_PQ2_0};
        for (int s = 0; s < 2; s++) {
            int src_type = s ? BN_F16 : BN_F32;
            const void *src = s ? (const void *)h : (const void *)x;
            for (int d = 0; d < 3; d++) {
                int64_t m = d == 0 ? n - 3 * 128 : n; // Q1_0: a partial group of 8 blocks
                size_t nb = bn_row_size(dsts[d], m);
                memset(a, 0xAA, nb);
                memset(b, 0x55, nb);
                bool done = bn_quantize_fast(src_type, src, dsts[d], a, m);
                float *y = xmalloc(m * sizeof(float));
                bn_dequantize(src_type, src, y, m);
                bn_quantize_ref(dsts[d], y, b, m);
                free(y);
                if (!done) {
                    printf("note: no fused kernel on this CPU for %s → %s\n", bn_type_name(src_type), bn_type_name(dsts[d]));
                    continue;
                }
                CHECK(memcmp(a, b, nb) == 0, "fused %s → %s round %d equals the reference", bn_type_name(src_type),
                      bn_type_name(dsts[d]), round);
            }
        }
    }
    free(x);
    free(h);
    free(a);
    free(b);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/bonsai-quantize-test.%d", (int)getpid());
    char cmd[300];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (system(cmd) != 0) return test_skip("cannot create a temp dir");
    init_inputs();
    write_model(path_of("f32.gguf"), BN_F32, NULL);
    write_model(path_of("f16.gguf"), BN_F16, NULL);
    roundtrip("Q1_0", false, BN_Q1_0, 41, 40);
    roundtrip("Q2_0", false, BN_Q2_0, 42, 41);
    roundtrip("Q2_0", true, BN_PQ2_0, 42, 41);
    roundtrip("PQ2_0", false, BN_PQ2_0, 142, 141);
    test_refusals();
    test_fast_kernels();
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
    return test_done("quantize_roundtrip");
}
