// synth/mkdrafter.h — writes random-weight DSpark drafter GGUFs (docs/dspark.md §2–3) of any shape, in
// either file convention:
//   legacy  arch `dspark`, double-prefixed keys `dspark.dspark.<k>`, tensors `dspark.fc`,
//           `dspark.hidden_norm`, `dspark.markov_head_a/b`, `dspark.confidence_head.*`,
//           `dspark.log_snr_fc1/2.*`; target_layers = layers whose OUTPUT is tapped.
//   dflash  arch `dflash`, keys `dflash.<k>` (+ tokenizer.ggml.mask_token_id), tensors `fc`,
//           `enc.output_norm`, `markov_w1/w2`, `conf_proj.*`, `log_snr_fc1/2.*`; target_layers
//           = layers whose INPUT is tapped (legacy ids + 1).
// Weights are drawn per tensor from (seed, canonical legacy name), so the same parameters give
// byte-identical weights in both conventions (the two files must produce identical drafts).
#ifndef BONSAI_MKDRAFTER_H
#define BONSAI_MKDRAFTER_H
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include "gguf/gguf.h"

#define BN_DRAFTER_MAX_TAPS 16
#define BN_DRAFTER_MAX_BLOCK 256 // block_size limit of a loaded drafter (the published ones use 4 and 16)

enum bn_drafter_convention { BN_DRAFTER_LEGACY = 0, BN_DRAFTER_DFLASH = 1 };

typedef struct {
    int convention;            // enum bn_drafter_convention
    int n_embd, n_layer, n_ff, n_head, n_head_kv, head_dim;
    int n_rot;                 // == head_dim: rope.dimension_count is not written
    float rope_base, norm_eps;
    int ctx;                   // context_length
    int n_vocab;               // must equal the target's
    int block_size;
    int mask_token_id;         // default n_vocab - 1
    int n_taps;
    int target_layers[BN_DRAFTER_MAX_TAPS]; // LEGACY numbering (output of layer L); dflash writes L + 1
    int markov_rank;
    bool confidence_head;
    bool confidence_with_markov; // confidence input = E + rank (else E)
    bool log_snr;
    float min_log_snr, max_log_snr;
    int snr_feat;              // log-SNR feature width (sin half + cos half), 128 in the real files
    bool shared;               // omit token_embd/output (borrowed from the target at run time)
    uint64_t seed;
    int type;                  // matrix type: BN_F32 / BN_F16 / BN_BF16 or a quantized bn_type
    float logit_scale;         // std of the drafter's base logits ~ logit_scale
    float markov_scale;        // std of the Markov bias ~ markov_scale
} bn_mkdrafter_params;

// bn_mkdrafter_defaults: a drafter for the "tiny" qwen35 target of synth/mkmodel.h (E 128, V 512,
// 2 layers, taps [1, 2], block 4, rank 16, conf head with Markov, log-SNR on, legacy, F32).
void bn_mkdrafter_defaults(bn_mkdrafter_params *p);
// bn_mkdrafter_check: validates the parameters; returns 0 or -1 with err filled.
int bn_mkdrafter_check(const bn_mkdrafter_params *p, char *err, size_t errlen);
// bn_mkdrafter_write_keys: adds the drafter's metadata keys of p's convention to w (the tensors are the caller's;
// p checked by bn_mkdrafter_check). Shared by bn_mkdrafter_write and the trainer's writer (train/drafter_io.c).
void bn_mkdrafter_write_keys(gguf_writer *w, const bn_mkdrafter_params *p);
// bn_drafter_tensor_name: the name in convention c of the tensor named dflash in the dflash convention (the
// legacy file prefixes the drafter's own tensors with "dspark." and names some differently, docs/dspark.md §3.3
// step 3); returns buf.
const char *bn_drafter_tensor_name(int c, const char *dflash, char *buf, size_t n);
// bn_drafter_convention_parse: "legacy" (or "dspark") / "dflash" into *c; returns 0, or -1 with err naming v.
int bn_drafter_convention_parse(const char *v, int *c, char *err, size_t errlen);
// bn_mkdrafter_write: writes the random drafter to path atomically; returns 0 or -1 with err filled.
int bn_mkdrafter_write(const bn_mkdrafter_params *p, const char *path, char *err, size_t errlen);

#endif
