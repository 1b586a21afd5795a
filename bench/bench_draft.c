// bench/bench_draft.c — what drafting costs for several slots at once: one drafter pass per slot, one after another,
// against the batched pass (bn_drafter_draft_multi on the CPU, the device drafter's draft_multi on a GPU).
//   bench_draft -m TARGET.gguf -md DRAFTER.gguf [-ngl N] [-t THREADS] [-s 1,2,4,8] [-k DRAFTS] [-r REPS]
// Per slot count S: S drafter states, each given CONTEXT (64) rows of random taps, draft DRAFTS (default the block
// size) tokens after their own anchor; per repetition (interleaved, so load from other processes hits every mode
// alike): "serial" (one state after another, each waited for), on a device also "together" (every state's own
// graph started before any is waited for) and "batched" (one call for all). Prints one markdown row per S: median
// ms per round of drafting for all S slots in each mode, and serial / batched. The drafts of the modes must agree
// (checked; a difference is reported and the exit status is 1).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spec/dspark.h"
#include "core/engine.h"
#include "base/rng.h"
#include "base/util.h"

#define MAX_S 16
#define MAX_REPS 200
#define CONTEXT 64

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// median: the median of v[0..n) (sorts v).
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void usage(void) {
    fprintf(stderr, "usage: bench_draft -m TARGET.gguf -md DRAFTER.gguf [-ngl N] [-t THREADS] [-s 1,2,4,8] [-k DRAFTS] "
                    "[-r REPS]\n");
    exit(1);
}

// The slots: drafter states on the CPU (cs) or on the target engine's device (ds, through ops).
typedef struct {
    const bn_drafter *d;
    const bn_dev_drafter_ops *ops; // NULL: the CPU drafter
    bn_dstate *cs[MAX_S];
    void *ds[MAX_S];
    int32_t anchor[MAX_S];
    int k;
} slots;

// draft_serial: each of the first n slots drafts alone, waited for before the next; drafts into out[i]. 0 or -1.
static int draft_serial(slots *sl, int n, int32_t out[][32], int *counts, char *err, size_t errlen) {
    for (int i = 0; i < n; i++) {
        if (sl->ops) {
            const int st = sl->ops->draft_start(sl->ds[i], sl->anchor[i], CONTEXT, sl->k, err, errlen);
            counts[i] = st < 0 ? -1 : sl->ops->draft_finish(sl->ds[i], st, 0.0f, out[i], err, errlen);
        } else
            counts[i] = bn_drafter_draft(sl->d, sl->cs[i], sl->anchor[i], CONTEXT, sl->k, 0.0f, out[i], err, errlen);
        if (counts[i] < 0) return -1;
    }
    return 0;
}

// draft_together: (device) every slot's draft started, then each waited for. 0 or -1.
static int draft_together(slots *sl, int n, int32_t out[][32], int *counts, char *err, size_t errlen) {
    int st[MAX_S];
    for (int i = 0; i < n; i++)
        if ((st[i] = sl->ops->draft_start(sl->ds[i], sl->anchor[i], CONTEXT, sl->k, err, errlen)) < 0) return -1;
    for (int i = 0; i < n; i++)
        if ((counts[i] = sl->ops->draft_finish(sl->ds[i], st[i], 0.0f, out[i], err, errlen)) < 0) return -1;
    return 0;
}

// draft_batched: one call for the first n slots. 0 or -1.
static int draft_batched(slots *sl, int n, int32_t out[][32], int *counts, char *err, size_t errlen) {
    int32_t *outs[MAX_S];
    int past[MAX_S], kk[MAX_S];
    for (int i = 0; i < n; i++) outs[i] = out[i], past[i] = CONTEXT, kk[i] = sl->k;
    if (sl->ops) return sl->ops->draft_multi(sl->ds, sl->anchor, past, kk, n, 0.0f, outs, counts, err, errlen);
    bn_draft_seq q[MAX_S];
    for (int i = 0; i < n; i++)
        q[i] = (bn_draft_seq){.s = sl->cs[i], .id_last = sl->anchor[i], .n_past = CONTEXT, .n_max = sl->k,
                              .drafts = out[i]};
    if (bn_drafter_draft_multi(sl->d, q, n, 0.0f, err, errlen) != 0) return -1;
    for (int i = 0; i < n; i++) counts[i] = q[i].n_drafts;
    return 0;
}

int main(int argc, char **argv) {
    const char *mpath = NULL, *dpath = NULL, *sizes = "1,2,4,8";
    int ngl = 0, threads = bn_n_threads_default(), k = 0, reps = 7;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) usage();
        if (!strcmp(a, "-m")) mpath = argv[++i];
        else if (!strcmp(a, "-md")) dpath = argv[++i];
        else if (!strcmp(a, "-ngl")) ngl = atoi(argv[++i]);
        else if (!strcmp(a, "-t")) threads = atoi(argv[++i]);
        else if (!strcmp(a, "-s")) sizes = argv[++i];
        else if (!strcmp(a, "-k")) k = atoi(argv[++i]);
        else if (!strcmp(a, "-r")) reps = atoi(argv[++i]);
        else usage();
    }
    int ns[MAX_S];
    const int n_sizes = bn_parse_int_list(sizes, 1, MAX_S, ns, MAX_S);
    if (!mpath || !dpath || n_sizes == 0 || reps < 1 || reps > MAX_REPS || threads < 1) usage();
    char err[512];
    bn_model *m = bn_model_load(mpath, err, sizeof err);
    bn_drafter *d = m ? bn_drafter_load(dpath, m, err, sizeof err) : NULL;
    bn_engine *e = d ? bn_engine_open(m, ngl, threads, err, sizeof err) : NULL;
    if (!e) bn_die("bench_draft: %s", err);
    slots sl = {.d = d, .ops = bn_dev_drafter_for(e)};
    if (sl.ops && !sl.ops->draft_multi) bn_die("bench_draft: the %s drafter has no batched draft", sl.ops->name);
    const int B = d->cfg.block_size;
    sl.k = k > 0 && k < B ? k : B;
    if (sl.k > 32) bn_die("bench_draft: %d drafts (at most 32)", sl.k);
    int max_s = 0;
    for (int i = 0; i < n_sizes; i++) max_s = ns[i] > max_s ? ns[i] : max_s;
    // the slots' context rows: random taps
    const size_t row = (size_t)d->cfg.n_taps * d->cfg.n_embd;
    float *taps = xmalloc(sizeof(float) * row * CONTEXT);
    bn_rng rng;
    bn_rng_seed(&rng, 5);
    for (int i = 0; i < max_s; i++) {
        for (size_t j = 0; j < row * CONTEXT; j++) taps[j] = 2.0f * bn_rng_uniform(&rng) - 1.0f;
        sl.anchor[i] = (int32_t)((17 + 7919 * i) % (d->cfg.n_vocab - 1));
        if (sl.anchor[i] == d->cfg.mask_token_id) sl.anchor[i]++;
        int rc;
        if (sl.ops) {
            sl.ds[i] = sl.ops->state_new(d, 256, err, sizeof err);
            rc = sl.ds[i] ? sl.ops->process(sl.ds[i], taps, CONTEXT, 0, err, sizeof err) : -1;
        } else {
            sl.cs[i] = bn_dstate_new(d, 256, threads);
            rc = bn_drafter_process(d, sl.cs[i], taps, CONTEXT, 0, err, sizeof err);
        }
        if (rc != 0) bn_die("bench_draft: slot %d: %s", i, err);
    }
    printf("drafter on %s, block %d, %d drafts per slot, %d context rows, %d threads, median of %d rounds\n\n",
           sl.ops ? sl.ops->name : "CPU", B, sl.k, CONTEXT, threads, reps);
    printf("| slots | serial ms |%s batched ms | serial / batched |\n|---:|---:|%s---:|---:|\n",
           sl.ops ? " together ms |" : "", sl.ops ? "---:|" : "");
    int bad = 0;
    for (int si = 0; si < n_sizes; si++) {
        const int n = ns[si];
        double t[3][MAX_REPS];
        int32_t out[3][MAX_S][32];
        int counts[3][MAX_S];
        for (int r = 0; r <= reps; r++) // r 0: warm-up (graph captures, the batch workspace)
            for (int mode = 0; mode < 3; mode++) {
                if (mode == 1 && !sl.ops) continue;
                const double t0 = bn_time_ms();
                const int rc = mode == 0   ? draft_serial(&sl, n, out[0], counts[0], err, sizeof err)
                               : mode == 1 ? draft_together(&sl, n, out[1], counts[1], err, sizeof err)
                                           : draft_batched(&sl, n, out[2], counts[2], err, sizeof err);
                if (rc != 0) bn_die("bench_draft: %d slots, mode %d: %s", n, mode, err);
                if (r > 0) t[mode][r - 1] = bn_time_ms() - t0;
            }
        for (int mode = 1; mode < 3; mode++) {
            if (mode == 1 && !sl.ops) continue;
            for (int i = 0; i < n; i++)
                if (counts[mode][i] != counts[0][i] ||
                    memcmp(out[mode][i], out[0][i], sizeof(int32_t) * (size_t)counts[0][i]) != 0) {
                    fprintf(stderr, "bench_draft: %d slots: slot %d drafts differently in mode %d\n", n, i, mode);
                    bad = 1;
                }
        }
        const double ms0 = median(t[0], reps), ms2 = median(t[2], reps);
        if (sl.ops)
            printf("| %d | %.3f | %.3f | %.3f | %.2fx |\n", n, ms0, median(t[1], reps), ms2, ms0 / ms2);
        else
            printf("| %d | %.3f | %.3f | %.2fx |\n", n, ms0, ms2, ms0 / ms2);
        fflush(stdout);
    }
    for (int i = 0; i < max_s; i++) {
        if (sl.ops) sl.ops->state_free(sl.ds[i]);
        else bn_dstate_free(sl.cs[i]);
    }
    free(taps);
    bn_engine_free(e);
    bn_drafter_free(d);
    bn_model_free(m);
    return bad;
}
