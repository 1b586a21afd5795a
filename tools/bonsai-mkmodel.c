// tools/bonsai-mkmodel.c — writes a random-weight qwen35 / qwen3 GGUF, float or Q1_0 / Q2_0 (see synth/mkmodel.h).
#include "synth/mkmodel.h"
#include "base/util.h"
#include "base/args.h"
#include "quant/quant.h"
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    bn_mkmodel_params p;
    const char *out, *preset;
} mkmodel_opts;

// type_fn: --type f32|f16|bf16|q1_0|q2_0.
static int type_fn(void *base, const char *opt, const char *v, char *err, size_t errlen) {
    int t = bn_type_from_name(v);
    if (t != BN_F32 && t != BN_F16 && t != BN_BF16 && t != BN_Q1_0 && t != BN_Q2_0)
        return bn_err(err, errlen, "'%s' is not one of f32|f16|bf16|q1_0|q2_0 (other types: bonsai-quantize afterwards)",
                      v);
    ((mkmodel_opts *)base)->p.type = t;
    return 0;
}

// Sizes and ids in -1..INT32_MAX (bn_mkmodel_check checks the shapes), reals in ±1e30 (the RoPE base and the norm
// epsilon positive).
#define O(f) offsetof(mkmodel_opts, f)
static const bn_arg mkmodel_args[] = {
    BN_POS(O(out), "OUT.gguf", "the file to write"),
    BN_STR("--preset", O(preset), "P",
           "tiny | small | mid | 27b | qwen3-tiny | qwen3-1.7b (applied first; the options below override its fields)"),
    BN_STR("--arch", O(p.arch), "A", "qwen35 | qwen3"),
    BN_INT("--n-embd", O(p.n_embd), "N", "embedding width", -1, INT32_MAX),
    BN_INT("--n-layer", O(p.n_layer), "N", "layers", -1, INT32_MAX),
    BN_INT("--n-ff", O(p.n_ff), "N", "feed-forward width", -1, INT32_MAX),
    BN_INT("--n-head", O(p.n_head), "N", "attention heads", -1, INT32_MAX),
    BN_INT("--n-head-kv", O(p.n_head_kv), "N", "key/value heads", -1, INT32_MAX),
    BN_INT("--head-dim", O(p.head_dim), "N", "head width", -1, INT32_MAX),
    BN_INT("--n-rot", O(p.n_rot), "N", "rotated dimensions per head", -1, INT32_MAX),
    BN_FLOAT("--rope-base", O(p.rope_base), "F", "RoPE base", 1e-30, 1e30),
    BN_FLOAT("--norm-eps", O(p.norm_eps), "F", "RMS norm epsilon", 1e-30, 1),
    BN_INT("--ctx", O(p.ctx), "N", "context_length written into the file", -1, INT32_MAX),
    BN_INT("--ssm-d-state", O(p.ssm_d_state), "N", "DeltaNet state width (dk = dv)", -1, INT32_MAX),
    BN_INT("--ssm-n-group", O(p.ssm_n_group), "N", "DeltaNet key heads", -1, INT32_MAX),
    BN_INT("--ssm-dt-rank", O(p.ssm_dt_rank), "N", "DeltaNet value heads", -1, INT32_MAX),
    BN_INT("--ssm-conv-kernel", O(p.ssm_conv_kernel), "N", "DeltaNet convolution width", -1, INT32_MAX),
    BN_INT("--full-attn-interval", O(p.full_attn_interval), "N", "every N-th layer is full attention", -1, INT32_MAX),
    BN_TRUE("--tied", O(p.tied), "share token_embd as the output head (no output.weight)"),
    BN_FALSE("--untied", O(p.tied), "a separate output.weight"),
    BN_STR("--vocab", O(p.vocab), "PATH",
           "copy every tokenizer.* KV from this GGUF (e.g. third_party/llama.cpp/models/ggml-vocab-qwen35.gguf)"),
    BN_INT("--n-vocab", O(p.n_vocab_small), "N", "size of the synthetic byte-level BPE vocab", -1, INT32_MAX),
    BN_FN("--type", type_fn, "T",
          "f32 | f16 | bf16 | q1_0 | q2_0 for the 2-D weights (norms/ssm/conv stay f32; q1_0 / q2_0: the f32 rows "
          "quantized as generated, = bonsai-quantize --pure of the f32 file)"),
    BN_INT("-t, --threads", O(p.n_threads), "N", "threads generating tensors (0: all CPUs; the file is the same)", 0,
           4096),
    BN_SEED("-s, --seed", O(p.seed), "RNG seed"),
    BN_FLOAT("--logit-scale", O(p.logit_scale), "F", "std of the logits", -1e30, 1e30),
    BN_STR("--name", O(p.name), "S", "general.name"),
    {0}};
#undef O

static const bn_args_tool tool = {
    .name = "bonsai-mkmodel",
    .usage = "usage: bonsai-mkmodel OUT.gguf [options]\n"
             "Writes a GGUF with random weights and the exact qwen35 (or qwen3) keys, tensor names and shapes.\n"};

int main(int argc, char **argv) {
    // the preset first (the defaults --help shows are its values)
    mkmodel_opts o = {.preset = bn_args_peek(argc, argv, "--preset", "tiny")};
    if (bn_mkmodel_defaults(&o.p, o.preset) != 0) {
        fprintf(stderr, "bonsai-mkmodel: unknown preset '%s' (tiny, small, mid, 27b, qwen3-tiny, qwen3-1.7b)\n",
                o.preset);
        return 1;
    }
    const bn_arg_table tables[] = {BN_TABLE(mkmodel_args, &o), BN_TABLE(bn_progress_args, NULL), {0}};
    bn_args_parse(&tool, tables, argc, argv);
    const bn_mkmodel_params *p = &o.p;
    if (!o.out) bn_args_fail(&tool, "OUT.gguf is required");
    if (p->vocab && bn_args_given("--n-vocab")) bn_args_fail(&tool, "--n-vocab and --vocab exclude each other");
    char err[512];
    if (bn_mkmodel_check(p, err, sizeof err) != 0 || bn_mkmodel_write(p, o.out, err, sizeof err) != 0) {
        fprintf(stderr, "bonsai-mkmodel: %s\n", err);
        return 1;
    }
    int64_t n_params = bn_mkmodel_n_params(p, p->vocab ? 0 : p->n_vocab_small);
    fprintf(stderr, "bonsai-mkmodel: wrote %s (%s, %d layers, %.2fM params%s)\n", o.out, p->arch, p->n_layer,
            (double)n_params / 1e6, p->vocab ? " without the embedding/output" : "");
    return 0;
}
