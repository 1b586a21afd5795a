// convert/convert_impl.h — internals shared by the HF/PEFT converters: the HF ↔ GGUF name table with
// each tensor's transform (docs/model.md §5) and the row-streaming transform itself.
#ifndef BONSAI_CONVERT_IMPL_H
#define BONSAI_CONVERT_IMPL_H
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>

enum { CV_QWEN35 = 0, CV_QWEN3 = 1, CV_QWEN2 = 2 };

typedef struct {
    int arch;                 // CV_*
    int Hk, Hv, dk, dv;       // qwen35 GDN heads (Hk key heads of dk, Hv value heads of dv)
} cv_params;

// One tensor's mapping. Row/column permutations act on V heads (blocks of blk rows/columns
// starting at row0/col 0), HF grouped ↔ GGUF tiled; identity when Hk == Hv.
typedef struct {
    char hf[128];        // HF name relative to the text prefix ("layers.3.mlp.up_proj.weight"; "lm_head.weight" as is)
    char gguf[96];       // "blk.3.ffn_up.weight"
    int layer;           // -1 for global tensors
    bool plus1;          // zero-centred norm: GGUF = HF + 1
    bool neg_exp;        // ssm_a = −exp(A_log)
    bool perm_rows;      // permute rows [row0, row0 + Hv·blk) (1-D tensors: elements)
    bool perm_cols;      // permute columns [0, Hv·blk)
    int64_t row0, blk;
    bool force_f32;      // 1-D, biases, norms, conv1d, ssm_a, dt bias
    bool conv;           // HF [C, 1, K] ↔ GGUF {K, C}
} cv_map;

// cv_map_from_hf: fills m for an HF text name (prefix already stripped); returns 0, or -1 if the
// name is not a known text tensor of this architecture.
int cv_map_from_hf(const cv_params *p, const char *hf, cv_map *m);
// cv_map_from_gguf: fills m for a GGUF tensor name; returns 0 or -1 if unknown.
int cv_map_from_gguf(const cv_params *p, const char *gguf, cv_map *m);
// cv_arch_from_name: CV_* for "qwen35"/"qwen3"/"qwen2", or -1.
int cv_arch_from_name(const char *arch);
// cv_arch_name: "qwen35" / "qwen3" / "qwen2".
const char *cv_arch_name(int arch);

// A conversion of one tensor: source bytes (any bn_type GGUF can hold, or F32/F16/BF16), viewed in
// GGUF order as rows of ne0 elements; destination F32/F16/BF16. dir = +1 HF → GGUF, −1 GGUF → HF.
typedef struct {
    const void *src;
    int src_type;
    int64_t ne0, n_el;   // GGUF row length and element count (same for source and destination)
    int dst_type;
    const cv_map *m;
    const cv_params *p;
    int dir;
} cv_job;

// cv_transform: writes the converted tensor (n_el elements of dst_type) into dst; 0 or -1 with err.
int cv_transform(const cv_job *j, void *dst, char *err, size_t errlen);
// cv_dtype_bytes: bytes of one element of F32/F16/BF16.
size_t cv_dtype_bytes(int type);
#endif
