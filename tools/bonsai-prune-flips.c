// bonsai-prune-flips — post-hoc flip pruning of a requantized head-only antidoom model (train/prune.h): reverts
// output.weight blocks to the quantized base's while that lowers the plain-text KL to the base more than it costs
// in train-pair margin, keeping the train-pair chosen_win.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/model.h"
#include "core/tokenizer.h"
#include "base/util.h"
#include "train/pairs_in.h"
#include "train/prune.h"

// usage: prints the help to f
static void usage(FILE *f) {
    fprintf(f,
            "usage: bonsai-prune-flips --base BASE.gguf -m MODEL.gguf -p TRAIN_PAIRS.jsonl --text FILE -o OUT.gguf\n"
            "                          [--cw-drop X] [--mu X] [--ctx N] [--max-text N] [-t N]\n"
            "  BASE and MODEL: the same quantized model, differing only in output.weight (e.g. base-Q1_0 and the\n"
            "  merged STE model). Pairs: TRAIN pairs only (never the held-out ones). Text: plain text, never the\n"
            "  perplexity text.\n"
            "  --cw-drop X   train-pair chosen_win may fall at most X below MODEL's (0)\n"
            "  --mu X        KL nats per unit of mean train-pair margin (chosen - rejected logit) lost (0.01)\n"
            "  --objective kl|nll  what a revert must lower on the text: KL to the base (kl) or the next-token loss\n"
            "  --ctx N       text window (128); --max-text N: text tokens used (0 = all)\n");
}

int main(int argc, char **argv) {
    const char *T = "bonsai-prune-flips";
    const char *base = NULL, *model = NULL, *pairs = NULL, *text_path = NULL, *out = NULL;
    bn_prune_cfg cfg = bn_prune_cfg_default();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!v) bn_arg_unknown(T, a);
        if (!strcmp(a, "--base")) base = v;
        else if (!strcmp(a, "-m")) model = v;
        else if (!strcmp(a, "-p")) pairs = v;
        else if (!strcmp(a, "--text")) text_path = v;
        else if (!strcmp(a, "-o")) out = v;
        else if (!strcmp(a, "--cw-drop")) cfg.cw_drop = bn_arg_float(T, a, v, 0, 1);
        else if (!strcmp(a, "--mu")) cfg.mu = bn_arg_float(T, a, v, 0, 1e30);
        else if (!strcmp(a, "--objective")) {
            if (!strcmp(v, "kl")) cfg.objective = BN_PRUNE_KL;
            else if (!strcmp(v, "nll")) cfg.objective = BN_PRUNE_NLL;
            else { fprintf(stderr, "%s: --objective is kl or nll\n", T); return 1; }
        } else if (!strcmp(a, "--ctx")) cfg.text_ctx = (int)bn_arg_int(T, a, v, 2, 1 << 20);
        else if (!strcmp(a, "--max-text")) cfg.max_text = bn_arg_int(T, a, v, 0, INT64_MAX);
        else if (!strcmp(a, "-t")) cfg.n_threads = (int)bn_arg_int(T, a, v, 1, 4096);
        else bn_arg_unknown(T, a);
        i++;
    }
    if (!base || !model || !pairs || !text_path || !out) { usage(stderr); return 1; }

    char err[512];
    bn_model *m = bn_model_load(base, err, sizeof err);
    if (!m) { fprintf(stderr, "%s: %s\n", T, err); return 1; }
    bn_tokenizer *tok = bn_tokenizer_from_gguf(m->gguf, err, sizeof err);
    if (!tok) { fprintf(stderr, "%s: %s\n", T, err); return 1; }
    bn_train_rows *rows = bn_train_rows_load(pairs, tok, m->cfg.n_vocab, 1 << 20, err, sizeof err);
    if (!rows) { fprintf(stderr, "%s: %s\n", T, err); return 1; }
    size_t n_text = 0;
    char *text = bn_read_file(text_path, &n_text, err, sizeof err);
    if (!text) { fprintf(stderr, "%s: %s\n", T, err); return 1; }
    int32_t *ids = NULL;
    int n_ids = bn_tokenize(tok, text, n_text, false, false, &ids);
    free(text);
    bn_tokenizer_free(tok);
    bn_model_free(m);
    if (n_ids <= 0) { fprintf(stderr, "%s: %s: cannot tokenize\n", T, text_path); return 1; }

    bn_prune_stats st;
    int rc = bn_prune_flips(base, model, rows, ids, n_ids, &cfg, out, &st, err, sizeof err);
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
    printf("prune-flips: wrote %s\n", out);
    return 0;
}
