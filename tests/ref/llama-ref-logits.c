// tests/ref/llama-ref-logits.c — debugging CLI over the llama.cpp reference shim.
//   llama-ref-logits MODEL.gguf [-c CTX] [-t THREADS] [-k TOPK] [-g NGEN] [-o FILE] (-p TEXT | ID ID ...)
// Evaluates the token ids (or the tokenized text) with llama.cpp and prints, per position, the token,
// the argmax and the top-K logits; -o writes all logits as raw float32 [n][n_vocab]; -g also prints
// N greedy continuation ids.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/ref/llama_ref.h"

static void usage(void) {
    fprintf(stderr, "usage: llama-ref-logits MODEL.gguf [-c CTX] [-t THREADS] [-k TOPK] [-g NGEN] [-o FILE] "
                    "(-p TEXT | ID ID ...)\n");
    exit(1);
}

// print_top: the k largest logits of row (n entries) as "id:value" pairs.
static void print_top(const float *row, int n, int k) {
    int *used = calloc((size_t)n, sizeof *used);
    for (int j = 0; j < k && j < n; j++) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (!used[i] && (best < 0 || row[i] > row[best])) best = i;
        used[best] = 1;
        printf(" %d:%.5f", best, row[best]);
    }
    free(used);
}

int main(int argc, char **argv) {
    if (argc < 3) usage();
    const char *model = argv[1], *text = NULL, *out_path = NULL;
    int n_ctx = 512, n_threads = 2, top_k = 5, n_gen = 0, n = 0;
    int32_t *ids = calloc((size_t)argc, sizeof *ids);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "-c") && has_val) n_ctx = atoi(argv[++i]);
        else if (!strcmp(a, "-t") && has_val) n_threads = atoi(argv[++i]);
        else if (!strcmp(a, "-k") && has_val) top_k = atoi(argv[++i]);
        else if (!strcmp(a, "-g") && has_val) n_gen = atoi(argv[++i]);
        else if (!strcmp(a, "-o") && has_val) out_path = argv[++i];
        else if (!strcmp(a, "-p") && has_val) text = argv[++i];
        else if (a[0] >= '0' && a[0] <= '9') ids[n++] = atoi(a);
        else usage();
    }
    char err[512];
    llama_ref *r = llama_ref_load(model, n_ctx, n_threads, err, sizeof err);
    if (!r) { fprintf(stderr, "llama-ref-logits: %s\n", err); return 1; }
    if (text) {
        free(ids);
        ids = calloc((size_t)n_ctx, sizeof *ids);
        n = llama_ref_tokenize(r, text, (int)strlen(text), ids, n_ctx, true, false);
        if (n <= 0) { fprintf(stderr, "llama-ref-logits: tokenizing failed or empty\n"); return 1; }
    }
    if (n == 0) usage();
    int n_vocab = llama_ref_n_vocab(r);
    float *logits = malloc(sizeof(float) * (size_t)n * (size_t)n_vocab);
    if (!logits || llama_ref_eval(r, ids, n, logits) != 0) {
        fprintf(stderr, "llama-ref-logits: evaluation failed (n %d, n_ctx %d)\n", n, n_ctx);
        return 1;
    }
    printf("n_vocab %d, %d tokens\n", n_vocab, n);
    for (int p = 0; p < n; p++) {
        const float *row = logits + (size_t)p * n_vocab;
        int best = 0;
        for (int i = 1; i < n_vocab; i++)
            if (row[i] > row[best]) best = i;
        printf("[%d] tok %d argmax %d top:", p, ids[p], best);
        print_top(row, n_vocab, top_k);
        printf("\n");
    }
    if (out_path) {
        FILE *f = fopen(out_path, "wb");
        if (!f || fwrite(logits, sizeof(float) * (size_t)n_vocab, (size_t)n, f) != (size_t)n || fclose(f)) {
            fprintf(stderr, "llama-ref-logits: cannot write %s\n", out_path);
            return 1;
        }
    }
    if (n_gen > 0) {
        int32_t *gen = calloc((size_t)n_gen, sizeof *gen);
        if (llama_ref_generate_greedy(r, ids, n, n_gen, gen) != n_gen) {
            fprintf(stderr, "llama-ref-logits: greedy generation failed\n");
            return 1;
        }
        printf("greedy:");
        for (int i = 0; i < n_gen; i++) printf(" %d", gen[i]);
        printf("\n");
        free(gen);
    }
    free(logits);
    free(ids);
    llama_ref_free(r);
    return 0;
}
