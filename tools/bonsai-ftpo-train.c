// tools/bonsai-ftpo-train.c — FTPO LoRA training on doom-loop pairs (docs/antidoom.md §9–11), plus
// --eval (no-grad metrics of an adapter) and --merge (adapter into a GGUF, docs/antidoom.md §12):
//   bonsai-ftpo-train -m MODEL.gguf -p PAIRS.jsonl[.gz] -o ADAPTER.gguf [options]
// Defaults = the seeds' recipe: r 32, q,k,v,o,gate,up,down, 12 epochs, lr 3e-5, batch 4 × 4,
// warmup 0.1 + linear decay, AdamW wd 0.01, clip 2.5, early stop at running chosen_win >= 0.4,
// antidoom loss preset. Per-step lines on stderr (and --log FILE as JSON lines).
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "core/model.h"
#include "core/tokenizer.h"
#include "base/util.h"
#include "train/trainer.h"
#include "train/lora.h"
#include "train/backward.h"
#include "train/merge.h"
#include "quant/quant.h"

static void usage(int code) {
    fprintf(code ? stderr : stdout,
        "usage: bonsai-ftpo-train -m MODEL.gguf -p PAIRS.jsonl -o ADAPTER.gguf [options]\n"
        "adapter:\n"
        "  --rank N             LoRA rank (32)\n"
        "  --alpha X            LoRA alpha (= rank: scale 1)\n"
        "  --dropout P          LoRA dropout (0)\n"
        "  --targets LIST       q,k,v,o,gate,up,down (also lm_head, qkv,z,beta,alpha,ssm_out, attn, ffn, gdn, all)\n"
        "  --ste-type TYPE      train through requantization (Q1_0, Q2_0, ...): the forward uses the model as\n"
        "                       bonsai-quantize --type TYPE stores it, adapted weights as deq(Q(W + s·B·A)) after each\n"
        "                       step, straight-through gradients; reference/eval = the quantized model. Ship with\n"
        "                       --merge ... --merge-type TYPE (needs --dropout 0)\n"
        "  --keep-scales        with --ste-type Q1_0|Q2_0|PQ2_0 and with --merge-type of that type: adapted weights\n"
        "                       keep the quantized base's block scales, the adapter changes only codes (signs,\n"
        "                       ternary codes; a Q2_0 block's scale is its max |w|, so without this one large\n"
        "                       element rescales its whole block). Merge with the flag it was trained with\n"
        "  --seed N             init / shuffle / dropout seed (3407)\n"
        "optimisation:\n"
        "  --epochs N           (12)          --lr X             (3e-5)\n"
        "  --batch N            (4)           --grad-accum N     (4)\n"
        "  --warmup-ratio X     (0.1)         --weight-decay X   (0.01)\n"
        "  --max-grad-norm X    (2.5)         --early-stop X     running chosen_win threshold (0.4; 0 = off)\n"
        "  --log-window N       steps in the running mean (5)\n"
        "  --max-steps N        stop after N optimizer steps in this run (0 = no limit)\n"
        "  --max-seq N          drop rows with len(context)+1 > N (6000)\n"
        "loss (docs/antidoom.md §9):\n"
        "  --preset NAME        antidoom (default: per-row mean, λ_nt 0.4, λ_t 0.05, τ_t 0.5) |\n"
        "                       antislop (weighted mean + fallback, τ_t 1, λ_agg 0.1, τ_agg 2)\n"
        "  --eps X  --lambda-nt X  --lambda-t X  --tau-t X  --lambda-agg X  --tau-agg X  --weighted-mean\n"
        "plain-text tether (off by default):\n"
        "  --tether-text FILE   plain UTF-8 text (e.g. the model's training corpus; never the text perplexity is\n"
        "                       measured on): each step adds λ·mean KL(p_ref ‖ p_θ) over every position of\n"
        "                       --tether-batch windows of --tether-ctx tokens (p_ref = the base the policy starts\n"
        "                       from: the quantized base with --ste-type); windows in a seeded order, reference\n"
        "                       log-probs cached per window\n"
        "  --lambda-tether X    (0 = off)     --tether-ctx N (64)   --tether-batch N (2)\n"
        "files:\n"
        "  --checkpoint FILE    write a checkpoint at epoch ends / --save-every steps / the end\n"
        "  --save-every N       (0)           --resume FILE      continue from a checkpoint\n"
        "  --init-adapter FILE  start from this adapter (same targets/rank) instead of the PEFT init; fresh\n"
        "                       optimizer and schedule (e.g. a second round on new pairs)\n"
        "  --log FILE           per-step JSON lines\n"
        "  --no-eval            skip the per-epoch no-grad evaluation\n"
        "  -t N                 threads for attention / DeltaNet (all CPUs; matmuls use OpenBLAS threads)\n"
        "  -q                   no per-step lines\n"
        "  (SIGINT/SIGTERM: finish the step, write the checkpoint and the adapter, exit 0)\n"
        "evaluation only (no training; -o not needed):\n"
        "  --eval ADAPTER.gguf  chosen_win / margin_win / mean Δ / loss of the base model and of the adapter\n"
        "                       over the train and held-out rows\n"
        "merge only (no training; -p not needed):\n"
        "  --merge ADAPTER.gguf -o MERGED.gguf [--merge-type keep|f16|f32|TYPE] [--lora-scale X]\n"
        "                       W' = W + scale·(α/r)·B·A in fp32 for each adapted tensor, re-quantized to its type\n"
        "                       (keep, default) or written F16/F32; everything else copied byte for byte.\n"
        "                       TYPE (q1_0, q2_0, q8_0, ...): the whole model as bonsai-quantize --type TYPE writes\n"
        "                       it, adapted tensors quantized straight from fp32 (what --ste-type TYPE trained;\n"
        "                       add --keep-scales if it was trained with it)\n");
    exit(code);
}

// on_signal: SIGINT/SIGTERM finish the current step, checkpoint and exit cleanly.
static void on_signal(int sig) {
    (void)sig;
    bn_ftpo_train_request_stop();
}

// merge_main: base + adapter → merged GGUF with per-tensor diagnostics; exit code.
static int merge_main(const char *base, const char *adapter, const char *type, bool keep_scales, float scale,
                      const char *out) {
    char err[512];
    int mode = !strcmp(type, "keep") ? BN_MERGE_KEEP : !strcmp(type, "f16") ? BN_MERGE_F16 : !strcmp(type, "f32") ? BN_MERGE_F32 : -1;
    if (mode < 0 && bn_type_from_name(type) < 0) {
        fprintf(stderr, "bonsai-ftpo-train: --merge-type must be keep, f16, f32 or a quantization type (q1_0, q2_0, ...)\n");
        return 1;
    }
    if (keep_scales && mode >= 0) {
        fprintf(stderr, "bonsai-ftpo-train: --keep-scales needs --merge-type q1_0, q2_0 or pq2_0\n");
        return 1;
    }
    bn_lora *l = bn_lora_load_gguf(adapter, err, sizeof err);
    if (!l) { fprintf(stderr, "bonsai-ftpo-train: %s\n", err); return 1; }
    bn_merge_stat *st = xcalloc((size_t)l->n_tensors, sizeof *st);
    int rc = mode >= 0 ? bn_lora_merge_gguf(base, l, scale, mode, out, st, err, sizeof err)
                       : bn_lora_merge_requant(base, l, scale, type, keep_scales, out, st, err, sizeof err);
    if (rc) fprintf(stderr, "bonsai-ftpo-train: %s\n", err);
    else {
        printf("%-32s %-10s %12s %10s %10s\n", "tensor", "type", "|dW|/|W|", "kept", "sign_flips");
        for (int i = 0; i < l->n_tensors; i++)
            printf("%-32s %-10s %12.4g %10.4f %10.5f\n", st[i].name, bn_type_name(st[i].type), st[i].rel_delta, st[i].kept,
                   st[i].sign_flips);
        fprintf(stderr, "ftpo-train: merged %d tensors (scale %g · %g/%d) into %s\n", l->n_tensors, scale, l->alpha, l->r, out);
    }
    free(st);
    bn_lora_free(l);
    return rc ? 1 : 0;
}

// eval_main: prints no-grad metrics of the base and the adapter on train / held-out rows; exit code.
static int eval_main(const bn_model *m, const bn_train_rows *rows, const char *adapter_path, const bn_ftpo_cfg *cfg) {
    char err[512];
    bn_lora *l = bn_lora_load_gguf(adapter_path, err, sizeof err);
    if (!l) { fprintf(stderr, "bonsai-ftpo-train: %s\n", err); return 1; }
    printf("%-8s %-8s %6s %10s %10s %10s %10s\n", "model", "rows", "n", "chosen_win", "margin_win", "mean_delta", "loss");
    for (int which = 0; which < 2; which++)
        for (int with = 0; with < 2; with++) {
            bn_ftpo_eval_result r;
            if (bn_ftpo_eval(m, rows, with ? l : NULL, cfg, which, &r, err, sizeof err)) {
                fprintf(stderr, "bonsai-ftpo-train: %s\n", err);
                bn_lora_free(l);
                return 1;
            }
            if (r.n_rows == 0) continue;
            printf("%-8s %-8s %6d %10.4f %10.4f %10.4f %10.4f\n", with ? "adapter" : "base", which ? "heldout" : "train",
                   r.n_rows, r.chosen_win, r.margin_win, r.mean_delta, r.loss);
        }
    bn_lora_free(l);
    return 0;
}

static const char *const T = "bonsai-ftpo-train";

int main(int argc, char **argv) {
    const char *tether_path = NULL;
    const char *model_path = NULL, *pairs_path = NULL, *targets = NULL, *preset = NULL, *eval_adapter = NULL, *merge_adapter = NULL, *merge_type = "keep";
    float lora_scale = 1.0f;
    bn_ftpo_train_opts o = bn_ftpo_train_defaults();
    int max_seq = 6000, n_threads = bn_n_threads_default();
    // loss overrides applied after the preset (NAN = keep)
    float eps = NAN, lnt = NAN, lt = NAN, taut = NAN, lagg = NAN, tagg = NAN;
    bool weighted = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) usage(0);
        else if (!strcmp(a, "-m") && has) model_path = argv[++i];
        else if (!strcmp(a, "-p") && has) pairs_path = argv[++i];
        else if (!strcmp(a, "-o") && has) o.out_adapter = argv[++i];
        else if (!strcmp(a, "--rank") && has) o.rank = (int)bn_arg_int(T, a, argv[++i], 1, 65536);
        else if (!strcmp(a, "--alpha") && has) o.alpha = (float)bn_arg_float(T, a, argv[++i], -1e6, 1e6);
        else if (!strcmp(a, "--dropout") && has) o.dropout = (float)bn_arg_float(T, a, argv[++i], 0, 0.99);
        else if (!strcmp(a, "--targets") && has) targets = argv[++i];
        else if (!strcmp(a, "--ste-type") && has) o.ste_type = argv[++i];
        else if (!strcmp(a, "--keep-scales")) o.ste_keep_scales = true;
        else if (!strcmp(a, "--seed") && has) o.seed = (uint64_t)bn_arg_int(T, a, argv[++i], 0, INT64_MAX);
        else if (!strcmp(a, "--epochs") && has) o.epochs = (int)bn_arg_int(T, a, argv[++i], 1, 1000000);
        else if (!strcmp(a, "--lr") && has) o.lr = (float)bn_arg_float(T, a, argv[++i], 0, 1e6);
        else if (!strcmp(a, "--batch") && has) o.batch = (int)bn_arg_int(T, a, argv[++i], 1, 1 << 20);
        else if (!strcmp(a, "--grad-accum") && has) o.grad_accum = (int)bn_arg_int(T, a, argv[++i], 1, 1 << 20);
        else if (!strcmp(a, "--warmup-ratio") && has) o.warmup_ratio = (float)bn_arg_float(T, a, argv[++i], 0, 1);
        else if (!strcmp(a, "--weight-decay") && has) o.adam.weight_decay = (float)bn_arg_float(T, a, argv[++i], 0, 1e6);
        else if (!strcmp(a, "--max-grad-norm") && has) o.max_grad_norm = (float)bn_arg_float(T, a, argv[++i], 0, 1e30);
        else if (!strcmp(a, "--early-stop") && has) o.early_stop = (float)bn_arg_float(T, a, argv[++i], 0, 1);
        else if (!strcmp(a, "--log-window") && has) o.log_window = (int)bn_arg_int(T, a, argv[++i], 1, 1 << 20);
        else if (!strcmp(a, "--max-steps") && has) o.max_steps = bn_arg_int(T, a, argv[++i], 0, INT64_MAX);
        else if (!strcmp(a, "--max-seq") && has) max_seq = (int)bn_arg_int(T, a, argv[++i], 2, INT32_MAX);
        else if (!strcmp(a, "--preset") && has) preset = argv[++i];
        else if (!strcmp(a, "--eps") && has) eps = (float)bn_arg_float(T, a, argv[++i], -1e30, 1e30);
        else if (!strcmp(a, "--lambda-nt") && has) lnt = (float)bn_arg_float(T, a, argv[++i], -1e30, 1e30);
        else if (!strcmp(a, "--lambda-t") && has) lt = (float)bn_arg_float(T, a, argv[++i], -1e30, 1e30);
        else if (!strcmp(a, "--tau-t") && has) taut = (float)bn_arg_float(T, a, argv[++i], -1e30, 1e30);
        else if (!strcmp(a, "--lambda-agg") && has) lagg = (float)bn_arg_float(T, a, argv[++i], -1e30, 1e30);
        else if (!strcmp(a, "--tau-agg") && has) tagg = (float)bn_arg_float(T, a, argv[++i], -1e30, 1e30);
        else if (!strcmp(a, "--weighted-mean")) weighted = true;
        else if (!strcmp(a, "--tether-text") && has) tether_path = argv[++i];
        else if (!strcmp(a, "--lambda-tether") && has) o.lambda_tether = (float)bn_arg_float(T, a, argv[++i], 0, 1e30);
        else if (!strcmp(a, "--tether-ctx") && has) o.tether_ctx = (int)bn_arg_int(T, a, argv[++i], 2, 1 << 20);
        else if (!strcmp(a, "--tether-batch") && has) o.tether_batch = (int)bn_arg_int(T, a, argv[++i], 1, 1 << 20);
        else if (!strcmp(a, "--checkpoint") && has) o.ckpt_path = argv[++i];
        else if (!strcmp(a, "--save-every") && has) o.save_every = (int)bn_arg_int(T, a, argv[++i], 0, INT32_MAX);
        else if (!strcmp(a, "--resume") && has) o.resume_path = argv[++i];
        else if (!strcmp(a, "--init-adapter") && has) o.init_adapter = argv[++i];
        else if (!strcmp(a, "--log") && has) o.log_jsonl = argv[++i];
        else if (!strcmp(a, "--no-eval")) o.eval_each_epoch = false;
        else if (!strcmp(a, "-q")) o.quiet = true;
        else if (!strcmp(a, "-t") && has) n_threads = (int)bn_arg_int(T, a, argv[++i], 1, 4096);
        else if (!strcmp(a, "--eval") && has) eval_adapter = argv[++i];
        else if (!strcmp(a, "--merge") && has) merge_adapter = argv[++i];
        else if (!strcmp(a, "--merge-type") && has) merge_type = argv[++i];
        else if (!strcmp(a, "--lora-scale") && has) lora_scale = (float)bn_arg_float(T, a, argv[++i], -1e6, 1e6);
        else bn_arg_unknown(T, a);
    }
    if (merge_adapter) {
        if (!model_path || !o.out_adapter) usage(1);
        return merge_main(model_path, merge_adapter, merge_type, o.ste_keep_scales, lora_scale, o.out_adapter);
    }
    if (!model_path || !pairs_path || (!o.out_adapter && !eval_adapter)) usage(1);
    char err[512];
    if (targets) {
        int mask = bn_lora_parse_targets(targets, err, sizeof err);
        if (mask < 0) { fprintf(stderr, "bonsai-ftpo-train: %s\n", err); return 1; }
        o.targets = (unsigned)mask;
    }
    if (preset) {
        if (!strcmp(preset, "antidoom")) o.loss = bn_ftpo_cfg_antidoom();
        else if (!strcmp(preset, "antislop")) o.loss = bn_ftpo_cfg_antislop();
        else { fprintf(stderr, "bonsai-ftpo-train: unknown preset '%s' (antidoom, antislop)\n", preset); return 1; }
    }
    if (!isnan(eps)) o.loss.eps = eps;
    if (!isnan(lnt)) o.loss.lambda_nt = lnt;
    if (!isnan(lt)) o.loss.lambda_t = lt;
    if (!isnan(taut)) o.loss.tau_t = taut;
    if (!isnan(lagg)) o.loss.lambda_agg = lagg;
    if (!isnan(tagg)) o.loss.tau_agg = tagg;
    if (weighted) o.loss.reduction = BN_FTPO_WEIGHTED;
    if (o.rank <= 0 || o.epochs <= 0 || o.batch <= 0 || o.grad_accum <= 0 || o.lr < 0 || o.dropout < 0 || o.dropout >= 1 ||
        o.loss.eps <= 0 || o.lambda_tether < 0 || o.tether_ctx < 2 || o.tether_batch < 1) {
        fprintf(stderr, "bonsai-ftpo-train: rank/epochs/batch/grad-accum must be > 0, lr >= 0, 0 <= dropout < 1, eps > 0, "
                "lambda-tether >= 0, tether-ctx >= 2, tether-batch >= 1\n");
        return 1;
    }
    if ((o.lambda_tether > 0) != (tether_path != NULL)) {
        fprintf(stderr, "bonsai-ftpo-train: --tether-text and --lambda-tether > 0 go together\n");
        return 1;
    }

    bn_train_set_threads(n_threads);
    bn_model *m = bn_model_load(model_path, err, sizeof err);
    if (!m) { fprintf(stderr, "bonsai-ftpo-train: %s\n", err); return 1; }
    bn_tokenizer *tok = bn_tokenizer_from_gguf(m->gguf, err, sizeof err); // only for rows without ids
    bn_train_rows *rows = bn_train_rows_load(pairs_path, tok, m->cfg.n_vocab, max_seq, err, sizeof err);
    if (!rows) { fprintf(stderr, "bonsai-ftpo-train: %s\n", err); return 1; }
    fprintf(stderr, "ftpo-train: %d rows from %s (dropped: %d trimmed-prompt, %d too long, %d without chosen)\n",
            rows->n_rows, pairs_path, rows->n_dropped_trimmed, rows->n_dropped_long, rows->n_dropped_no_chosen);
    int32_t *tether_tok = NULL;
    if (tether_path && !eval_adapter) {
        size_t n_text;
        char *text = bn_read_file(tether_path, &n_text, err, sizeof err);
        if (!text) { fprintf(stderr, "bonsai-ftpo-train: %s\n", err); return 1; }
        int n_tok = tok ? bn_tokenize(tok, text, n_text, false, false, &tether_tok) : -1;
        free(text);
        if (n_tok < 0) {
            fprintf(stderr, "bonsai-ftpo-train: %s: %s\n", tether_path,
                    tok ? "cannot tokenize" : "the model has no tokenizer to tokenize it");
            return 1;
        }
        o.tether_tokens = tether_tok;
        o.n_tether_tokens = n_tok;
        fprintf(stderr, "ftpo-train: tether text %s: %d tokens\n", tether_path, n_tok);
    }
    if (eval_adapter) {
        int erc = eval_main(m, rows, eval_adapter, &o.loss);
        bn_train_rows_free(rows);
        bn_tokenizer_free(tok);
        bn_model_free(m);
        return erc;
    }
    bn_ftpo_train_result res;
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    int rc = bn_ftpo_train(m, rows, &o, &res, err, sizeof err);
    if (rc) { fprintf(stderr, "bonsai-ftpo-train: %s\n", err); return 1; }
    if (res.interrupted && o.ckpt_path)
        fprintf(stderr, "ftpo-train: interrupted; continue with --resume %s (same options)\n", o.ckpt_path);
    fprintf(stderr, "ftpo-train: %lld/%lld steps%s; chosen_win %.3f -> %.3f (running %.3f); loss %.5f -> %.5f; adapter %s\n",
            (long long)res.steps, (long long)res.total_steps,
            res.early_stopped ? " (early stop)" : res.interrupted ? " (interrupted)" : "",
            res.first_chosen_win, res.last_chosen_win, res.chosen_win_avg, res.first_loss, res.last_loss, o.out_adapter);
    if (tether_tok) fprintf(stderr, "ftpo-train: tether KL %.5g -> %.5g\n", res.first_tether, res.last_tether);
    free(tether_tok);
    bn_train_rows_free(rows);
    bn_tokenizer_free(tok);
    bn_model_free(m);
    return 0;
}
