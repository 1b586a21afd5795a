// tools/bonsai-mkdrafter.c — writes a random-weight DSpark drafter GGUF (see synth/mkdrafter.h).
#include "synth/mkdrafter.h"
#include "base/util.h"
#include "base/args.h"
#include "quant/quant.h"
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

static void preset_27b(bn_mkdrafter_params *p) {
    p->n_embd = 5120;
    p->n_layer = 6;
    p->n_ff = 5120;
    p->n_head = 40;
    p->n_head_kv = 4;
    p->head_dim = 128;
    p->n_rot = 128;
    p->n_vocab = 248320;
    p->mask_token_id = 248319;
    p->n_taps = 5;
    int tl[5] = {1, 16, 31, 46, 61};
    memcpy(p->target_layers, tl, sizeof tl);
    p->markov_rank = 256;
}

typedef struct {
    bn_mkdrafter_params p;
    const char *out, *preset;
} mkdrafter_opts;

// convention_fn: --convention legacy|dflash ("dspark" = legacy).
static int convention_fn(void *base, const char *opt, const char *v, char *err, size_t errlen) {
    return bn_drafter_convention_parse(v, &((mkdrafter_opts *)base)->p.convention, err, errlen);
}

// head_dim_fn: --head-dim N sets the rotated dimensions too.
static int head_dim_fn(void *base, const char *opt, const char *v, char *err, size_t errlen) {
    long long n;
    if (bn_args_int(opt, v, -1, INT32_MAX, &n, err, errlen) != 0) return -1;
    bn_mkdrafter_params *p = &((mkdrafter_opts *)base)->p;
    p->head_dim = p->n_rot = (int)n;
    return 0;
}

// type_fn: --type T (any bn_type name).
static int type_fn(void *base, const char *opt, const char *v, char *err, size_t errlen) {
    int t = bn_type_from_name(v);
    if (t < 0) return bn_err(err, errlen, "unknown type '%s'", v);
    ((mkdrafter_opts *)base)->p.type = t;
    return 0;
}

// Sizes and ids in -1..INT32_MAX (bn_mkdrafter_check checks the shapes), reals in ±1e30 (the RoPE base and the norm
// epsilon positive).
#define O(f) offsetof(mkdrafter_opts, f)
#define SIZE(names, f, help) BN_INT(names, O(p.f), "N", help, -1, INT32_MAX)
static const bn_arg mkdrafter_args[] = {
    BN_POS(O(out), "OUT.gguf", "the file to write"),
    BN_STR("--preset", O(preset), "P",
           "tiny (default) | 27b (Bonsai-27B drafter shapes: E 5120, 6 layers, 40/4 heads, V 248320, taps "
           "1,16,31,46,61, rank 256); applied first, the options below override its fields"),
    BN_FN("--convention", convention_fn, "C",
          "legacy (arch dspark, dspark.dspark.* keys) | dflash (target_layers += 1)"),
    SIZE("--n-embd", n_embd, "embedding width (the target's)"),
    SIZE("--n-layer", n_layer, "layers"),
    SIZE("--n-ff", n_ff, "feed-forward width"),
    SIZE("--n-head", n_head, "attention heads"),
    SIZE("--n-head-kv", n_head_kv, "key/value heads"),
    BN_FN("--head-dim", head_dim_fn, "N", "head width (and --n-rot)"),
    SIZE("--n-rot", n_rot, "rotated dimensions per head"),
    BN_FLOAT("--rope-base", O(p.rope_base), "F", "RoPE base", 1e-30, 1e30),
    BN_FLOAT("--norm-eps", O(p.norm_eps), "F", "RMS norm epsilon", 1e-30, 1),
    SIZE("--ctx", ctx, "context_length written into the file"),
    SIZE("--n-vocab", n_vocab, "vocabulary size (must equal the target's)"),
    SIZE("--block-size", block_size, "tokens per drafted block"),
    SIZE("--mask-token", mask_token_id, "the mask token id (default n_vocab-1)"),
    BN_INTS("--target-layers", O(p.target_layers), O(p.n_taps), BN_DRAFTER_MAX_TAPS, "L1,L2,...",
            "tapped target layers (legacy ids: tap = OUTPUT of that target layer)", -1, INT32_MAX),
    SIZE("--markov-rank", markov_rank, "rank of the Markov bias"),
    BN_FALSE("--no-confidence", O(p.confidence_head), "no confidence head"),
    BN_FALSE("--confidence-no-markov", O(p.confidence_with_markov),
             "the confidence head's input without the Markov rank"),
    BN_FALSE("--no-log-snr", O(p.log_snr), "no log-SNR feature"),
    BN_FLOAT("--min-log-snr", O(p.min_log_snr), "F", "log-SNR range, low end", -1e30, 1e30),
    BN_FLOAT("--max-log-snr", O(p.max_log_snr), "F", "log-SNR range, high end", -1e30, 1e30),
    SIZE("--snr-feat", snr_feat, "log-SNR feature width (sin half + cos half)"),
    BN_TRUE("--shared", O(p.shared), "omit token_embd/output (borrowed from the target)"),
    BN_FN("--type", type_fn, "T", "f32 | f16 | bf16 | q8_0 | q4_1 ... for the matrices"),
    BN_SEED("-s, --seed", O(p.seed), "RNG seed"),
    BN_FLOAT("--logit-scale", O(p.logit_scale), "F", "std of the drafter's base logits", -1e30, 1e30),
    BN_FLOAT("--markov-scale", O(p.markov_scale), "F", "std of the Markov bias", -1e30, 1e30),
    {0}};
#undef SIZE
#undef O

static const bn_args_tool tool = {
    .name = "bonsai-mkdrafter",
    .usage = "usage: bonsai-mkdrafter OUT.gguf [options]\n"
             "Writes a DSpark drafter with random weights (defaults: for bonsai-mkmodel's tiny target).\n"};

int main(int argc, char **argv) {
    // the preset first (the defaults --help shows are its values)
    mkdrafter_opts o = {.preset = bn_args_peek(argc, argv, "--preset", "tiny")};
    bn_mkdrafter_defaults(&o.p);
    if (strcmp(o.preset, "tiny") != 0 && strcmp(o.preset, "27b") != 0) {
        fprintf(stderr, "bonsai-mkdrafter: unknown preset '%s' (tiny, 27b)\n", o.preset);
        return 1;
    }
    if (strcmp(o.preset, "27b") == 0) preset_27b(&o.p);
    const bn_arg_table tables[] = {BN_TABLE(mkdrafter_args, &o), {0}};
    bn_args_parse(&tool, tables, argc, argv);
    if (!o.out) bn_args_fail(&tool, "OUT.gguf is required");
    const bn_mkdrafter_params *p = &o.p;
    char err[512];
    if (bn_mkdrafter_write(p, o.out, err, sizeof err) != 0) {
        fprintf(stderr, "bonsai-mkdrafter: %s\n", err);
        return 1;
    }
    printf("wrote %s (%s convention, E %d, %d layers, V %d, block %d, %d taps)\n", o.out,
           p->convention == BN_DRAFTER_DFLASH ? "dflash" : "legacy", p->n_embd, p->n_layer, p->n_vocab, p->block_size,
           p->n_taps);
    return 0;
}
