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
#include <stdarg.h>
#include <cblas.h>
#include "core/model.h"
#include "core/tokenizer.h"
#include "base/util.h"
#include "base/args.h"
#include "train/trainer.h"
#include "train/lora.h"
#include "train/backward.h"
#include "train/merge.h"
#include "train/memplan.h"
#include "train/dp.h"
#include "train/device.h"
#include "quant/quant.h"

static bool g_follower; // a data-parallel rank other than 0: prints errors only

// note: an information line on stderr, from rank 0 alone in a data-parallel run.
__attribute__((format(printf, 1, 2))) static void note(const char *fmt, ...) {
    if (g_follower) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

// on_signal: SIGINT/SIGTERM finish the current step, checkpoint and exit cleanly.
static void on_signal(int sig) {
    (void)sig;
    bn_ftpo_train_request_stop();
}

// merge_main: base + adapter → merged GGUF with per-tensor diagnostics; exit code.
static int merge_main(const char *base, const char *adapter, const char *type, const char *output_type,
                      bool keep_scales, float scale, const char *out) {
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
    if (output_type && mode >= 0) {
        fprintf(stderr, "bonsai-ftpo-train: --output-tensor-type needs --merge-type TYPE (a quantization type)\n");
        return 1;
    }
    bn_lora *l = bn_lora_load_gguf(adapter, err, sizeof err);
    if (!l) { fprintf(stderr, "bonsai-ftpo-train: %s\n", err); return 1; }
    bn_merge_stat *st = xcalloc((size_t)l->n_tensors, sizeof *st);
    int rc = mode >= 0 ? bn_lora_merge_gguf(base, l, scale, mode, out, st, err, sizeof err)
                       : bn_lora_merge_requant(base, l, scale, type, output_type, keep_scales, out, st, err, sizeof err);
    if (rc) fprintf(stderr, "bonsai-ftpo-train: %s\n", err);
    else {
        printf("|dW|/|W|: the adapter's change against the weight; delta_kept: the share of that change the written\n"
               "(quantized) tensor keeps, 1 = all; sign_flips: the share of elements whose sign differs from the base's\n");
        printf("%-32s %-10s %12s %12s %10s\n", "tensor", "type", "|dW|/|W|", "delta_kept", "sign_flips");
        for (int i = 0; i < l->n_tensors; i++)
            printf("%-32s %-10s %12.4g %12.4f %10.5f\n", st[i].name, bn_type_name(st[i].type), st[i].rel_delta,
                   st[i].kept, st[i].sign_flips);
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

typedef struct {
    bn_ftpo_train_opts t;
    const char *model, *pairs, *targets, *preset, *eval_adapter, *merge_adapter, *merge_type, *tether_path;
    const char *mem_limit; // --mem-limit as given
    float lora_scale;
    int max_seq, n_threads, plan_ctx, plan_act_bytes, n_ranks, dp_timeout;
    bool plan_only;
    float eps, lnt, lt, taut, lagg, tagg; // loss overrides applied after the preset (NAN: the preset's)
    bool weighted;
} ftpo_opts;

#define O(f) offsetof(ftpo_opts, f)
static const bn_arg ftpo_args[] = {
    BN_STR("-m, --model", O(model), "FILE", "the base model GGUF (required)"),
    BN_STR("-p, --pairs", O(pairs), "FILE", "pair rows (.jsonl[.gz]; required but with --merge)"),
    BN_STR("-o, --output", O(t.out_adapter), "FILE", "the adapter GGUF to write (with --merge: the merged model)"),
    BN_INT("-t, --threads", O(n_threads), "N", "threads for attention / DeltaNet (matmuls use OpenBLAS threads)", 1,
           4096),
    BN_INT("-ngl, --gpu-layers, --n-gpu-layers", O(t.n_gpu_layers), "N",
           "N > 0: the forwards and backwards on the GPU (the whole model; with -dp, rank k on device k mod the "
           "devices); without one, a warning and the CPU", 0, INT32_MAX),
    BN_CHOICE("--train-gemm", O(t.train_gemm), BN_TRAIN_GEMM_NAMES,
              "with -ngl: the base weights' products on the GPU with bf16 inputs and fp32 accumulation (tensor cores, "
              "as PEFT trains in bf16) and attention's with TF32 inputs, or f32 (the CPU trainer's arithmetic, at the "
              "GPU's fp32 rate); LoRA products and all other ops stay fp32; without -ngl it changes nothing (the CPU "
              "computes in fp32)"),
    BN_INT("-dp, --data-parallel", O(n_ranks), "N",
           "train as N processes on this machine, each on its share of every micro-batch, gradients summed before "
           "each step (a run of N ranks x batch B equals one of batch N·B; -t defaults to the CPUs / N per rank)",
           1, 256),
    BN_INT("--dp-timeout", O(dp_timeout), "S",
           "under a launcher (torchrun, mpirun, srun: one process per rank, joined through MASTER_ADDR:MASTER_PORT), "
           "how long a rank waits for the others to start and at each gradient sum before it fails", 1, 86400),
    BN_SECTION("memory plan (docs/antidoom.md §19)"),
    BN_TRUE("--plan-only", O(plan_only),
            "print the memory plan of this run's settings as a table and exit (no training; -p and -o not needed)"),
    BN_STR("--mem-limit", O(mem_limit), "BYTES",
           "refuse a run (or a plan) whose planned total exceeds this: a byte count or 512M, 12G, 141G (K/M/G/T = "
           "2^10, 2^20, 2^30, 2^40)"),
    BN_INT("-c, --ctx-size", O(plan_ctx), "N",
           "tokens per row the plan assumes (default: the longest row of -p, else 4096)", 1, INT32_MAX),
    BN_INT("--plan-act-bytes", O(plan_act_bytes), "N",
           "bytes per activation element in the plan: 4 (fp32, what this CPU trainer keeps) or 2 (16-bit)", 2, 4),
    BN_TRUE("-q", O(t.quiet), "no per-step lines"),
    BN_SECTION("adapter"),
    BN_INT("--rank", O(t.rank), "N", "LoRA rank (default: the model's size preset, see below)", 1, 65536),
    BN_FLOAT("--alpha", O(t.alpha), "X", "LoRA alpha (0: the rank, a scale of 1)", -1e6, 1e6),
    BN_FLOAT("--dropout", O(t.dropout), "P", "LoRA dropout", 0, 0.99),
    BN_STR("--targets", O(targets), "LIST",
           "q,k,v,o,gate,up,down (default; also lm_head, qkv,z,beta,alpha,ssm_out, attn, ffn, gdn, all)"),
    BN_STR("--ste-type", O(t.ste_type), "TYPE",
           "train through requantization (Q1_0, Q2_0, ...): the forward uses the model as bonsai-quantize --type TYPE "
           "stores it, adapted weights as deq(Q(W + s·B·A)) after each step, straight-through gradients; "
           "reference/eval = the quantized model. Ship with --merge ... --merge-type TYPE (needs --dropout 0)"),
    BN_TRUE(
        "--keep-scales", O(t.ste_keep_scales),
        "with --ste-type Q1_0|Q2_0|PQ2_0 and with --merge-type of that type: adapted weights keep the quantized base's "
        "block scales, the adapter changes only codes (signs, ternary codes; a Q2_0 block's scale is its max |w|, so "
        "without this one large element rescales its whole block). Merge with the flag it was trained with"),
    BN_STR("--output-tensor-type", O(t.ste_output_type), "TYPE",
           "with --ste-type and with --merge-type TYPE: output.weight's type, as bonsai-quantize --output-tensor-type "
           "(e.g. q6_k, llama-quantize's rule for low-bit files, keeps more of an lm_head adapter); merge with the "
           "type it was trained with"),
    BN_SEED("-s, --seed", O(t.seed), "init / shuffle / dropout seed"),
    BN_SECTION("optimisation"),
    BN_INT("--epochs", O(t.epochs), "N", "epochs", 1, 1000000),
    BN_FLOAT("--lr", O(t.lr), "X", "peak learning rate (default: the model's size preset, see below)", 0, 1e6),
    BN_INT("--batch", O(t.batch), "N", "rows per micro-batch", 1, 1 << 20),
    BN_INT("--grad-accum", O(t.grad_accum), "N", "micro-batches per optimizer step", 1, 1 << 20),
    BN_FLOAT("--warmup-ratio", O(t.warmup_ratio), "X", "warmup share of the steps, then linear decay", 0, 1),
    BN_FLOAT("--weight-decay", O(t.adam.weight_decay), "X", "AdamW weight decay", 0, 1e6),
    BN_FLOAT("--max-grad-norm", O(t.max_grad_norm), "X", "gradient clipping", 0, 1e30),
    BN_FLOAT("--early-stop", O(t.early_stop), "X", "stop at this running chosen_win (0: off)", 0, 1),
    BN_INT("--log-window", O(t.log_window), "N", "steps in the running mean", 1, 1 << 20),
    BN_I64("--max-steps", O(t.max_steps), "N", "stop after N optimizer steps in this run (0: no limit)", 0, 0x1p63),
    BN_INT("--max-seq", O(max_seq), "N", "drop rows with len(context)+1 > N", 2, INT32_MAX),
    BN_SECTION("loss (docs/antidoom.md §9; the values default to the preset's)"),
    BN_STR("--preset", O(preset), "NAME",
           "antidoom (default: per-row mean, λ_nt 0.4, λ_t 0.05, τ_t 0.5) | antislop (weighted mean + fallback, τ_t 1, "
           "λ_agg 0.1, τ_agg 2); the options below override its values"),
    BN_FLOAT("--eps", O(eps), "X", "the loss's epsilon (> 0)", -1e30, 1e30),
    BN_FLOAT("--lambda-nt", O(lnt), "X", "λ_nt", -1e30, 1e30),
    BN_FLOAT("--lambda-t", O(lt), "X", "λ_t", -1e30, 1e30),
    BN_FLOAT("--tau-t", O(taut), "X", "τ_t", -1e30, 1e30),
    BN_FLOAT("--lambda-agg", O(lagg), "X", "λ_agg", -1e30, 1e30),
    BN_FLOAT("--tau-agg", O(tagg), "X", "τ_agg", -1e30, 1e30),
    BN_TRUE("--weighted-mean", O(weighted), "weighted-mean reduction"),
    BN_SECTION("plain-text tether (off by default)"),
    BN_STR("--tether-text", O(tether_path), "FILE",
           "plain UTF-8 text (e.g. the model's training corpus; never the text perplexity is measured on): each step "
           "adds λ·mean KL(p_ref ‖ p_θ) over every position of --tether-batch windows of --tether-ctx tokens (p_ref = "
           "the base the policy starts from: the quantized base with --ste-type); windows in a seeded order, reference "
           "log-probs cached per window"),
    BN_FLOAT("--lambda-tether", O(t.lambda_tether), "X", "λ of the tether (0: off)", 0, 1e30),
    BN_INT("--tether-ctx", O(t.tether_ctx), "N", "tokens per tether window", 2, 1 << 20),
    BN_INT("--tether-batch", O(t.tether_batch), "N", "tether windows per step", 1, 1 << 20),
    BN_SECTION("files"),
    BN_STR("--checkpoint", O(t.ckpt_path), "FILE", "write a checkpoint at epoch ends / --save-every steps / the end"),
    BN_INT("--save-every", O(t.save_every), "N", "checkpoint every N steps (0: epoch ends and the end only)", 0,
           INT32_MAX),
    BN_STR("--resume", O(t.resume_path), "FILE", "continue from a checkpoint"),
    BN_STR("--init-adapter", O(t.init_adapter), "FILE",
           "start from this adapter (same targets/rank) instead of the PEFT init; fresh optimizer and schedule (e.g. a "
           "second round on new pairs)"),
    BN_STR("--log", O(t.log_jsonl), "FILE", "per-step JSON lines"),
    BN_FALSE("--no-eval", O(t.eval_each_epoch), "skip the per-epoch no-grad evaluation"),
    BN_SECTION("evaluation only (no training; -o not needed)"),
    BN_STR("--eval", O(eval_adapter), "ADAPTER",
           "chosen_win / margin_win / mean Δ / loss of the base model and of the adapter over the train and held-out "
           "rows"),
    BN_SECTION("merge only (no training; -p not needed): --merge ADAPTER.gguf -o MERGED.gguf"),
    BN_STR("--merge", O(merge_adapter), "ADAPTER",
           "W' = W + scale·(α/r)·B·A in fp32 for each adapted tensor, re-quantized to its type (--merge-type keep) or "
           "written F16/F32; everything else copied byte for byte"),
    BN_STR("--merge-type", O(merge_type), "keep|f16|f32|TYPE",
           "TYPE (q1_0, q2_0, q8_0, ...): the whole model as bonsai-quantize --type TYPE writes it, adapted tensors "
           "quantized straight from fp32 (what --ste-type TYPE trained; add --keep-scales if it was trained with it)"),
    BN_FLOAT("--lora-scale", O(lora_scale), "X", "scale of the adapter's delta", -1e6, 1e6),
    {0}};
#undef O

static const bn_args_tool tool = {
    .name = "bonsai-ftpo-train",
    .usage = "usage: bonsai-ftpo-train -m MODEL.gguf -p PAIRS.jsonl -o ADAPTER.gguf [options]\n"
             "       bonsai-ftpo-train -m MODEL.gguf -p PAIRS.jsonl --eval ADAPTER.gguf\n"
             "       bonsai-ftpo-train -m MODEL.gguf --merge ADAPTER.gguf -o MERGED.gguf [--merge-type T]\n"
             "FTPO LoRA training on doom-loop pairs (docs/antidoom.md §9-12), on the CPU or a GPU (-ngl).\n",
    .notes = "Size presets of --lr / --rank by the model's weights: under 50 M 1e-3 / 16, under 1 B 3e-4 / 16, under\n"
             "10 B 1e-4 / 32, larger 3e-5 / 32 (the seed recipe's, for the 27 B models).\n"
             "Per-step lines on stderr carry an ETA (-q or --no-progress: none). SIGINT/SIGTERM: finish the step,\n"
             "write the checkpoint and the adapter, exit 0.\n"};

// set_loss: the preset, the loss overrides and the targets into o->t; checks the values; exits on a bad one.
static void set_loss(ftpo_opts *o) {
    char err[512];
    if (o->targets) {
        int mask = bn_lora_parse_targets(o->targets, err, sizeof err);
        if (mask < 0) bn_args_fail(&tool, "%s", err);
        o->t.targets = (unsigned)mask;
    }
    bn_ftpo_cfg *l = &o->t.loss;
    if (o->preset && !strcmp(o->preset, "antidoom")) *l = bn_ftpo_cfg_antidoom();
    else if (o->preset && !strcmp(o->preset, "antislop")) *l = bn_ftpo_cfg_antislop();
    else if (o->preset) bn_args_fail(&tool, "unknown preset '%s' (antidoom, antislop)", o->preset);
    if (!isnan(o->eps)) l->eps = o->eps;
    if (!isnan(o->lnt)) l->lambda_nt = o->lnt;
    if (!isnan(o->lt)) l->lambda_t = o->lt;
    if (!isnan(o->taut)) l->tau_t = o->taut;
    if (!isnan(o->lagg)) l->lambda_agg = o->lagg;
    if (!isnan(o->tagg)) l->tau_agg = o->tagg;
    if (o->weighted) l->reduction = BN_FTPO_WEIGHTED;
    if (l->eps <= 0) bn_args_fail(&tool, "--eps must be > 0");
    if ((o->t.lambda_tether > 0) != (o->tether_path != NULL))
        bn_args_fail(&tool, "--tether-text and --lambda-tether > 0 go together");
}

// parse_args: the options into o (exits on --help, --version or a bad or missing option).
static void parse_args(ftpo_opts *o, int argc, char **argv) {
    *o = (ftpo_opts){.t = bn_ftpo_train_defaults(), .merge_type = "keep", .lora_scale = 1.0f, .max_seq = 6000,
                     .n_threads = bn_n_threads_default(), .plan_act_bytes = 4, .n_ranks = 1, .dp_timeout = 1800, .eps = NAN, .lnt = NAN, .lt = NAN,
                     .taut = NAN, .lagg = NAN, .tagg = NAN};
    const bn_arg_table tables[] = {BN_TABLE(ftpo_args, o), BN_TABLE(bn_progress_args, NULL), {0}};
    bn_args_parse(&tool, tables, argc, argv);
    if (o->plan_act_bytes != 2 && o->plan_act_bytes != 4) bn_args_fail(&tool, "--plan-act-bytes must be 2 or 4");
    if (bn_progress_mode_now() == BN_PROGRESS_OFF) o->t.quiet = true; // --no-progress: no step lines either
    if (o->merge_adapter) {
        if (!o->model || !o->t.out_adapter) bn_args_fail(&tool, "--merge needs -m BASE.gguf and -o MERGED.gguf");
        return;
    }
    if (o->mem_limit && bn_parse_bytes(o->mem_limit, &(int64_t){0}) != 0)
        bn_args_fail(&tool, "--mem-limit: '%s' is not a byte count (e.g. 12G, 512M, 141000000000)", o->mem_limit);
    if (o->plan_only && !o->model) bn_args_fail(&tool, "--plan-only needs -m MODEL.gguf");
    if (!o->plan_only && (!o->model || !o->pairs || (!o->t.out_adapter && !o->eval_adapter)))
        bn_args_fail(&tool, "-m, -p and -o (or --eval ADAPTER) are required");
    set_loss(o);
}

// load_tether: --tether-text's tokens into o->t (the caller frees *tokens); returns 0 or -1 (printed).
static int load_tether(ftpo_opts *o, const bn_tokenizer *tok, int32_t **tokens) {
    char err[512];
    size_t n_text;
    char *text = bn_read_file(o->tether_path, &n_text, err, sizeof err);
    if (!text) {
        fprintf(stderr, "bonsai-ftpo-train: %s\n", err);
        return -1;
    }
    int n_tok = tok ? bn_tokenize(tok, text, n_text, false, false, tokens) : -1;
    free(text);
    if (n_tok < 0) {
        fprintf(stderr, "bonsai-ftpo-train: %s: %s\n", o->tether_path,
                tok ? "cannot tokenize" : "the model has no tokenizer to tokenize it");
        return -1;
    }
    o->t.tether_tokens = *tokens;
    o->t.n_tether_tokens = n_tok;
    note("ftpo-train: tether text %s: %d tokens\n", o->tether_path, n_tok);
    return 0;
}

// train: the training run and its summary; returns the exit status.
static int train(const bn_model *m, const bn_train_rows *rows, const bn_ftpo_train_opts *t) {
    char err[1024];
    bn_ftpo_train_result res;
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (bn_ftpo_train(m, rows, t, &res, err, sizeof err)) {
        fprintf(stderr, "bonsai-ftpo-train: %s\n", err);
        return 1;
    }
    if (res.interrupted && t->ckpt_path)
        note("ftpo-train: interrupted; continue with --resume %s (same options)\n", t->ckpt_path);
    note("ftpo-train: %lld/%lld steps%s; chosen_win %.3f -> %.3f (running %.3f); loss %.5f -> %.5f; adapter %s\n",
         (long long)res.steps, (long long)res.total_steps,
         res.early_stopped ? " (early stop)" : res.interrupted ? " (interrupted)" : "", res.first_chosen_win,
         res.last_chosen_win, res.chosen_win_avg, res.first_loss, res.last_loss, t->out_adapter);
    if (t->tether_tokens) note("ftpo-train: tether KL %.5g -> %.5g\n", res.first_tether, res.last_tether);
    return 0;
}

// plan_device: with --plan-only -ngl N, the device plan against device 0's free memory (the ranks of -dp that share
// it each hold one); returns 0 when it fits or no device is present, 1 when it does not fit (printed).
static int plan_device(const ftpo_opts *o, const bn_memplan_cfg *c, const bn_memplan *p) {
    const bn_train_device *dev = bn_train_device_get();
    const int n_dev = dev ? dev->device_count() : 0;
    char err[1024], fr[32], tot[32], need[32];
    if (n_dev == 0) {
        printf("-ngl %d: %s; the device column is what a GPU would hold\n", o->t.n_gpu_layers,
               dev ? "no device found" : "this program has no device backend");
        return 0;
    }
    size_t free_b = 0, total_b = 0;
    const int ranks = (o->n_ranks + n_dev - 1) / n_dev;
    if (dev->mem_info(0, &free_b, &total_b, err, sizeof err) ||
        bn_memplan_device_fits(p, c, ranks, 0, (int64_t)free_b, (int64_t)total_b, err, sizeof err)) {
        fprintf(stderr, "bonsai-ftpo-train: refused: %s\n", err);
        return 1;
    }
    printf("%s device 0: %s free of %s; the run needs %s there (the device plan + the margin%s): it fits\n",
           dev->name, bn_format_bytes(fr, sizeof fr, (double)free_b), bn_format_bytes(tot, sizeof tot, (double)total_b),
           bn_format_bytes(need, sizeof need, (double)(ranks * (p->dev.total + BN_MEMPLAN_DEVICE_MARGIN))),
           ranks > 1 ? ", for each rank on it" : "");
    return 0;
}

// plan: the memory plan of this run (printed with --plan-only, checked against --mem-limit); returns 0 when the run
// may go on, 1 when it is refused (over the limit, or the plan cannot be made), 2 when --plan-only is done.
static int plan(const ftpo_opts *o, const bn_model *m, const bn_train_rows *rows) {
    char err[512];
    bn_memplan_cfg c = bn_memplan_cfg_default(4096);
    int longest = 0;
    for (int i = 0; rows && i < rows->n_rows; i++)
        if (rows->rows[i].n_ctx > longest) longest = rows->rows[i].n_ctx;
    c.ctx = o->plan_ctx > 0 ? o->plan_ctx : longest > 0 ? longest : 4096;
    c.targets = o->t.targets;
    c.rank = o->t.rank;
    c.batch = o->t.batch;
    c.grad_accum = o->t.grad_accum;
    c.dropout = o->t.dropout;
    c.ste = o->t.ste_type != NULL;
    c.act_bytes = o->plan_act_bytes;
    c.gemm_bytes = o->t.train_gemm == BN_TRAIN_GEMM_F32 ? 4 : 2; // the device column's GEMMs (--train-gemm)
    c.n_rows = rows ? rows->n_rows : 0;
    if (o->tether_path) {
        c.tether_ctx = o->t.tether_ctx;
        c.tether_batch = o->t.tether_batch;
        c.tether_cache_mb = o->t.tether_cache_mb;
    }
    bn_memshape s = bn_memshape_of_model(m);
    bn_memplan p;
    if (bn_memplan_compute(&s, &c, &p, err, sizeof err)) {
        fprintf(stderr, "bonsai-ftpo-train: %s\n", err);
        return 1;
    }
    if (o->plan_only) bn_memplan_print(stdout, &s, &c, &p);
    if (o->plan_only && o->t.ste_type)
        printf("(--ste-type: the device column holds the weights twice, the policy's and the reference's, at this "
               "file's stored types (the trainer plans the requantized types); the host's two requantized copies are "
               "not counted)\n");
    if (o->plan_only && o->t.n_gpu_layers > 0 && plan_device(o, &c, &p)) return 1;
    int64_t limit = 0;
    if (o->mem_limit) bn_parse_bytes(o->mem_limit, &limit);
    if (limit > 0 && p.total > limit) {
        if (!o->plan_only) bn_memplan_print(stderr, &s, &c, &p);
        fprintf(stderr, "bonsai-ftpo-train: refused: the plan needs %lld B (%.2f GiB), over --mem-limit %s = %lld B "
                "(%.2f GiB)\n", (long long)p.total, p.total / 1073741824.0, o->mem_limit, (long long)limit,
                limit / 1073741824.0);
        return 1;
    }
    if (limit > 0 && !o->t.quiet)
        note("ftpo-train: memory plan %lld B (%.2f GiB) within --mem-limit %lld B\n", (long long)p.total,
                p.total / 1073741824.0, (long long)limit);
    return o->plan_only ? 2 : 0;
}

// spawn_ranks: with -dp N > 1, forks the N rank processes of the training run (train/dp.h; they share the loaded
// model and rows) and gives each its share of the threads. Returns -1 in each rank (and with one process); in the
// supervisor, once the ranks have ended, the exit status.
static int spawn_ranks(ftpo_opts *o) {
    if (o->n_ranks <= 1) return -1;
    char err[512];
    int status;
    int rc = bn_dp_spawn(o->n_ranks, &o->t.dp, &status, err, sizeof err);
    if (rc < 0) fprintf(stderr, "bonsai-ftpo-train: %s\n", err);
    if (rc != 0) return rc < 0 ? 1 : status;
    g_follower = bn_dp_rank(o->t.dp) > 0;
    if (!bn_args_given("--threads")) o->n_threads = bn_n_threads_default() / o->n_ranks;
    if (o->n_threads < 1) o->n_threads = 1;
    openblas_set_num_threads(o->n_threads);
    return -1;
}

// join_launched: when a launcher started this process as one of several ranks (train/dp.h, bn_dp_join_env), joins
// the others and gives the rank its share of the machine's threads. Returns 0 (joined, or not launched) or 1 (err).
static int join_launched(ftpo_opts *o) {
    char err[512];
    int rc = bn_dp_join_env(&o->t.dp, o->dp_timeout, err, sizeof err);
    if (rc < 0) fprintf(stderr, "bonsai-ftpo-train: %s\n", err);
    if (rc <= 0) return rc < 0;
    if (o->n_ranks > 1) {
        fprintf(stderr, "bonsai-ftpo-train: -dp %d under a launcher that started %d ranks: use one or the other\n",
                o->n_ranks, bn_dp_world(o->t.dp));
        return 1;
    }
    g_follower = bn_dp_rank(o->t.dp) > 0;
    if (!bn_args_given("--threads")) o->n_threads = bn_n_threads_default() / bn_dp_local_world(o->t.dp);
    if (o->n_threads < 1) o->n_threads = 1;
    openblas_set_num_threads(o->n_threads);
    note("ftpo-train: %d ranks started by a launcher, joined over tcp\n", bn_dp_world(o->t.dp));
    return 0;
}

int main(int argc, char **argv) {
    ftpo_opts o;
    parse_args(&o, argc, argv);
    if (!o.merge_adapter && !o.plan_only && !o.eval_adapter && join_launched(&o)) return 1;
    if (o.merge_adapter)
        return merge_main(o.model, o.merge_adapter, o.merge_type, o.t.ste_output_type, o.t.ste_keep_scales, o.lora_scale,
                          o.t.out_adapter);
    char err[512];
    bn_model *m = bn_model_load(o.model, err, sizeof err);
    if (!m) { fprintf(stderr, "bonsai-ftpo-train: %s\n", err); return 1; }
    if (!bn_args_given("--lr") || !bn_args_given("--rank")) {
        float lr;
        int rank;
        bn_ftpo_size_preset(bn_model_n_params(m), &lr, &rank);
        if (!bn_args_given("--lr")) o.t.lr = lr;
        if (!bn_args_given("--rank")) o.t.rank = rank;
        note("ftpo-train: lr %g, rank %d (%.1f M weights; the size preset for what --lr / --rank do not set)\n", o.t.lr,
             o.t.rank, bn_model_n_params(m) / 1e6);
    }
    bn_tokenizer *tok = bn_tokenizer_from_gguf(m->gguf, err, sizeof err); // only for rows without ids
    bn_train_rows *rows = NULL;
    if (o.pairs) {
        rows = bn_train_rows_load(o.pairs, tok, m->cfg.n_vocab, o.max_seq, err, sizeof err);
        if (!rows) { fprintf(stderr, "bonsai-ftpo-train: %s\n", err); return 1; }
        note("ftpo-train: %d rows from %s (dropped: %d trimmed-prompt, %d too long, %d without chosen)\n", rows->n_rows,
             o.pairs, rows->n_dropped_trimmed, rows->n_dropped_long, rows->n_dropped_no_chosen);
    }
    int32_t *tether_tok = NULL;
    if (bn_args_given("--train-gemm") && o.t.n_gpu_layers <= 0)
        note("ftpo-train: --train-gemm %s applies to -ngl training; the CPU trainer computes in fp32\n",
             bn_train_gemm_name(o.t.train_gemm));
    int pr = o.plan_only || (o.mem_limit && !o.eval_adapter) ? plan(&o, m, rows) : 0, rc;
    if (pr) rc = pr == 2 ? 0 : 1; // --plan-only done, or refused
    else if (o.tether_path && !o.eval_adapter && load_tether(&o, tok, &tether_tok) != 0) rc = 1;
    else if (o.eval_adapter) {
        bn_train_set_threads(o.n_threads);
        rc = eval_main(m, rows, o.eval_adapter, &o.t.loss);
    } else if ((rc = spawn_ranks(&o)) < 0) { // one process, or a rank of -dp N
        bn_train_set_threads(o.n_threads);
        rc = train(m, rows, &o.t);
    }
    free(tether_tok);
    bn_train_rows_free(rows);
    bn_tokenizer_free(tok);
    bn_model_free(m);
    bn_dp_free(o.t.dp);
    return rc;
}
