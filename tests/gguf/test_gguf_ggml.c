// tests/gguf/test_gguf_ggml.c — interop with ggml's own GGUF reader (gguf_init_from_buffer in the npm
// libggml-base.so, dlopen'ed): files from our writer (every KV type, several tensor types, alignments
// 1..256) must open there with the same KVs, offsets and data offset; the checked-in corpus must get the
// same verdict from both readers, except the listed known differences (e.g. the legacy g128 type-42 file,
// which mainline ggml must reject, docs/formats.md §3.9, and we must accept). Skips (77) when third_party/ is missing.
#include "tests/test.h"
#include "gguf/gguf.h"
#include "base/util.h"
#include "quant/quant.h"
#include <dlfcn.h>
#include <dirent.h>
#include <string.h>
#include <unistd.h>

// ggml's C API, declared here by hand (ggml/include/gguf.h collides with gguf/gguf.h).
struct ggml_ctx_opaque;
typedef struct {
    bool no_alloc;
    struct ggml_ctx_opaque **ctx;
} ggml_gguf_params;
typedef void *(*init_buffer_fn)(const void *data, size_t size, ggml_gguf_params params);
static init_buffer_fn g_init;
static void (*g_free)(void *);
static void (*g_ctx_free)(struct ggml_ctx_opaque *);
static int64_t (*g_n_kv)(const void *);
static int64_t (*g_n_tensors)(const void *);
static size_t (*g_alignment)(const void *);
static size_t (*g_data_offset)(const void *);
static const char *(*g_key)(const void *, int64_t);
static int (*g_kv_type)(const void *, int64_t);
static int (*g_arr_type)(const void *, int64_t);
static size_t (*g_arr_n)(const void *, int64_t);
static const char *(*g_tensor_name)(const void *, int64_t);
static size_t (*g_tensor_offset)(const void *, int64_t);
static int (*g_tensor_type)(const void *, int64_t);
static void (*g_log_set)(void (*)(int, const char *, void *), void *);

static void quiet_log(int level, const char *text, void *user) { (void)level, (void)text, (void)user; }

// load_ggml: dlopen libggml-base and resolve the functions; returns 0 or -1 with why filled.
static int load_ggml(char *why, size_t n) {
    char path[600];
    test_third_party(path, sizeof path, "node-llama-cpp/bins/linux-x64/libggml-base.so");
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return bn_err(why, n, "cannot load %s: %s", path, dlerror());
#define SYM(var, name) if (!(*(void **)&var = dlsym(h, name))) return bn_err(why, n, "%s: missing %s", path, name)
    SYM(g_init, "gguf_init_from_buffer");
    SYM(g_free, "gguf_free");
    SYM(g_ctx_free, "ggml_free");
    SYM(g_n_kv, "gguf_get_n_kv");
    SYM(g_n_tensors, "gguf_get_n_tensors");
    SYM(g_alignment, "gguf_get_alignment");
    SYM(g_data_offset, "gguf_get_data_offset");
    SYM(g_key, "gguf_get_key");
    SYM(g_kv_type, "gguf_get_kv_type");
    SYM(g_arr_type, "gguf_get_arr_type");
    SYM(g_arr_n, "gguf_get_arr_n");
    SYM(g_tensor_name, "gguf_get_tensor_name");
    SYM(g_tensor_offset, "gguf_get_tensor_offset");
    SYM(g_tensor_type, "gguf_get_tensor_type");
    SYM(g_log_set, "ggml_log_set");
#undef SYM
    g_log_set(quiet_log, NULL);
    return 0;
}

// ggml_accepts: whether ggml parses the buffer including reading all tensor data.
static bool ggml_accepts(const void *buf, size_t n) {
    struct ggml_ctx_opaque *ctx = NULL;
    void *g = g_init(buf, n, (ggml_gguf_params){false, &ctx});
    if (g) g_free(g);
    if (ctx) g_ctx_free(ctx);
    return g != NULL;
}

// compare: our reader and ggml's agree on every KV (key, type, array type/length) and tensor (name,
// type id, offset), alignment and data offset.
static void compare(const char *what, const void *buf, size_t n) {
    char err[512];
    gguf_file *f = gguf_open_mem(buf, n, err, sizeof err);
    void *g = g_init(buf, n, (ggml_gguf_params){true, NULL});
    CHECK(f && g, "%s: ours %s, ggml %s", what, f ? "ok" : err, g ? "ok" : "rejects");
    if (f && g) {
        CHECK(g_n_kv(g) == (int64_t)f->n_kv && g_n_tensors(g) == (int64_t)f->n_tensors, "%s: counts", what);
        CHECK(g_alignment(g) == f->alignment, "%s: alignment %zu vs %u", what, g_alignment(g), f->alignment);
        CHECK(g_data_offset(g) == f->data_offset, "%s: data offset %zu vs %llu", what, g_data_offset(g),
              (unsigned long long)f->data_offset);
        for (size_t i = 0; i < f->n_kv && (int64_t)i < g_n_kv(g); i++) {
            const gguf_kv *kv = &f->kv[i];
            CHECK(strcmp(g_key(g, (int64_t)i), kv->key) == 0 && g_kv_type(g, (int64_t)i) == (int)kv->type,
                  "%s: kv %zu %s", what, i, kv->key);
            if (kv->type == GGUF_TYPE_ARRAY)
                CHECK(g_arr_type(g, (int64_t)i) == (int)kv->arr_type && g_arr_n(g, (int64_t)i) == kv->n,
                      "%s: array %s", what, kv->key);
        }
        for (size_t i = 0; i < f->n_tensors && (int64_t)i < g_n_tensors(g); i++) {
            const gguf_tensor *t = &f->tensors[i];
            CHECK(strcmp(g_tensor_name(g, (int64_t)i), t->name) == 0 && g_tensor_offset(g, (int64_t)i) == t->offset &&
                      g_tensor_type(g, (int64_t)i) == (int)t->file_type,
                  "%s: tensor %s", what, t->name);
        }
        CHECK(ggml_accepts(buf, n), "%s: ggml reads the tensor data", what);
    }
    if (g) g_free(g);
    gguf_close(f);
}

static void test_writer_files(void) {
    static const uint32_t aligns[] = {1, 8, 32, 64, 256};
    for (size_t ai = 0; ai < sizeof aligns / sizeof aligns[0]; ai++) {
        char path[256], err[512], what[64];
        snprintf(path, sizeof path, "/tmp/bonsai-test-gguf-ggml-%d.gguf", (int)getpid());
        snprintf(what, sizeof what, "writer file, alignment %u", aligns[ai]);
        gguf_writer *w = gguf_writer_new();
        gguf_set_str(w, "general.architecture", "test");
        if (aligns[ai] != 32) gguf_set_u32(w, "general.alignment", aligns[ai]);
        gguf_set_u8(w, "t.u8", 1);
        gguf_set_i32(w, "t.i32", -5);
        gguf_set_u64(w, "t.u64", 1ull << 40);
        gguf_set_f32(w, "t.f32", 0.25f);
        gguf_set_bool(w, "t.bool", true);
        int16_t i16[3] = {-1, 2, -3};
        double f64[2] = {1.0, -2.5};
        gguf_set_arr(w, "t.i16s", GGUF_TYPE_INT16, 3, i16);
        gguf_set_arr(w, "t.f64s", GGUF_TYPE_FLOAT64, 2, f64);
        const char *strs[] = {"", "a b", "\xc4\xa0x"};
        gguf_set_arr_str(w, "t.strs", 3, strs);
        static uint8_t data[8192];
        for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i * 11);
        struct {
            const char *name;
            int type;
            int64_t ne[2];
        } ts[] = {{"f32.vec", BN_F32, {7, 1}}, {"f16.mat", BN_F16, {3, 5}}, {"q8_0.mat", BN_Q8_0, {64, 3}},
                  {"q1_0.mat", BN_Q1_0, {256, 4}}, {"q2_0.mat", BN_Q2_0, {128, 2}}, {"bf16.mat", BN_BF16, {9, 2}}};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
            // zero scales keep the quantized blocks valid numbers for ggml's row validation
            CHECK(gguf_writer_add_tensor(w, ts[i].name, 2, ts[i].ne, ts[i].type, (uint32_t)ts[i].type,
                                         ts[i].type == BN_F32 || ts[i].type == BN_F16 || ts[i].type == BN_BF16 ? data : data + 4096,
                                         err, sizeof err) >= 0, "add %s: %s", ts[i].name, err);
        }
        CHECK(gguf_writer_write(w, path, NULL, NULL, err, sizeof err) == 0, "write: %s", err);
        gguf_writer_free(w);
        size_t n;
        char *buf = bn_read_file(path, &n, err, sizeof err);
        if (buf) compare(what, buf, n);
        free(buf);
        unlink(path);
    }
}

// Files where the two readers are expected to differ, and why.
typedef struct {
    const char *file;
    bool ours, theirs;
    const char *why;
} known_diff;
static const known_diff known[] = {
    {"ok_sample_pq2_42.gguf", true, false, "legacy g128 stored as type 42: mainline ggml reads g64 (docs/formats.md 3.9)"},
    {"ok_last_tensor_unpadded.gguf", true, false,
     "ggml reading the data into a context needs the final padding; mmap loaders do not (docs/formats.md 1.4)"},
    {"ok_gap_between_tensors.gguf", true, false, "ggml requires tensor data back to back in info order (docs/formats.md 1.4)"},
    {"bad_kv_bad_bool.gguf", false, true, "ggml does not validate bool values (docs/formats.md 1.2: other values invalid)"},
    {"bad_tensors_ne_too_big.gguf", false, true,
     "ne {2^32, 2^32}: ggml's element-count guard is skipped because the product wraps to 0"},
};

static void test_corpus_verdicts(void) {
    const char *root = getenv("BONSAI_SOURCE_ROOT");
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tests/gguf/corpus", root ? root : ".");
    DIR *d = opendir(dir);
    CHECK(d != NULL, "corpus %s", dir);
    if (!d) return;
    struct dirent *e;
    int agree = 0, total = 0;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".gguf") != 0) continue;
        char path[1100], err[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t n;
        char *buf = bn_read_file(path, &n, err, sizeof err);
        if (!buf) continue;
        gguf_file *f = gguf_open_mem(buf, n, err, sizeof err);
        bool ours = f != NULL, theirs = ggml_accepts(buf, n);
        gguf_close(f);
        total++;
        const known_diff *k = NULL;
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
            if (strcmp(e->d_name, known[i].file) == 0) k = &known[i];
        if (k) {
            CHECK(ours == k->ours && theirs == k->theirs, "%s: ours %d (want %d), ggml %d (want %d): %s", e->d_name, ours,
                  k->ours, theirs, k->theirs, k->why);
            agree += ours == k->ours && theirs == k->theirs;
        } else {
            CHECK(ours == theirs, "%s: ours %s, ggml %s", e->d_name, ours ? "accepts" : "rejects",
                  theirs ? "accepts" : "rejects");
            agree += ours == theirs;
        }
        if (strcmp(e->d_name, "ok_last_tensor_unpadded.gguf") == 0) { // metadata-only (mmap loaders) is fine
            void *g = g_init(buf, n, (ggml_gguf_params){true, NULL});
            CHECK(g != NULL, "ggml parses the unpadded file without reading the data blob");
            if (g) g_free(g);
        }
        free(buf);
    }
    closedir(d);
    printf("corpus: %d/%d verdicts as expected vs ggml\n", agree, total);
}

int main(void) {
    char why[1024];
    if (load_ggml(why, sizeof why) != 0) {
        char msg[1100];
        snprintf(msg, sizeof msg, "ggml reference unavailable: %s", why);
        return test_skip(msg);
    }
    test_writer_files();
    test_corpus_verdicts();
    return test_done("test_gguf_ggml");
}
