// tools/bonsai-perplexity.c — llama-perplexity for our engine (docs/server.md §14):
//   bonsai-perplexity -m MODEL.gguf -f TEXT [-c 512] [-b 2048] [-t THREADS] [-ngl N] [--chunks N]
//                     [--kl-divergence-base FILE [--kl-divergence]]
// Same method and output lines: info lines on stderr, "[i]ppl," progress on stdout, then
// "Final estimate: PPL = %.4lf +/- %.5lf" (stderr, as llama.cpp's LOG_INF). KL-divergence mode
// (eval/kld.h): --kl-divergence-base FILE saves the model's log-probabilities (llama.cpp's file format);
// adding --kl-divergence scores this model against such a file (its tokens; -f not needed).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/model.h"
#include "eval/kld.h"
#include "eval/perplexity.h"
#include "core/tokenizer.h"
#include "base/util.h"
#include "base/args.h"
#include "core/engine.h"
#include <unistd.h>

typedef struct {
    const bn_ppl_result *r; // filled while running (sec_first is set before chunk 1 is reported)
    int n_chunk, n_seq;
    int n_vocab;
    bn_atomic_file *save;   // --kl-divergence-base without --kl-divergence: rows written here
    bn_kld_base *base;      // --kl-divergence: rows read from here
    uint16_t *rows;         // one row (save) or one chunk of rows (base)
    bn_kld_stats kld;
    bn_progress bar;        // chunks done, on stderr (started when stdout, which gets "[i]ppl,", is not a terminal)
} ppl_progress;

// print_eta: llama-perplexity's per-pass timing line (after chunk 1).
static void print_eta(const ppl_progress *pp) {
    fprintf(stderr, "perplexity: %.2f seconds per pass - ETA ", pp->r->sec_first);
    int total_seconds = (int)(pp->r->sec_first * pp->n_chunk / pp->n_seq);
    if (total_seconds >= 60 * 60) {
        fprintf(stderr, "%d hours ", total_seconds / (60 * 60));
        total_seconds = total_seconds % (60 * 60);
    }
    fprintf(stderr, "%.2f minutes\n", total_seconds / 60.0);
}

// save_row: --kl-divergence-base: appends one scored position's encoded log-probabilities.
static int save_row(void *ctx, int chunk, int row, const float *logits, int32_t next, char *err, size_t errlen) {
    ppl_progress *pp = ctx;
    bn_kld_encode_row(logits, pp->n_vocab, next, pp->rows);
    size_t n = bn_kld_row_len(pp->n_vocab);
    if (fwrite(pp->rows, sizeof(uint16_t), n, pp->save->f) != n) return bn_err(err, errlen, "cannot write %s", pp->save->path);
    return 0;
}

// score_row: --kl-divergence: reads the chunk's base rows at its first position, then scores one.
static int score_row(void *ctx, int chunk, int row, const float *logits, int32_t next, char *err, size_t errlen) {
    ppl_progress *pp = ctx;
    if (row == 0 && bn_kld_base_read_chunk(pp->base, pp->rows, err, errlen) != 0) return -1;
    bn_kld_add_row(&pp->kld, logits, pp->n_vocab, pp->rows + (size_t)row * pp->base->row_len, next);
    return 0;
}

// print_kld_chunk: --kl-divergence's per-chunk line.
static void print_kld_chunk(void *ctx, int chunk, double ppl) {
    ppl_progress *pp = ctx;
    if (chunk == 1) {
        print_eta(pp);
        printf("\nchunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p\n");
    }
    bn_kld_print_chunk(&pp->kld, chunk, stdout);
    fflush(stdout);
    bn_progress_update(&pp->bar, chunk, NULL);
}

// print_chunk: llama-perplexity's per-pass timing line (after chunk 1) and "[i]ppl," progress.
static void print_chunk(void *ctx, int chunk, double ppl) {
    ppl_progress *pp = ctx;
    if (chunk == 1) print_eta(pp);
    printf("[%d]%.4lf,", chunk, ppl);
    fflush(stdout);
    char extra[48];
    snprintf(extra, sizeof extra, "PPL %.4f", ppl);
    bn_progress_update(&pp->bar, chunk, extra);
}

// write_header: --kl-divergence-base: magic, n_ctx, n_vocab, n_chunk and the evaluated tokens.
static int write_header(bn_atomic_file *af, int n_ctx, int n_vocab, int n_chunk, const int32_t *tokens) {
    uint32_t ctx = (uint32_t)n_ctx;
    size_t n_tok = (size_t)n_chunk * n_ctx;
    return fwrite("_logits_", 1, 8, af->f) == 8 && fwrite(&ctx, 4, 1, af->f) == 1 && fwrite(&n_vocab, 4, 1, af->f) == 1 &&
                   fwrite(&n_chunk, 4, 1, af->f) == 1 && fwrite(tokens, sizeof(int32_t), n_tok, af->f) == n_tok
               ? 0
               : -1;
}

// fail: prints the tool's error line; returns 1 (the exit status).
static int fail(const char *msg) {
    fprintf(stderr, "bonsai-perplexity: %s\n", msg);
    return 1;
}

typedef struct {
    bn_engine_opts eng;
    const char *text, *kld_path;
    int n_batch, chunks;
    bool kld_mode;
} ppl_opts;

#define O(f) offsetof(ppl_opts, f)
static const bn_arg ppl_args[] = {
    BN_STR("-f, --file", O(text), "FILE", "the text to evaluate"),
    BN_INT("-b, --batch-size", O(n_batch), "N", "tokens per batch: n_seq = N / n_ctx chunks per pass", 1, INT32_MAX),
    BN_INT("--chunks", O(chunks), "N", "evaluate at most N chunks (-1: all)", -1, INT32_MAX),
    BN_STR("--kl-divergence-base, --save-all-logits", O(kld_path), "FILE",
           "llama-perplexity's log-probability file (interchangeable with it): saved from this model, or with "
           "--kl-divergence read"),
    BN_TRUE("--kl-divergence", O(kld_mode), "score the model against FILE: KLD, Δp, same top token, PPL(Q)/PPL(base)"),
    {0}};
#undef O

static const bn_args_tool tool = {
    .name = "bonsai-perplexity",
    .usage = "usage: bonsai-perplexity -m MODEL.gguf -f TEXT [-c 512] [-b 2048] [-t THREADS] [-ngl N] [--chunks N]\n"
             "       bonsai-perplexity -m BASE.gguf -f TEXT --kl-divergence-base FILE   (save log-probabilities)\n"
             "       bonsai-perplexity -m MODEL.gguf --kl-divergence-base FILE --kl-divergence  (KLD vs the saved "
             "base)\n"
             "llama-perplexity's method and output on the engine -ngl picks.\n",
    .notes = "-c is the chunk length (at least 4; with --kl-divergence the base file's).\n"};

// parse_args: the options into o (exits on --help, --version or a bad or missing option).
static void parse_args(ppl_opts *o, int argc, char **argv) {
    *o = (ppl_opts){.eng = {.n_ctx = 512}, .n_batch = 2048, .chunks = -1};
    const bn_arg_table tables[] = {BN_TABLE(ppl_args, o), BN_TABLE(bn_engine_args, &o->eng),
                                   BN_TABLE(bn_progress_args, NULL), {0}};
    bn_args_parse(&tool, tables, argc, argv);
    if (!o->eng.model) bn_args_fail(&tool, "-m MODEL.gguf is required");
    if (o->eng.n_ctx < 4) bn_args_fail(&tool, "-c must be at least 4");
    if (o->kld_mode && !o->kld_path)
        bn_args_fail(&tool, "--kl-divergence needs --kl-divergence-base FILE (the saved base log-probabilities)");
    if (!o->kld_mode && !o->text) bn_args_fail(&tool, "-f TEXT is required");
}

// load_tokens: the tokens to score into *tokens, *n_tokens: the base file's (--kl-divergence; its context replaces
// *n_ctx) or the text's; returns 0, or 1 (printed).
static int load_tokens(const ppl_opts *o, const bn_tokenizer *tok, int n_vocab, bn_kld_base *base, int32_t **tokens,
                       int *n_tokens, int *n_ctx) {
    char err[512];
    if (o->kld_mode) {
        if (bn_kld_base_open(base, o->kld_path, err, sizeof err) != 0) return fail(err);
        if (base->n_vocab != n_vocab) {
            snprintf(err, sizeof err, "inconsistent vocabulary: %s has %d tokens, the model %d", o->kld_path,
                     base->n_vocab, n_vocab);
            return fail(err);
        }
        if (bn_args_given("-c") && *n_ctx != (int)base->n_ctx)
            fprintf(stderr, "perplexity: using the base file's context %u (not -c %d)\n", base->n_ctx, *n_ctx);
        *n_ctx = (int)base->n_ctx;
        *tokens = base->tokens;
        *n_tokens = base->n_chunk * *n_ctx;
        return 0;
    }
    size_t text_len = 0;
    char *text = bn_read_file(o->text, &text_len, err, sizeof err);
    if (!text) return fail(err);
    fprintf(stderr, "perplexity: tokenizing the input ..\n");
    double t0 = bn_time_ms();
    *n_tokens = bn_tokenize(tok, text, text_len, true, false, tokens);
    fprintf(stderr, "perplexity: tokenization took %g ms\n", bn_time_ms() - t0);
    free(text);
    return 0;
}

int main(int argc, char **argv) {
    ppl_opts o;
    parse_args(&o, argc, argv);
    char err[512];
    bn_model *m = bn_model_load(o.eng.model, err, sizeof err);
    if (!m) return fail(err);
    bn_tokenizer *tok = bn_tokenizer_from_gguf(m->gguf, err, sizeof err);
    if (!tok) return fail(err);
    const int n_vocab = m->cfg.n_vocab;
    int n_ctx = o.eng.n_ctx;
    bn_kld_base base = {0};
    int32_t *tokens = NULL;
    int n_tokens = 0;
    if (load_tokens(&o, tok, n_vocab, &base, &tokens, &n_tokens, &n_ctx) != 0) return 1;
    if (n_tokens < 2 * n_ctx) {
        fprintf(stderr, "perplexity: you need at least %d tokens to evaluate perplexity with a context of %d\n",
                2 * n_ctx, n_ctx);
        fprintf(stderr, "perplexity: the %s provided tokenizes to only %d tokens\n",
                o.kld_mode ? "base file" : "data file", n_tokens < 0 ? 0 : n_tokens);
        return 1;
    }
    int n_chunk = n_tokens / n_ctx;
    if (o.chunks >= 0 && o.chunks < n_chunk) n_chunk = o.chunks;
    int n_seq = o.n_batch / n_ctx > 1 ? o.n_batch / n_ctx : 1;
    fprintf(stderr, "perplexity: calculating perplexity over %d chunks, n_ctx=%d, batch_size=%d, n_seq=%d\n", n_chunk,
            n_ctx, o.n_batch, n_seq);
    bn_engine *eng = bn_engine_open_opts(m, &o.eng, err, sizeof err);
    if (!eng) return fail(err);
    int32_t bos = bn_tokenizer_add_bos(tok) ? bn_token_bos(tok) : -1;
    bn_ppl_result r;
    ppl_progress progress = {.r = &r, .n_chunk = n_chunk, .n_seq = n_seq, .n_vocab = n_vocab};
    bn_ppl_hooks hooks = {.on_chunk = print_chunk, .ctx = &progress};
    bn_atomic_file save;
    if (o.kld_mode) {
        progress.base = &base;
        progress.rows = xmalloc(sizeof(uint16_t) * (size_t)(n_ctx - 1 - n_ctx / 2) * base.row_len);
        hooks.on_logits = score_row;
        hooks.on_chunk = print_kld_chunk;
    } else if (o.kld_path) {
        if (bn_atomic_open(&save, o.kld_path, err, sizeof err) != 0) return fail(err);
        fprintf(stderr, "perplexity: saving all logits to %s\n", o.kld_path);
        if (write_header(&save, n_ctx, n_vocab, n_chunk, tokens) != 0) {
            bn_atomic_abort(&save);
            return fail("cannot write the log-probability file header");
        }
        progress.save = &save;
        progress.rows = xmalloc(sizeof(uint16_t) * bn_kld_row_len(n_vocab));
        hooks.on_logits = save_row;
    }
    if (!isatty(STDOUT_FILENO)) bn_progress_start(&progress.bar, "chunks", n_chunk); // (else "[i]ppl," shows it)
    if (bn_perplexity(eng, tokens, n_tokens, n_ctx, n_chunk, bos, &hooks, &r, err, sizeof err)) {
        if (progress.save) bn_atomic_abort(&save);
        fprintf(stderr, "\n");
        return fail(err);
    }
    bn_progress_finish(&progress.bar, NULL);
    if (progress.save && bn_atomic_commit(&save, err, sizeof err) != 0) return fail(err);
    printf("\n");
    if (o.kld_mode) {
        bn_kld_print_summary(&progress.kld, stdout);
        bn_kld_free(&progress.kld);
    }
    fflush(stdout);
    if (r.ppl_err > 0) fprintf(stderr, "Final estimate: PPL = %.4lf +/- %.5lf\n", r.ppl, r.ppl_err);
    else fprintf(stderr, "Unexpected negative standard deviation of log(prob)\n");
    free(progress.rows);
    if (o.kld_mode) bn_kld_base_close(&base);
    else free(tokens);
    bn_engine_free(eng);
    bn_tokenizer_free(tok);
    bn_model_free(m);
    return 0;
}
