// tests/compat/compat_common.h — helpers shared by the compat tests: temp dirs, model generation,
// a "--pure" requantizer (every quantizable tensor of docs/formats.md §5.1 to one type), log-softmax and
// logit comparisons between our engine and another source of logits.
#ifndef BONSAI_COMPAT_COMMON_H
#define BONSAI_COMPAT_COMMON_H
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include "core/model.h"
#include "core/forward.h"

// compat_tmpdir: a fresh directory under $TMPDIR (or /tmp) named bonsai-compat-XXXXXX; returns a
// static buffer, or NULL.
const char *compat_tmpdir(void);
// compat_rmdir: removes the files directly inside dir, then dir.
void compat_rmdir(const char *dir);

// compat_make_model: bonsai-mkmodel preset ("tiny", "qwen3-tiny", ...) with 2-D weights of type
// (BN_F32/BN_F16) and the given seed, written to path. Returns 0 or -1 with err filled.
int compat_make_model(const char *preset, int type, uint64_t seed, const char *path, char *err, size_t errlen);

// compat_requant: copies in → out converting every quantizable tensor (≥ 2 dims, name ends in
// "weight", no "_norm.weight", no "ssm_conv1d") to type (dequantizing quantized sources first); other
// tensors are copied unchanged. file_type_id is the id stored in the file for that type (e.g. 42 for
// a legacy BN_PQ2_0 file); general.file_type is set to ftype (or removed when ftype < 0). Returns 0/-1.
int compat_requant(const char *in, const char *out, int type, uint32_t file_type_id, int ftype,
                   char *err, size_t errlen);

// compat_log_softmax: dst[i] = x[i] - logsumexp(x) over n entries (double accumulation).
void compat_log_softmax(const float *x, float *dst, int n);

// compat_argmax: index of the largest value, lowest index on ties.
int32_t compat_argmax(const float *x, int n);

// Differences between two [n][n_vocab] logit matrices after log-softmax per row.
typedef struct {
    double max_abs_row;   // max over positions and vocab of |logprob_a - logprob_b|
    double max_abs_next;  // max over positions of |Δ logprob| of the next (teacher-forced) token
    double mean_abs_next; // mean of the same
    int argmax_diff;      // positions whose argmax differs
    int n_pos;
} compat_diff;

// compat_diff_logits: fills d comparing a and b ([n][n_vocab]); next[i] (may be NULL) is the token at
// position i + 1 for the teacher-forced logprob (positions 0..n-2).
void compat_diff_logits(const float *a, const float *b, int n, int n_vocab, const int32_t *next, compat_diff *d);

// compat_forward_all: runs tokens through our engine from a fresh state and writes [n][n_vocab] logits.
// chunk > 0 feeds the tokens in pieces of that many (chunk 1 = the one-token decode path). Returns 0/-1.
int compat_forward_all(const bn_model *m, bn_state *s, const int32_t *tokens, int n, int chunk, float *logits,
                       char *err, size_t errlen);
// compat_greedy: our engine: prompt from a fresh state, then n_gen argmax tokens decoded one at a time
// (no EOG stop) into out. Returns 0/-1.
int compat_greedy(const bn_model *m, bn_state *s, const int32_t *prompt, int n_prompt, int n_gen, int32_t *out,
                  char *err, size_t errlen);

// compat_random_tokens: n ids in [lo, hi) from a small LCG seeded with seed.
void compat_random_tokens(uint64_t seed, int lo, int hi, int n, int32_t *out);

#endif
