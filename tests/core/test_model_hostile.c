// tests/core/test_model_hostile.c — well-formed GGUF files with hostile contents: every KV of a generated
// qwen35 model, a dense qwen3 model, a DSpark drafter and a LoRA adapter set to edge values (0, 1, -1,
// INT32_MAX, 2^32 − 1, odd and doubled sizes, NaN, inf, empty or other strings), removed, or (arrays) shrunk,
// emptied or retyped; every tensor removed, given another shape (a dimension + 1, doubled, the dimensions
// swapped, one more dimension) or another type (its bytes cut or zero-padded to fit); general.alignment set to 1,
// 2 or 3 (weights at odd addresses, or a refused alignment). The GGUF layer accepts
// all of them (test_gguf covers broken files), so they reach the model, drafter and adapter loaders. Each file
// is loaded in a child process, which then uses what loaded: the model tokenizes a prompt, runs a 3-token
// forward and detokenizes every id it can produce; the drafter (of the untouched qwen35) takes 4 context rows
// and drafts; the adapter is merged into the qwen35 model, which then runs. The child must exit with "refused,
// with a message" or "ran"; a crash, an abort, a hang (20 s) or a refusal without a message fails the case.
// Under scripts/sanitize.sh the children run with ASan + UBSan.
#include "tests/test.h"
#include "tests/hostile.h"
#include "gguf/gguf.h"
#include "core/model.h"
#include "core/engine.h"
#include "core/tokenizer.h"
#include "synth/mkmodel.h"
#include "synth/mkdrafter.h"
#include "spec/dspark.h"
#include "quant/quant.h"
#include "train/lora.h"
#include "train/merge.h"
#include <math.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[256], target_path[320], case_path[320];

// ---- the children --------------------------------------------------------------------------

// run_drafter: loads path as a drafter of the (valid) target, processes 4 context rows and drafts; never returns
static void run_drafter(const char *path) {
    char err[512] = "";
    bn_model *m = bn_model_load(target_path, err, sizeof err);
    if (!m) _exit(2); // the untouched target must load
    bn_drafter *d = bn_drafter_load(path, m, err, sizeof err);
    if (!d) hostile_refuse(err);
    bn_dstate *s = bn_dstate_new(d, 32, 1);
    if (!s) hostile_refuse("no drafter state");
    const int rows = 4;
    size_t nt = (size_t)rows * d->cfg.n_taps * d->cfg.n_embd;
    float *taps = malloc(sizeof(float) * (nt ? nt : 1));
    for (size_t i = 0; i < nt; i++) taps[i] = (float)((i * 37) % 17) / 17.0f - 0.5f;
    if (bn_drafter_process(d, s, taps, rows, 0, err, sizeof err) != 0) hostile_refuse(err);
    int32_t drafts[64];
    int n_max = d->cfg.block_size < 64 ? d->cfg.block_size : 64;
    if (bn_drafter_draft(d, s, 1, rows, n_max, 0.0f, drafts, err, sizeof err) < 0) hostile_refuse(err);
    _exit(HOSTILE_RAN);
}

// ---- writing a mutated copy ----------------------------------------------------------------

typedef enum { KV_KEEP, KV_DROP, KV_U32, KV_I32, KV_F32, KV_STR, KV_BOOL, KV_ARR_N, KV_ARR_F32 } kv_change;
typedef enum { T_KEEP, T_DROP, T_SHAPE, T_TYPE } tensor_change;

typedef struct {
    const char *key;   // the KV changed (NULL: none)
    kv_change how;
    uint64_t u;        // the new integer value / array length
    float f;
    const char *s;
    const char *tensor; // the tensor changed (NULL: none)
    tensor_change thow;
    int64_t ne[GGUF_MAX_DIMS];
    int n_dims, type;
} mutation;

typedef struct {
    const gguf_file *g;
    int map[4096]; // writer index -> source tensor index
} fill_ctx;

// fill: the source tensor's bytes, cut or zero-padded to the new size
static int fill(void *ctx, int idx, void *dst, size_t nbytes, char *err, size_t errlen) {
    (void)err, (void)errlen;
    const fill_ctx *c = ctx;
    const gguf_tensor *t = &c->g->tensors[c->map[idx]];
    size_t n = t->nbytes < nbytes ? t->nbytes : nbytes;
    memcpy(dst, t->data, n);
    memset((char *)dst + n, 0, nbytes - n);
    return 0;
}

// set_array_prefix: kv's first n elements (n <= kv->n) as the same kind of array
static void set_array_prefix(gguf_writer *w, const gguf_kv *kv, uint64_t n) {
    if (kv->arr_type == GGUF_TYPE_STRING) {
        gguf_set_arr_str(w, kv->key, n, (const char *const *)kv->strs);
    } else {
        gguf_set_arr(w, kv->key, kv->arr_type, n, kv->data);
    }
}

// write_mutation: g with one change, to case_path; returns 0 or -1 (the change cannot be written: skipped)
static int write_mutation(const gguf_file *g, const mutation *mu) {
    gguf_writer *w = gguf_writer_new();
    for (size_t i = 0; i < g->n_kv; i++) {
        const gguf_kv *kv = &g->kv[i];
        if (!mu->key || strcmp(kv->key, mu->key) != 0) {
            gguf_set_kv(w, kv);
            continue;
        }
        switch (mu->how) {
        case KV_KEEP: gguf_set_kv(w, kv); break;
        case KV_DROP: break;
        case KV_U32: gguf_set_u32(w, kv->key, (uint32_t)mu->u); break;
        case KV_I32: gguf_set_i32(w, kv->key, (int32_t)mu->u); break;
        case KV_F32: gguf_set_f32(w, kv->key, mu->f); break;
        case KV_STR: gguf_set_str(w, kv->key, mu->s); break;
        case KV_BOOL: gguf_set_bool(w, kv->key, mu->u != 0); break;
        case KV_ARR_N: set_array_prefix(w, kv, mu->u); break;
        case KV_ARR_F32: {
            float z[8] = {0};
            gguf_set_arr(w, kv->key, GGUF_TYPE_FLOAT32, kv->n < 8 ? kv->n : 8, z);
            break;
        }
        }
    }
    if (mu->key && mu->how == KV_U32 && gguf_find_key(g, mu->key) < 0) gguf_set_u32(w, mu->key, (uint32_t)mu->u); // added
    static fill_ctx c;
    c.g = g;
    int n = 0, rc = 0;
    char err[256];
    for (size_t i = 0; i < g->n_tensors && rc == 0; i++) {
        const gguf_tensor *t = &g->tensors[i];
        int n_dims = (int)t->n_dims, type = t->type;
        int64_t ne[GGUF_MAX_DIMS];
        memcpy(ne, t->ne, sizeof ne);
        if (mu->tensor && !strcmp(t->name, mu->tensor)) {
            if (mu->thow == T_DROP) continue;
            if (mu->thow == T_SHAPE) n_dims = mu->n_dims, memcpy(ne, mu->ne, sizeof ne);
            if (mu->thow == T_TYPE) type = mu->type;
        }
        if (n >= 4096) rc = -1;
        else if (gguf_writer_add_tensor(w, t->name, n_dims, ne, type, (uint32_t)type, NULL, err, sizeof err) < 0)
            rc = -1;
        else c.map[n++] = (int)i;
    }
    if (rc == 0 && gguf_writer_write(w, case_path, fill, &c, err, sizeof err) != 0) rc = -1;
    gguf_writer_free(w);
    return rc;
}

// ---- running a case ------------------------------------------------------------------------

// run_case: writes the mutation and runs it in a child (model, drafter or adapter)
static int case_kind;
static void case_child(void *ctx) {
    (void)ctx;
    char merged[400];
    snprintf(merged, sizeof merged, "%s/merged-%d.gguf", dir, (int)getpid());
    if (case_kind == 1) run_drafter(case_path);
    else if (case_kind == 2) hostile_run_adapter(case_path, target_path, merged);
    else hostile_run_model(case_path);
}
static void run_case(const gguf_file *g, const mutation *mu, int kind, const char *what) {
    if (write_mutation(g, mu) != 0) return; // e.g. a shape the writer refuses: nothing reaches a loader
    case_kind = kind;
    hostile_child(what, case_child, NULL);
}

// try_case: run_case with a printf-formatted description
static void try_case(const gguf_file *g, mutation mu, int kind, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    run_case(g, &mu, kind, what);
}

static void kv_cases(const gguf_file *g, int kind, const char *file) {
    static const uint64_t ints[] = {0, 1, 2, 3, 7, 65536, 0x7fffffffu, 0xffffffffu};
    static const char *const strs[] = {"", "llama", "qwen35", "qwen3", "dspark", "bogus"};
    const float reals[] = {0.0f, -1.0f, NAN, INFINITY, 1e30f};
    const int n_ints = (int)(sizeof ints / sizeof ints[0]);
    for (size_t i = 0; i < g->n_kv; i++) {
        const gguf_kv *kv = &g->kv[i];
        const char *K = kv->key;
        try_case(g, (mutation){.key = K, .how = KV_DROP}, kind, "%s: %s removed", file, K);
        switch (kv->type) {
        case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64:
        case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: {
            int64_t v = 0;
            gguf_get_int(g, K, &v);
            const uint64_t more[] = {(uint64_t)v + 1, (uint64_t)v * 2 + 1};
            const int how = kv->type == GGUF_TYPE_INT32 ? KV_I32 : KV_U32;
            for (int k = 0; k < n_ints + 2; k++) {
                uint64_t u = k < n_ints ? ints[k] : more[k - n_ints];
                try_case(g, (mutation){.key = K, .how = how, .u = u}, kind, "%s: %s = %llu", file, K,
                         (unsigned long long)u);
            }
            try_case(g, (mutation){.key = K, .how = KV_STR, .s = "12"}, kind, "%s: %s as a string", file, K);
            break;
        }
        case GGUF_TYPE_FLOAT32: case GGUF_TYPE_FLOAT64:
            for (size_t k = 0; k < sizeof reals / sizeof reals[0]; k++)
                try_case(g, (mutation){.key = K, .how = KV_F32, .f = reals[k]}, kind, "%s: %s = %g", file, K,
                         (double)reals[k]);
            break;
        case GGUF_TYPE_BOOL: {
            bool b = false;
            gguf_get_bool(g, K, &b);
            try_case(g, (mutation){.key = K, .how = KV_BOOL, .u = !b}, kind, "%s: %s flipped", file, K);
            try_case(g, (mutation){.key = K, .how = KV_U32, .u = 1}, kind, "%s: %s as a u32", file, K);
            break;
        }
        case GGUF_TYPE_STRING:
            if (!strcmp(K, "general.name")) break; // read by nothing that matters
            for (size_t k = 0; k < sizeof strs / sizeof strs[0]; k++)
                try_case(g, (mutation){.key = K, .how = KV_STR, .s = strs[k]}, kind, "%s: %s = \"%s\"", file, K,
                         strs[k]);
            break;
        case GGUF_TYPE_ARRAY: {
            const uint64_t lens[] = {0, 1, kv->n / 2, kv->n > 0 ? kv->n - 1 : 0};
            for (size_t k = 0; k < 4; k++)
                try_case(g, (mutation){.key = K, .how = KV_ARR_N, .u = lens[k]}, kind, "%s: %s cut to %llu of %llu",
                         file, K, (unsigned long long)lens[k], (unsigned long long)kv->n);
            try_case(g, (mutation){.key = K, .how = KV_ARR_F32}, kind, "%s: %s as a float array", file, K);
            try_case(g, (mutation){.key = K, .how = KV_U32, .u = 3}, kind, "%s: %s as a u32", file, K);
            break;
        }
        default: break;
        }
    }
}

static void tensor_cases(const gguf_file *g, int kind, const char *file) {
    static const int types[] = {BN_F32, BN_F16, BN_Q8_0, BN_Q1_0, BN_Q2_0};
    static const char *const shape_changes[] = {"ne0 + 1", "last dimension doubled", "dimensions swapped",
                                                "one more dimension"};
    for (size_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        try_case(g, (mutation){.tensor = t->name, .thow = T_DROP}, kind, "%s: tensor %s removed", file, t->name);
        for (int k = 0; k < 4; k++) {
            mutation m = {.tensor = t->name, .thow = T_SHAPE, .n_dims = (int)t->n_dims};
            memcpy(m.ne, t->ne, sizeof m.ne);
            if (k == 0) m.ne[0] += 1;
            if (k == 1) m.ne[t->n_dims - 1] *= 2;
            if (k == 2) {
                if (t->n_dims < 2 || t->ne[0] == t->ne[1]) continue;
                m.ne[0] = t->ne[1], m.ne[1] = t->ne[0];
            }
            if (k == 3) {
                if (t->n_dims >= GGUF_MAX_DIMS) continue;
                m.ne[t->n_dims] = 2, m.n_dims = (int)t->n_dims + 1;
            }
            try_case(g, m, kind, "%s: tensor %s %s", file, t->name, shape_changes[k]);
        }
        for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
            if (types[k] == t->type || t->ne[0] % bn_type_blck(types[k]) != 0) continue;
            try_case(g, (mutation){.tensor = t->name, .thow = T_TYPE, .type = types[k]}, kind, "%s: tensor %s as %s",
                     file, t->name, bn_type_name(types[k]));
        }
    }
}

// sweep: every KV and tensor case of the file at path
static void sweep(const char *path, int kind, const char *file) {
    char err[256];
    gguf_file *g = gguf_open(path, err, sizeof err);
    CHECK(g != NULL, "%s: %s", file, err);
    if (!g) return;
    int before = hostile_cases, fails = test_failures;
    kv_cases(g, kind, file);
    tensor_cases(g, kind, file);
    // tensor data at any address: ggml accepts an alignment of 1 or 2 (a power of two); 3 is refused when opened
    for (uint64_t a = 1; a <= 3; a++)
        try_case(g, (mutation){.key = "general.alignment", .how = KV_U32, .u = a}, kind, "%s: general.alignment %llu",
                 file, (unsigned long long)a);
    printf("%s: %d cases, %d failed\n", file, hostile_cases - before, test_failures - fails);
    gguf_close(g);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/bonsai-hostile-XXXXXX");
    if (!mkdtemp(dir)) return test_skip("cannot make a temp dir");
    snprintf(case_path, sizeof case_path, "%s/case.gguf", dir);
    char err[256], dense[320], drafter[320], adapter[320];
    snprintf(target_path, sizeof target_path, "%s/qwen35.gguf", dir);
    snprintf(dense, sizeof dense, "%s/qwen3.gguf", dir);
    snprintf(drafter, sizeof drafter, "%s/drafter.gguf", dir);
    snprintf(adapter, sizeof adapter, "%s/adapter.gguf", dir);
    bn_mkmodel_params p;
    bn_mkmodel_defaults(&p, "tiny");
    CHECK(bn_mkmodel_write(&p, target_path, err, sizeof err) == 0, "qwen35: %s", err);
    bn_mkmodel_defaults(&p, "qwen3-tiny");
    CHECK(bn_mkmodel_write(&p, dense, err, sizeof err) == 0, "qwen3: %s", err);
    bn_mkdrafter_params dp;
    bn_mkdrafter_defaults(&dp);
    CHECK(bn_mkdrafter_write(&dp, drafter, err, sizeof err) == 0, "drafter: %s", err);
    // a rank-2 adapter on the attention and FFN projections and the GDN input projection of the qwen35 model,
    // B nonzero so that a merge changes the weights
    bn_model *m = bn_model_load(target_path, err, sizeof err);
    bn_lora *l = m ? bn_lora_from_model(m, BN_LORA_Q | BN_LORA_V | BN_LORA_DOWN | BN_LORA_QKV, 2, 4.0f, 0.0f, err,
                                        sizeof err) : NULL;
    CHECK(l != NULL, "adapter: %s", err);
    if (l) {
        bn_lora_init_peft(l, 5);
        for (int i = 0; i < l->n_tensors; i++)
            for (int64_t k = 0; k < l->t[i].n_out * l->r; k++)
                l->params[l->t[i].off_b + k] = 0.01f * (float)(k % 7 - 3);
        CHECK(bn_lora_save_gguf(l, adapter, err, sizeof err) == 0, "adapter: %s", err);
    }
    bn_lora_free(l);
    bn_model_free(m);

    // the untouched files run (so a refusal below is the change's doing)
    mutation none = {0};
    int refused = hostile_refused;
    gguf_file *g = gguf_open(target_path, err, sizeof err);
    if (g) run_case(g, &none, 0, "qwen35 untouched");
    gguf_close(g);
    g = gguf_open(drafter, err, sizeof err);
    if (g) run_case(g, &none, 1, "drafter untouched");
    gguf_close(g);
    g = gguf_open(adapter, err, sizeof err);
    if (g) run_case(g, &none, 2, "adapter untouched");
    gguf_close(g);
    CHECK(hostile_refused == refused && hostile_ran == 3, "the untouched model, drafter and adapter run (%d ran)", hostile_ran);

    sweep(target_path, 0, "qwen35");
    sweep(dense, 0, "qwen3");
    sweep(drafter, 1, "drafter");
    sweep(adapter, 2, "adapter");
    printf("%d hostile files: %d refused with a message, %d loaded and ran\n", hostile_cases, hostile_refused, hostile_ran);
    CHECK(hostile_refused > hostile_cases / 4, "most shape and type changes are refused (%d of %d)", hostile_refused, hostile_cases);
    unlink(case_path), unlink(target_path), unlink(dense), unlink(drafter), unlink(adapter), rmdir(dir);
    return test_done("test_model_hostile");
}
