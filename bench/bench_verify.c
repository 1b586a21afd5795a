// bench/bench_verify.c — the cost of a small batched forward (DSpark's verify) against one token:
//   bench_verify -m MODEL.gguf [-t THREADS] [-c CONTEXT] [-n 1,2,4,8] [-r REPS]
// Prefills CONTEXT random tokens once, snapshots the state, then per repetition and per n (interleaved,
// so load from other processes hits every n alike) restores the snapshot and times bn_forward of n
// tokens with all logits (what dspark_spec's verify asks for). Prints one markdown row per n: median ms,
// min ms, and the median's ratio to the first n of the list.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/forward.h"
#include "core/model.h"
#include "base/rng.h"
#include "base/util.h"
#include "quant/quant.h"

#define MAX_N 16
#define MAX_REPS 200

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void usage(void) {
    fprintf(stderr, "usage: bench_verify -m MODEL.gguf [-t THREADS] [-c CONTEXT] [-n 1,2,4,8] [-r REPS]\n");
    exit(1);
}

int main(int argc, char **argv) {
    const char *path = NULL;
    int threads = 2, n_ctx_fill = 128, reps = 9, sizes[MAX_N] = {1, 2, 4, 8}, n_sizes = 4;
    for (int i = 1; i < argc; i++) {
        bool has = i + 1 < argc;
        if (!strcmp(argv[i], "-m") && has) path = argv[++i];
        else if (!strcmp(argv[i], "-t") && has) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-c") && has) n_ctx_fill = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && has) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-n") && has) {
            if (!(n_sizes = bn_parse_int_list(argv[++i], 1, 64, sizes, MAX_N))) usage();
        } else usage();
    }
    if (!path || threads < 1 || n_ctx_fill < 1 || reps < 1 || reps > MAX_REPS) usage();
    char err[512];
    bn_model *m = bn_model_load(path, err, sizeof err);
    if (!m) { fprintf(stderr, "bench_verify: %s\n", err); return 1; }
    const int V = m->cfg.n_vocab, n_max = 64;
    bn_state *s = bn_state_new(m, n_ctx_fill + n_max, threads);
    bn_rng rng;
    bn_rng_seed(&rng, 1234);
    int32_t *tok = xmalloc(sizeof(int32_t) * (size_t)(n_ctx_fill + n_max));
    for (int i = 0; i < n_ctx_fill + n_max; i++) tok[i] = (int32_t)bn_rng_below(&rng, (uint64_t)V);
    bn_forward_out none = {0};
    if (bn_forward(m, s, tok, n_ctx_fill, &none, err, sizeof err) != 0) {
        fprintf(stderr, "bench_verify: %s\n", err);
        return 1;
    }
    bn_snapshot *snap = bn_state_snapshot(s);
    float *logits = xmalloc(sizeof(float) * (size_t)V * (size_t)n_max);
    static double ms[MAX_N][MAX_REPS];
    for (int r = -1; r < reps; r++) { // r = -1: untimed warm-up
        for (int k = 0; k < n_sizes; k++) {
            bn_state_restore(s, snap);
            bn_forward_out out = {.logits = logits, .all_logits = true};
            double t0 = bn_time_ms();
            if (bn_forward(m, s, tok + n_ctx_fill, sizes[k], &out, err, sizeof err) != 0) {
                fprintf(stderr, "bench_verify: %s\n", err);
                return 1;
            }
            if (r >= 0) ms[k][r] = bn_time_ms() - t0;
        }
    }
    double med[MAX_N];
    printf("| model | threads | ctx | n | median ms | min ms | ratio to n=%d |\n", sizes[0]);
    printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    for (int k = 0; k < n_sizes; k++) {
        qsort(ms[k], (size_t)reps, sizeof(double), cmp_double);
        med[k] = reps % 2 ? ms[k][reps / 2] : 0.5 * (ms[k][reps / 2 - 1] + ms[k][reps / 2]);
        printf("| %s | %d | %d | %d | %.2f | %.2f | %.2f |\n", base, threads, n_ctx_fill, sizes[k], med[k], ms[k][0],
               med[k] / med[0]);
    }
    printf("simd: %s\n", bn_simd_name());
    free(logits);
    free(tok);
    bn_snapshot_free(snap);
    bn_state_free(s);
    bn_model_free(m);
    return 0;
}
