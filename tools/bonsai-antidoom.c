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

typedef struct {
    bn_recipe_cfg c;
    bn_engine_opts eng;
    const char *config;
    bool full;
    int n_mine_given;
} antidoom_opts;

// tethers_fn: --tethers KIND=A,B: the λ_tether candidates of one output kind.
static int tethers_fn(void *base, const char *opt, const char *v, char *err, size_t errlen) {
    antidoom_opts *a = base;
    const char *eq = strchr(v, '=');
    char kind[16];
    if (!eq || eq - v >= (int)sizeof kind) return bn_err(err, errlen, "'%s' is not KIND=A,B,...", v);
    snprintf(kind, sizeof kind, "%.*s", (int)(eq - v), v);
    int mask = bn_recipe_parse_kinds(kind, err, errlen);
    if (mask < 0) return -1;
    int k = __builtin_ctz((unsigned)mask);
    int n = bn_recipe_parse_reals(eq + 1, a->c.tethers[k], BN_RECIPE_MAX_LIST, err, errlen);
    if (n <= 0) return n < 0 ? -1 : bn_err(err, errlen, "'%s': no tether strength", v);
    a->c.n_tethers[k] = n;
    return 0;
}

// mine_fn: --mine-prompts FILE (repeatable): the first one replaces the default list.
static int mine_fn(void *base, const char *opt, const char *v, char *err, size_t errlen) {
    antidoom_opts *a = base;
    if (a->n_mine_given == BN_RECIPE_MAX_LIST) return bn_err(err, errlen, "at most %d files", BN_RECIPE_MAX_LIST);
    a->c.mine_prompts[a->n_mine_given++] = v;
    a->c.n_mine_prompts = a->n_mine_given;
    return 0;
}

#define O(f) offsetof(antidoom_opts, f)
static const bn_arg antidoom_args[] = {
    BN_SECTION("run"),
    BN_STR("--out", O(c.out_dir), "DIR",
           "every stage's output, the manifest and the report (required; reused on rerun)"),
    BN_STR("--config", O(config), "FILE", "settings as a JSON object (keys: docs/antidoom.md §18); flags override it"),
    BN_STR("--kind, --kinds", O(c.kinds), "LIST", "outputs: adapter, f16, q1_0, q2_0 (comma list; default adapter)"),
    BN_TRUE("--full", O(full), "the full budget: all mining and validation prompts, 3 rounds, 2 seeds, 3 Q1_0 tethers"),
    BN_SEED("-s, --seed", O(c.seed), "the first candidate's LoRA init, shuffles and tether windows (then seed+1, ...)"),
    BN_SEED("--mine-seed", O(c.mine_seed), "mining's sampling (apart from -s: runs of several -s can share mining)"),
    BN_SECTION("data"),
    BN_FN("--mine-prompts", mine_fn, "FILE", "prompts to mine (repeatable; default the train prompts and the tether "
                                             "prompts)"),
    BN_INT("--mine-max-prompts", O(c.mine_max), "N",
           "prompts mined per round, split over the files: the first of each (0: all)", 0, INT32_MAX),
    BN_TRUE("--mine-spread", O(c.mine_spread), "evenly spaced prompts of each file instead of the first ones"),
    BN_STR("--heldout-prompts", O(c.heldout_prompts), "FILE", "held-out evaluation prompts (no pick sees them)"),
    BN_STR("--heldout-text", O(c.heldout_text), "FILE", "held-out perplexity text"),
    BN_STR("--unseen-prompts", O(c.unseen_prompts), "FILE", "a prompt source no stage touches, evaluated at the end"),
    BN_STR("--val-pair-prompts", O(c.val_pair_prompts), "FILE", "validation pairs are mined on these"),
    BN_STR("--val-loop-prompts", O(c.val_loop_prompts), "FILE", "validation loop rate prompts"),
    BN_STR("--val-text", O(c.val_text), "FILE", "validation perplexity text"),
    BN_STR("--tether-text", O(c.tether_text), "FILE", "plain text of the training KL tether"),
    BN_INT("--val-max-prompts", O(c.val_max), "N", "validation prompts used of each file (0: all)", 0, INT32_MAX),
    BN_SECTION("generation"),
    BN_INT("-n, --n-predict", O(c.n_predict), "N", "new tokens per prompt (mining and evaluation)", 1, 1 << 20),
    BN_INT("--thinking", O(c.thinking), "1|0|-1",
           "chat template: <think> open, closed, plain ChatML (default: what the model's own template has)", -1, 1),
    BN_SECTION("training"),
    BN_INT("--rounds", O(c.rounds), "N", "most on-policy rounds", 1, 64),
    BN_INT("--seeds", O(c.seeds), "N", "candidates per tether strength (seeds seed, seed+1, ...)", 1, 64),
    BN_FN("--tethers", tethers_fn, "KIND=A,B",
          "λ_tether candidates of a kind (default adapter=3,10 f16=3,10 q1_0=10,30 q2_0=1,3)"),
    BN_DOUBLE("--lr", O(c.lr), "X", "learning rate (0: the model's size preset, bonsai-ftpo-train --help)", 0, 1e3),
    BN_INT("--rank", O(c.rank), "N", "LoRA rank (0: the size preset)", 0, 65536),
    BN_INT("--epochs", O(c.epochs), "N", "epochs", 1, 1000000),
    BN_DOUBLE("--early-stop", O(c.early_stop), "X", "stop at this running chosen_win", 0, 1),
    BN_STR("--targets", O(c.targets), "LIST", "LoRA targets"),
    BN_STR("--output-tensor-type", O(c.output_type), "TYPE",
           "q1_0 / q2_0 outputs: output.weight's type (default q6_k, llama-quantize's rule for low-bit files, which "
           "keeps an lm_head adapter's effect; \"\" = low-bit like the rest)"),
    BN_DOUBLE("--lambda-nt", O(c.lambda_nt), "X", "FTPO non-target tether λ_nt", 0, 1e6),
    BN_DOUBLE("--goal-drift", O(c.goal_drift), "PCT", "validation drift the pick allows before a shortfall", 0, 1e6),
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
    const bn_arg_table tables[] = {BN_TABLE(antidoom_args, a), BN_TABLE(bn_engine_args, &a->eng),
                                   BN_TABLE(bn_progress_args, NULL), {0}};
    bn_args_parse(&tool, tables, argc, argv);
    a->c.model = a->eng.model;
    a->c.threads = a->eng.n_threads > 0 ? a->eng.n_threads : bn_n_threads_default();
    a->c.n_ctx = a->eng.n_ctx;
    a->c.n_gpu_layers = a->eng.n_gpu_layers;
    if (!a->c.model) bn_args_fail(&tool, "-m is required (or \"model\" in --config)");
    if (a->eng.n_lora > 0)
        bn_args_fail(&tool, "--lora: bonsai-antidoom trains its own adapter; give the base model alone");
    if (!a->c.out_dir) bn_args_fail(&tool, "--out is required (or \"out\" in --config)");
    if (bn_recipe_parse_kinds(a->c.kinds, err, sizeof err) < 0) bn_args_fail(&tool, "--kind: %s", err);
    const char *head = bn_recipe_output_type(&a->c);
    if (head && bn_parse_tensor_type_name(head, false, err, sizeof err) < 0)
        bn_args_fail(&tool, "--output-tensor-type: %s", err);
}

int main(int argc, char **argv) {
    antidoom_opts a;
    void *doc;
    char err[1024];
    parse(&a, argc, argv, &doc);
    int rc = bn_recipe_main(&a.c, err, sizeof err);
    if (rc) fprintf(stderr, "bonsai-antidoom: %s\n", err);
    bn_recipe_json_free(doc);
    return rc ? 1 : 0;
}
