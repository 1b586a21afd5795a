// convert/safetensors.c — safetensors reader (mmap, validated header, shards) and atomic writer.
#include "convert/safetensors.h"
#include "base/util.h"
#include "quant/quant.h"
#include <jansson.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER (100u << 20) // the HF reference refuses headers above 100 MB

const char *bn_st_dtype_name(int type) {
    switch (type) {
    case BN_F32: return "F32";
    case BN_F16: return "F16";
    case BN_BF16: return "BF16";
    default: return NULL;
    }
}

static int dtype_from_name(const char *s) {
    if (strcmp(s, "F32") == 0) return BN_F32;
    if (strcmp(s, "F16") == 0) return BN_F16;
    if (strcmp(s, "BF16") == 0) return BN_BF16;
    return -1;
}

static size_t dtype_size(int type) { return type == BN_F32 ? 4 : 2; }

int64_t bn_st_nelements(const bn_st_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->n_dims; i++) n *= t->shape[i];
    return n;
}

void bn_st_to_f32(int type, const void *src, float *dst, int64_t n) {
    if (type == BN_F32) {
        memcpy(dst, src, (size_t)n * 4);
        return;
    }
    // safetensors data offsets need not be even (nor the header length a multiple of 8): a misaligned
    // F16/BF16 run goes through an aligned copy, in chunks (the row converters take uint16_t pointers)
    uint16_t bounce[2048];
    const bool aligned = ((uintptr_t)src & 1) == 0;
    for (int64_t i = 0; i < n;) {
        const int64_t k = aligned ? n - i : (n - i < 2048 ? n - i : 2048);
        const uint16_t *x = aligned ? (const uint16_t *)src + i : memcpy(bounce, (const uint8_t *)src + 2 * i, 2 * k);
        if (type == BN_F16) bn_fp16_to_fp32_row(x, dst + i, k);
        else bn_bf16_to_fp32_row(x, dst + i, k);
        i += k;
    }
}

void bn_st_from_f32(int type, const float *src, void *dst, int64_t n) {
    if (type == BN_F32) memcpy(dst, src, (size_t)n * 4);
    else if (type == BN_F16) bn_fp32_to_fp16_row(src, dst, n);
    else bn_fp32_to_bf16_row(src, dst, n);
}

// ---- reading ------------------------------------------------------------------------------

typedef struct {
    uint64_t begin, end;
    const char *name;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

// parse_entry: validates one header entry and fills t (name/data set by the caller); 0 or -1.
static int parse_entry(const char *path, const char *name, json_t *v, bn_st_tensor *t, uint64_t data_size,
                       uint64_t *begin, char *err, size_t errlen) {
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"), *jo = json_object_get(v, "data_offsets");
    if (!json_is_object(v) || !json_is_string(jd) || !json_is_array(js) || !json_is_array(jo) || json_array_size(jo) != 2)
        return bn_err(err, errlen, "%s: corrupt safetensors header: entry '%s' needs dtype, shape, data_offsets[2]", path, name);
    t->type = dtype_from_name(json_string_value(jd));
    if (t->type < 0)
        return bn_err(err, errlen, "%s: tensor '%s' has dtype %s; only F32, F16 and BF16 are supported", path, name,
                      json_string_value(jd));
    size_t nd = json_array_size(js);
    if (nd > BN_ST_MAX_DIMS) return bn_err(err, errlen, "%s: tensor '%s' has %zu dims (max %d)", path, name, nd, BN_ST_MAX_DIMS);
    t->n_dims = (int)nd;
    uint64_t nel = 1;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0 || json_integer_value(d) > (1ll << 40))
            return bn_err(err, errlen, "%s: corrupt safetensors header: bad shape of '%s'", path, name);
        t->shape[i] = json_integer_value(d);
        if (t->shape[i] && nel > (UINT64_MAX >> 2) / (uint64_t)t->shape[i])
            return bn_err(err, errlen, "%s: shape of '%s' overflows", path, name);
        nel *= (uint64_t)t->shape[i];
    }
    for (int i = t->n_dims; i < BN_ST_MAX_DIMS; i++) t->shape[i] = 1;
    json_t *j0 = json_array_get(jo, 0), *j1 = json_array_get(jo, 1);
    if (!json_is_integer(j0) || !json_is_integer(j1) || json_integer_value(j0) < 0 ||
        json_integer_value(j1) < json_integer_value(j0))
        return bn_err(err, errlen, "%s: corrupt safetensors header: bad data_offsets of '%s'", path, name);
    uint64_t b = (uint64_t)json_integer_value(j0), e = (uint64_t)json_integer_value(j1);
    if (e > data_size)
        return bn_err(err, errlen, "%s: tensor '%s' data [%llu, %llu) lies outside the file (data size %llu; truncated?)",
                      path, name, (unsigned long long)b, (unsigned long long)e, (unsigned long long)data_size);
    if (nel * dtype_size(t->type) != e - b)
        return bn_err(err, errlen, "%s: tensor '%s': shape × %s size = %llu bytes but data_offsets span %llu", path, name,
                      json_string_value(jd), (unsigned long long)(nel * dtype_size(t->type)),
                      (unsigned long long)(e - b));
    t->nbytes = (size_t)(e - b);
    *begin = b;
    return 0;
}

// parse_shard: validates the mapped file and appends its tensors to st; 0 or -1.
static int parse_shard(bn_safetensors *st, int shard, char *err, size_t errlen) {
    const char *path = st->shard_paths[shard];
    const uint8_t *base = st->maps[shard];
    size_t size = st->map_sizes[shard];
    if (size < 8) return bn_err(err, errlen, "%s: not a safetensors file (%zu bytes, truncated?)", path, size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | base[i];
    if (n < 2 || n > ST_MAX_HEADER || n > size - 8)
        return bn_err(err, errlen, "%s: bad safetensors header length %llu (file has %zu bytes)", path,
                      (unsigned long long)n, size);
    json_error_t je;
    json_t *root = json_loadb((const char *)base + 8, (size_t)n, JSON_REJECT_DUPLICATES, &je);
    if (!root) return bn_err(err, errlen, "%s: corrupt safetensors header JSON: %s", path, je.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return bn_err(err, errlen, "%s: corrupt safetensors header: not a JSON object", path);
    }
    const uint8_t *data = base + 8 + n;
    uint64_t data_size = size - 8 - n;
    size_t cap = (size_t)st->n_tensors + json_object_size(root);
    st->t = xrealloc(st->t, (cap ? cap : 1) * sizeof(bn_st_tensor));
    span *spans = xmalloc((json_object_size(root) + 1) * sizeof(span));
    int n_spans = 0, rc = 0;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) continue;
        bn_st_tensor *t = &st->t[st->n_tensors];
        memset(t, 0, sizeof *t);
        uint64_t b = 0;
        if (parse_entry(path, key, v, t, data_size, &b, err, errlen) != 0) {
            rc = -1;
            break;
        }
        t->name = xstrdup(key);
        t->data = data + b;
        t->shard = shard;
        spans[n_spans++] = (span){b, b + t->nbytes, t->name};
        st->n_tensors++;
    }
    if (rc == 0) {
        qsort(spans, (size_t)n_spans, sizeof(span), cmp_span);
        for (int i = 1; i < n_spans; i++)
            if (spans[i].begin < spans[i - 1].end) {
                rc = bn_err(err, errlen, "%s: tensors '%s' and '%s' overlap in the data section", path,
                            spans[i - 1].name, spans[i].name);
                break;
            }
    }
    free(spans);
    json_decref(root);
    return rc;
}

static int map_file(bn_safetensors *st, const char *path, char *err, size_t errlen) {
    int i = st->n_shards++;
    st->shard_paths = xrealloc(st->shard_paths, st->n_shards * sizeof(char *));
    st->maps = xrealloc(st->maps, st->n_shards * sizeof(void *));
    st->map_sizes = xrealloc(st->map_sizes, st->n_shards * sizeof(size_t));
    st->shard_paths[i] = xstrdup(path);
    st->maps[i] = NULL;
    st->map_sizes[i] = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return bn_err(err, errlen, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return bn_err(err, errlen, "cannot stat %s: %s", path, strerror(errno));
    }
    if (sb.st_size > 0) {
        void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return bn_err(err, errlen, "cannot mmap %s: %s", path, strerror(errno));
        }
        st->maps[i] = p;
        st->map_sizes[i] = (size_t)sb.st_size;
    }
    close(fd);
    return parse_shard(st, i, err, errlen);
}

void bn_st_close(bn_safetensors *st) {
    if (!st) return;
    for (int i = 0; i < st->n_shards; i++) {
        if (st->maps[i]) munmap(st->maps[i], st->map_sizes[i]);
        free(st->shard_paths[i]);
    }
    for (int i = 0; i < st->n_tensors; i++) free(st->t[i].name);
    free(st->shard_paths);
    free(st->maps);
    free(st->map_sizes);
    free(st->t);
    free(st);
}

bn_safetensors *bn_st_open_file(const char *path, char *err, size_t errlen) {
    bn_safetensors *st = xcalloc(1, sizeof *st);
    if (map_file(st, path, err, errlen) != 0) {
        bn_st_close(st);
        return NULL;
    }
    return st;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

bn_safetensors *bn_st_open_dir(const char *dir, char *err, size_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (access(path, F_OK) != 0) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        if (access(path, F_OK) != 0) {
            bn_err(err, errlen, "%s: no model.safetensors or model.safetensors.index.json", dir);
            return NULL;
        }
        return bn_st_open_file(path, err, errlen);
    }
    json_error_t je;
    json_t *idx = json_load_file(path, 0, &je);
    json_t *wm = idx ? json_object_get(idx, "weight_map") : NULL;
    if (!json_is_object(wm)) {
        bn_err(err, errlen, "%s: %s", path, idx ? "no weight_map object" : je.text);
        json_decref(idx);
        return NULL;
    }
    // unique shard names, sorted (the order llama.cpp's converter reads them in)
    size_t n_names = 0;
    char **names = xmalloc((json_object_size(wm) + 1) * sizeof(char *));
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v) {
        if (!json_is_string(v)) continue;
        bool seen = false;
        for (size_t i = 0; i < n_names && !seen; i++) seen = strcmp(names[i], json_string_value(v)) == 0;
        if (!seen) names[n_names++] = (char *)json_string_value(v);
    }
    qsort(names, n_names, sizeof(char *), cmp_str);
    bn_safetensors *st = xcalloc(1, sizeof *st);
    int rc = 0;
    for (size_t i = 0; i < n_names && rc == 0; i++) {
        if (strchr(names[i], '/')) {
            rc = bn_err(err, errlen, "%s: shard name '%s' must be a plain file name", path, names[i]);
            break;
        }
        char sp[4096];
        snprintf(sp, sizeof sp, "%s/%s", dir, names[i]);
        if (access(sp, F_OK) != 0) {
            rc = bn_err(err, errlen, "missing shard %s (listed in %s)", sp, path);
            break;
        }
        rc = map_file(st, sp, err, errlen);
    }
    if (rc == 0 && st->n_tensors > 1) { // a name in two shards is ambiguous
        char **all = xmalloc((size_t)st->n_tensors * sizeof(char *));
        for (int i = 0; i < st->n_tensors; i++) all[i] = st->t[i].name;
        qsort(all, (size_t)st->n_tensors, sizeof(char *), cmp_str);
        for (int i = 1; i < st->n_tensors && rc == 0; i++)
            if (strcmp(all[i], all[i - 1]) == 0) rc = bn_err(err, errlen, "%s: tensor '%s' appears in two shards", dir, all[i]);
        free(all);
    }
    if (rc == 0) {
        json_object_foreach(wm, key, v) {
            const bn_st_tensor *t = bn_st_find(st, key);
            if (!t || strcmp(st->shard_paths[t->shard] + strlen(dir) + 1, json_string_value(v)) != 0) {
                rc = bn_err(err, errlen, "tensor '%s' listed in %s is missing from shard %s", key, path,
                            json_string_value(v));
                break;
            }
        }
    }
    free(names);
    json_decref(idx);
    if (rc != 0) {
        bn_st_close(st);
        return NULL;
    }
    return st;
}

const bn_st_tensor *bn_st_find(const bn_safetensors *st, const char *name) {
    for (int i = 0; i < st->n_tensors; i++)
        if (strcmp(st->t[i].name, name) == 0) return &st->t[i];
    return NULL;
}

// ---- writing ------------------------------------------------------------------------------

typedef struct {
    char *name;
    int type, n_dims;
    int64_t shape[BN_ST_MAX_DIMS];
    size_t nbytes;
    const void *data;
} wtensor;

struct bn_st_writer {
    int n, cap;
    wtensor *t;
};

bn_st_writer *bn_st_writer_new(void) { return xcalloc(1, sizeof(bn_st_writer)); }

void bn_st_writer_free(bn_st_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) free(w->t[i].name);
    free(w->t);
    free(w);
}

int bn_st_writer_add(bn_st_writer *w, const char *name, int type, int n_dims, const int64_t *shape,
                     const void *data, char *err, size_t errlen) {
    if (!bn_st_dtype_name(type)) return bn_err(err, errlen, "safetensors: tensor '%s': unsupported type %d", name, type);
    if (n_dims < 0 || n_dims > BN_ST_MAX_DIMS) return bn_err(err, errlen, "safetensors: tensor '%s': %d dims", name, n_dims);
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0) return bn_err(err, errlen, "safetensors: duplicate tensor '%s'", name);
    if (w->n == w->cap) w->t = xrealloc(w->t, (size_t)(w->cap = w->cap ? 2 * w->cap : 64) * sizeof(wtensor));
    wtensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->name = xstrdup(name);
    t->type = type;
    t->n_dims = n_dims;
    size_t nel = 1;
    for (int i = 0; i < n_dims; i++) {
        if (shape[i] < 0) return bn_err(err, errlen, "safetensors: tensor '%s': negative dim", name);
        t->shape[i] = shape[i];
        nel *= (size_t)shape[i];
    }
    t->nbytes = nel * dtype_size(type);
    t->data = data;
    return w->n++;
}

int bn_st_writer_write(bn_st_writer *w, const char *path, bn_st_fill_fn fill, void *ctx, char *err, size_t errlen) {
    json_t *root = json_object();
    json_t *meta = json_object();
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(root, "__metadata__", meta);
    uint64_t off = 0;
    size_t max_bytes = 0;
    for (int i = 0; i < w->n; i++) {
        const wtensor *t = &w->t[i];
        json_t *e = json_object(), *sh = json_array(), *of = json_array();
        json_object_set_new(e, "dtype", json_string(bn_st_dtype_name(t->type)));
        for (int d = 0; d < t->n_dims; d++) json_array_append_new(sh, json_integer(t->shape[d]));
        json_object_set_new(e, "shape", sh);
        json_array_append_new(of, json_integer((json_int_t)off));
        json_array_append_new(of, json_integer((json_int_t)(off + t->nbytes)));
        json_object_set_new(e, "data_offsets", of);
        json_object_set_new(root, t->name, e);
        off += t->nbytes;
        if (t->nbytes > max_bytes) max_bytes = t->nbytes;
    }
    char *hdr = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    size_t hn = strlen(hdr), padded = (hn + 7) / 8 * 8;
    bn_atomic_file af;
    if (bn_atomic_open(&af, path, err, errlen) != 0) {
        free(hdr);
        return -1;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    int rc = 0;
    if (fwrite(len8, 1, 8, af.f) != 8 || fwrite(hdr, 1, hn, af.f) != hn) rc = -1;
    for (size_t i = hn; i < padded && rc == 0; i++)
        if (fputc(' ', af.f) == EOF) rc = -1;
    free(hdr);
    if (rc != 0) {
        bn_atomic_abort(&af);
        return bn_err(err, errlen, "cannot write %s: %s", path, strerror(errno));
    }
    void *buf = max_bytes ? xmalloc(max_bytes) : NULL;
    for (int i = 0; i < w->n && rc == 0; i++) {
        const wtensor *t = &w->t[i];
        const void *src = t->data;
        if (!src) {
            if (!fill) {
                rc = bn_err(err, errlen, "safetensors: tensor '%s' has no data and no fill callback", t->name);
                break;
            }
            if (fill(ctx, i, buf, t->nbytes, err, errlen) != 0) {
                rc = -1;
                break;
            }
            src = buf;
        }
        if (t->nbytes && fwrite(src, 1, t->nbytes, af.f) != t->nbytes)
            rc = bn_err(err, errlen, "cannot write %s: %s", path, strerror(errno));
    }
    free(buf);
    if (rc != 0) {
        bn_atomic_abort(&af);
        return -1;
    }
    return bn_atomic_commit(&af, err, errlen);
}
