// tools/bonsai-mkdrafter.c — writes a random-weight DSpark drafter GGUF (see synth/mkdrafter.h).
#include "synth/mkdrafter.h"
#include "base/util.h"
#include "quant/quant.h"
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: bonsai-mkdrafter OUT.gguf [options]\n"
            "Writes a DSpark drafter with random weights (defaults: for bonsai-mkmodel's tiny target).\n"
            "  --convention C        legacy (arch dspark, dspark.dspark.* keys) | dflash (target_layers += 1)\n"
            "  --preset P            tiny (default) | 27b (Bonsai-27B drafter shapes: E 5120, 6 layers,\n"
            "                        40/4 heads, V 248320, taps 1,16,31,46,61, rank 256)\n"
            "  --n-embd N  --n-layer N  --n-ff N  --n-head N  --n-head-kv N  --head-dim N  --n-rot N\n"
            "  --rope-base F  --norm-eps F  --ctx N  --n-vocab N (must equal the target's)\n"
            "  --block-size N  --mask-token N (default n_vocab-1)  --target-layers L1,L2,...  (legacy ids:\n"
            "                        tap = OUTPUT of that target layer)\n"
            "  --markov-rank N  --no-confidence  --confidence-no-markov  --no-log-snr\n"
            "  --min-log-snr F  --max-log-snr F  --snr-feat N\n"
            "  --shared              omit token_embd/output (borrowed from the target)\n"
            "  --type T              f32 | f16 | bf16 | q8_0 | q4_1 ... for the matrices\n"
            "  --seed N  --logit-scale F  --markov-scale F\n");
}

// parse_int / parse_float / parse_seed: strict option values (exit 1 with a message on junk): sizes and ids in
// -1..INT32_MAX (the generator checks the shapes), reals in ±1e30 (the RoPE base and the norm epsilon positive),
// seeds in 0..INT64_MAX.
static int parse_int(const char *opt, const char *s) { return (int)bn_arg_int("bonsai-mkdrafter", opt, s, -1, INT32_MAX); }
static float parse_float(const char *opt, const char *s) {
    return (float)bn_arg_float("bonsai-mkdrafter", opt, s, -1e30, 1e30);
}
static uint64_t parse_seed(const char *opt, const char *s) {
    return (uint64_t)bn_arg_int("bonsai-mkdrafter", opt, s, 0, INT64_MAX);
}

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

int main(int argc, char **argv) {
    bn_mkdrafter_params p;
    bn_mkdrafter_defaults(&p);
    const char *out = NULL;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--preset") == 0 && i + 1 < argc && strcmp(argv[i + 1], "27b") == 0) preset_27b(&p);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(name) (strcmp(a, name) == 0 && v && ++i)
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (OPT("--preset")) {
            if (strcmp(v, "tiny") != 0 && strcmp(v, "27b") != 0) {
                fprintf(stderr, "bonsai-mkdrafter: unknown preset '%s'\n", v);
                return 1;
            }
        } else if (OPT("--convention")) {
            if (strcmp(v, "legacy") == 0 || strcmp(v, "dspark") == 0) p.convention = BN_DRAFTER_LEGACY;
            else if (strcmp(v, "dflash") == 0) p.convention = BN_DRAFTER_DFLASH;
            else {
                fprintf(stderr, "bonsai-mkdrafter: --convention must be legacy or dflash\n");
                return 1;
            }
        } else if (OPT("--n-embd")) p.n_embd = parse_int(a, v);
        else if (OPT("--n-layer")) p.n_layer = parse_int(a, v);
        else if (OPT("--n-ff")) p.n_ff = parse_int(a, v);
        else if (OPT("--n-head")) p.n_head = parse_int(a, v);
        else if (OPT("--n-head-kv")) p.n_head_kv = parse_int(a, v);
        else if (OPT("--head-dim")) p.head_dim = p.n_rot = parse_int(a, v);
        else if (OPT("--n-rot")) p.n_rot = parse_int(a, v);
        else if (OPT("--rope-base")) p.rope_base = (float)bn_arg_float("bonsai-mkdrafter", a, v, 1e-30, 1e30);
        else if (OPT("--norm-eps")) p.norm_eps = (float)bn_arg_float("bonsai-mkdrafter", a, v, 1e-30, 1);
        else if (OPT("--ctx")) p.ctx = parse_int(a, v);
        else if (OPT("--n-vocab")) p.n_vocab = parse_int(a, v);
        else if (OPT("--block-size")) p.block_size = parse_int(a, v);
        else if (OPT("--mask-token")) p.mask_token_id = parse_int(a, v);
        else if (OPT("--markov-rank")) p.markov_rank = parse_int(a, v);
        else if (OPT("--min-log-snr")) p.min_log_snr = parse_float(a, v);
        else if (OPT("--max-log-snr")) p.max_log_snr = parse_float(a, v);
        else if (OPT("--snr-feat")) p.snr_feat = parse_int(a, v);
        else if (OPT("--seed")) p.seed = parse_seed(a, v);
        else if (OPT("--logit-scale")) p.logit_scale = parse_float(a, v);
        else if (OPT("--markov-scale")) p.markov_scale = parse_float(a, v);
        else if (OPT("--target-layers")) {
            p.n_taps = 0;
            char *s = xstrdup(v);
            for (char *tk = strtok(s, ","); tk; tk = strtok(NULL, ",")) {
                if (p.n_taps == BN_DRAFTER_MAX_TAPS) {
                    fprintf(stderr, "bonsai-mkdrafter: at most %d target layers\n", BN_DRAFTER_MAX_TAPS);
                    return 1;
                }
                p.target_layers[p.n_taps++] = parse_int(a, tk);
            }
            free(s);
        } else if (OPT("--type")) {
            p.type = bn_type_from_name(v);
            if (p.type < 0) {
                fprintf(stderr, "bonsai-mkdrafter: unknown type '%s'\n", v);
                return 1;
            }
        } else if (strcmp(a, "--no-confidence") == 0) p.confidence_head = false;
        else if (strcmp(a, "--confidence-no-markov") == 0) p.confidence_with_markov = false;
        else if (strcmp(a, "--no-log-snr") == 0) p.log_snr = false;
        else if (strcmp(a, "--shared") == 0) p.shared = true;
        else if (a[0] != '-' && !out) out = a;
        else {
            bn_arg_unknown("bonsai-mkdrafter", a);
        }
#undef OPT
    }
    if (!out) {
        usage(stderr);
        return 1;
    }
    char err[512];
    if (bn_mkdrafter_write(&p, out, err, sizeof err) != 0) {
        fprintf(stderr, "bonsai-mkdrafter: %s\n", err);
        return 1;
    }
    printf("wrote %s (%s convention, E %d, %d layers, V %d, block %d, %d taps)\n", out,
           p.convention == BN_DRAFTER_DFLASH ? "dflash" : "legacy", p.n_embd, p.n_layer, p.n_vocab, p.block_size,
           p.n_taps);
    return 0;
}
