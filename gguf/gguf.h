// gguf/gguf.h — a small GGUF v3 library: read (gguf/read.c: mmap, zero-copy tensor views, every field validated
// against the file size and overflow) and write (gguf/write.c: atomic, temp file + fsync + rename).
//
// The format (docs/formats.md §1 has every detail), all little-endian:
//   header        "GGUF" magic, u32 version (3; 2 is read too), u64 tensor_count, u64 kv_count
//   kv_count KVs  string key, u32 value type (enum gguf_type), value: a scalar, a string, or an array
//                 (u32 element type, u64 count, the elements; arrays of arrays are refused)
//   tensor infos  string name (1..63 bytes), u32 n_dims (1..4), u64 ne[n_dims], u32 type id, u64 offset
//                 (relative to the data section, a multiple of the alignment)
//   padding       zeros up to a multiple of the alignment (general.alignment, a u32 power of two; default 32)
//   data          each tensor's bytes at its offset, padded to the alignment
// A string is a u64 byte count and that many bytes (no NUL). Tensor type ids are quant/quant.h's bn_type (id 42
// resolved to BN_Q2_0 g64 or BN_PQ2_0 g128 by its byte span, docs/formats.md §3.9).
#ifndef BONSAI_GGUF_H
#define BONSAI_GGUF_H
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>

// The value types of a KV (bytes of one value).
enum gguf_type {
    GGUF_TYPE_UINT8 = 0,   // 1
    GGUF_TYPE_INT8 = 1,    // 1
    GGUF_TYPE_UINT16 = 2,  // 2
    GGUF_TYPE_INT16 = 3,   // 2
    GGUF_TYPE_UINT32 = 4,  // 4
    GGUF_TYPE_INT32 = 5,   // 4
    GGUF_TYPE_FLOAT32 = 6, // 4
    GGUF_TYPE_BOOL = 7,    // 1: only 0 or 1
    GGUF_TYPE_STRING = 8,  // a string (u64 length + bytes)
    GGUF_TYPE_ARRAY = 9,   // u32 element type, u64 count, the elements
    GGUF_TYPE_UINT64 = 10, // 8
    GGUF_TYPE_INT64 = 11,  // 8
    GGUF_TYPE_FLOAT64 = 12, // 8
    GGUF_TYPE_COUNT = 13,
};

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 63

// One key/value. Scalars and numeric arrays: `data` holds n packed little-endian values of
// the element type. STRING: `str` (NUL-terminated copy; `str_len` bytes, may contain NUL).
// Array of strings: `strs[i]` / `str_lens[i]`.
typedef struct {
    char *key;
    uint32_t type;      // enum gguf_type
    uint32_t arr_type;  // element type when type == ARRAY
    uint64_t n;         // element count (1 for scalars)
    void *data;
    char *str;
    uint64_t str_len;
    char **strs;
    uint64_t *str_lens;
} gguf_kv;

// One tensor of an open file.
typedef struct {
    char *name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; // unused dims are 1
    int type;                  // bn_type (resolved)
    uint32_t file_type;        // type id as stored in the file
    uint64_t offset;           // relative to the data section
    size_t nbytes;
    const void *data;          // view into the mapped file
} gguf_tensor;

// An open file: its KVs and tensors in file order.
typedef struct {
    char *path;
    uint32_t version;
    size_t n_kv;
    gguf_kv *kv;
    size_t n_tensors;
    gguf_tensor *tensors;
    uint32_t alignment;
    uint64_t data_offset; // absolute offset of the data section
    const uint8_t *base;  // whole file
    size_t size;
    bool mapped;          // base is an mmap (else borrowed memory)
    void *realigned;      // gguf_align_tensors' copies (one allocation), or NULL
} gguf_file;

// ---- reading (gguf/read.c) ----------------------------------------------------------------
// gguf_open: mmaps and validates path; returns NULL with one line in err on any problem.
gguf_file *gguf_open(const char *path, char *err, size_t errlen);
// gguf_open_mem: parses a buffer the caller keeps alive (fuzzing, tests); NULL on error.
gguf_file *gguf_open_mem(const void *buf, size_t size, char *err, size_t errlen);
// gguf_close: unmaps and frees everything (NULL is fine).
void gguf_close(gguf_file *f);
// gguf_align_tensors: points every tensor whose data is not aligned to its element size (4 bytes for F32/I32, 2 for
// the fp16-scaled and 16-bit types; an alignment of 1 or 2 allows it) at an aligned copy owned by f, so that
// kernels may load it as floats; the others stay views of the mapping. Returns the number of tensors copied.
size_t gguf_align_tensors(gguf_file *f);

// gguf_find_key: index of key or -1.
int gguf_find_key(const gguf_file *f, const char *key);
// gguf_get_int: integer KV of any integer type (or bool) into *out; false if absent/not integer.
bool gguf_get_int(const gguf_file *f, const char *key, int64_t *out);
// gguf_get_u32: like gguf_get_int but false also if the value does not fit a u32.
bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
// gguf_get_f32: FLOAT32/FLOAT64 (or integer) KV as float; false if absent.
bool gguf_get_f32(const gguf_file *f, const char *key, float *out);
// gguf_get_bool: BOOL KV; false if absent or not bool.
bool gguf_get_bool(const gguf_file *f, const char *key, bool *out);
// gguf_get_str: STRING KV (NUL-terminated) or NULL.
const char *gguf_get_str(const gguf_file *f, const char *key);
// gguf_get_arr: ARRAY KV; returns the kv (for arr_type, n, data/strs) or NULL.
const gguf_kv *gguf_get_arr(const gguf_file *f, const char *key);
// gguf_find_tensor: tensor by name or NULL.
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);
// gguf_tensor_nelements: product of ne.
int64_t gguf_tensor_nelements(const gguf_tensor *t);
// gguf_tensor_nrows: ne[1]·ne[2]·ne[3], or 0 for an empty tensor (ne[0] == 0, whose other dimensions may multiply
// past int64: the reader checks only the product of all four).
int64_t gguf_tensor_nrows(const gguf_tensor *t);
// gguf_type_name: "u32", "string", ... for a gguf_type.
const char *gguf_type_name(uint32_t type);
// gguf_type_size: bytes of one scalar of that type (0 for STRING/ARRAY/unknown).
size_t gguf_type_size(uint32_t type);

// ---- writing (gguf/write.c) ----------------------------------------------------------------
// A file being built: KVs and tensor infos, written by gguf_writer_write.
typedef struct gguf_writer gguf_writer;

// gguf_writer_new: empty writer (KVs in insertion order, tensors in insertion order).
gguf_writer *gguf_writer_new(void);
// gguf_writer_free: frees the writer and its copies of the KVs (NULL is fine); borrowed tensor data stays the caller's.
void gguf_writer_free(gguf_writer *w);
// gguf_set_u8 .. gguf_set_str: a scalar or string KV (the string copied). Setting an existing key removes it and
// appends it at the end (llama.cpp semantics); so do gguf_set_arr, gguf_set_arr_str and gguf_set_kv.
void gguf_set_u8(gguf_writer *w, const char *key, uint8_t v);
void gguf_set_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_set_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_set_u64(gguf_writer *w, const char *key, uint64_t v);
void gguf_set_f32(gguf_writer *w, const char *key, float v);
void gguf_set_bool(gguf_writer *w, const char *key, bool v);
void gguf_set_str(gguf_writer *w, const char *key, const char *v);
// gguf_set_arr: numeric array of arr_type with n packed elements copied from data.
void gguf_set_arr(gguf_writer *w, const char *key, uint32_t arr_type, uint64_t n, const void *data);
// gguf_set_arr_str: array of n NUL-terminated strings.
void gguf_set_arr_str(gguf_writer *w, const char *key, uint64_t n, const char *const *strs);
// gguf_set_kv: deep copy of a KV read from a file (any type).
void gguf_set_kv(gguf_writer *w, const gguf_kv *kv);
// gguf_remove_key: deletes key if present.
void gguf_remove_key(gguf_writer *w, const char *key);
// gguf_writer_add_tensor: appends a tensor. data (nbytes = row size × rows) is borrowed until
// gguf_writer_write; pass NULL to have the fill callback produce it. file_type is the id to
// store (usually == type; 42 for a legacy-layout BN_PQ2_0 tensor). Returns its index, or -1
// with err filled (bad shape, duplicate or too long name).
int gguf_writer_add_tensor(gguf_writer *w, const char *name, int n_dims, const int64_t *ne,
                           int type, uint32_t file_type, const void *data, char *err, size_t errlen);
// gguf_fill_fn: writes tensor idx's nbytes into dst; returns 0 or -1 with err filled.
typedef int (*gguf_fill_fn)(void *ctx, int idx, void *dst, size_t nbytes, char *err, size_t errlen);
// gguf_writer_write: writes the file atomically (alignment = general.alignment if set, else 32).
// Returns 0, or -1 with err filled and no file left under path.
int gguf_writer_write(gguf_writer *w, const char *path, gguf_fill_fn fill, void *ctx, char *err, size_t errlen);
// gguf_writer_n_tensors / gguf_writer_tensor_nbytes: introspection for progress reporting.
int gguf_writer_n_tensors(const gguf_writer *w);
size_t gguf_writer_tensor_nbytes(const gguf_writer *w, int idx);

#endif
