// convert/safetensors.h — Hugging Face safetensors: mmap reader (one file, or a sharded checkpoint
// through model.safetensors.index.json) with every header field validated like GGUF, and an
// atomic writer producing the HF layout (8-byte LE header length, compact JSON header with
// __metadata__ {"format":"pt"}, padded with spaces to a multiple of 8, then the raw data).
// Only F32, F16 and BF16 tensors are accepted (bn_type ids BN_F32 / BN_F16 / BN_BF16).
#ifndef BONSAI_SAFETENSORS_H
#define BONSAI_SAFETENSORS_H
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>

#define BN_ST_MAX_DIMS 4

typedef struct {
    char *name;
    int type;                      // BN_F32 / BN_F16 / BN_BF16
    int n_dims;
    int64_t shape[BN_ST_MAX_DIMS]; // torch order: shape[n_dims-1] is contiguous
    size_t nbytes;
    const void *data;              // view into the mapped shard
    int shard;                     // index into bn_safetensors.shard_paths
} bn_st_tensor;

typedef struct {
    int n_shards;
    char **shard_paths;
    void **maps;        // [n_shards] mmap bases
    size_t *map_sizes;  // [n_shards]
    int n_tensors;
    bn_st_tensor *t;    // shards in sorted file-name order, each in its header order
} bn_safetensors;

// bn_st_open_file: mmaps and validates one .safetensors file; NULL with one line in err.
bn_safetensors *bn_st_open_file(const char *path, char *err, size_t errlen);
// bn_st_open_dir: opens dir/model.safetensors.index.json (all shards) or dir/model.safetensors;
// NULL with err (missing shard, tensor missing from its shard, corrupt header...).
bn_safetensors *bn_st_open_dir(const char *dir, char *err, size_t errlen);
// bn_st_close: unmaps and frees (NULL is fine).
void bn_st_close(bn_safetensors *st);
// bn_st_find: tensor by name or NULL.
const bn_st_tensor *bn_st_find(const bn_safetensors *st, const char *name);
// bn_st_nelements: product of the shape.
int64_t bn_st_nelements(const bn_st_tensor *t);
// bn_st_dtype_name: "F32" / "F16" / "BF16" for a bn_type, NULL for others.
const char *bn_st_dtype_name(int type);
// bn_st_to_f32: converts n elements of type (F32/F16/BF16) at src to floats.
void bn_st_to_f32(int type, const void *src, float *dst, int64_t n);
// bn_st_from_f32: converts n floats to type (F32/F16/BF16, round to nearest even) at dst.
void bn_st_from_f32(int type, const float *src, void *dst, int64_t n);

// ---- writing ------------------------------------------------------------------------------
typedef struct bn_st_writer bn_st_writer;
// bn_st_fill_fn: writes tensor idx's nbytes into dst; returns 0 or -1 with err filled.
typedef int (*bn_st_fill_fn)(void *ctx, int idx, void *dst, size_t nbytes, char *err, size_t errlen);

// bn_st_writer_new: empty writer (tensors written in insertion order); never NULL.
bn_st_writer *bn_st_writer_new(void);
void bn_st_writer_free(bn_st_writer *w);
// bn_st_writer_add: appends a tensor (shape in torch order); data borrowed until write, or NULL to
// have the fill callback produce it. Returns its index, or -1 (bad type/shape, duplicate name).
int bn_st_writer_add(bn_st_writer *w, const char *name, int type, int n_dims, const int64_t *shape,
                     const void *data, char *err, size_t errlen);
// bn_st_writer_write: writes the file atomically; returns 0 or -1 with err (no file left).
int bn_st_writer_write(bn_st_writer *w, const char *path, bn_st_fill_fn fill, void *ctx, char *err, size_t errlen);

#endif
