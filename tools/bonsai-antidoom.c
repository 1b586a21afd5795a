// tools/bonsai-antidoom.c — the whole antidoom recipe as one resumable run (recipe/recipe.h, docs/antidoom.md §18):
//   bonsai-antidoom -m MODEL.gguf --out DIR [--kind adapter,f16,q1_0,q2_0] [--config FILE.json] [options]
// Settings: the defaults, then the JSON config file, then the flags. Rerunning with the same --out reuses every stage
// that finished with the same settings and inputs.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/args.h"
#include "base/progress.h"
#include "base/util.h"
#include "core/engine.h"
#include "quantize/rules.h"
#include "recipe/recipe.h"
#include "train/device.h"

typedef struct {
    bn_recipe_cfg c; // the settings (recipe/config.h: their flags come from its key table)
    bn_engine_opts eng;
    const char *config;
} antidoom_opts;

#define O(f) offsetof(antidoom_opts, f)
static const bn_arg antidoom_args[] = {
    BN_STR("--config", O(config), "FILE", "settings as a JSON object (keys: docs/antidoom.md §18); flags override it"),
    {0}};
#undef O

static const bn_args_tool tool = {
    .name = "bonsai-antidoom",
    .usage = "usage: bonsai-antidoom -m MODEL.gguf --out DIR [--kind adapter,f16,q1_0,q2_0] [--config FILE] [options]\n"
             "The antidoom recipe in one run: evaluate the base, mine loops (primed and sampled), regularise, train\n"
             "candidates (seeds x tether strengths), pick on validation data, mine the pick's own loops and train\n"
             "again, write each output kind, evaluate it on the held-out prompts and write DIR/report.md and .html.\n",
    .notes = "Rerunning with the same --out reuses every finished stage whose settings and inputs did not change\n"
             "(DIR/manifest.json); a stage whose settings changed runs again, and so does what depends on it.\n"
             "The data paths default to the checkout's data/ (run it from the repository root).\n"};

// parse: the defaults, the config file, then the flags, into a (exits on a bad option or file).
static void parse(antidoom_opts *a, int argc, char **argv, void **doc) {
    char err[1024];
    *a = (antidoom_opts){.c = bn_recipe_cfg_default()};
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--full")) bn_recipe_cfg_full(&a->c); // the budget first: the other flags override it
    const char *config = bn_args_peek(argc, argv, "--config", NULL);
    *doc = NULL;
    if (config && bn_recipe_cfg_load_json(&a->c, config, doc, err, sizeof err)) {
        fprintf(stderr, "bonsai-antidoom: %s\n", err);
        exit(1);
    }
    a->eng = (bn_engine_opts){.model = a->c.model, .n_threads = a->c.threads, .n_ctx = a->c.n_ctx,
                              .n_gpu_layers = a->c.n_gpu_layers};
    bn_arg recipe_args[BN_RECIPE_N_ARGS];
    if (bn_recipe_args(recipe_args, BN_RECIPE_N_ARGS) < 0) bn_args_fail(&tool, "internal: too many settings");
    const bn_arg_table tables[] = {BN_TABLE(antidoom_args, a), BN_TABLE(recipe_args, &a->c),
                                   BN_TABLE(bn_engine_args, &a->eng), BN_TABLE(bn_progress_args, NULL), {0}};
    bn_args_parse(&tool, tables, argc, argv);
    a->c.model = a->eng.model;
    a->c.threads = a->eng.n_threads > 0 ? a->eng.n_threads : bn_n_threads_default();
    a->c.n_ctx = a->eng.n_ctx;
    a->c.n_gpu_layers = a->eng.n_gpu_layers;
    if (!a->c.model) bn_args_fail(&tool, "-m is required (or \"model\" in --config)");
    if (a->eng.n_lora > 0)
        bn_args_fail(&tool, "--lora: bonsai-antidoom trains its own adapter; give the base model alone");
    if (a->eng.f32_act)
        bn_args_fail(&tool, "--f32-activations: bonsai-antidoom measures its outputs as llama.cpp runs them");
    if (!a->c.out_dir) bn_args_fail(&tool, "--out is required (or \"out\" in --config)");
    if (bn_recipe_parse_kinds(a->c.kinds, err, sizeof err) < 0) bn_args_fail(&tool, "--kind: %s", err);
    if (bn_recipe_train_gemm(&a->c) < 0)
        bn_args_fail(&tool, "--train-gemm: '%s' is not one of %s", a->c.train_gemm, BN_TRAIN_GEMM_NAMES);
    const char *head = bn_recipe_output_type(&a->c);
    if (head && bn_parse_tensor_type_name(head, false, err, sizeof err) < 0)
        bn_args_fail(&tool, "--output-tensor-type: %s", err);
}

int main(int argc, char **argv) {
    antidoom_opts a;
    void *doc;
    char err[1024];
    parse(&a, argc, argv, &doc);
    char note[256];
    int rc = bn_recipe_fit_output_type(&a.c, note, sizeof note, err, sizeof err);
    if (rc == 0 && note[0]) fprintf(stderr, "bonsai-antidoom: %s\n", note);
    if (rc == 0) rc = bn_recipe_main(&a.c, err, sizeof err);
    if (rc) fprintf(stderr, "bonsai-antidoom: %s\n", err);
    bn_recipe_json_free(doc);
    return rc ? 1 : 0;
}
