// bonsai-prune-flips — post-hoc flip pruning of a requantized head-only antidoom model (train/prune.h): reverts
// output.weight blocks to the quantized base's while that lowers the plain-text KL to the base more than it costs
// in train-pair margin, keeping the train-pair chosen_win.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/model.h"
#include "core/tokenizer.h"
#include "base/util.h"
#include "base/args.h"
#include "train/pairs_in.h"
#include "train/prune.h"

typedef struct {
    const char *base, *model, *pairs, *text, *out;
    bn_prune_cfg cfg;
} prune_opts;

#define O(f) offsetof(prune_opts, f)
static const bn_arg prune_args[] = {
    BN_STR("--base", O(base), "FILE", "the quantized base (required)"),
    BN_STR("-m, --model", O(model), "FILE", "the same model with a changed output.weight (required)"),
    BN_STR("-p, --pairs", O(pairs), "FILE", "TRAIN pair rows only, never the held-out ones (required)"),
    BN_STR("--text", O(text), "FILE", "plain text, never the perplexity text (required)"),
    BN_STR("-o, --output", O(out), "FILE", "the pruned model (required)"),
    BN_DOUBLE("--cw-drop", O(cfg.cw_drop), "X", "train-pair chosen_win may fall at most X below MODEL's", 0, 1),
    BN_DOUBLE("--mu", O(cfg.mu), "X", "KL nats per unit of mean train-pair margin (chosen - rejected logit) lost", 0,
              1e30),
    BN_CHOICE("--objective", O(cfg.objective), "kl|nll",
              "what a revert must lower on the text: KL to the base (kl) or the next-token loss (nll)"),
    BN_INT("-c, --ctx-size, --ctx", O(cfg.text_ctx), "N", "text window", 2, 1 << 20),
    BN_I64("--max-text", O(cfg.max_text), "N", "text tokens used (0: all)", 0, 0x1p63),
    BN_INT("-t, --threads", O(cfg.n_threads), "N", "forward threads (0: all CPUs)", 0, 4096),
    {0}};
#undef O

static const bn_args_tool tool = {
    .name = "bonsai-prune-flips",
    .usage = "usage: bonsai-prune-flips --base BASE.gguf -m MODEL.gguf -p TRAIN_PAIRS.jsonl --text FILE -o OUT.gguf\n"
             "                          [--cw-drop X] [--mu X] [--objective kl|nll] [-c N] [--max-text N] [-t N]\n"
             "Reverts output.weight blocks of MODEL to BASE's while that lowers the text KL to the base more than it\n"
             "costs in train-pair margin, keeping the train-pair chosen_win.\n",
    .notes =
        "BASE and MODEL: the same quantized model, differing only in output.weight (e.g. base-Q1_0 and the merged\n"
        "STE model).\n"};

int main(int argc, char **argv) {
    const char *T = "bonsai-prune-flips";
    prune_opts o = {.cfg = bn_prune_cfg_default()};
    const bn_arg_table tables[] = {BN_TABLE(prune_args, &o), {0}};
    bn_args_parse(&tool, tables, argc, argv);
    if (!o.base || !o.model || !o.pairs || !o.text || !o.out)
        bn_args_fail(&tool, "--base, -m, -p, --text and -o are required");
    char err[512];
    bn_model *m = bn_model_load(o.base, err, sizeof err);
    if (!m) { fprintf(stderr, "%s: %s\n", T, err); return 1; }
    bn_tokenizer *tok = bn_tokenizer_from_gguf(m->gguf, err, sizeof err);
    if (!tok) { fprintf(stderr, "%s: %s\n", T, err); return 1; }
    bn_train_rows *rows = bn_train_rows_load(o.pairs, tok, m->cfg.n_vocab, 1 << 20, err, sizeof err);
    if (!rows) { fprintf(stderr, "%s: %s\n", T, err); return 1; }
    size_t n_text = 0;
    char *text = bn_read_file(o.text, &n_text, err, sizeof err);
    if (!text) { fprintf(stderr, "%s: %s\n", T, err); return 1; }
    int32_t *ids = NULL;
    int n_ids = bn_tokenize(tok, text, n_text, false, false, &ids);
    free(text);
    bn_tokenizer_free(tok);
    bn_model_free(m);
    if (n_ids <= 0) { fprintf(stderr, "%s: %s: cannot tokenize\n", T, o.text); return 1; }

    bn_prune_stats st;
    int rc = bn_prune_flips(o.base, o.model, rows, ids, n_ids, &o.cfg, o.out, &st, err, sizeof err);
    free(ids);
    bn_train_rows_free(rows);
    if (rc) { fprintf(stderr, "%s: %s\n", T, err); return 1; }
    printf("prune-flips: %d of %d head blocks differ from the base (%d rows); reverted %d, %d rows left changed\n",
           st.n_changed, st.n_blocks, st.n_rows_changed, st.n_reverted, st.n_rows_after);
    printf("prune-flips: text KL to the base %.5f -> %.5f nats (%lld positions); train chosen_win %.4f -> %.4f, "
           "mean margin %.4f -> %.4f\n", st.kl_before, st.kl_after, (long long)st.n_text, st.cw_before, st.cw_after,
           st.margin_before, st.margin_after);
    printf("prune-flips: text next-token loss %.5f (base %.5f) -> %.5f nats\n", st.nll_before, st.nll_base,
           st.nll_after);
    printf("prune-flips: wrote %s\n", o.out);
    return 0;
}
