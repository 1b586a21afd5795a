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
#include "train/sft.h"
#include "train/backward.h"
#include "train/bpe.h"

static void usage(int code) {
    fprintf(code ? stderr : stdout,
        "usage: bonsai-train-lm -m INIT.gguf --data tokens.bin -o OUT.gguf [options]\n"
        "       bonsai-train-lm --tokenize TEXT -m VOCAB.gguf -o tokens.bin\n"
        "       bonsai-train-lm --train-vocab N TEXT -o VOCAB.gguf   (N-token byte-level BPE learned from TEXT;\n"
        "                       use with bonsai-mkmodel --vocab VOCAB.gguf)\n"
        "  --steps N            optimizer steps = schedule length (1000)\n"
        "  --ctx N              tokens per window (128)      --batch N       windows per step (8)\n"
        "  --lr X               peak learning rate (1e-3)    --warmup-ratio X (0.05), then linear decay to 0\n"
        "  --weight-decay X     (0.01)                       --max-grad-norm X (1.0; 0 = off)\n"
        "  --seed N             window sampling seed (1)\n"
        "  --val-frac X         last fraction of tokens held out (0.05)\n"
        "  --eval-every N       held-out perplexity every N steps (0 = only at the end) (100)\n"
        "  --eval-windows N     at most N held-out windows per evaluation (0 = all) (64)\n"
        "  --checkpoint FILE    checkpoint every --save-every steps and at the end\n"
        "  --save-every N       (100)                        --resume FILE   continue from a checkpoint\n"
        "                       (steps, ctx, batch, lr, warmup, clipping, weight decay come from the checkpoint)\n"
        "  --max-steps N        stop after N steps in this run (checkpoint + OUT written; 0 = no limit)\n"
        "  --threads N          threads for attention / DeltaNet (matmuls use OpenBLAS threads) (1)\n"
        "  --qat-type T         quantization-aware training for bonsai-quantize type T (Q1_0, Q2_0, ...): the\n"
        "                       forward uses deq(Q(W)) of every tensor bonsai-quantize would store as T,\n"
        "                       gradients go to the F32 master; OUT.gguf is written quantized (= bonsai-quantize\n"
        "                       of the master); perplexities are the quantized model's\n"
        "  --qat-skip LIST      comma-separated tensor-name patterns (as --tensor-type) kept out of QAT and\n"
        "                       written as F16\n"
        "  -q                   no per-step lines\n");
    exit(code);
}

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

static const char *const T = "bonsai-train-lm";

int main(int argc, char **argv) {
    const char *model_path = NULL, *data_path = NULL, *out_path = NULL, *ckpt_path = NULL, *resume_path = NULL;
    const char *tokenize_path = NULL, *vocab_text = NULL, *qat_type = NULL, *qat_skip = NULL;
    int vocab_n = 0;
    bn_sft_cfg cfg = bn_sft_cfg_default();
    uint64_t seed = 1;
    double val_frac = 0.05;
    int eval_every = 100, eval_windows = 64, save_every = 100, n_threads = 1;
    int64_t max_steps = 0;
    bool quiet = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) usage(0);
        else if (!strcmp(a, "-m") && has) model_path = argv[++i];
        else if (!strcmp(a, "--data") && has) data_path = argv[++i];
        else if (!strcmp(a, "-o") && has) out_path = argv[++i];
        else if (!strcmp(a, "--tokenize") && has) tokenize_path = argv[++i];
        else if (!strcmp(a, "--train-vocab") && i + 2 < argc) { vocab_n = (int)bn_arg_int(T, a, argv[++i], 1, 1 << 24); vocab_text = argv[++i]; }
        else if (!strcmp(a, "--steps") && has) cfg.total_steps = bn_arg_int(T, a, argv[++i], 1, INT64_MAX);
        else if (!strcmp(a, "--ctx") && has) cfg.ctx = (int)bn_arg_int(T, a, argv[++i], 1, 1 << 20);
        else if (!strcmp(a, "--batch") && has) cfg.batch = (int)bn_arg_int(T, a, argv[++i], 1, 1 << 20);
        else if (!strcmp(a, "--lr") && has) cfg.lr = (float)bn_arg_float(T, a, argv[++i], 0, 1e6);
        else if (!strcmp(a, "--warmup-ratio") && has) cfg.warmup_ratio = (float)bn_arg_float(T, a, argv[++i], 0, 1);
        else if (!strcmp(a, "--weight-decay") && has) cfg.adam.weight_decay = (float)bn_arg_float(T, a, argv[++i], 0, 1e6);
        else if (!strcmp(a, "--max-grad-norm") && has) cfg.max_grad_norm = (float)bn_arg_float(T, a, argv[++i], 0, 1e30);
        else if (!strcmp(a, "--seed") && has) seed = (uint64_t)bn_arg_int(T, a, argv[++i], 0, INT64_MAX);
        else if (!strcmp(a, "--val-frac") && has) val_frac = bn_arg_float(T, a, argv[++i], 0, 0.999999);
        else if (!strcmp(a, "--eval-every") && has) eval_every = (int)bn_arg_int(T, a, argv[++i], 0, INT32_MAX);
        else if (!strcmp(a, "--eval-windows") && has) eval_windows = (int)bn_arg_int(T, a, argv[++i], 0, 1 << 24);
        else if (!strcmp(a, "--checkpoint") && has) ckpt_path = argv[++i];
        else if (!strcmp(a, "--save-every") && has) save_every = (int)bn_arg_int(T, a, argv[++i], 0, INT32_MAX);
        else if (!strcmp(a, "--resume") && has) resume_path = argv[++i];
        else if (!strcmp(a, "--max-steps") && has) max_steps = bn_arg_int(T, a, argv[++i], 0, INT64_MAX);
        else if ((!strcmp(a, "--threads") || !strcmp(a, "-t")) && has) n_threads = (int)bn_arg_int(T, a, argv[++i], 1, 4096);
        else if (!strcmp(a, "--qat-type") && has) qat_type = argv[++i];
        else if (!strcmp(a, "--qat-skip") && has) qat_skip = argv[++i];
        else if (!strcmp(a, "-q")) quiet = true;
        else bn_arg_unknown(T, a);
    }
    if (vocab_text) {
        if (!out_path) { fprintf(stderr, "bonsai-train-lm: --train-vocab needs -o VOCAB.gguf\n"); return 1; }
        char err[512];
        size_t len;
        char *text = bn_read_file(vocab_text, &len, err, sizeof err);
        if (!text) { fprintf(stderr, "bonsai-train-lm: %s\n", err); return 1; }
        int n = bn_bpe_train_vocab(text, len, vocab_n, out_path, err, sizeof err);
        free(text);
        if (n < 0) { fprintf(stderr, "bonsai-train-lm: %s\n", err); return 1; }
        fprintf(stderr, "train-lm: vocab of %d tokens (%d merges) from %zu bytes -> %s\n", n, n - 259, len, out_path);
        return 0;
    }
    if (tokenize_path) {
        if (!model_path || !out_path) { fprintf(stderr, "bonsai-train-lm: --tokenize needs -m VOCAB.gguf and -o\n"); return 1; }
        return tokenize_main(tokenize_path, model_path, out_path);
    }
    if (!model_path || !data_path || !out_path) { fprintf(stderr, "bonsai-train-lm: -m, --data and -o are required\n"); usage(1); }
    if (cfg.total_steps <= 0 || cfg.ctx < 1 || cfg.batch < 1 || cfg.lr < 0 || val_frac < 0 || val_frac >= 1) {
        fprintf(stderr, "bonsai-train-lm: steps, ctx, batch must be > 0, lr >= 0, 0 <= val-frac < 1\n");
        return 1;
    }
    char err[512];
    bn_train_set_threads(n_threads);
    bn_model *m = bn_model_load(model_path, err, sizeof err);
    if (!m) { fprintf(stderr, "bonsai-train-lm: %s\n", err); return 1; }
    bn_sft_data d;
    if (bn_sft_data_load(&d, data_path, m->cfg.n_vocab, val_frac, err, sizeof err)) {
        fprintf(stderr, "bonsai-train-lm: %s\n", err);
        return 1;
    }
    if (d.n_train < cfg.ctx + 1)
        fprintf(stderr, "train-lm: warning: only %lld training tokens for windows of %d\n", (long long)d.n_train, cfg.ctx + 1);
    bn_sft_params *p = bn_sft_params_new(m, err, sizeof err);
    if (!p) { fprintf(stderr, "bonsai-train-lm: %s\n", err); return 1; }
    if (qat_skip && !qat_type) { fprintf(stderr, "bonsai-train-lm: --qat-skip needs --qat-type\n"); return 1; }
    if (qat_type) {
        int n_qat = bn_sft_qat_enable(p, qat_type, qat_skip, err, sizeof err);
        if (n_qat < 0) { fprintf(stderr, "bonsai-train-lm: %s\n", err); return 1; }
        int64_t n_qat_params = 0;
        for (int i = 0; i < p->n_tensors; i++) n_qat_params += p->t[i].qat ? p->t[i].n : 0;
        fprintf(stderr, "train-lm: QAT %s: %d of %d tensors (%lld of %lld params) fake-quantized in the forward\n",
                p->qat_spec, n_qat, p->n_tensors, (long long)n_qat_params, (long long)p->n_params);
    }
    bn_adamw *o = NULL;
    bn_sft_pos pos = {.step = 0, .total_steps = cfg.total_steps, .ctx = cfg.ctx, .batch = cfg.batch, .lr = cfg.lr,
                      .warmup_ratio = cfg.warmup_ratio, .max_grad_norm = cfg.max_grad_norm,
                      .weight_decay = cfg.adam.weight_decay};
    bn_rng_seed(&pos.rng, seed);
    if (resume_path) {
        if (bn_sft_checkpoint_load(resume_path, p, &o, &pos, err, sizeof err)) {
            fprintf(stderr, "bonsai-train-lm: %s\n", err);
            return 1;
        }
        // keep the resumed run's schedule and batch shape (the command line's values are ignored)
        cfg.total_steps = pos.total_steps;
        if (pos.ctx > 0) cfg.ctx = pos.ctx; // (0: not recorded)
        if (pos.batch > 0) cfg.batch = pos.batch;
        cfg.lr = pos.lr;
        cfg.warmup_ratio = pos.warmup_ratio;
        cfg.max_grad_norm = pos.max_grad_norm;
        cfg.adam.weight_decay = pos.weight_decay;
        fprintf(stderr, "train-lm: resumed from %s at step %lld of %lld\n", resume_path, (long long)pos.step,
                (long long)pos.total_steps);
    } else {
        o = bn_adamw_new(p->n_params);
    }
    fprintf(stderr, "train-lm: %lld params in %d tensors, %lld train + %lld held-out tokens, ctx %d, batch %d, "
            "%lld steps, lr %.3g\n", (long long)p->n_params, p->n_tensors, (long long)d.n_train,
            (long long)(d.n - d.n_train), cfg.ctx, cfg.batch, (long long)cfg.total_steps, cfg.lr);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    const bool have_val = d.n - d.n_train >= 2;
    int rc = 0;
    const int64_t run_end = max_steps > 0 && pos.step + max_steps < cfg.total_steps ? pos.step + max_steps : cfg.total_steps;
    while (pos.step < run_end && !stop_requested) {
        double t0 = now_ms(), loss, gn, lr;
        if (bn_sft_step(p, o, &cfg, &d, &pos, &loss, &gn, &lr, err, sizeof err)) {
            fprintf(stderr, "bonsai-train-lm: step %lld: %s\n", (long long)pos.step + 1, err);
            rc = 1;
            break;
        }
        double ms = now_ms() - t0;
        if (!quiet)
            fprintf(stderr, "step %lld/%lld loss %.4f |g| %.3f lr %.3e %.0f ms %.0f tok/s\n", (long long)pos.step,
                    (long long)cfg.total_steps, loss, gn, lr, ms, (double)cfg.batch * cfg.ctx / (ms / 1e3));
        if (have_val && eval_every > 0 && pos.step % eval_every == 0 && pos.step < cfg.total_steps) {
            double ppl = bn_sft_eval_ppl(p, &d, cfg.ctx, eval_windows, err, sizeof err);
            fprintf(stderr, "eval step %lld held-out ppl %.4f\n", (long long)pos.step, ppl);
        }
        if (ckpt_path && save_every > 0 && pos.step % save_every == 0 &&
            bn_sft_checkpoint_save(ckpt_path, p, o, &pos, err, sizeof err)) {
            fprintf(stderr, "bonsai-train-lm: %s\n", err);
            rc = 1;
            break;
        }
    }
    if (rc == 0 && ckpt_path && bn_sft_checkpoint_save(ckpt_path, p, o, &pos, err, sizeof err)) {
        fprintf(stderr, "bonsai-train-lm: %s\n", err);
        rc = 1;
    }
    if (rc == 0 && bn_sft_save_gguf(p, out_path, err, sizeof err)) {
        fprintf(stderr, "bonsai-train-lm: %s\n", err);
        rc = 1;
    }
    if (rc == 0) {
        if (stop_requested) fprintf(stderr, "train-lm: stopped at step %lld (checkpoint written)\n", (long long)pos.step);
        if (have_val) {
            double ppl = bn_sft_eval_ppl(p, &d, cfg.ctx, 0, err, sizeof err);
            printf("final held-out ppl %.4f (step %lld%s)\n", ppl, (long long)pos.step, p->fq ? ", quantized model" : "");
        }
        fprintf(stderr, "train-lm: wrote %s\n", out_path);
    }
    bn_adamw_free(o);
    bn_sft_params_free(p);
    bn_sft_data_free(&d);
    bn_model_free(m);
    return rc;
}
