// tools/bonsai-train-lm.c — full-parameter next-token training of a small model (train/sft.h):
//   bonsai-train-lm -m INIT.gguf --data tokens.bin -o OUT.gguf [options]
//   bonsai-train-lm --tokenize TEXT -m VOCAB.gguf -o tokens.bin     (text → uint32 token file)
//   bonsai-train-lm --train-vocab N TEXT -o VOCAB.gguf               (byte-level BPE, train/bpe.h)
// Every tensor is trained in F32 (quantized inputs are dequantized); OUT.gguf is all-F32 with the
// input's KVs. With --qat-type T (quantization-aware training, train/sft.h) every tensor
// `bonsai-quantize IN OUT T` would store as T is used as deq(Q(W)) in the forward (straight-through
// estimator onto the F32 master) and OUT.gguf is that quantized file. Per-step line on stderr: loss, gradient norm, lr, ms/step, tok/s; held-out
// perplexity every --eval-every steps and at the end. SIGINT/SIGTERM: finish the step, checkpoint,
// write OUT.gguf, exit 0.
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>
#include "core/model.h"
#include "gguf/gguf.h"
#include "core/tokenizer.h"
#include "base/util.h"
#include "base/args.h"
#include "train/sft.h"
#include "train/backward.h"
#include "train/bpe.h"

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig) { (void)sig; stop_requested = 1; }

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// tokenize_main: text file → little-endian uint32 ids with the GGUF's tokenizer; returns the exit code.
static int tokenize_main(const char *text_path, const char *vocab, const char *out) {
    char err[512];
    gguf_file *g = gguf_open(vocab, err, sizeof err);
    if (!g) { fprintf(stderr, "bonsai-train-lm: %s\n", err); return 1; }
    bn_tokenizer *tk = bn_tokenizer_from_gguf(g, err, sizeof err);
    if (!tk) { fprintf(stderr, "bonsai-train-lm: %s\n", err); gguf_close(g); return 1; }
    size_t len;
    char *text = bn_read_file(text_path, &len, err, sizeof err);
    if (!text) { fprintf(stderr, "bonsai-train-lm: %s\n", err); return 1; }
    int32_t *ids = NULL;
    int n = bn_tokenize(tk, text, len, false, false, &ids);
    if (n < 0) { fprintf(stderr, "bonsai-train-lm: tokenizing %s failed\n", text_path); return 1; }
    uint8_t *buf = xmalloc((size_t)n * 4 + 1);
    for (int i = 0; i < n; i++)
        for (int b = 0; b < 4; b++) buf[(size_t)i * 4 + b] = (uint8_t)((uint32_t)ids[i] >> (8 * b));
    int rc = bn_write_file_atomic(out, buf, (size_t)n * 4, err, sizeof err);
    if (rc) fprintf(stderr, "bonsai-train-lm: %s\n", err);
    else fprintf(stderr, "train-lm: %zu bytes -> %d tokens (%.2f bytes/token, vocab %d) -> %s\n", len, n,
                 n ? (double)len / n : 0.0, bn_tokenizer_n_vocab(tk), out);
    free(buf);
    free(ids);
    free(text);
    bn_tokenizer_free(tk);
    gguf_close(g);
    return rc ? 1 : 0;
}

typedef struct {
    const char *model, *data, *out, *ckpt, *resume, *tokenize, *qat_type, *qat_skip, *vocab_text;
    int vocab_n;
    bn_sft_cfg cfg;
    uint64_t seed;
    double val_frac;
    int eval_every, eval_windows, save_every, n_threads;
    int64_t max_steps;
    bool quiet;
} lm_opts;

#define O(f) offsetof(lm_opts, f)
static const bn_arg lm_args[] = {
    BN_STR("-m, --model", O(model), "FILE", "the initial model (with --tokenize: the vocabulary GGUF)"),
    BN_STR("--data", O(data), "FILE", "uint32 token file (--tokenize writes one)"),
    BN_STR("-o, --output", O(out), "FILE",
           "the trained model (with --tokenize: tokens.bin; --train-vocab: VOCAB.gguf)"),
    BN_STR("--tokenize", O(tokenize), "TEXT", "tokenize the text file TEXT with -m's tokenizer into -o, then exit"),
    BN_INT("--train-vocab", O(vocab_n), "N",
           "learn an N-token byte-level BPE from the text file given as the argument into -o, then exit (use with "
           "bonsai-mkmodel --vocab VOCAB.gguf)",
           1, 1 << 24),
    BN_POS(O(vocab_text), "TEXT", "--train-vocab's text file"),
    BN_SECTION("training"),
    BN_I64("--steps", O(cfg.total_steps), "N", "optimizer steps = schedule length", 1, 0x1p63),
    BN_INT("-c, --ctx-size, --ctx", O(cfg.ctx), "N", "tokens per window", 1, 1 << 20),
    BN_INT("--batch", O(cfg.batch), "N", "windows per step", 1, 1 << 20),
    BN_FLOAT("--lr", O(cfg.lr), "X", "peak learning rate", 0, 1e6),
    BN_FLOAT("--warmup-ratio", O(cfg.warmup_ratio), "X", "warmup share of the steps, then linear decay to 0", 0, 1),
    BN_FLOAT("--weight-decay", O(cfg.adam.weight_decay), "X", "AdamW weight decay of the matrices", 0, 1e6),
    BN_FLOAT("--max-grad-norm", O(cfg.max_grad_norm), "X", "gradient clipping (0: off)", 0, 1e30),
    BN_SEED("-s, --seed", O(seed), "window sampling seed"),
    BN_DOUBLE("--val-frac", O(val_frac), "X", "last fraction of tokens held out", 0, 0.999999),
    BN_INT("--eval-every", O(eval_every), "N", "held-out perplexity every N steps (0: only at the end)", 0, INT32_MAX),
    BN_INT("--eval-windows", O(eval_windows), "N", "at most N held-out windows per evaluation (0: all)", 0, 1 << 24),
    BN_STR("--checkpoint", O(ckpt), "FILE", "checkpoint every --save-every steps and at the end"),
    BN_INT("--save-every", O(save_every), "N", "steps between checkpoints", 0, INT32_MAX),
    BN_STR("--resume", O(resume), "FILE",
           "continue from a checkpoint (steps, ctx, batch, lr, warmup, clipping, weight decay come from it)"),
    BN_I64("--max-steps", O(max_steps), "N", "stop after N steps in this run (checkpoint + OUT written; 0: no limit)",
           0, 0x1p63),
    BN_INT("-t, --threads", O(n_threads), "N", "threads for attention / DeltaNet (matmuls use OpenBLAS threads)", 1,
           4096),
    BN_STR("--qat-type", O(qat_type), "T",
           "quantization-aware training for bonsai-quantize type T (Q1_0, Q2_0, ...): the forward uses deq(Q(W)) of "
           "every tensor bonsai-quantize would store as T, gradients go to the F32 master; OUT.gguf is written "
           "quantized (= bonsai-quantize of the master); perplexities are the quantized model's"),
    BN_STR("--qat-skip", O(qat_skip), "LIST",
           "comma-separated tensor-name patterns (as --tensor-type) kept out of QAT and written as F16"),
    BN_TRUE("-q", O(quiet), "no per-step lines"),
    {0}};
#undef O

static const bn_args_tool tool = {
    .name = "bonsai-train-lm",
    .usage = "usage: bonsai-train-lm -m INIT.gguf --data tokens.bin -o OUT.gguf [options]\n"
             "       bonsai-train-lm --tokenize TEXT -m VOCAB.gguf -o tokens.bin\n"
             "       bonsai-train-lm --train-vocab N TEXT -o VOCAB.gguf\n"
             "Full-parameter next-token training of a small model in F32, on the CPU.\n",
    .notes = "Per-step lines on stderr (loss, gradient norm, lr, ms/step, tok/s, ETA; -q or --no-progress: none).\n"
             "SIGINT/SIGTERM: finish the step, checkpoint, write OUT.gguf, exit 0.\n"};

// parse_args: the options into o (exits on --help, --version or a bad or missing option).
static void parse_args(lm_opts *o, int argc, char **argv) {
    *o = (lm_opts){.cfg = bn_sft_cfg_default(), .seed = 1, .val_frac = 0.05, .eval_every = 100, .eval_windows = 64,
                   .save_every = 100, .n_threads = 1};
    const bn_arg_table tables[] = {BN_TABLE(lm_args, o), BN_TABLE(bn_progress_args, NULL), {0}};
    bn_args_parse(&tool, tables, argc, argv);
    if (bn_progress_mode_now() == BN_PROGRESS_OFF) o->quiet = true; // --no-progress: no step lines either
    if (!o->vocab_n != !o->vocab_text) bn_args_fail(&tool, "--train-vocab takes N and a TEXT file");
    if (o->vocab_text && !o->out) bn_args_fail(&tool, "--train-vocab needs -o VOCAB.gguf");
    if (o->tokenize && (!o->model || !o->out)) bn_args_fail(&tool, "--tokenize needs -m VOCAB.gguf and -o");
    if (!o->vocab_text && !o->tokenize && (!o->model || !o->data || !o->out))
        bn_args_fail(&tool, "-m, --data and -o are required");
    if (o->qat_skip && !o->qat_type) bn_args_fail(&tool, "--qat-skip needs --qat-type");
}

// vocab_main: --train-vocab; returns the exit status.
static int vocab_main(const lm_opts *o) {
    char err[512];
    size_t len;
    char *text = bn_read_file(o->vocab_text, &len, err, sizeof err);
    if (!text) { fprintf(stderr, "bonsai-train-lm: %s\n", err); return 1; }
    int n = bn_bpe_train_vocab(text, len, o->vocab_n, o->out, err, sizeof err);
    free(text);
    if (n < 0) { fprintf(stderr, "bonsai-train-lm: %s\n", err); return 1; }
    fprintf(stderr, "train-lm: vocab of %d tokens (%d merges) from %zu bytes -> %s\n", n, n - 259, len, o->out);
    return 0;
}

// A training run: the model's parameters, data, optimizer and position.
typedef struct {
    bn_model *m;
    bn_sft_data d;
    bn_sft_params *p;
    bn_adamw *opt;
    bn_sft_pos pos;
} lm_run;

// setup: loads the model and data, QAT, the optimizer (fresh or from --resume, whose schedule replaces o->cfg's);
// returns 0 or -1 with err.
static int setup(lm_opts *o, lm_run *r, char *err, size_t errlen) {
    bn_sft_cfg *cfg = &o->cfg;
    bn_train_set_threads(o->n_threads);
    if (!(r->m = bn_model_load(o->model, err, errlen))) return -1;
    if (bn_sft_data_load(&r->d, o->data, r->m->cfg.n_vocab, o->val_frac, err, errlen)) return -1;
    if (r->d.n_train < cfg->ctx + 1)
        fprintf(stderr, "train-lm: warning: only %lld training tokens for windows of %d\n", (long long)r->d.n_train,
                cfg->ctx + 1);
    bn_sft_params *p = r->p = bn_sft_params_new(r->m, err, errlen);
    if (!p) return -1;
    if (o->qat_type) {
        int n_qat = bn_sft_qat_enable(p, o->qat_type, o->qat_skip, err, errlen);
        if (n_qat < 0) return -1;
        int64_t n_qat_params = 0;
        for (int i = 0; i < p->n_tensors; i++) n_qat_params += p->t[i].qat ? p->t[i].n : 0;
        fprintf(stderr, "train-lm: QAT %s: %d of %d tensors (%lld of %lld params) fake-quantized in the forward\n",
                p->qat_spec, n_qat, p->n_tensors, (long long)n_qat_params, (long long)p->n_params);
    }
    r->pos = (bn_sft_pos){.step = 0, .total_steps = cfg->total_steps, .ctx = cfg->ctx, .batch = cfg->batch,
                          .lr = cfg->lr, .warmup_ratio = cfg->warmup_ratio, .max_grad_norm = cfg->max_grad_norm,
                          .weight_decay = cfg->adam.weight_decay};
    bn_rng_seed(&r->pos.rng, o->seed);
    if (!o->resume) {
        r->opt = bn_adamw_new(p->n_params);
        return 0;
    }
    if (bn_sft_checkpoint_load(o->resume, p, &r->opt, &r->pos, err, errlen)) return -1;
    // keep the resumed run's schedule and batch shape (the command line's values are ignored)
    cfg->total_steps = r->pos.total_steps;
    if (r->pos.ctx > 0) cfg->ctx = r->pos.ctx; // (0: not recorded)
    if (r->pos.batch > 0) cfg->batch = r->pos.batch;
    cfg->lr = r->pos.lr;
    cfg->warmup_ratio = r->pos.warmup_ratio;
    cfg->max_grad_norm = r->pos.max_grad_norm;
    cfg->adam.weight_decay = r->pos.weight_decay;
    fprintf(stderr, "train-lm: resumed from %s at step %lld of %lld\n", o->resume, (long long)r->pos.step,
            (long long)r->pos.total_steps);
    return 0;
}

// run_steps: the optimizer steps of this run (until the schedule's end, --max-steps or a stop signal), with the
// step lines, held-out evaluations and checkpoints; returns 0 or -1 with err.
static int run_steps(const lm_opts *o, lm_run *r, char *err, size_t errlen) {
    const bn_sft_cfg *cfg = &o->cfg;
    const bool have_val = r->d.n - r->d.n_train >= 2;
    const int64_t first = r->pos.step;
    const int64_t run_end = o->max_steps > 0 && first + o->max_steps < cfg->total_steps ? first + o->max_steps
                                                                                       : cfg->total_steps;
    const double t_run = now_ms();
    while (r->pos.step < run_end && !stop_requested) {
        double t0 = now_ms(), loss, gn, lr;
        if (bn_sft_step(r->p, r->opt, cfg, &r->d, &r->pos, &loss, &gn, &lr, err, errlen)) {
            char why[512];
            snprintf(why, sizeof why, "%s", err);
            return bn_err(err, errlen, "step %lld: %s", (long long)r->pos.step + 1, why);
        }
        double ms = now_ms() - t0;
        char eta[48];
        bn_eta_text(eta, sizeof eta, (now_ms() - t_run) / 1e3, (double)(r->pos.step - first),
                    (double)(run_end - first));
        if (!o->quiet)
            fprintf(stderr, "step %lld/%lld loss %.4f |g| %.3f lr %.3e %.0f ms %.0f tok/s%s%s\n",
                    (long long)r->pos.step, (long long)cfg->total_steps, loss, gn, lr, ms,
                    (double)cfg->batch * cfg->ctx / (ms / 1e3), eta[0] ? " " : "", eta);
        if (have_val && o->eval_every > 0 && r->pos.step % o->eval_every == 0 && r->pos.step < cfg->total_steps) {
            double ppl = bn_sft_eval_ppl(r->p, &r->d, cfg->ctx, o->eval_windows, err, errlen);
            fprintf(stderr, "eval step %lld held-out ppl %.4f\n", (long long)r->pos.step, ppl);
        }
        if (o->ckpt && o->save_every > 0 && r->pos.step % o->save_every == 0 &&
            bn_sft_checkpoint_save(o->ckpt, r->p, r->opt, &r->pos, err, errlen))
            return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    lm_opts o;
    parse_args(&o, argc, argv);
    if (o.vocab_text) return vocab_main(&o);
    if (o.tokenize) return tokenize_main(o.tokenize, o.model, o.out);
    char err[512];
    lm_run r = {0};
    if (setup(&o, &r, err, sizeof err) != 0) {
        fprintf(stderr, "bonsai-train-lm: %s\n", err);
        return 1;
    }
    const bn_sft_cfg *cfg = &o.cfg;
    fprintf(stderr, "train-lm: %lld params in %d tensors, %lld train + %lld held-out tokens, ctx %d, batch %d, "
            "%lld steps, lr %.3g\n", (long long)r.p->n_params, r.p->n_tensors, (long long)r.d.n_train,
            (long long)(r.d.n - r.d.n_train), cfg->ctx, cfg->batch, (long long)cfg->total_steps, cfg->lr);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    int rc = run_steps(&o, &r, err, sizeof err) == 0 &&
                     (!o.ckpt || bn_sft_checkpoint_save(o.ckpt, r.p, r.opt, &r.pos, err, sizeof err) == 0) &&
                     bn_sft_save_gguf(r.p, o.out, err, sizeof err) == 0
                 ? 0
                 : 1;
    if (rc) fprintf(stderr, "bonsai-train-lm: %s\n", err);
    if (rc == 0) {
        if (stop_requested)
            fprintf(stderr, "train-lm: stopped at step %lld (checkpoint written)\n", (long long)r.pos.step);
        if (r.d.n - r.d.n_train >= 2) {
            double ppl = bn_sft_eval_ppl(r.p, &r.d, cfg->ctx, 0, err, sizeof err);
            printf("final held-out ppl %.4f (step %lld%s)\n", ppl, (long long)r.pos.step,
                   r.p->fq ? ", quantized model" : "");
        }
        fprintf(stderr, "train-lm: wrote %s\n", o.out);
    }
    bn_adamw_free(r.opt);
    bn_sft_params_free(r.p);
    bn_sft_data_free(&r.d);
    bn_model_free(r.m);
    return rc;
}
