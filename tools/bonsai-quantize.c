// tools/bonsai-quantize.c — requantize a GGUF model (llama-quantize's rules, docs/formats.md §5).
#include "quantize/quantize.h"
#include "base/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
        "usage: bonsai-quantize IN.gguf OUT.gguf TYPE [options]\n"
        "\n"
        "TYPE (name or numeric general.file_type):\n"
        "  Q1_0  (40)   1.125 bpw, group 128\n"
        "  Q2_0  (41)   2.25 bpw ternary, group 64 (mainline layout; loads in upstream llama.cpp)\n"
        "               with --q2-layout g128: 2.125 bpw legacy fork layout, type id 42 (published Bonsai files)\n"
        "  PQ2_0 (141)  2.125 bpw ternary, group 128, type id 142 (PrismML fork v7+)\n"
        "  PTQ1_0 (143) 1.75 bpw base-3 ternary, group 128 (fork v7+), if this build has its quantizer\n"
        "  Q4_0 (2), Q4_1 (3), Q5_0 (8), Q5_1 (9), Q8_0 (7), Q6_K (18), TQ1_0 (36), TQ2_0 (37)\n"
        "  Q4_K_M (15; alias Q4_K)   llama-quantize's mixture: Q4_K, Q6_K output and attn_v/attn_qkv/\n"
        "                            ffn_down of use_more_bits layers; rows not a multiple of 256 -> Q5_0.\n"
        "                            --pure gives plain Q4_K everywhere\n"
        "  Q4_K_S (14)               mixture with Q5_K (first 4 attn_v-like, first 1/8 of ffn_down)\n"
        "  Q5_K_M (17; alias Q5_K), Q5_K_S (16)   as llama-quantize (Q5_K_M: Q6_K like Q4_K_M's)\n"
        "  F16 (1), BF16 (32), F32 (0)   unpack: quantizable tensors dequantized to this type\n"
        "                                (unpack Q1_0/Q2_0 to F16 or F32, not BF16: FORMATS §3.10)\n"
        "\n"
        "Options:\n"
        "  --pure                     every quantizable tensor gets TYPE (no mixture rules)\n"
        "  --llama-mix                for Q1_0/Q2_0/PQ2_0 use llama-quantize's mixture: output.weight Q6_K,\n"
        "                             token_embd.weight Q4_K for Q2_0/PQ2_0. Default for these types keeps\n"
        "                             output and token_embd in TYPE (the compact published Bonsai layout).\n"
        "  --output-tensor-type T     type for output.weight\n"
        "  --token-embedding-type T   type for token_embd.weight\n"
        "  --tensor-type REGEX=T      tensors whose name matches REGEX (PCRE2, substring search, regex\n"
        "                             lower-cased) get T; repeatable, first match wins\n"
        "  --allow-requantize         allow quantized → other quantized type (quality loss); dequantizing\n"
        "                             to F16/F32/BF16 is always allowed\n"
        "  --leave-output-tensor      copy output.weight unchanged\n"
        "  --q2-layout g64|g128       layout of Q2_0 (default g64)\n"
        "  --threads N                quantization threads (default: all CPUs)\n"
        "  --dry-run                  print the type table and sizes, write nothing\n"
        "  -q, --quiet                no per-tensor table (warnings and the summary still print)\n"
        "  --help\n"
        "\n"
        "Tensors whose chosen type equals their type are copied byte-exact; 1-D tensors, norms and\n"
        "ssm_conv1d are never quantized. KVs keep their input order (split.* removed) and end with\n"
        "general.quantization_version = 2 and general.file_type. Tensors are written in llama-quantize's\n"
        "order (layer, then name), alignment 32. The output file is written atomically.\n");
}

static const char *need_arg(int argc, char **argv, int *i) { return bn_arg_next("bonsai-quantize", argc, argv, i); }

int main(int argc, char **argv) {
    bn_quantize_params p = bn_quantize_params_default();
    const char *tensor_types[argc]; // (at most one --tensor-type per argument; nothing to free on any return)
    const char *pos[3];
    int n_pos = 0;
    bool quiet = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--pure")) {
            p.pure = true;
        } else if (!strcmp(a, "--llama-mix")) {
            p.llama_mix = true;
        } else if (!strcmp(a, "--allow-requantize")) {
            p.allow_requantize = true;
        } else if (!strcmp(a, "--leave-output-tensor")) {
            p.leave_output = true;
        } else if (!strcmp(a, "--dry-run")) {
            p.dry_run = true;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = true;
        } else if (!strcmp(a, "--output-tensor-type")) {
            p.output_type = need_arg(argc, argv, &i);
        } else if (!strcmp(a, "--token-embedding-type")) {
            p.token_embd_type = need_arg(argc, argv, &i);
        } else if (!strcmp(a, "--tensor-type")) {
            tensor_types[p.n_tensor_types++] = need_arg(argc, argv, &i);
        } else if (!strcmp(a, "--threads")) {
            p.n_threads = (int)bn_arg_int("bonsai-quantize", a, need_arg(argc, argv, &i), 1, 4096);
        } else if (!strcmp(a, "--q2-layout")) {
            const char *l = need_arg(argc, argv, &i);
            if (!strcmp(l, "g128")) p.q2_g128 = true;
            else if (!strcmp(l, "g64")) p.q2_g128 = false;
            else {
                fprintf(stderr, "bonsai-quantize: --q2-layout must be g64 or g128, not '%s'\n", l);
                return 1;
            }
        } else if (a[0] == '-' && a[1] == '-') {
            bn_arg_unknown("bonsai-quantize", a);
        } else if (n_pos < 3) {
            pos[n_pos++] = a;
        } else {
            fprintf(stderr, "bonsai-quantize: too many arguments (see --help)\n");
            return 1;
        }
    }
    if (n_pos != 3) {
        usage(stderr);
        return 1;
    }
    p.type = pos[2];
    p.tensor_types = tensor_types;
    p.log = stdout;
    p.no_table = quiet;
    p.progress = true; // bn_progress itself stays silent unless stderr is a TTY (or BONSAI_PROGRESS=1)
    char err[512];
    if (bn_quantize_file(&p, pos[0], pos[1], err, sizeof err) != 0) {
        fprintf(stderr, "bonsai-quantize: %s\n", err);
        return 1;
    }
    return 0;
}
