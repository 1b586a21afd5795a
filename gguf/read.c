// gguf/read.c — the GGUF v3 reader (gguf.h, docs/formats.md §1): the header, KVs and tensor infos parsed from a
// mapping or a caller's buffer, tensors as zero-copy views, the lookups. Every count, length, offset, dimension and
// type read from a file is checked against the remaining bytes and for overflow before use; errors name the field and
// its file offset.
#include "gguf/gguf_impl.h"
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
        off = (uint64_t)gguf_align_up((int64_t)end, f->alignment);
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
        bool fit64 = s64 >= 0 && (uint64_t)s64 <= span && span <= (uint64_t)gguf_align_up(s64, f->alignment);
        bool fit128 = s128 >= 0 && (uint64_t)s128 <= span && span <= (uint64_t)gguf_align_up(s128, f->alignment);
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

// parse_header: the magic, version and the two counts (each checked against the bytes left); 0 or -1 (err).
static int parse_header(reader *r, gguf_file *f, uint64_t *n_tensors, uint64_t *n_kv) {
    char *err = r->err;
    size_t errlen = r->errlen;
    char magic[4] = {0};
    if (rd_bytes(r, magic, 4, "magic") != 0) return -1;
    if (memcmp(magic, "GGUF", 4) != 0)
        return bn_err(err, errlen, "gguf: invalid magic characters at offset 0 (not a GGUF file)");
    if (rd_u32(r, &f->version, "version") != 0) return -1;
    if (f->version == 0 || (f->version & 0xFFFF) == 0)
        return bn_err(err, errlen, "gguf: bad GGUF version %u at offset 4 (zero or wrong endianness)", f->version);
    if (f->version == 1) return bn_err(err, errlen, "gguf: GGUFv1 is no longer supported");
    if (f->version > 3) return bn_err(err, errlen, "gguf: unsupported GGUF version %u at offset 4", f->version);
    if (rd_u64(r, n_tensors, "tensor_count") != 0 || rd_u64(r, n_kv, "kv_count") != 0) return -1;
    // each KV needs >= 8+4 bytes, each tensor info >= 8+4+8+4+8
    if (*n_kv > (r->size - r->off) / 12)
        return bn_err(err, errlen, "gguf: kv_count %llu at offset 16 exceeds the file", (unsigned long long)*n_kv);
    if (*n_tensors > (r->size - r->off) / 32)
        return bn_err(err, errlen, "gguf: tensor_count %llu at offset 8 exceeds the file",
                      (unsigned long long)*n_tensors);
    return 0;
}

// parse_kv: KV i (key, value, general.alignment) into f->kv[i]; its key's position into *name. 0 or -1 (err).
static int parse_kv(reader *r, gguf_file *f, uint64_t i, named *name) {
    gguf_kv *kv = &f->kv[i];
    size_t at = r->off;
    uint64_t klen = 0;
    if (rd_string(r, &kv->key, &klen, "kv key") != 0) return -1;
    f->n_kv = i + 1;
    if (klen == 0 || strlen(kv->key) != klen)
        return bn_err(r->err, r->errlen, "gguf: kv %llu at offset %zu: empty key or key with NUL",
                      (unsigned long long)i, at);
    *name = (named){kv->key, (size_t)i, at};
    if (rd_value(r, kv, kv->key) != 0) return -1;
    if (strcmp(kv->key, "general.alignment") == 0) {
        uint32_t a = kv->type == GGUF_TYPE_UINT32 ? *(uint32_t *)kv->data : 0;
        if (kv->type != GGUF_TYPE_UINT32 || a == 0 || (a & (a - 1)) != 0)
            return bn_err(r->err, r->errlen,
                          "gguf: general.alignment at offset %zu must be a non-zero power-of-two u32", at);
        f->alignment = a;
    }
    return 0;
}

// parse_kvs: the n_kv KVs into f->kv (distinct keys); 0 or -1 (err).
static int parse_kvs(reader *r, gguf_file *f, uint64_t n_kv) {
    f->kv = xcalloc(n_kv ? n_kv : 1, sizeof(gguf_kv));
    named *names = xmalloc(sizeof(named) * (n_kv ? n_kv : 1)); // (key, index, offset) for the duplicate check
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    int rc = 0;
    for (uint64_t i = 0; i < n_kv && rc == 0; i++) rc = parse_kv(r, f, i, &names[i]);
    const named *dup = rc == 0 ? find_duplicate(names, f->n_kv) : NULL;
    if (dup) rc = bn_err(r->err, r->errlen, "gguf: duplicate key '%s' at offset %zu", dup->name, dup->at);
    free(names);
    return rc;
}

// parse_tensor_info: tensor info i (name, dimensions, type, offset) into f->tensors[i]; its name's position into *name.
// 0 or -1 (err).
static int parse_tensor_info(reader *r, gguf_file *f, uint64_t i, named *name) {
    char *err = r->err;
    size_t errlen = r->errlen;
    gguf_tensor *t = &f->tensors[i];
    size_t at = r->off;
    uint64_t nlen = 0;
    if (rd_string(r, &t->name, &nlen, "tensor name") != 0) return -1;
    f->n_tensors = i + 1;
    if (nlen == 0 || nlen > GGUF_MAX_NAME || strlen(t->name) != nlen)
        return bn_err(err, errlen, "gguf: tensor %llu at offset %zu: name length %llu is invalid (1..%d)",
                      (unsigned long long)i, at, (unsigned long long)nlen, GGUF_MAX_NAME);
    *name = (named){t->name, (size_t)i, at};
    at = r->off;
    if (rd_u32(r, &t->n_dims, "n_dims") != 0) return -1;
    if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS)
        return bn_err(err, errlen, "gguf: tensor '%s' at offset %zu: n_dims %u not in 1..4", t->name, at, t->n_dims);
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    int64_t nel = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        at = r->off;
        uint64_t v = 0;
        if (rd_u64(r, &v, "tensor dimension") != 0) return -1;
        if (v > INT64_MAX || (v != 0 && (uint64_t)nel > (uint64_t)INT64_MAX / v))
            return bn_err(err, errlen, "gguf: tensor '%s' at offset %zu: dimension %u = %llu overflows", t->name, at, d,
                          (unsigned long long)v);
        t->ne[d] = (int64_t)v;
        nel *= (int64_t)v;
    }
    at = r->off;
    if (rd_u32(r, &t->file_type, "tensor type") != 0) return -1;
    t->type = (int)t->file_type;
    int blck = bn_type_blck(t->type);
    if (t->file_type >= BN_TYPE_MAX || blck == 0)
        return bn_err(err, errlen, "gguf: tensor '%s' at offset %zu: unknown or unsupported type id %u", t->name, at,
                      t->file_type);
    if (t->ne[0] % blck != 0)
        return bn_err(err, errlen, "gguf: tensor '%s': ne[0] = %lld is not a multiple of the %s block size %d", t->name,
                      (long long)t->ne[0], bn_type_name(t->type), blck);
    at = r->off;
    if (rd_u64(r, &t->offset, "tensor offset") != 0) return -1;
    if (t->offset % f->alignment != 0)
        return bn_err(err, errlen,
                      "gguf: tensor '%s' at offset %zu: data offset %llu is not a multiple of the alignment %u",
                      t->name, at, (unsigned long long)t->offset, f->alignment);
    return 0;
}

// parse_tensor_infos: the n_tensors tensor infos into f->tensors (distinct names); 0 or -1 (err).
static int parse_tensor_infos(reader *r, gguf_file *f, uint64_t n_tensors) {
    named *names = xmalloc(sizeof(named) * (n_tensors ? n_tensors : 1));
    f->tensors = xcalloc(n_tensors ? n_tensors : 1, sizeof(gguf_tensor));
    int rc = 0;
    for (uint64_t i = 0; i < n_tensors && rc == 0; i++) rc = parse_tensor_info(r, f, i, &names[i]);
    const named *dup = rc == 0 ? find_duplicate(names, f->n_tensors) : NULL;
    if (dup) rc = bn_err(r->err, r->errlen, "gguf: duplicate tensor name '%s' at offset %zu", dup->name, dup->at);
    free(names);
    return rc;
}

// place_data: the data section after the infos (which end at byte end) and every tensor's offset inside the file;
// 0 or -1 (err).
static int place_data(gguf_file *f, size_t end, char *err, size_t errlen) {
    f->data_offset = f->n_tensors ? (uint64_t)gguf_align_up((int64_t)end, f->alignment) : end;
    if (f->n_tensors && f->data_offset > f->size)
        return bn_err(err, errlen, "gguf: data section at offset %llu starts past the end of the file (%zu bytes)",
                      (unsigned long long)f->data_offset, f->size);
    for (size_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].offset > f->size - f->data_offset)
            return bn_err(err, errlen, "gguf: tensor '%s': data offset %llu is past the end of the file",
                          f->tensors[i].name, (unsigned long long)f->tensors[i].offset);
    return 0;
}

// size_tensors: every tensor's byte size (no overflow), inside the file, pointed at its data, and no two overlapping;
// 0 or -1 (err).
static int size_tensors(gguf_file *f, char *err, size_t errlen) {
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
            return bn_err(err, errlen, "gguf: tensor '%s': byte size overflows", t->name);
        }
        t->nbytes = rs * (size_t)rows;
        if (t->nbytes > f->size - f->data_offset - t->offset) {
            free(order);
            return bn_err(err, errlen, "gguf: tensor '%s': %zu bytes at data offset %llu run past the end of the file "
                          "(%zu bytes)", t->name, t->nbytes, (unsigned long long)t->offset, f->size);
        }
        t->data = f->base + f->data_offset + t->offset;
        order[i] = t;
    }
    qsort(order, f->n_tensors, sizeof *order, cmp_by_offset);
    int rc = 0;
    for (size_t i = 1; i < f->n_tensors && rc == 0; i++)
        if (order[i - 1]->offset + order[i - 1]->nbytes > order[i]->offset && order[i - 1]->nbytes > 0)
            rc = bn_err(err, errlen, "gguf: tensors '%s' and '%s' overlap (data offsets %llu + %zu > %llu)",
                        order[i - 1]->name, order[i]->name, (unsigned long long)order[i - 1]->offset,
                        order[i - 1]->nbytes, (unsigned long long)order[i]->offset);
    free(order);
    return rc;
}

// parse: f (base and size set) parsed and validated in place; returns f, or NULL (f closed) with err.
static gguf_file *parse(gguf_file *f, char *err, size_t errlen) {
    reader r = {f->base, f->size, 0, err, errlen};
    uint64_t n_tensors = 0, n_kv = 0;
    if (parse_header(&r, f, &n_tensors, &n_kv) != 0 || parse_kvs(&r, f, n_kv) != 0 ||
        parse_tensor_infos(&r, f, n_tensors) != 0 || place_data(f, r.off, err, errlen) != 0 ||
        resolve_q2_0(f, err, errlen) != 0 || size_tensors(f, err, errlen) != 0) {
        gguf_close(f);
        return NULL;
    }
    return f;
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
    for (size_t i = 0; i < f->n_kv; i++) gguf_kv_clear(&f->kv[i]);
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
