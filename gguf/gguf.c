// gguf/gguf.c — GGUF v3 reader/writer. See gguf.h and docs/formats.md §1.
// Every count, length, offset, dimension and type read from a file is checked against the
// remaining bytes and for overflow before use; errors name the field and its file offset.
#include "gguf/gguf.h"
#include "base/util.h"
#include "quant/quant.h"
#include <string.h>
#include <stdlib.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#define GGUF_MAX_STRING (1ull << 30)
#define GGUF_MAX_ARRAY (1ull << 30)

static const size_t type_sizes[GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
static const char *type_names[GGUF_TYPE_COUNT] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                                  "bool", "string", "array", "u64", "i64", "f64"};

size_t gguf_type_size(uint32_t type) { return type < GGUF_TYPE_COUNT ? type_sizes[type] : 0; }
const char *gguf_type_name(uint32_t type) { return type < GGUF_TYPE_COUNT ? type_names[type] : "?"; }

// ---- reader -------------------------------------------------------------------------------

typedef struct {
    const uint8_t *p;
    size_t size, off;
    char *err;
    size_t errlen;
} reader;

static int rd_bytes(reader *r, void *dst, size_t n, const char *what) {
    if (n > r->size - r->off)
        return bn_err(r->err, r->errlen, "gguf: truncated file: %s at offset %zu needs %zu bytes, %zu left",
                      what, r->off, n, r->size - r->off);
    memcpy(dst, r->p + r->off, n);
    r->off += n;
    return 0;
}

static int rd_u32(reader *r, uint32_t *v, const char *what) { return rd_bytes(r, v, 4, what); }
static int rd_u64(reader *r, uint64_t *v, const char *what) { return rd_bytes(r, v, 8, what); }

// rd_string: reads a GGUF string into a fresh NUL-terminated buffer.
static int rd_string(reader *r, char **out, uint64_t *len_out, const char *what) {
    size_t at = r->off;
    uint64_t len = 0;
    if (rd_u64(r, &len, what) != 0) return -1;
    if (len > GGUF_MAX_STRING || len > r->size - r->off)
        return bn_err(r->err, r->errlen, "gguf: %s at offset %zu: string length %llu exceeds the file",
                      what, at, (unsigned long long)len);
    char *s = xmalloc(len + 1);
    memcpy(s, r->p + r->off, len);
    s[len] = 0;
    r->off += len;
    *out = s;
    if (len_out) *len_out = len;
    return 0;
}

static void kv_free(gguf_kv *kv) {
    free(kv->key);
    free(kv->data);
    free(kv->str);
    if (kv->strs)
        for (uint64_t i = 0; i < kv->n; i++) free(kv->strs[i]);
    free(kv->strs);
    free(kv->str_lens);
    memset(kv, 0, sizeof *kv);
}

static int rd_value(reader *r, gguf_kv *kv, const char *key) {
    size_t at = r->off;
    if (rd_u32(r, &kv->type, "kv type") != 0) return -1;
    if (kv->type >= GGUF_TYPE_COUNT)
        return bn_err(r->err, r->errlen, "gguf: key '%s' at offset %zu: invalid value type %u", key, at, kv->type);
    if (kv->type == GGUF_TYPE_STRING) {
        kv->n = 1;
        return rd_string(r, &kv->str, &kv->str_len, "string value");
    }
    if (kv->type != GGUF_TYPE_ARRAY) {
        kv->n = 1;
        kv->data = xmalloc(8);
        if (rd_bytes(r, kv->data, type_sizes[kv->type], "scalar value") != 0) return -1;
        if (kv->type == GGUF_TYPE_BOOL && *(uint8_t *)kv->data > 1)
            return bn_err(r->err, r->errlen, "gguf: key '%s' at offset %zu: bool value %u is not 0 or 1", key,
                          at + 4, *(uint8_t *)kv->data);
        return 0;
    }
    at = r->off;
    if (rd_u32(r, &kv->arr_type, "array element type") != 0) return -1;
    if (kv->arr_type >= GGUF_TYPE_COUNT || kv->arr_type == GGUF_TYPE_ARRAY)
        return bn_err(r->err, r->errlen, "gguf: key '%s' at offset %zu: invalid array element type %u", key, at,
                      kv->arr_type);
    at = r->off;
    if (rd_u64(r, &kv->n, "array count") != 0) return -1;
    if (kv->n > GGUF_MAX_ARRAY)
        return bn_err(r->err, r->errlen, "gguf: key '%s' at offset %zu: array count %llu is too large", key, at,
                      (unsigned long long)kv->n);
    if (kv->arr_type == GGUF_TYPE_STRING) {
        // every string needs at least its 8-byte length
        if (kv->n > (r->size - r->off) / 8)
            return bn_err(r->err, r->errlen, "gguf: key '%s' at offset %zu: %llu strings exceed the file", key, at,
                          (unsigned long long)kv->n);
        kv->strs = xcalloc(kv->n ? kv->n : 1, sizeof(char *));
        kv->str_lens = xcalloc(kv->n ? kv->n : 1, sizeof(uint64_t));
        for (uint64_t i = 0; i < kv->n; i++)
            if (rd_string(r, &kv->strs[i], &kv->str_lens[i], "array string") != 0) return -1;
        return 0;
    }
    size_t es = type_sizes[kv->arr_type];
    if (kv->n > (r->size - r->off) / es)
        return bn_err(r->err, r->errlen, "gguf: key '%s' at offset %zu: array of %llu x %zu bytes exceeds the file",
                      key, at, (unsigned long long)kv->n, es);
    kv->data = xmalloc(kv->n * es);
    if (kv->arr_type == GGUF_TYPE_BOOL) {
        for (uint64_t i = 0; i < kv->n; i++)
            if (r->p[r->off + i] > 1)
                return bn_err(r->err, r->errlen, "gguf: key '%s': bool array element %llu is not 0 or 1", key,
                              (unsigned long long)i);
    }
    return rd_bytes(r, kv->data, kv->n * es, "array data");
}

static int64_t align_up(int64_t x, int64_t a) { return x + (a - x % a) % a; }

// chain_fits: true if, with every type-42 tensor read as group g (64 or 128), the tensors lie
// back to back in file order (ggml's ordering rule) and the file ends where the data ends.
static bool chain_fits(const gguf_file *f, int g) {
    uint64_t off = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        int type = t->file_type == BN_Q2_0 ? (g == 128 ? BN_PQ2_0 : BN_Q2_0) : t->type;
        if (t->ne[0] % bn_type_blck(type) != 0 || t->offset != off) return false;
        int64_t rows = gguf_tensor_nrows(t);
        uint64_t nb = bn_row_size(type, t->ne[0]) * (uint64_t)rows;
        if (nb > f->size) return false;
        uint64_t end = off + nb;
        off = (uint64_t)align_up((int64_t)end, f->alignment);
        if (i + 1 == f->n_tensors) {
            uint64_t avail = f->size - f->data_offset;
            return end <= avail && avail <= off;
        }
    }
    return true;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

// resolve_q2_0: decides g64 vs g128 for all type-42 tensors (docs/formats.md §3.9): the layout under
// which the tensors chain back to back and fill the file; if both or neither chain, each
// tensor's span to the next offset decides. Returns 0 or -1 (err filled).
static int resolve_q2_0(gguf_file *f, char *err, size_t errlen) {
    size_t n42 = 0;
    for (size_t i = 0; i < f->n_tensors; i++) n42 += f->tensors[i].file_type == BN_Q2_0;
    if (!n42) return 0;
    bool c64 = chain_fits(f, 64), c128 = chain_fits(f, 128);
    int layout = c64 != c128 ? (c128 ? 128 : 64) : 0;
    // sorted offsets: the next tensor start after t is found by binary search (no O(n^2) on huge counts)
    uint64_t *offs = xmalloc(sizeof(uint64_t) * f->n_tensors);
    for (size_t i = 0; i < f->n_tensors; i++) offs[i] = f->tensors[i].offset;
    qsort(offs, f->n_tensors, sizeof *offs, cmp_u64);
    for (size_t i = 0; i < f->n_tensors && !layout; i++) {
        gguf_tensor *t = &f->tensors[i];
        if (t->file_type != BN_Q2_0) continue;
        size_t lo = 0, hi = f->n_tensors; // first offs[k] > t->offset
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (offs[mid] > t->offset) hi = mid;
            else lo = mid + 1;
        }
        uint64_t next = lo < f->n_tensors ? offs[lo] : f->size - f->data_offset;
        uint64_t span = next - t->offset;
        int64_t nel = gguf_tensor_nelements(t);
        int64_t s64 = t->ne[0] % 64 == 0 ? nel / 64 * 18 : -1;
        int64_t s128 = t->ne[0] % 128 == 0 ? nel / 128 * 34 : -1;
        bool fit64 = s64 >= 0 && (uint64_t)s64 <= span && span <= (uint64_t)align_up(s64, f->alignment);
        bool fit128 = s128 >= 0 && (uint64_t)s128 <= span && span <= (uint64_t)align_up(s128, f->alignment);
        if (!fit64 && !fit128) {
            free(offs);
            return bn_err(err, errlen, "gguf: tensor '%s': type 42 (q2_0) span of %llu bytes matches neither the "
                          "g64 (%lld B) nor the g128 (%lld B) layout", t->name, (unsigned long long)span,
                          (long long)s64, (long long)s128);
        }
        if (fit64 != fit128) layout = fit128 ? 128 : 64;
    }
    free(offs);
    if (!layout) layout = 64; // indistinguishable (tiny tensors): mainline reading
    for (size_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].file_type == BN_Q2_0) f->tensors[i].type = layout == 128 ? BN_PQ2_0 : BN_Q2_0;
    return 0;
}

// A name with its position, for duplicate detection by sorting (O(n log n) even for huge counts).
typedef struct {
    const char *name;
    size_t idx, at;
} named;

static int cmp_named(const void *a, const void *b) {
    const named *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->idx < y->idx ? -1 : x->idx > y->idx);
}

// find_duplicate: the entry (second occurrence) of a name that appears twice, or NULL. Sorts v.
static const named *find_duplicate(named *v, size_t n) {
    qsort(v, n, sizeof *v, cmp_named);
    const named *dup = NULL;
    for (size_t i = 1; i < n; i++)
        if (strcmp(v[i - 1].name, v[i].name) == 0 && (!dup || v[i].idx < dup->idx)) dup = &v[i];
    return dup;
}

static int cmp_by_offset(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static gguf_file *parse(gguf_file *f, char *err, size_t errlen) {
    reader r = {f->base, f->size, 0, err, errlen};
    named *names = NULL; // (key or tensor name, index, file offset) for the duplicate checks
    char magic[4] = {0};
    if (rd_bytes(&r, magic, 4, "magic") != 0) goto fail;
    if (memcmp(magic, "GGUF", 4) != 0) {
        bn_err(err, errlen, "gguf: invalid magic characters at offset 0 (not a GGUF file)");
        goto fail;
    }
    if (rd_u32(&r, &f->version, "version") != 0) goto fail;
    if (f->version == 0 || (f->version & 0xFFFF) == 0) {
        bn_err(err, errlen, "gguf: bad GGUF version %u at offset 4 (zero or wrong endianness)", f->version);
        goto fail;
    }
    if (f->version == 1) {
        bn_err(err, errlen, "gguf: GGUFv1 is no longer supported");
        goto fail;
    }
    if (f->version > 3) {
        bn_err(err, errlen, "gguf: unsupported GGUF version %u at offset 4", f->version);
        goto fail;
    }
    uint64_t n_tensors = 0, n_kv = 0;
    if (rd_u64(&r, &n_tensors, "tensor_count") != 0 || rd_u64(&r, &n_kv, "kv_count") != 0) goto fail;
    // each KV needs >= 8+4 bytes, each tensor info >= 8+4+8+4+8
    if (n_kv > (r.size - r.off) / 12) {
        bn_err(err, errlen, "gguf: kv_count %llu at offset 16 exceeds the file", (unsigned long long)n_kv);
        goto fail;
    }
    if (n_tensors > (r.size - r.off) / 32) {
        bn_err(err, errlen, "gguf: tensor_count %llu at offset 8 exceeds the file", (unsigned long long)n_tensors);
        goto fail;
    }
    f->kv = xcalloc(n_kv ? n_kv : 1, sizeof(gguf_kv));
    names = xmalloc(sizeof(named) * (n_kv ? n_kv : 1));
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        size_t at = r.off;
        uint64_t klen;
        if (rd_string(&r, &kv->key, &klen, "kv key") != 0) goto fail;
        f->n_kv = i + 1;
        if (klen == 0 || strlen(kv->key) != klen) {
            bn_err(err, errlen, "gguf: kv %llu at offset %zu: empty key or key with NUL", (unsigned long long)i, at);
            goto fail;
        }
        names[i] = (named){kv->key, (size_t)i, at};
        if (rd_value(&r, kv, kv->key) != 0) goto fail;
        if (strcmp(kv->key, "general.alignment") == 0) {
            uint32_t a = kv->type == GGUF_TYPE_UINT32 ? *(uint32_t *)kv->data : 0;
            if (kv->type != GGUF_TYPE_UINT32 || a == 0 || (a & (a - 1)) != 0) {
                bn_err(err, errlen, "gguf: general.alignment at offset %zu must be a non-zero power-of-two u32", at);
                goto fail;
            }
            f->alignment = a;
        }
    }
    const named *dup = find_duplicate(names, f->n_kv);
    if (dup) {
        bn_err(err, errlen, "gguf: duplicate key '%s' at offset %zu", dup->name, dup->at);
        goto fail;
    }
    free(names);
    names = xmalloc(sizeof(named) * (n_tensors ? n_tensors : 1));
    f->tensors = xcalloc(n_tensors ? n_tensors : 1, sizeof(gguf_tensor));
    for (uint64_t i = 0; i < n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        size_t at = r.off;
        uint64_t nlen;
        if (rd_string(&r, &t->name, &nlen, "tensor name") != 0) goto fail;
        f->n_tensors = i + 1;
        if (nlen == 0 || nlen > GGUF_MAX_NAME || strlen(t->name) != nlen) {
            bn_err(err, errlen, "gguf: tensor %llu at offset %zu: name length %llu is invalid (1..%d)",
                   (unsigned long long)i, at, (unsigned long long)nlen, GGUF_MAX_NAME);
            goto fail;
        }
        names[i] = (named){t->name, (size_t)i, at};
        at = r.off;
        if (rd_u32(&r, &t->n_dims, "n_dims") != 0) goto fail;
        if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS) {
            bn_err(err, errlen, "gguf: tensor '%s' at offset %zu: n_dims %u not in 1..4", t->name, at, t->n_dims);
            goto fail;
        }
        for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        int64_t nel = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            at = r.off;
            uint64_t v = 0;
            if (rd_u64(&r, &v, "tensor dimension") != 0) goto fail;
            if (v > INT64_MAX || (v != 0 && (uint64_t)nel > (uint64_t)INT64_MAX / v)) {
                bn_err(err, errlen, "gguf: tensor '%s' at offset %zu: dimension %u = %llu overflows", t->name, at, d,
                       (unsigned long long)v);
                goto fail;
            }
            t->ne[d] = (int64_t)v;
            nel *= (int64_t)v;
        }
        at = r.off;
        if (rd_u32(&r, &t->file_type, "tensor type") != 0) goto fail;
        t->type = (int)t->file_type;
        int blck = bn_type_blck(t->type);
        if (t->file_type >= BN_TYPE_MAX || blck == 0) {
            bn_err(err, errlen, "gguf: tensor '%s' at offset %zu: unknown or unsupported type id %u", t->name, at,
                   t->file_type);
            goto fail;
        }
        if (t->ne[0] % blck != 0) {
            bn_err(err, errlen, "gguf: tensor '%s': ne[0] = %lld is not a multiple of the %s block size %d", t->name,
                   (long long)t->ne[0], bn_type_name(t->type), blck);
            goto fail;
        }
        at = r.off;
        if (rd_u64(&r, &t->offset, "tensor offset") != 0) goto fail;
        if (t->offset % f->alignment != 0) {
            bn_err(err, errlen, "gguf: tensor '%s' at offset %zu: data offset %llu is not a multiple of the alignment %u",
                   t->name, at, (unsigned long long)t->offset, f->alignment);
            goto fail;
        }
    }
    dup = find_duplicate(names, f->n_tensors);
    if (dup) {
        bn_err(err, errlen, "gguf: duplicate tensor name '%s' at offset %zu", dup->name, dup->at);
        goto fail;
    }
    free(names);
    names = NULL;
    f->data_offset = n_tensors ? (uint64_t)align_up((int64_t)r.off, f->alignment) : r.off;
    if (n_tensors && f->data_offset > f->size) {
        bn_err(err, errlen, "gguf: data section at offset %llu starts past the end of the file (%zu bytes)",
               (unsigned long long)f->data_offset, f->size);
        goto fail;
    }
    for (size_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].offset > f->size - f->data_offset) {
            bn_err(err, errlen, "gguf: tensor '%s': data offset %llu is past the end of the file", f->tensors[i].name,
                   (unsigned long long)f->tensors[i].offset);
            goto fail;
        }
    if (resolve_q2_0(f, err, errlen) != 0) goto fail;
    // sizes, bounds and overlaps
    gguf_tensor **order = xmalloc(sizeof(gguf_tensor *) * (f->n_tensors ? f->n_tensors : 1));
    for (size_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        int64_t rows = gguf_tensor_nrows(t); // an empty tensor (ggml accepts it too) has no rows
        // the row size itself can overflow (e.g. F32 with ne[0] = 2^62 would wrap to 0 bytes)
        uint64_t blocks = (uint64_t)(t->ne[0] / bn_type_blck(t->type));
        bool row_overflows = blocks > (SIZE_MAX / 2) / (uint64_t)bn_type_size(t->type);
        size_t rs = row_overflows ? 0 : bn_row_size(t->type, t->ne[0]);
        if (row_overflows || (rows != 0 && rs > (SIZE_MAX / 2) / (size_t)rows)) {
            free(order);
            bn_err(err, errlen, "gguf: tensor '%s': byte size overflows", t->name);
            goto fail;
        }
        t->nbytes = rs * (size_t)rows;
        if (t->nbytes > f->size - f->data_offset - t->offset) {
            free(order);
            bn_err(err, errlen, "gguf: tensor '%s': %zu bytes at data offset %llu run past the end of the file "
                   "(%zu bytes)", t->name, t->nbytes, (unsigned long long)t->offset, f->size);
            goto fail;
        }
        t->data = f->base + f->data_offset + t->offset;
        order[i] = t;
    }
    qsort(order, f->n_tensors, sizeof *order, cmp_by_offset);
    for (size_t i = 1; i < f->n_tensors; i++)
        if (order[i - 1]->offset + order[i - 1]->nbytes > order[i]->offset && order[i - 1]->nbytes > 0) {
            bn_err(err, errlen, "gguf: tensors '%s' and '%s' overlap (data offsets %llu + %zu > %llu)", order[i - 1]->name,
                   order[i]->name, (unsigned long long)order[i - 1]->offset, order[i - 1]->nbytes,
                   (unsigned long long)order[i]->offset);
            free(order);
            goto fail;
        }
    free(order);
    return f;
fail:
    free(names);
    gguf_close(f);
    return NULL;
}

gguf_file *gguf_open_mem(const void *buf, size_t size, char *err, size_t errlen) {
    gguf_file *f = xcalloc(1, sizeof *f);
    f->base = buf;
    f->size = size;
    f->path = xstrdup("<memory>");
    return parse(f, err, errlen);
}

gguf_file *gguf_open(const char *path, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        bn_err(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        bn_err(err, errlen, "%s: not a regular file", path);
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    void *base = NULL;
    if (size > 0) {
        base = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
        if (base == MAP_FAILED) {
            close(fd);
            bn_err(err, errlen, "cannot mmap %s: %s", path, strerror(errno));
            return NULL;
        }
    }
    close(fd);
    gguf_file *f = xcalloc(1, sizeof *f);
    f->base = base;
    f->size = size;
    f->mapped = base != NULL;
    f->path = xstrdup(path);
    char sub[512];
    gguf_file *ok = parse(f, sub, sizeof sub);
    if (!ok) bn_err(err, errlen, "%s: %s", path, sub);
    return ok;
}

// data_align: the alignment a tensor of this type needs for its loads (its float / 16-bit fields)
static size_t data_align(int type) {
    if (type == BN_F32 || type == BN_I32) return 4;
    return bn_type_size(type) % 2 == 0 ? 2 : 1; // fp16 scales, 16-bit elements; I8-like types: none
}

size_t gguf_align_tensors(gguf_file *f) {
    size_t bytes = 0, n = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if ((uintptr_t)t->data % data_align(t->type) != 0) bytes += (t->nbytes + 63) / 64 * 64;
    }
    if (bytes == 0) return 0;
    uint8_t *copies = xmalloc(bytes); // malloc's alignment (16) serves every type
    free(f->realigned);
    f->realigned = copies;
    for (size_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        if ((uintptr_t)t->data % data_align(t->type) == 0) continue;
        memcpy(copies, t->data, t->nbytes);
        t->data = copies;
        copies += (t->nbytes + 63) / 64 * 64;
        n++;
    }
    return n;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    free(f->realigned);
    for (size_t i = 0; i < f->n_kv; i++) kv_free(&f->kv[i]);
    free(f->kv);
    for (size_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    if (f->mapped) munmap((void *)f->base, f->size);
    free(f->path);
    free(f);
}

int gguf_find_key(const gguf_file *f, const char *key) {
    for (size_t i = 0; i < f->n_kv; i++)
        if (strcmp(f->kv[i].key, key) == 0) return (int)i;
    return -1;
}

static bool scalar_int(const gguf_kv *kv, int64_t *out) {
    const void *d = kv->data;
    switch (kv->type) {
    case GGUF_TYPE_UINT8: *out = *(const uint8_t *)d; return true;
    case GGUF_TYPE_INT8: *out = *(const int8_t *)d; return true;
    case GGUF_TYPE_UINT16: *out = *(const uint16_t *)d; return true;
    case GGUF_TYPE_INT16: *out = *(const int16_t *)d; return true;
    case GGUF_TYPE_UINT32: *out = *(const uint32_t *)d; return true;
    case GGUF_TYPE_INT32: *out = *(const int32_t *)d; return true;
    case GGUF_TYPE_UINT64:
        if (*(const uint64_t *)d > INT64_MAX) return false;
        *out = (int64_t)*(const uint64_t *)d;
        return true;
    case GGUF_TYPE_INT64: *out = *(const int64_t *)d; return true;
    case GGUF_TYPE_BOOL: *out = *(const uint8_t *)d; return true;
    default: return false;
    }
}

bool gguf_get_int(const gguf_file *f, const char *key, int64_t *out) {
    int i = gguf_find_key(f, key);
    return i >= 0 && scalar_int(&f->kv[i], out);
}

bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    int64_t v;
    if (!gguf_get_int(f, key, &v) || v < 0 || v > UINT32_MAX) return false;
    *out = (uint32_t)v;
    return true;
}

bool gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    int i = gguf_find_key(f, key);
    if (i < 0) return false;
    const gguf_kv *kv = &f->kv[i];
    if (kv->type == GGUF_TYPE_FLOAT32) *out = *(const float *)kv->data;
    else if (kv->type == GGUF_TYPE_FLOAT64) *out = (float)*(const double *)kv->data;
    else {
        int64_t v;
        if (!scalar_int(kv, &v)) return false;
        *out = (float)v;
    }
    return true;
}

bool gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
    int i = gguf_find_key(f, key);
    if (i < 0 || f->kv[i].type != GGUF_TYPE_BOOL) return false;
    *out = *(const uint8_t *)f->kv[i].data != 0;
    return true;
}

const char *gguf_get_str(const gguf_file *f, const char *key) {
    int i = gguf_find_key(f, key);
    return i >= 0 && f->kv[i].type == GGUF_TYPE_STRING ? f->kv[i].str : NULL;
}

const gguf_kv *gguf_get_arr(const gguf_file *f, const char *key) {
    int i = gguf_find_key(f, key);
    return i >= 0 && f->kv[i].type == GGUF_TYPE_ARRAY ? &f->kv[i] : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    for (size_t i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

int64_t gguf_tensor_nelements(const gguf_tensor *t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }

int64_t gguf_tensor_nrows(const gguf_tensor *t) { return t->ne[0] == 0 ? 0 : t->ne[1] * t->ne[2] * t->ne[3]; }

// ---- writer -------------------------------------------------------------------------------

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
    for (size_t i = 0; i < w->n_kv; i++) kv_free(&w->kv[i]);
    free(w->kv);
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    free(w);
}

void gguf_remove_key(gguf_writer *w, const char *key) {
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0) {
            kv_free(&w->kv[i]);
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
    memcpy(kv->data, v, type_sizes[type]);
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
    kv->data = xmalloc(n * type_sizes[arr_type]);
    memcpy(kv->data, data, n * type_sizes[arr_type]);
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
        size_t es = type_sizes[src->type == GGUF_TYPE_ARRAY ? src->arr_type : src->type];
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
    uint64_t pad = (uint64_t)align_up((int64_t)*pos, align) - *pos;
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
                size_t n = kv->n * type_sizes[kv->arr_type];
                w_bytes(f, kv->data, n);
                pos += n;
            }
        } else {
            w_bytes(f, kv->data, type_sizes[kv->type]);
            pos += type_sizes[kv->type];
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
        off = (uint64_t)align_up((int64_t)(off + t->nbytes), align);
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
