// tests/compat/compat_common.c — see compat_common.h.
#include "tests/compat/compat_common.h"
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gguf/gguf.h"
#include "synth/mkmodel.h"
#include "base/util.h"
#include "quant/quant.h"

const char *compat_tmpdir(void) {
    static char buf[512];
    const char *base = getenv("TMPDIR");
    snprintf(buf, sizeof buf, "%s/bonsai-compat-XXXXXX", base && *base ? base : "/tmp");
    return mkdtemp(buf);
}

void compat_rmdir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[1024];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

int compat_make_model(const char *preset, int type, uint64_t seed, const char *path, char *err, size_t errlen) {
    bn_mkmodel_params p;
    if (bn_mkmodel_defaults(&p, preset) != 0) return bn_err(err, errlen, "unknown mkmodel preset %s", preset);
    p.type = type;
    p.seed = seed;
    if (bn_mkmodel_check(&p, err, errlen) != 0) return -1;
    return bn_mkmodel_write(&p, path, err, errlen);
}

// is_quantizable: docs/formats.md §5.1 for the qwen35/qwen3 tensor set.
static bool is_quantizable(const gguf_tensor *t) {
    size_t len = strlen(t->name);
    bool ends_weight = len >= 6 && !strcmp(t->name + len - 6, "weight");
    return t->n_dims >= 2 && t->ne[1] > 1 && ends_weight && !strstr(t->name, "_norm.weight") &&
           !strstr(t->name, "ssm_conv1d");
}

int compat_requant(const char *in, const char *out, int type, uint32_t file_type_id, int ftype,
                   char *err, size_t errlen) {
    gguf_file *g = gguf_open(in, err, errlen);
    if (!g) return -1;
    gguf_writer *w = gguf_writer_new();
    for (size_t i = 0; i < g->n_kv; i++) gguf_set_kv(w, &g->kv[i]);
    gguf_set_u32(w, "general.quantization_version", 2);
    if (ftype >= 0) gguf_set_u32(w, "general.file_type", (uint32_t)ftype);
    else gguf_remove_key(w, "general.file_type");
    void **bufs = xcalloc(g->n_tensors, sizeof *bufs);
    int rc = 0;
    for (size_t i = 0; i < g->n_tensors && rc == 0; i++) {
        const gguf_tensor *t = &g->tensors[i];
        if (!is_quantizable(t) || t->type == type) {
            rc = gguf_writer_add_tensor(w, t->name, (int)t->n_dims, t->ne, t->type, t->file_type, t->data,
                                        err, errlen) < 0 ? -1 : 0;
            continue;
        }
        int64_t n = gguf_tensor_nelements(t);
        if (t->ne[0] % bn_type_blck(type) != 0) {
            rc = bn_err(err, errlen, "%s: ne0 %lld not a multiple of %s's block", t->name, (long long)t->ne[0],
                        bn_type_name(type));
            break;
        }
        float *f = xmalloc(sizeof(float) * (size_t)n);
        if (bn_dequantize(t->type, t->data, f, n) != 0) {
            free(f);
            rc = bn_err(err, errlen, "%s: cannot dequantize type %s", t->name, bn_type_name(t->type));
            break;
        }
        size_t nbytes = bn_row_size(type, t->ne[0]) * (size_t)(n / t->ne[0]);
        bufs[i] = xmalloc(nbytes);
        size_t wrote;
        if (type == BN_F32) { memcpy(bufs[i], f, nbytes); wrote = nbytes; }
        else wrote = bn_quantize_ref(type, f, bufs[i], n);
        free(f);
        if (wrote != nbytes) {
            rc = bn_err(err, errlen, "%s: quantizing to %s wrote %zu of %zu bytes", t->name, bn_type_name(type),
                        wrote, nbytes);
            break;
        }
        uint32_t id = type == BN_F32 ? (uint32_t)BN_F32 : file_type_id;
        rc = gguf_writer_add_tensor(w, t->name, (int)t->n_dims, t->ne, type, id, bufs[i], err, errlen) < 0 ? -1 : 0;
    }
    if (rc == 0) rc = gguf_writer_write(w, out, NULL, NULL, err, errlen);
    for (size_t i = 0; i < g->n_tensors; i++) free(bufs[i]);
    free(bufs);
    gguf_writer_free(w);
    gguf_close(g);
    return rc;
}

void compat_log_softmax(const float *x, float *dst, int n) {
    double mx = x[0];
    for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)x[i] - mx);
    double lse = mx + log(sum);
    for (int i = 0; i < n; i++) dst[i] = (float)((double)x[i] - lse);
}

int32_t compat_argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

void compat_diff_logits(const float *a, const float *b, int n, int n_vocab, const int32_t *next, compat_diff *d) {
    memset(d, 0, sizeof *d);
    float *la = xmalloc(sizeof(float) * (size_t)n_vocab), *lb = xmalloc(sizeof(float) * (size_t)n_vocab);
    double sum_next = 0;
    int n_next = 0;
    for (int p = 0; p < n; p++) {
        const float *ra = a + (size_t)p * n_vocab, *rb = b + (size_t)p * n_vocab;
        compat_log_softmax(ra, la, n_vocab);
        compat_log_softmax(rb, lb, n_vocab);
        for (int i = 0; i < n_vocab; i++) {
            double delta = fabs((double)la[i] - lb[i]);
            if (delta > d->max_abs_row) d->max_abs_row = delta;
        }
        if (next && p + 1 < n) {
            double delta = fabs((double)la[next[p]] - lb[next[p]]);
            if (delta > d->max_abs_next) d->max_abs_next = delta;
            sum_next += delta;
            n_next++;
        }
        if (compat_argmax(ra, n_vocab) != compat_argmax(rb, n_vocab)) d->argmax_diff++;
    }
    d->mean_abs_next = n_next ? sum_next / n_next : 0;
    d->n_pos = n;
    free(la);
    free(lb);
}

int compat_forward_all(const bn_model *m, bn_state *s, const int32_t *tokens, int n, int chunk, float *logits,
                       char *err, size_t errlen) {
    bn_state_reset(s);
    int step = chunk > 0 ? chunk : n;
    for (int i = 0; i < n; i += step) {
        int k = n - i < step ? n - i : step;
        bn_forward_out out = {.logits = logits + (size_t)i * m->cfg.n_vocab, .all_logits = true};
        if (bn_forward(m, s, tokens + i, k, &out, err, errlen) != 0) return -1;
    }
    return 0;
}

int compat_greedy(const bn_model *m, bn_state *s, const int32_t *prompt, int n_prompt, int n_gen, int32_t *out,
                  char *err, size_t errlen) {
    int n_vocab = m->cfg.n_vocab;
    float *logits = xmalloc(sizeof(float) * (size_t)n_vocab);
    bn_state_reset(s);
    bn_forward_out fo = {.logits = logits, .all_logits = false};
    int rc = bn_forward(m, s, prompt, n_prompt, &fo, err, errlen);
    for (int i = 0; i < n_gen && rc == 0; i++) {
        out[i] = compat_argmax(logits, n_vocab);
        if (i + 1 < n_gen) rc = bn_forward(m, s, &out[i], 1, &fo, err, errlen);
    }
    free(logits);
    return rc;
}

void compat_random_tokens(uint64_t seed, int lo, int hi, int n, int32_t *out) {
    uint64_t x = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    for (int i = 0; i < n; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        out[i] = lo + (int32_t)((x >> 33) % (uint64_t)(hi - lo));
    }
}
