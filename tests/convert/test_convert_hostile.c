// tests/convert/test_convert_hostile.c — Hugging Face and PEFT directories with hostile JSON: a generated qwen35
// model and a dense qwen3 model are exported (bn_convert_gguf_to_hf), and a LoRA adapter of the qwen35 model too
// (bn_convert_lora_to_peft); then every value in config.json, tokenizer_config.json, tokenizer.json (its vocabulary
// and merges sampled: the first two and the last entry) and adapter_config.json is, one at a time, removed or
// replaced by an edge value (0, ±1, 2, 3, 7, 65536, INT32_MAX, 2^32 + 1, INT64_MAX, INT64_MIN, 0.5, ±1e300,
// 1e-300, strings, null, true, false, [], {}), and every array emptied or given an extra null. Each directory is
// imported in a child process (tests/hostile.h), which then uses what it made: the model tokenizes, runs and
// detokenizes; the adapter is merged into the model, which runs. The child must refuse with a message or run.
// The safetensors files are linked, not copied (tests/convert/fuzz_safetensors.c covers their headers).
#include "tests/test.h"
#include "tests/hostile.h"
#include "convert/convert.h"
#include "synth/mkmodel.h"
#include "core/model.h"
#include "base/util.h"
#include "train/lora.h"
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

static char dir[256], case_dir[320], case_out[320], scratch[320], q35_path[320];

// ---- JSON paths ------------------------------------------------------------------------------

enum { MAX_DEPTH = 8, MAX_PATHS = 4096 };

typedef struct {
    const char *key[MAX_DEPTH]; // object member name, or NULL: array element idx[d]
    size_t idx[MAX_DEPTH];
    int n;
} jpath;

static jpath paths[MAX_PATHS];
static int n_paths;

// collect: appends the path of v and of everything under it (objects of over 64 members and arrays of over 8
// sampled: their first two members and the last: a vocabulary, the merges), pre-order
static void collect(json_t *v, jpath *p) {
    if (n_paths < MAX_PATHS) paths[n_paths++] = *p;
    if (p->n == MAX_DEPTH) return;
    if (json_is_object(v)) {
        size_t n = json_object_size(v), i = 0;
        const char *k;
        json_t *c;
        json_object_foreach(v, k, c) {
            if (n > 64 && i >= 2 && i + 1 < n) { i++; continue; }
            p->key[p->n] = k, p->n++;
            collect(c, p);
            p->n--, i++;
        }
    } else if (json_is_array(v)) {
        size_t n = json_array_size(v);
        for (size_t i = 0; i < n; i++) {
            if (n > 8 && i >= 2 && i + 1 < n) continue;
            p->key[p->n] = NULL, p->idx[p->n] = i, p->n++;
            collect(json_array_get(v, i), p);
            p->n--;
        }
    }
}

// path_text: "a.b[2].c" for messages
static const char *path_text(const jpath *p, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = 0;
    for (int d = 0; d < p->n && len < n; d++)
        len += p->key[d] ? (size_t)snprintf(buf + len, n - len, "%s%s", d ? "." : "", p->key[d])
                         : (size_t)snprintf(buf + len, n - len, "[%zu]", p->idx[d]);
    return buf;
}

// at: the value at the first depth steps of p under root, or NULL
static json_t *at(json_t *root, const jpath *p, int depth) {
    json_t *v = root;
    for (int d = 0; d < depth && v; d++) v = p->key[d] ? json_object_get(v, p->key[d]) : json_array_get(v, p->idx[d]);
    return v;
}

// ---- mutations -------------------------------------------------------------------------------

typedef enum { M_DROP, M_INT, M_REAL, M_STR, M_NULL, M_TRUE, M_FALSE, M_ARR, M_OBJ, M_EMPTY, M_APPEND } mut_kind;
typedef struct {
    mut_kind kind;
    json_int_t i;
    double r;
    const char *s;
} mutation;

#define MI(v) {.kind = M_INT, .i = (v)}
#define MR(v) {.kind = M_REAL, .r = (v)}
#define MS(v) {.kind = M_STR, .s = (v)}
#define MK(k) {.kind = (k)}
static const mutation mutations[] = {
    MK(M_DROP), MI(0), MI(1), MI(-1), MI(2), MI(3), MI(7), MI(65536), MI(INT32_MAX), MI((json_int_t)UINT32_MAX + 2),
    MI(INT64_MAX), MI(INT64_MIN), MR(0.5), MR(1e300), MR(-1e300), MR(1e-300), MS(""), MS("x"),
    MS("Qwen3ForCausalLM"), MS("linear_attention"), MS("<|im_end|>"), MK(M_NULL), MK(M_TRUE), MK(M_FALSE), MK(M_ARR),
    MK(M_OBJ), MK(M_EMPTY), MK(M_APPEND),
};
#undef MI
#undef MR
#undef MS
#undef MK

static const char *mutation_text(const mutation *m, char *buf, size_t n) {
    switch (m->kind) {
    case M_DROP: return "removed";
    case M_INT: snprintf(buf, n, "= %lld", (long long)m->i); return buf;
    case M_REAL: snprintf(buf, n, "= %g", m->r); return buf;
    case M_STR: snprintf(buf, n, "= \"%s\"", m->s); return buf;
    case M_NULL: return "= null";
    case M_TRUE: return "= true";
    case M_FALSE: return "= false";
    case M_ARR: return "= []";
    case M_OBJ: return "= {}";
    case M_EMPTY: return "emptied";
    case M_APPEND: return "with an extra null";
    }
    return "?";
}

// apply: m applied at p to root (a copy); returns 0, or -1 when it does not apply (the root itself; emptying or
// extending what is not an array or object)
static int apply(json_t *root, const jpath *p, const mutation *m) {
    if (p->n == 0) return -1;
    json_t *parent = at(root, p, p->n - 1), *cur = at(root, p, p->n);
    if (!parent || !cur) return -1;
    const char *key = p->key[p->n - 1];
    size_t idx = p->idx[p->n - 1];
    json_t *nv = NULL;
    switch (m->kind) {
    case M_DROP: return key ? json_object_del(parent, key) : json_array_remove(parent, idx);
    case M_EMPTY:
        if (json_is_array(cur)) return json_array_clear(cur);
        if (json_is_object(cur)) return json_object_clear(cur);
        return -1;
    case M_APPEND: return json_is_array(cur) ? json_array_append_new(cur, json_null()) : -1;
    case M_INT: nv = json_integer(m->i); break;
    case M_REAL: nv = json_real(m->r); break;
    case M_STR: nv = json_string(m->s); break;
    case M_NULL: nv = json_null(); break;
    case M_TRUE: nv = json_true(); break;
    case M_FALSE: nv = json_false(); break;
    case M_ARR: nv = json_array(); break;
    case M_OBJ: nv = json_object(); break;
    }
    return key ? json_object_set_new(parent, key, nv) : json_array_set_new(parent, idx, nv);
}

// ---- cases -----------------------------------------------------------------------------------

// make_case_dir: case_dir holds links to every file of src but file, which is written from root; returns 0 or -1
static int make_case_dir(const char *src, const char *file, json_t *root) {
    DIR *d = opendir(case_dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        char p[640];
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", case_dir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    d = opendir(src);
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));) {
        char from[640], to[640];
        if (e->d_name[0] == '.' || strcmp(e->d_name, file) == 0) continue;
        snprintf(from, sizeof from, "%s/%s", src, e->d_name);
        snprintf(to, sizeof to, "%s/%s", case_dir, e->d_name);
        if (symlink(from, to) != 0) return closedir(d), -1;
    }
    closedir(d);
    char out[640];
    snprintf(out, sizeof out, "%s/%s", case_dir, file);
    return json_dump_file(root, out, JSON_COMPACT);
}

static bool peft; // the case is a PEFT directory (else a Hugging Face model directory)

// case_child: imports case_dir and uses the result; never returns
static void case_child(void *ctx) {
    (void)ctx;
    char err[512] = "";
    bn_convert_opts o = {.outtype = -1, .quiet = true};
    if (peft) {
        if (bn_convert_peft_to_lora(case_dir, q35_path, case_out, &o, err, sizeof err) != 0) hostile_refuse(err);
        hostile_run_adapter(case_out, q35_path, scratch);
    }
    if (bn_convert_hf_to_gguf(case_dir, case_out, &o, err, sizeof err) != 0) hostile_refuse(err);
    hostile_run_model(case_out);
}

// sweep: every mutation at every path of src/file, each imported in a child
static void sweep(const char *what, const char *src, const char *file, bool is_peft) {
    char path[640];
    snprintf(path, sizeof path, "%s/%s", src, file);
    json_error_t je;
    json_t *orig = json_load_file(path, 0, &je);
    CHECK(orig != NULL, "%s: %s: %s", what, path, je.text);
    if (!orig) return;
    jpath p = {0};
    n_paths = 0;
    collect(orig, &p);
    peft = is_peft;
    int before = hostile_cases;
    for (int k = 0; k < n_paths; k++)
        for (size_t m = 0; m < sizeof mutations / sizeof mutations[0]; m++) {
            json_t *copy = json_deep_copy(orig);
            if (apply(copy, &paths[k], &mutations[m]) == 0) {
                char pt[256], mt[64], desc[400];
                snprintf(desc, sizeof desc, "%s: %s: %s %s", what, file, path_text(&paths[k], pt, sizeof pt),
                         mutation_text(&mutations[m], mt, sizeof mt));
                if (make_case_dir(src, file, copy) == 0) hostile_child(desc, case_child, NULL);
                else CHECK(false, "%s: cannot write the case: %s", desc, strerror(errno));
            }
            json_decref(copy);
        }
    printf("%s %s: %d paths, %d cases\n", what, file, n_paths, hostile_cases - before);
    json_decref(orig);
}

int main(void) {
    // in memory where a tmpfs has room (the cases need ~15 MB): every case writes (and fsyncs) a GGUF
    struct statvfs fs;
    const bool shm = statvfs("/dev/shm", &fs) == 0 && (double)fs.f_bavail * fs.f_frsize > 256e6 &&
                     access("/dev/shm", W_OK) == 0;
    snprintf(dir, sizeof dir, "%s/bonsai-convert-hostile-XXXXXX", shm ? "/dev/shm" : "/tmp");
    if (!mkdtemp(dir)) return test_skip("cannot make a temp dir");
    char err[400], dense[320], adapter[320], hf35[320], hf3[320], peft_dir[320];
    snprintf(q35_path, sizeof q35_path, "%s/qwen35.gguf", dir);
    snprintf(dense, sizeof dense, "%s/qwen3.gguf", dir);
    snprintf(adapter, sizeof adapter, "%s/adapter.gguf", dir);
    snprintf(hf35, sizeof hf35, "%s/hf-qwen35", dir);
    snprintf(hf3, sizeof hf3, "%s/hf-qwen3", dir);
    snprintf(peft_dir, sizeof peft_dir, "%s/peft", dir);
    snprintf(case_dir, sizeof case_dir, "%s/case", dir);
    snprintf(case_out, sizeof case_out, "%s/case.gguf", dir);
    snprintf(scratch, sizeof scratch, "%s/merged.gguf", dir);
    mkdir(case_dir, 0777);
    bn_convert_opts o = {.outtype = -1, .quiet = true};
    bn_mkmodel_params mp;
    bn_mkmodel_defaults(&mp, "tiny");
    CHECK(bn_mkmodel_write(&mp, q35_path, err, sizeof err) == 0, "qwen35: %s", err);
    bn_mkmodel_defaults(&mp, "qwen3-tiny");
    CHECK(bn_mkmodel_write(&mp, dense, err, sizeof err) == 0, "qwen3: %s", err);
    CHECK(bn_convert_gguf_to_hf(q35_path, hf35, &o, err, sizeof err) == 0, "export qwen35: %s", err);
    CHECK(bn_convert_gguf_to_hf(dense, hf3, &o, err, sizeof err) == 0, "export qwen3: %s", err);
    bn_model *m = bn_model_load(q35_path, err, sizeof err);
    bn_lora *l = m ? bn_lora_from_model(m, BN_LORA_Q | BN_LORA_V | BN_LORA_DOWN | BN_LORA_QKV, 2, 4.0f, 0.0f, err,
                                        sizeof err) : NULL;
    CHECK(l != NULL, "adapter: %s", err);
    if (l) {
        bn_lora_init_peft(l, 5);
        CHECK(bn_lora_save_gguf(l, adapter, err, sizeof err) == 0, "adapter: %s", err);
    }
    bn_lora_free(l);
    bn_model_free(m);
    CHECK(bn_convert_lora_to_peft(adapter, q35_path, peft_dir, &o, err, sizeof err) == 0, "export adapter: %s", err);
    if (test_failures) return test_done("test_convert_hostile");

    // the untouched directories import and run (so a refusal below is the change's doing)
    const char *files[] = {"config.json", "tokenizer_config.json", "tokenizer.json"};
    const char *srcs[] = {hf35, hf3};
    const char *names[] = {"qwen35", "qwen3"};
    for (int s = 0; s < 2; s++) {
        char path[400];
        snprintf(path, sizeof path, "%s/config.json", srcs[s]);
        json_t *cfg = json_load_file(path, 0, NULL);
        peft = false;
        if (cfg && make_case_dir(srcs[s], "config.json", cfg) == 0) hostile_child(names[s], case_child, NULL);
        json_decref(cfg);
    }
    snprintf(err, sizeof err, "%s/adapter_config.json", peft_dir);
    json_t *acfg = json_load_file(err, 0, NULL);
    peft = true;
    if (acfg && make_case_dir(peft_dir, "adapter_config.json", acfg) == 0) hostile_child("peft", case_child, NULL);
    json_decref(acfg);
    CHECK(hostile_ran == 3 && hostile_cases == 3, "the untouched directories import and run (%d of %d)", hostile_ran,
          hostile_cases);

    for (int f = 0; f < 3; f++) sweep("qwen35", hf35, files[f], false);
    sweep("qwen3", hf3, "config.json", false); // (its tokenizer files are the qwen35 model's)
    sweep("peft", peft_dir, "adapter_config.json", true);
    printf("%d hostile directories: %d refused with a message, %d imported and ran\n", hostile_cases, hostile_refused,
           hostile_ran);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
    return test_done("test_convert_hostile");
}
