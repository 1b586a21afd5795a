// tools/bonsai-mkmodel.c — writes a random-weight qwen35 / qwen3 GGUF (see synth/mkmodel.h).
#include "synth/mkmodel.h"
#include "base/util.h"
#include "quant/quant.h"
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: bonsai-mkmodel OUT.gguf [options]\n"
            "Writes a GGUF with random weights and the exact qwen35 (or qwen3) keys, tensor names and shapes.\n"
            "  --preset P            tiny (default) | small | mid | 27b | qwen3-tiny | qwen3-1.7b\n"
            "                        (applied first; the options below override its fields)\n"
            "  --arch A              qwen35 | qwen3\n"
            "  --n-embd N  --n-layer N  --n-ff N  --n-head N  --n-head-kv N  --head-dim N  --n-rot N\n"
            "  --rope-base F  --norm-eps F  --ctx N\n"
            "  --ssm-d-state N  --ssm-n-group N  --ssm-dt-rank N  --ssm-conv-kernel N  --full-attn-interval N\n"
            "  --tied | --untied     share token_embd as the output head (no output.weight)\n"
            "  --vocab PATH          copy every tokenizer.* KV from this GGUF (e.g.\n"
            "                        third_party/llama.cpp/models/ggml-vocab-qwen35.gguf)\n"
            "  --n-vocab N           size of the synthetic byte-level BPE vocab (default per preset)\n"
            "  --type T              f32 | f16 | bf16 for the 2-D weights (norms/ssm/conv stay f32)\n"
            "  --seed N              RNG seed (default 42)\n"
            "  --logit-scale F       std of the logits (default 4)\n"
            "  --name S              general.name\n"
            "  --help\n");
}

// parse_int / parse_float / parse_seed: strict option values (exit 1 with a message on junk): sizes and ids in
// -1..INT32_MAX (the generator checks the shapes), reals in ±1e30 (the RoPE base and the norm epsilon positive),
// seeds in 0..INT64_MAX.
static int parse_int(const char *opt, const char *s) { return (int)bn_arg_int("bonsai-mkmodel", opt, s, -1, INT32_MAX); }
static float parse_float(const char *opt, const char *s) {
    return (float)bn_arg_float("bonsai-mkmodel", opt, s, -1e30, 1e30);
}
static uint64_t parse_seed(const char *opt, const char *s) {
    return (uint64_t)bn_arg_int("bonsai-mkmodel", opt, s, 0, INT64_MAX);
}

int main(int argc, char **argv) {
    const char *out = NULL, *preset = "tiny";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--preset") == 0 && i + 1 < argc) preset = argv[i + 1];
    }
    bn_mkmodel_params p;
    if (bn_mkmodel_defaults(&p, preset) != 0) {
        fprintf(stderr, "bonsai-mkmodel: unknown preset '%s' (tiny, small, mid, 27b, qwen3-tiny, qwen3-1.7b)\n",
                preset);
        return 1;
    }
    bool vocab_size_set = false;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (o[0] != '-') {
            if (out) {
                fprintf(stderr, "bonsai-mkmodel: more than one output path ('%s', '%s')\n", out, o);
                return 1;
            }
            out = o;
            continue;
        }
        if (strcmp(o, "--tied") == 0) { p.tied = true; continue; }
        if (strcmp(o, "--untied") == 0) { p.tied = false; continue; }
        if (i + 1 >= argc) bn_arg_unknown("bonsai-mkmodel", o);
        const char *v = argv[++i];
        if (strcmp(o, "--preset") == 0) continue;
        else if (strcmp(o, "--arch") == 0) p.arch = v;
        else if (strcmp(o, "--n-embd") == 0) p.n_embd = parse_int(o, v);
        else if (strcmp(o, "--n-layer") == 0) p.n_layer = parse_int(o, v);
        else if (strcmp(o, "--n-ff") == 0) p.n_ff = parse_int(o, v);
        else if (strcmp(o, "--n-head") == 0) p.n_head = parse_int(o, v);
        else if (strcmp(o, "--n-head-kv") == 0) p.n_head_kv = parse_int(o, v);
        else if (strcmp(o, "--head-dim") == 0) p.head_dim = parse_int(o, v);
        else if (strcmp(o, "--n-rot") == 0) p.n_rot = parse_int(o, v);
        else if (strcmp(o, "--rope-base") == 0) p.rope_base = (float)bn_arg_float("bonsai-mkmodel", o, v, 1e-30, 1e30);
        else if (strcmp(o, "--norm-eps") == 0) p.norm_eps = (float)bn_arg_float("bonsai-mkmodel", o, v, 1e-30, 1);
        else if (strcmp(o, "--ctx") == 0) p.ctx = parse_int(o, v);
        else if (strcmp(o, "--ssm-d-state") == 0) p.ssm_d_state = parse_int(o, v);
        else if (strcmp(o, "--ssm-n-group") == 0) p.ssm_n_group = parse_int(o, v);
        else if (strcmp(o, "--ssm-dt-rank") == 0) p.ssm_dt_rank = parse_int(o, v);
        else if (strcmp(o, "--ssm-conv-kernel") == 0) p.ssm_conv_kernel = parse_int(o, v);
        else if (strcmp(o, "--full-attn-interval") == 0) p.full_attn_interval = parse_int(o, v);
        else if (strcmp(o, "--vocab") == 0) p.vocab = v;
        else if (strcmp(o, "--n-vocab") == 0) {
            p.n_vocab_small = parse_int(o, v);
            vocab_size_set = true;
        } else if (strcmp(o, "--type") == 0) {
            p.type = bn_type_from_name(v);
            if (p.type != BN_F32 && p.type != BN_F16 && p.type != BN_BF16) {
                fprintf(stderr, "bonsai-mkmodel: --type must be f32, f16 or bf16 (got '%s'); quantize afterwards\n", v);
                return 1;
            }
        } else if (strcmp(o, "--seed") == 0) p.seed = parse_seed(o, v);
        else if (strcmp(o, "--logit-scale") == 0) p.logit_scale = parse_float(o, v);
        else if (strcmp(o, "--name") == 0) p.name = v;
        else {
            bn_arg_unknown("bonsai-mkmodel", o);
        }
    }
    if (!out) {
        usage(stderr);
        return 1;
    }
    if (p.vocab && vocab_size_set) {
        fprintf(stderr, "bonsai-mkmodel: --n-vocab and --vocab exclude each other\n");
        return 1;
    }
    char err[512];
    if (bn_mkmodel_check(&p, err, sizeof err) != 0) {
        fprintf(stderr, "bonsai-mkmodel: %s\n", err);
        return 1;
    }
    if (bn_mkmodel_write(&p, out, err, sizeof err) != 0) {
        fprintf(stderr, "bonsai-mkmodel: %s\n", err);
        return 1;
    }
    int64_t n_params = bn_mkmodel_n_params(&p, p.vocab ? 0 : p.n_vocab_small);
    fprintf(stderr, "bonsai-mkmodel: wrote %s (%s, %d layers, %.2fM params%s)\n", out, p.arch, p.n_layer,
            (double)n_params / 1e6, p.vocab ? " without the embedding/output" : "");
    return 0;
}
