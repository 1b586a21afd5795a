// bench/bench_lora.c — the decode cost of LoRA adapters applied unmerged (core/adapter.h):
//   bench_lora -m MODEL.gguf [-t THREADS] [-r RANK] [-n TOKENS] [-k REPS]
// Three engines on one model, side by side: no adapter, an adapter on the LM head only (output.weight), and one on
// every projection and the head; both adapters random-initialised (A PEFT-style, B small), rank RANK (16), written
// to /tmp and loaded like --lora. Each repetition decodes TOKENS tokens (128) greedily from the same 8-token prompt on
// each engine in turn (interleaved, so other load hits all three alike), timed by the wall clock and by the process's
// CPU time (which other processes on a shared machine do not inflate); prints tok/s and the cost (extra time per
// token) against no adapter: wall-clock median and best, CPU-time median. A tied head (no output.weight) has no head-only row.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "core/adapter.h"
#include "core/forward.h"
#include "core/model.h"
#include "base/rng.h"
#include "base/util.h"
#include "quant/quant.h"

#define MAX_REPS 101

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// write_adapter: a random adapter of rank r on every adaptable weight of m (head_only: output.weight alone) to path;
// false when m has no such weight.
static bool write_adapter(const bn_model *m, bool head_only, int r, const char *path) {
    bn_adapter a = {.alpha = (float)r};
    snprintf(a.arch, sizeof a.arch, "%s", bn_model_arch_name(m));
    const int max = m->cfg.n_layer * 16 + 1;
    a.t = xcalloc((size_t)max, sizeof *a.t);
    const char *stems[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
                           "attn_qkv", "attn_gate", "ssm_beta", "ssm_alpha", "ssm_out"};
    char name[96];
    for (int il = 0; !head_only && il < m->cfg.n_layer; il++)
        for (size_t k = 0; k < sizeof stems / sizeof stems[0]; k++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", il, stems[k]);
            if (bn_adapter_weight(m, name)) snprintf(a.t[a.n_tensors++].name, sizeof a.t[0].name, "%s", name);
        }
    if (bn_adapter_weight(m, "output.weight")) snprintf(a.t[a.n_tensors++].name, sizeof a.t[0].name, "output.weight");
    bn_rng rng;
    bn_rng_seed(&rng, 7);
    for (int i = 0; i < a.n_tensors; i++) {
        bn_adapter_tensor *t = &a.t[i];
        const bn_weight *w = bn_adapter_weight(m, t->name);
        t->n_in = w->ne[0], t->n_out = w->ne[1], t->r = r;
        t->A = xmalloc(sizeof(float) * (size_t)(t->n_in * r));
        t->B = xmalloc(sizeof(float) * (size_t)(t->n_out * r));
        for (int64_t e = 0; e < t->n_in * r; e++) t->A[e] = (float)(bn_rng_uniform(&rng) - 0.5) * 0.1f;
        for (int64_t e = 0; e < t->n_out * r; e++) t->B[e] = (float)(bn_rng_uniform(&rng) - 0.5) * 0.01f;
    }
    char err[256];
    const bool ok = a.n_tensors > 0 && bn_adapter_save(&a, path, BN_F32, err, sizeof err) == 0;
    if (a.n_tensors > 0 && !ok) bn_die("%s", err);
    for (int i = 0; i < a.n_tensors; i++) free(a.t[i].A), free(a.t[i].B);
    free(a.t);
    return ok;
}

// cpu_ms: the process's CPU time in ms (all threads).
static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// decode_ms: ms to decode n tokens greedily after the prompt on a fresh state of m with set (cpu: the process's CPU
// time instead of the wall clock's).
static double decode_ms(const bn_model *m, const bn_lora_set *set, int threads, int n, bool cpu) {
    char err[256];
    bn_state *s = bn_state_new(m, n + 16, threads);
    bn_state_set_lora(s, set);
    int32_t tok[8], next;
    for (int t = 0; t < 8; t++) tok[t] = (int32_t)((t * 31 + 5) % m->cfg.n_vocab);
    bn_forward_out o = {.argmax = &next};
    if (bn_forward(m, s, tok, 8, &o, err, sizeof err) != 0) bn_die("%s", err);
    const double t0 = cpu ? cpu_ms() : bn_time_ms();
    for (int i = 0; i < n; i++)
        if (bn_forward(m, s, &next, 1, &o, err, sizeof err) != 0) bn_die("%s", err);
    const double ms = (cpu ? cpu_ms() : bn_time_ms()) - t0;
    bn_state_free(s);
    return ms;
}

int main(int argc, char **argv) {
    const char *path = NULL;
    int threads = 0, rank = 16, n = 128, reps = 15, opt;
    while ((opt = getopt(argc, argv, "m:t:r:n:k:")) != -1) {
        if (opt == 'm') path = optarg;
        else if (opt == 't') threads = atoi(optarg);
        else if (opt == 'r') rank = atoi(optarg);
        else if (opt == 'n') n = atoi(optarg);
        else if (opt == 'k') reps = atoi(optarg);
        else path = NULL, optind = argc;
    }
    if (!path || rank < 1 || n < 1 || reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "usage: bench_lora -m MODEL.gguf [-t THREADS] [-r RANK] [-n TOKENS] [-k REPS (<= %d)]\n",
                MAX_REPS);
        return 1;
    }
    char err[256];
    bn_model *m = bn_model_load(path, err, sizeof err);
    if (!m) bn_die("%s", err);
    char head[64], all[64];
    snprintf(head, sizeof head, "/tmp/bench_lora_head_%d.gguf", (int)getpid());
    snprintf(all, sizeof all, "/tmp/bench_lora_all_%d.gguf", (int)getpid());
    const char *names[3] = {"no adapter", "lm_head only", "all projections + head"};
    bn_lora_set *sets[3] = {NULL, NULL, NULL};
    const bool has_head = write_adapter(m, true, rank, head);
    write_adapter(m, false, rank, all);
    if (has_head && !(sets[1] = bn_lora_set_open(m, (const char *[]){head}, NULL, 1, err, sizeof err))) bn_die("%s", err);
    if (!(sets[2] = bn_lora_set_open(m, (const char *[]){all}, NULL, 1, err, sizeof err))) bn_die("%s", err);
    unlink(head), unlink(all);
    static double ms[2][3][MAX_REPS]; // [wall, cpu][engine][rep]
    for (int k = 0; k < 3; k++) decode_ms(m, sets[k], threads, n / 4 + 1, false); // warm-up
    for (int r = 0; r < reps; r++)
        for (int c = 0; c < 2; c++)
            for (int k = 0; k < 3; k++)
                if (k != 1 || has_head) ms[c][k][r] = decode_ms(m, sets[k], threads, n, c == 1);
    char desc[128];
    printf("%s, %d threads, rank %d, %d tokens decoded, %d repetitions\n\n", bn_model_describe(m, desc, sizeof desc),
           threads > 0 ? threads : bn_n_threads_default(), rank, n, reps);
    printf("| adapter | tok/s (wall, median) | cost | tok/s (wall, best) | cost | tok/s (CPU time, median) | cost |\n"
           "|---|---:|---:|---:|---:|---:|---:|\n");
    double base[3] = {0};
    for (int k = 0; k < 3; k++) {
        if (k == 1 && !has_head) continue;
        double tps[3];
        for (int c = 0; c < 2; c++) qsort(ms[c][k], (size_t)reps, sizeof(double), cmp_double);
        tps[0] = n / (ms[0][k][reps / 2] / 1e3), tps[1] = n / (ms[0][k][0] / 1e3), tps[2] = n / (ms[1][k][reps / 2] / 1e3);
        if (k == 0) memcpy(base, tps, sizeof base);
        printf("| %s", names[k]);
        for (int c = 0; c < 3; c++) printf(" | %.1f | %+.1f %%", tps[c], 100.0 * (base[c] / tps[c] - 1.0));
        printf(" |\n");
    }
    for (int k = 0; k < 3; k++) bn_lora_set_free(sets[k]);
    bn_model_free(m);
    return 0;
}
