// gguf/write.c — the GGUF v3 writer (gguf.h: gguf_writer, docs/formats.md §1): KVs and tensor infos in insertion
// order, each tensor's data padded to the alignment, written atomically (temp file + fsync + rename).
#include "gguf/gguf_impl.h"
#include "base/util.h"
#include "quant/quant.h"
#include <string.h>
#include <stdlib.h>
#include <errno.h>

typedef struct {
    char *name;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    int type;
    uint32_t file_type;
    const void *data;
    size_t nbytes;
} wtensor;

struct gguf_writer {
    gguf_kv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
};

gguf_writer *gguf_writer_new(void) { return xcalloc(1, sizeof(gguf_writer)); }

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) gguf_kv_clear(&w->kv[i]);
    free(w->kv);
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    free(w);
}

void gguf_remove_key(gguf_writer *w, const char *key) {
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0) {
            gguf_kv_clear(&w->kv[i]);
            memmove(&w->kv[i], &w->kv[i + 1], (w->n_kv - i - 1) * sizeof(gguf_kv));
            w->n_kv--;
            return;
        }
}

static gguf_kv *new_kv(gguf_writer *w, const char *key, uint32_t type) {
    gguf_remove_key(w, key);
    if (w->n_kv == w->cap_kv) w->kv = xrealloc(w->kv, (w->cap_kv = w->cap_kv ? 2 * w->cap_kv : 32) * sizeof(gguf_kv));
    gguf_kv *kv = &w->kv[w->n_kv++];
    memset(kv, 0, sizeof *kv);
    kv->key = xstrdup(key);
    kv->type = type;
    kv->n = 1;
    return kv;
}

static void set_scalar(gguf_writer *w, const char *key, uint32_t type, const void *v) {
    gguf_kv *kv = new_kv(w, key, type);
    kv->data = xcalloc(1, 8);
    memcpy(kv->data, v, gguf_type_size(type));
}

void gguf_set_u8(gguf_writer *w, const char *key, uint8_t v) { set_scalar(w, key, GGUF_TYPE_UINT8, &v); }
void gguf_set_u32(gguf_writer *w, const char *key, uint32_t v) { set_scalar(w, key, GGUF_TYPE_UINT32, &v); }
void gguf_set_i32(gguf_writer *w, const char *key, int32_t v) { set_scalar(w, key, GGUF_TYPE_INT32, &v); }
void gguf_set_u64(gguf_writer *w, const char *key, uint64_t v) { set_scalar(w, key, GGUF_TYPE_UINT64, &v); }
void gguf_set_f32(gguf_writer *w, const char *key, float v) { set_scalar(w, key, GGUF_TYPE_FLOAT32, &v); }
void gguf_set_bool(gguf_writer *w, const char *key, bool v) {
    uint8_t b = v;
    set_scalar(w, key, GGUF_TYPE_BOOL, &b);
}

void gguf_set_str(gguf_writer *w, const char *key, const char *v) {
    gguf_kv *kv = new_kv(w, key, GGUF_TYPE_STRING);
    kv->str = xstrdup(v);
    kv->str_len = strlen(v);
}

void gguf_set_arr(gguf_writer *w, const char *key, uint32_t arr_type, uint64_t n, const void *data) {
    gguf_kv *kv = new_kv(w, key, GGUF_TYPE_ARRAY);
    kv->arr_type = arr_type;
    kv->n = n;
    kv->data = xmalloc(n * gguf_type_size(arr_type));
    memcpy(kv->data, data, n * gguf_type_size(arr_type));
}

void gguf_set_arr_str(gguf_writer *w, const char *key, uint64_t n, const char *const *strs) {
    gguf_kv *kv = new_kv(w, key, GGUF_TYPE_ARRAY);
    kv->arr_type = GGUF_TYPE_STRING;
    kv->n = n;
    kv->strs = xcalloc(n ? n : 1, sizeof(char *));
    kv->str_lens = xcalloc(n ? n : 1, sizeof(uint64_t));
    for (uint64_t i = 0; i < n; i++) {
        kv->strs[i] = xstrdup(strs[i]);
        kv->str_lens[i] = strlen(strs[i]);
    }
}

void gguf_set_kv(gguf_writer *w, const gguf_kv *src) {
    gguf_kv *kv = new_kv(w, src->key, src->type);
    kv->arr_type = src->arr_type;
    kv->n = src->n;
    if (src->type == GGUF_TYPE_STRING) {
        kv->str = xmalloc(src->str_len + 1);
        memcpy(kv->str, src->str, src->str_len + 1);
        kv->str_len = src->str_len;
    } else if (src->type == GGUF_TYPE_ARRAY && src->arr_type == GGUF_TYPE_STRING) {
        kv->strs = xcalloc(src->n ? src->n : 1, sizeof(char *));
        kv->str_lens = xcalloc(src->n ? src->n : 1, sizeof(uint64_t));
        for (uint64_t i = 0; i < src->n; i++) {
            kv->strs[i] = xmalloc(src->str_lens[i] + 1);
            memcpy(kv->strs[i], src->strs[i], src->str_lens[i] + 1);
            kv->str_lens[i] = src->str_lens[i];
        }
    } else {
        size_t es = gguf_type_size(src->type == GGUF_TYPE_ARRAY ? src->arr_type : src->type);
        kv->data = xmalloc(src->n * es + 8);
        memcpy(kv->data, src->data, src->n * es);
    }
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, int n_dims, const int64_t *ne, int type,
                           uint32_t file_type, const void *data, char *err, size_t errlen) {
    if (strlen(name) == 0 || strlen(name) > GGUF_MAX_NAME)
        return bn_err(err, errlen, "gguf: tensor name '%s' must be 1..%d bytes", name, GGUF_MAX_NAME);
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) return bn_err(err, errlen, "gguf: duplicate tensor name '%s'", name);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) return bn_err(err, errlen, "gguf: tensor '%s': n_dims %d", name, n_dims);
    int blck = bn_type_blck(type);
    if (blck == 0) return bn_err(err, errlen, "gguf: tensor '%s': unsupported type %d", name, type);
    if (ne[0] % blck != 0)
        return bn_err(err, errlen, "gguf: tensor '%s': ne[0] = %lld is not a multiple of the %s block size %d", name,
                      (long long)ne[0], bn_type_name(type), blck);
    if (w->n_t == w->cap_t) w->t = xrealloc(w->t, (w->cap_t = w->cap_t ? 2 * w->cap_t : 64) * sizeof(wtensor));
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    // like ggml_n_dims: trailing dimensions of size 1 are dropped (min 1)
    int nd = n_dims;
    while (nd > 1 && ne[nd - 1] == 1) nd--;
    t->name = xstrdup(name);
    t->n_dims = nd;
    int64_t rows = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        t->ne[d] = d < n_dims ? ne[d] : 1;
        if (d > 0) rows *= t->ne[d];
    }
    t->type = type;
    t->file_type = file_type;
    t->data = data;
    t->nbytes = bn_row_size(type, t->ne[0]) * (size_t)rows;
    return (int)w->n_t++;
}

int gguf_writer_n_tensors(const gguf_writer *w) { return (int)w->n_t; }
size_t gguf_writer_tensor_nbytes(const gguf_writer *w, int idx) { return w->t[idx].nbytes; }

static void w_bytes(FILE *f, const void *p, size_t n) { fwrite(p, 1, n, f); }
static void w_u32(FILE *f, uint32_t v) { w_bytes(f, &v, 4); }
static void w_u64(FILE *f, uint64_t v) { w_bytes(f, &v, 8); }
static void w_str(FILE *f, const char *s, uint64_t n) {
    w_u64(f, n);
    w_bytes(f, s, n);
}

static void w_pad(FILE *f, uint64_t *pos, uint32_t align) {
    static const char zeros[256];
    uint64_t pad = (uint64_t)gguf_align_up((int64_t)*pos, align) - *pos;
    *pos += pad;
    while (pad > 0) {
        size_t k = pad > sizeof zeros ? sizeof zeros : pad;
        w_bytes(f, zeros, k);
        pad -= k;
    }
}

int gguf_writer_write(gguf_writer *w, const char *path, gguf_fill_fn fill, void *ctx, char *err, size_t errlen) {
    uint32_t align = GGUF_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, "general.alignment") == 0 && w->kv[i].type == GGUF_TYPE_UINT32) {
            align = *(uint32_t *)w->kv[i].data;
            if (align == 0 || (align & (align - 1)))
                return bn_err(err, errlen, "gguf: general.alignment %u is not a power of two", align);
        }
    bn_atomic_file af;
    if (bn_atomic_open(&af, path, err, errlen) != 0) return -1;
    FILE *f = af.f;
    uint64_t pos = 0;
    w_bytes(f, "GGUF", 4);
    w_u32(f, 3);
    w_u64(f, w->n_t);
    w_u64(f, w->n_kv);
    pos = 24;
    for (size_t i = 0; i < w->n_kv; i++) {
        const gguf_kv *kv = &w->kv[i];
        uint64_t kl = strlen(kv->key);
        w_str(f, kv->key, kl);
        w_u32(f, kv->type);
        pos += 8 + kl + 4;
        if (kv->type == GGUF_TYPE_STRING) {
            w_str(f, kv->str, kv->str_len);
            pos += 8 + kv->str_len;
        } else if (kv->type == GGUF_TYPE_ARRAY) {
            w_u32(f, kv->arr_type);
            w_u64(f, kv->n);
            pos += 12;
            if (kv->arr_type == GGUF_TYPE_STRING) {
                for (uint64_t j = 0; j < kv->n; j++) {
                    w_str(f, kv->strs[j], kv->str_lens[j]);
                    pos += 8 + kv->str_lens[j];
                }
            } else {
                size_t n = kv->n * gguf_type_size(kv->arr_type);
                w_bytes(f, kv->data, n);
                pos += n;
            }
        } else {
            w_bytes(f, kv->data, gguf_type_size(kv->type));
            pos += gguf_type_size(kv->type);
        }
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        uint64_t nl = strlen(t->name);
        w_str(f, t->name, nl);
        w_u32(f, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) w_u64(f, (uint64_t)t->ne[d]);
        w_u32(f, t->file_type);
        w_u64(f, off);
        pos += 8 + nl + 4 + 8 * t->n_dims + 4 + 8;
        off = (uint64_t)gguf_align_up((int64_t)(off + t->nbytes), align);
    }
    w_pad(f, &pos, align);
    void *buf = NULL;
    size_t buf_cap = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        const void *src = t->data;
        if (!src) {
            if (!fill) {
                free(buf);
                bn_atomic_abort(&af);
                return bn_err(err, errlen, "gguf: tensor '%s' has no data", t->name);
            }
            if (t->nbytes > buf_cap) {
                free(buf);
                buf = xmalloc(buf_cap = t->nbytes);
            }
            if (fill(ctx, (int)i, buf, t->nbytes, err, errlen) != 0) {
                free(buf);
                bn_atomic_abort(&af);
                return -1;
            }
            src = buf;
        }
        w_bytes(f, src, t->nbytes);
        pos += t->nbytes;
        w_pad(f, &pos, align);
        if (ferror(f)) break;
    }
    free(buf);
    if (ferror(f)) {
        bn_err(err, errlen, "cannot write %s: %s", path, strerror(errno));
        bn_atomic_abort(&af);
        return -1;
    }
    return bn_atomic_commit(&af, err, errlen);
}
