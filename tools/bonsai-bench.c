// tools/bonsai-bench.c — llama-bench for our engine (docs/server.md §12), CPU, CUDA (-ngl >= n_layer) or CPU+CUDA
// (0 < -ngl < n_layer):
//   bonsai-bench -m MODEL.gguf [-m ...] [-p 512[,N...]] [-n 128[,N...]] [-pg P,G] [-t THREADS[,T...]] [-r 5]
//                [-ngl N[,N...]] [-npl N[,N...]] [-nv N[,N...]] [-o md|json] [--no-warmup]
// Prints llama-bench's markdown table (or JSON). The build line uses $BONSAI_BUILD_COMMIT if set.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "eval/bench.h"
#include "core/engine.h"
#include "core/model.h"
#include "base/util.h"

#define MAX_LIST 16

// usage: prints the help to f; exits 0 for --help (stdout), 1 otherwise
static void usage(FILE *f) {
    fprintf(f,
            "usage: bonsai-bench -m MODEL.gguf [-m MODEL2 ...] [-p N[,N...]] [-n N[,N...]] [-pg P,G] [-t T[,T...]]\n"
            "                    [-r REPS] [-ngl N[,N...]] [-npl N[,N...]] [-nv N[,N...]] [-o md|json] [--no-warmup]\n"
            "  defaults: -p 512 -n 128 -r 5 -t <cpus> -ngl 0 -o md (0 in -p/-n drops that test)\n"
            "  -ngl N: layers on the GPU (CUDA builds): 0 all on the CPU, >= the model's layer count all on the GPU\n"
            "          (-t is then ignored; backend CUDA), in between the last N layers + head on the GPU and the\n"
            "          first layers on the CPU with -t threads (backend CPU+CUDA)\n"
            "  -npl N: also every tg test with N sequences decoded at once (batched steps; test \"tg128 x4\", t/s of\n"
            "          all sequences together); 1 is the plain tg test\n"
            "  -nv N:  also every tg test (and -npl test) in passes of N tokens of each sequence, as a greedy speculative\n"
            "          verify pass asks for them (argmax of every row, a snapshot after every token; test \"tg128 x4 v4\"):\n"
            "          the decode ceiling when N - 1 drafts are always accepted, drafting not counted; 1: one-token steps\n");
    exit(f == stdout ? 0 : 1);
}

// parse_list: comma-separated non-negative ints into out (at most MAX_LIST); returns the count (exits on a bad list).
static int parse_list(const char *s, int *out) {
    const int n = bn_parse_int_list(s, 0, 1L << 30, out, MAX_LIST);
    if (n == 0) {
        fprintf(stderr, "bonsai-bench: bad list '%s' (at most %d non-negative integers, comma-separated)\n", s, MAX_LIST);
        exit(1);
    }
    return n;
}

int main(int argc, char **argv) {
    const char *models[MAX_LIST];
    int n_models = 0, prompts[MAX_LIST] = {512}, n_prompts = 1, gens[MAX_LIST] = {128}, n_gens = 1;
    int threads[MAX_LIST] = {bn_n_threads_default()}, n_threads = 1, reps = 5, pg[2] = {0, 0};
    int ngls[MAX_LIST] = {0}, n_ngls = 1, npls[MAX_LIST] = {1}, n_npls = 1, nvs[MAX_LIST] = {1}, n_nvs = 1;
    bool warmup = true, json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "-m") && has) {
            if (n_models == MAX_LIST) { fprintf(stderr, "bonsai-bench: at most %d models\n", MAX_LIST); return 1; }
            models[n_models++] = argv[++i];
        } else if ((!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) && has) n_prompts = parse_list(argv[++i], prompts);
        else if ((!strcmp(a, "-n") || !strcmp(a, "--n-gen")) && has) n_gens = parse_list(argv[++i], gens);
        else if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && has) n_threads = parse_list(argv[++i], threads);
        else if ((!strcmp(a, "-ngl") || !strcmp(a, "--n-gpu-layers")) && has) n_ngls = parse_list(argv[++i], ngls);
        else if ((!strcmp(a, "-npl") || !strcmp(a, "--n-parallel")) && has) n_npls = parse_list(argv[++i], npls);
        else if (!strcmp(a, "-nv") && has) n_nvs = parse_list(argv[++i], nvs);
        else if (!strcmp(a, "-pg") && has) {
            if (parse_list(argv[++i], pg) != 2) { fprintf(stderr, "bonsai-bench: -pg takes P,G\n"); return 1; }
        } else if ((!strcmp(a, "-r") || !strcmp(a, "--repetitions")) && has) reps = (int)bn_arg_int("bonsai-bench", a, argv[++i], 1, BN_BENCH_MAX_REPS);
        else if (!strcmp(a, "-o") && has) {
            const char *o = argv[++i];
            if (!strcmp(o, "json")) json = true;
            else if (strcmp(o, "md")) { fprintf(stderr, "bonsai-bench: output %s not supported (md, json)\n", o); return 1; }
        } else if (!strcmp(a, "--no-warmup")) warmup = false;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) usage(stdout);
        else bn_arg_unknown("bonsai-bench", a);
    }
    if (n_models == 0) usage(stderr);
    const char *commit = getenv("BONSAI_BUILD_COMMIT") ? getenv("BONSAI_BUILD_COMMIT") : "unknown";

    int max_results = n_models * n_ngls * n_threads * (n_prompts + n_gens * n_npls * n_nvs + 1);
    bn_bench_result *results = xcalloc((size_t)max_results, sizeof *results);
    int n_results = 0;
    if (!json) bn_bench_print_md_header(stdout);
    fflush(stdout);
    char err[512];
    for (int mi = 0; mi < n_models; mi++) {
        bn_model *m = bn_model_load(models[mi], err, sizeof err);
        if (!m) { fprintf(stderr, "bonsai-bench: %s\n", err); return 1; }
        for (int gi = 0; gi < n_ngls; gi++)
        for (int ti = 0; ti < n_threads; ti++) {
            if (ngls[gi] >= m->cfg.n_layer && ti > 0) break; // threads do not matter with every layer on the GPU
            bn_engine *eng = bn_engine_open(m, ngls[gi], threads[ti], err, sizeof err);
            if (!eng) { fprintf(stderr, "bonsai-bench: %s\n", err); return 1; }
            static bool said_switches = false; // llama-bench prints its device setup; ours: which kernels run
            const bn_engine_device *dev = bn_engine_device_get();
            char sw[512];
            if (ngls[gi] > 0 && dev && eng->n_gpu_layers > 0 && !said_switches)
                fprintf(stderr, "bonsai-bench: %s %s\n", dev->name, dev->describe(sw, sizeof sw));
            said_switches = said_switches || (ngls[gi] > 0 && eng->n_gpu_layers > 0);
            // llama-bench order: every -p test, then every -n test, then -pg.
            int tests[MAX_LIST * 2 + 1][2], n_tests = 0;
            for (int k = 0; k < n_prompts; k++) if (prompts[k] > 0) { tests[n_tests][0] = prompts[k]; tests[n_tests++][1] = 0; }
            for (int k = 0; k < n_gens; k++) if (gens[k] > 0) { tests[n_tests][0] = 0; tests[n_tests++][1] = gens[k]; }
            if (pg[0] > 0 || pg[1] > 0) { tests[n_tests][0] = pg[0]; tests[n_tests++][1] = pg[1]; }
            for (int k = 0; k < n_tests; k++) {
                bn_bench_result *r = &results[n_results];
                if (bn_bench_run_engine(eng, tests[k][0], tests[k][1], reps, warmup, r, err, sizeof err) != 0) {
                    fprintf(stderr, "bonsai-bench: %s\n", err);
                    return 1;
                }
                n_results++;
                if (!json) { bn_bench_print_md_row(stdout, r); fflush(stdout); }
            }
            // tg with several sequences at once (-npl values > 1) and in passes of several tokens (-nv values > 1)
            for (int k = 0; k < n_gens; k++)
                for (int q = 0; q < n_npls && gens[k] > 0; q++)
                    for (int v = 0; v < n_nvs; v++) {
                        if (npls[q] <= 1 && nvs[v] <= 1) continue; // the plain tg test above
                        bn_bench_result *r = &results[n_results];
                        if (bn_bench_run_batched(eng, gens[k], npls[q] > 1 ? npls[q] : 1, nvs[v], reps, warmup, r,
                                                 err, sizeof err) != 0) {
                            fprintf(stderr, "bonsai-bench: %s\n", err);
                            return 1;
                        }
                        n_results++;
                        if (!json) { bn_bench_print_md_row(stdout, r); fflush(stdout); }
                    }
            bn_engine_free(eng);
        }
        bn_model_free(m);
    }
    if (json) bn_bench_print_json(stdout, results, n_results, commit, 0);
    else bn_bench_print_md_footer(stdout, commit, 0);
    free(results);
    return 0;
}
