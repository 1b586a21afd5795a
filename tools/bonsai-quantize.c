// tools/bonsai-quantize.c — requantize a GGUF model (llama-quantize's rules, docs/formats.md §5).
#include "quantize/quantize.h"
#include "base/util.h"
#include "base/args.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    bn_quantize_params p;
    const char *in, *out, *tensor_types[256];
    int n_tensor_types;
    bool quiet;
} quantize_opts;

// layout_fn: --q2-layout g64|g128.
static int layout_fn(void *base, const char *opt, const char *v, char *err, size_t errlen) {
    if (strcmp(v, "g64") && strcmp(v, "g128")) return bn_err(err, errlen, "'%s' is not one of g64|g128", v);
    ((quantize_opts *)base)->p.q2_g128 = !strcmp(v, "g128");
    return 0;
}

#define O(f) offsetof(quantize_opts, f)
static const bn_arg quantize_args[] = {
    BN_POS(O(in), "IN.gguf", "the model to requantize"),
    BN_POS(O(out), "OUT.gguf", "the file to write (atomically)"),
    BN_POS(O(p.type), "TYPE", "the type: a name or a numeric general.file_type (below)"),
    BN_TRUE("--pure", O(p.pure), "every quantizable tensor gets TYPE (no mixture rules)"),
    BN_TRUE(
        "--llama-mix", O(p.llama_mix),
        "for Q1_0/Q2_0/PQ2_0 use llama-quantize's mixture: output.weight Q6_K, token_embd.weight Q4_K for Q2_0/PQ2_0. "
        "Default for these types keeps output and token_embd in TYPE (the compact published Bonsai layout)"),
    BN_STR("--output-tensor-type", O(p.output_type), "T", "type for output.weight"),
    BN_STR("--token-embedding-type", O(p.token_embd_type), "T", "type for token_embd.weight"),
    BN_STRS("--tensor-type", O(tensor_types), O(n_tensor_types), 256, "REGEX=T",
            "tensors whose name matches REGEX (PCRE2, substring search, regex lower-cased) get T; repeatable, first "
            "match wins"),
    BN_TRUE("--allow-requantize", O(p.allow_requantize),
            "allow quantized -> other quantized type (quality loss); dequantizing to F16/F32/BF16 is always allowed"),
    BN_TRUE("--leave-output-tensor", O(p.leave_output), "copy output.weight unchanged"),
    BN_FN("--q2-layout", layout_fn, "g64|g128", "layout of Q2_0 (default g64)"),
    BN_INT("-t, --threads", O(p.n_threads), "N", "quantization threads (0: all CPUs)", 0, 4096),
    BN_TRUE("--dry-run", O(p.dry_run), "print the type table and sizes, write nothing"),
    BN_TRUE("-q, --quiet", O(quiet), "no per-tensor table (warnings and the summary still print)"),
    {0}};
#undef O

static const bn_args_tool tool = {
    .name = "bonsai-quantize",
    .usage = "usage: bonsai-quantize IN.gguf OUT.gguf TYPE [options]\n",
    .notes =
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
        "Tensors whose chosen type equals their type are copied byte-exact; 1-D tensors, norms and\n"
        "ssm_conv1d are never quantized. KVs keep their input order (split.* removed) and end with\n"
        "general.quantization_version = 2 and general.file_type. Tensors are written in llama-quantize's\n"
        "order (layer, then name), alignment 32. The output file is written atomically.\n"};

int main(int argc, char **argv) {
    quantize_opts o = {.p = bn_quantize_params_default()};
    const bn_arg_table tables[] = {BN_TABLE(quantize_args, &o), BN_TABLE(bn_progress_args, NULL), {0}};
    bn_args_parse(&tool, tables, argc, argv);
    if (!o.p.type) bn_args_fail(&tool, "IN.gguf, OUT.gguf and TYPE are required");
    o.p.tensor_types = o.tensor_types;
    o.p.n_tensor_types = o.n_tensor_types;
    o.p.log = stdout;
    o.p.no_table = o.quiet;
    o.p.progress = true; // base/progress.h: a bar on a terminal, plain lines otherwise, none with --no-progress
    char err[512];
    if (bn_quantize_file(&o.p, o.in, o.out, err, sizeof err) != 0) {
        fprintf(stderr, "bonsai-quantize: %s\n", err);
        return 1;
    }
    return 0;
}
