// tools/bonsai-perplexity.c — llama-perplexity for our engine (SERVER.md §14):
//   bonsai-perplexity -m MODEL.gguf -f TEXT [-c 512] [-b 2048] [-t THREADS] [--chunks N]
// Same method and output lines: info lines on stderr, "[i]ppl," progress on stdout, then
// "Final estimate: PPL = %.4lf +/- %.5lf" (stderr, as llama.cpp's LOG_INF).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/model.h"
#include "core/perplexity.h"
#include "core/tokenizer.h"
#include "core/util.h"

static void usage(void) {
    fprintf(stderr, "usage: bonsai-perplexity -m MODEL.gguf -f TEXT [-c 512] [-b 2048] [-t THREADS] [--chunks N]\n");
    exit(1);
}

typedef struct {
    const bn_ppl_result *r; // filled while running (sec_first is set before chunk 1 is reported)
    int n_chunk, n_seq;
} ppl_progress;

// print_chunk: llama-perplexity's per-pass timing line (after chunk 1) and "[i]ppl," progress.
static void print_chunk(void *ctx, int chunk, double ppl) {
    const ppl_progress *pp = ctx;
    if (chunk == 1) {
        fprintf(stderr, "perplexity: %.2f seconds per pass - ETA ", pp->r->sec_first);
        int total_seconds = (int)(pp->r->sec_first * pp->n_chunk / pp->n_seq);
        if (total_seconds >= 60 * 60) {
            fprintf(stderr, "%d hours ", total_seconds / (60 * 60));
            total_seconds = total_seconds % (60 * 60);
        }
        fprintf(stderr, "%.2f minutes\n", total_seconds / 60.0);
    }
    printf("[%d]%.4lf,", chunk, ppl);
    fflush(stdout);
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *text_path = NULL;
    int n_ctx = 512, n_batch = 2048, n_threads = bn_n_threads_default(), chunks = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "-m") && has) model_path = argv[++i];
        else if (!strcmp(a, "-f") && has) text_path = argv[++i];
        else if ((!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) && has) n_ctx = atoi(argv[++i]);
        else if ((!strcmp(a, "-b") || !strcmp(a, "--batch-size")) && has) n_batch = atoi(argv[++i]);
        else if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && has) n_threads = atoi(argv[++i]);
        else if (!strcmp(a, "--chunks") && has) chunks = atoi(argv[++i]);
        else usage();
    }
    if (!model_path || !text_path || n_ctx < 4 || n_batch < 1) usage();
    char err[512];
    bn_model *m = bn_model_load(model_path, err, sizeof err);
    if (!m) { fprintf(stderr, "bonsai-perplexity: %s\n", err); return 1; }
    bn_tokenizer *tok = bn_tokenizer_from_gguf(m->gguf, err, sizeof err);
    if (!tok) { fprintf(stderr, "bonsai-perplexity: %s\n", err); return 1; }
    size_t text_len = 0;
    char *text = bn_read_file(text_path, &text_len, err, sizeof err);
    if (!text) { fprintf(stderr, "bonsai-perplexity: %s\n", err); return 1; }

    fprintf(stderr, "perplexity: tokenizing the input ..\n");
    double t0 = bn_time_ms();
    int32_t *tokens = NULL;
    int n_tokens = bn_tokenize(tok, text, text_len, true, false, &tokens);
    fprintf(stderr, "perplexity: tokenization took %g ms\n", bn_time_ms() - t0);
    if (n_tokens < 2 * n_ctx) {
        fprintf(stderr, "perplexity: you need at least %d tokens to evaluate perplexity with a context of %d\n",
                2 * n_ctx, n_ctx);
        fprintf(stderr, "perplexity: the data file you provided tokenizes to only %d tokens\n", n_tokens < 0 ? 0 : n_tokens);
        return 1;
    }
    int n_chunk = n_tokens / n_ctx;
    if (chunks >= 0 && chunks < n_chunk) n_chunk = chunks;
    int n_seq = n_batch / n_ctx > 1 ? n_batch / n_ctx : 1;
    fprintf(stderr, "perplexity: calculating perplexity over %d chunks, n_ctx=%d, batch_size=%d, n_seq=%d\n", n_chunk,
            n_ctx, n_batch, n_seq);
    int32_t bos = bn_tokenizer_add_bos(tok) ? bn_token_bos(tok) : -1;
    bn_ppl_result r;
    ppl_progress progress = {&r, n_chunk, n_seq};
    if (bn_perplexity(m, tokens, n_tokens, n_ctx, n_chunk, bos, n_threads, print_chunk, &progress, &r, err, sizeof err)) {
        fprintf(stderr, "\nbonsai-perplexity: %s\n", err);
        return 1;
    }
    printf("\n");
    fflush(stdout);
    if (r.ppl_err > 0) fprintf(stderr, "Final estimate: PPL = %.4lf +/- %.5lf\n", r.ppl, r.ppl_err);
    else fprintf(stderr, "Unexpected negative standard deviation of log(prob)\n");
    free(tokens);
    free(text);
    bn_tokenizer_free(tok);
    bn_model_free(m);
    return 0;
}
