// synth/mkmodel.h — writes random-weight GGUF models with the exact qwen35 (docs/model.md §2–3) or
// dense qwen3 (docs/model.md §7) keys, tensor names and shapes, in llama-quantize's tensor order
// (docs/formats.md §5.5). Weights are generated per tensor on the fly from (seed, tensor name), so
// even the 27B preset streams to disk without holding the model in memory. Batches of tensors (up to
// 1 GiB) are generated in parallel on a thread pool, in chunks of rows whose generators are jumped
// ahead to their first row, then written in order: the bytes do not depend on the thread count.
//
// Quantized files (type BN_Q1_0 / BN_Q2_0): each 2-D weight's random fp32 rows are quantized as they are
// made, with the type's reference quantizer, so a tensor equals `bonsai-quantize --pure` of the same
// tensor in the F32 file of the same seed (the quantizer works block by block); norms, ssm_a / dt and
// ssm_conv1d stay F32 as for the other types. This writes a 64-layer 27B-shape Q1_0 file (3.6 GB)
// without the 54 GB F16 file a quantization would start from.
//
// Presets (all 2-D weights have ne[0] a multiple of 128 so Q1_0 / PQ2_0 / Q2_0 apply; the only
// exception is ssm_conv1d {K, conv_dim}, which is never quantized):
//   tiny        qwen35, H 128, 4 layers (3 GDN + 1 attention), nh/nkv 4/2, hd 32, rope 8 dims
//               (sections [2,2,0,0]), Hk 2, Hv 4, dk = dv 32, F 256, V 512 synthetic, untied, f32.
//               (docs/model.md §6.2's tiny model doubled in H/F/hd/dk so every quantized ne[0] is
//               128 or 256; nh*hd = 128, Hv*dv = 128, qkv rows 2*2*32 + 4*32 = 256.)
//   small       qwen35, H 512, 8 layers, nh/nkv 4/2, hd 128, rope 32, Hk 2, Hv 4, dk 128, F 1536,
//               V 4096, untied, f32 (~31M params).
//   mid         qwen35 0.8B shapes (docs/model.md §6.2): H 1024, 24 layers, nh/nkv 8/2, hd 256, F 3584,
//               Hk = Hv = 16, dk 128, V 248320 (synthetic), tied, f16 (~0.75B params).
//   27b         exact Qwen3.5-27B shapes (docs/model.md §3, §6.1), V 248320, untied, f16.
//   qwen3-tiny  qwen3, H 128, 2 layers, nh/nkv 4/2, hd 32, F 256, V 512, tied, f32.
//   qwen3-1.7b  qwen3 1.7B shapes (docs/model.md §6.3): H 2048, 28 layers, 16/8, hd 128, F 6144,
//               V 151936, tied, f16.
//
// Synthetic vocabulary (vocab == NULL): gpt2-style byte-level BPE, tokenizer.ggml.pre "qwen35":
// ids 0..255 = the 256 byte tokens (GPT-2 bytes_to_unicode, in byte order), then merged tokens
// (each with its merge "a b", rank = order), then <|endoftext|>, <|im_start|>, <|im_end|>
// (type 3 control; eos = bos = padding = <|endoftext|>), then "[PAD<id>]" rows of type 5 (unused)
// up to n_vocab_small. With vocab = path, every tokenizer.* KV of that GGUF is copied and the
// vocab size is its token count.
#ifndef BONSAI_MKMODEL_H
#define BONSAI_MKMODEL_H
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    const char *arch;          // "qwen35" | "qwen3"
    int n_embd, n_layer, n_ff, n_head, n_head_kv, head_dim, n_rot;
    float rope_base, norm_eps;
    int ctx;                   // context_length
    // qwen35 only:
    int ssm_d_state;           // dk = dv
    int ssm_n_group;           // Hk
    int ssm_dt_rank;           // Hv
    int ssm_conv_kernel;       // K
    int full_attn_interval;    // layer il is attention iff (il + 1) % interval == 0
    bool tied;                 // no output.weight
    const char *vocab;         // path to a vocab GGUF (copy all tokenizer.* KVs), or NULL = synthetic
    int n_vocab_small;         // synthetic vocab size (>= 262)
    uint64_t seed;
    int type;                  // 2-D weight type: BN_F32 / BN_F16 / BN_BF16 / BN_Q1_0 / BN_Q2_0 (norms,
                               // ssm_a/dt/conv stay F32)
    float logit_scale;         // std of the logits ~ logit_scale (output.weight scaled by it)
    const char *name;          // general.name (NULL = "bonsai-mkmodel")
    int n_threads;             // threads generating tensors (<= 0: all CPUs); the bytes do not depend on it
} bn_mkmodel_params;

// bn_mkmodel_defaults: fills p with a preset ("tiny", "small", "mid", "27b", "qwen3-tiny",
// "qwen3-1.7b"); returns 0, or -1 for an unknown preset (p then holds "tiny").
int bn_mkmodel_defaults(bn_mkmodel_params *p, const char *preset);
// bn_mkmodel_check: validates the shape parameters and the type (a quantized type needs every quantized
// weight's ne0 to be a multiple of its block); returns 0 or -1 with err filled.
int bn_mkmodel_check(const bn_mkmodel_params *p, char *err, size_t errlen);
// The transformer shape both generators (this one and synth/mkdrafter.h) write as ARCH.* keys.
typedef struct {
    int n_layer, ctx, n_embd, n_ff, n_head, n_head_kv, head_dim;
    float norm_eps, rope_base;
} bn_synth_shape;
struct gguf_writer;
// bn_synth_set_shape_keys: writes ARCH.block_count, context_length, embedding_length, feed_forward_length, the
// attention head counts and key/value lengths, its RMS-norm epsilon and rope.freq_base of s to w (in that order).
void bn_synth_set_shape_keys(struct gguf_writer *w, const char *arch, const bn_synth_shape *s);
// bn_mkmodel_write: writes the random model to path atomically; returns 0 or -1 with err filled.
int bn_mkmodel_write(const bn_mkmodel_params *p, const char *path, char *err, size_t errlen);
// bn_mkmodel_n_params: number of weight elements the parameters describe (vocab size of a
// vocab file is not known here: n_vocab is used); returns the count.
int64_t bn_mkmodel_n_params(const bn_mkmodel_params *p, int64_t n_vocab);

#endif
