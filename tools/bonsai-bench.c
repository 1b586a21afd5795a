// tools/bonsai-bench.c — llama-bench for our engine (docs/server.md §12), CPU, CUDA (-ngl >= n_layer) or CPU+CUDA
// (0 < -ngl < n_layer):
//   bonsai-bench -m MODEL.gguf [-m ...] [-p 512[,N...]] [-n 128[,N...]] [-pg P,G] [-t THREADS[,T...]] [-r 5]
//                [-ngl N[,N...]] [-npl N[,N...]] [-nv N[,N...]] [-o md|json] [--no-warmup]
// Prints llama-bench's markdown table (or JSON); the build line gives the git commit and commit count of the build
// ($BONSAI_BUILD_COMMIT overrides the commit).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "eval/bench.h"
#include "core/engine.h"
#include "core/model.h"
#include "base/util.h"
#include "base/args.h"

#define MAX_LIST 16

typedef struct {
    const char *models[MAX_LIST];
    int n_models, prompts[MAX_LIST], n_prompts, gens[MAX_LIST], n_gens, threads[MAX_LIST], n_threads, reps, pg[2], n_pg;
    int ngls[MAX_LIST], n_ngls, npls[MAX_LIST], n_npls, nvs[MAX_LIST], n_nvs, output;
    bool warmup;
    bn_engine_opts eng; // --lora / --lora-scaled only (bn_lora_args)
} bench_opts;

#define O(f) offsetof(bench_opts, f)
#define LIST(names, f, help) BN_INTS(names, O(f), O(n_##f), MAX_LIST, "N[,N...]", help, 0, 1 << 30)
static const bn_arg bench_args[] = {
    BN_STRS("-m, --model", O(models), O(n_models), MAX_LIST, "FILE", "model GGUF (repeatable; at least one)"),
    LIST("-p, --n-prompt", prompts, "prompt-processing tests of N tokens (0: none) (default: 512)"),
    LIST("-n, --n-gen", gens, "text-generation tests of N tokens (0: none) (default: 128)"),
    BN_INTS("-pg", O(pg), O(n_pg), 2, "P,G", "also a test of a P-token prompt then G generated tokens", 0, 1 << 30),
    LIST("-t, --threads", threads, "CPU threads (default: all CPUs)"),
    BN_INT("-r, --repetitions", O(reps), "N", "repetitions of each test", 1, BN_BENCH_MAX_REPS),
    LIST("-ngl, --gpu-layers, --n-gpu-layers", ngls,
         "layers on the GPU (CUDA builds): 0 all on the CPU, >= the model's layer count all on the GPU (-t is then "
         "ignored; backend CUDA), in between the last N layers + head on the GPU and the first layers on the CPU with "
         "-t threads (backend CPU+CUDA) (default: 0)"),
    LIST("-npl, --n-parallel", npls,
         "also every tg test with N sequences decoded at once (batched steps; test \"tg128 x4\", t/s of all sequences "
         "together); 1 is the plain tg test (default: 1)"),
    LIST("-nv", nvs,
         "also every tg test (and -npl test) in passes of N tokens of each sequence, as a greedy speculative verify "
         "pass asks for them (argmax of every row, a snapshot after every token; test \"tg128 x4 v4\"): the decode "
         "ceiling when N - 1 drafts are always accepted, drafting not counted; 1: one-token steps (default: 1)"),
    BN_CHOICE("-o, --output", O(output), "md|json", "llama-bench's markdown table or its JSON"),
    BN_FALSE("--no-warmup", O(warmup), "no warm-up run before each test"),
    {0}};
#undef LIST
#undef O

static const bn_args_tool tool = {
    .name = "bonsai-bench",
    .usage = "usage: bonsai-bench -m MODEL.gguf [-m MODEL2 ...] [-p N[,N...]] [-n N[,N...]] [-pg P,G] [-t T[,T...]]\n"
             "                    [-r REPS] [-ngl N[,N...]] [-npl N[,N...]] [-nv N[,N...]] [-o md|json] [--no-warmup]\n"
             "llama-bench for our engine: every combination of the lists is a row.\n",
    .notes = "The build line gives the git commit the program was built from ($BONSAI_BUILD_COMMIT overrides it).\n"};

// run_model: every test of one model, its rows printed (markdown) and kept in results[*n_results...]; 0 or -1 (err).
static int run_model(const bench_opts *o, bn_model *m, bn_bench_result *results, int *n_results, bool json, char *err,
                     size_t errlen) {
    for (int gi = 0; gi < o->n_ngls; gi++)
        for (int ti = 0; ti < o->n_threads; ti++) {
            if (o->ngls[gi] >= m->cfg.n_layer && ti > 0) break; // threads do not matter with every layer on the GPU
            bn_lora_set *lora = NULL;
            if (o->eng.n_lora > 0 &&
                !(lora = bn_lora_set_open(m, o->eng.lora, o->eng.lora_scale, o->eng.n_lora, err, errlen)))
                return -1;
            bn_engine *eng = bn_engine_open_lora(m, o->ngls[gi], o->threads[ti], lora, err, errlen);
            if (!eng) return -1;
            static bool said_switches = false; // llama-bench prints its device setup; ours: which kernels run
            const bn_engine_device *dev = bn_engine_device_get();
            char sw[512];
            if (o->ngls[gi] > 0 && dev && eng->n_gpu_layers > 0 && !said_switches)
                fprintf(stderr, "bonsai-bench: %s %s\n", dev->name, dev->describe(sw, sizeof sw));
            said_switches = said_switches || (o->ngls[gi] > 0 && eng->n_gpu_layers > 0);
            // llama-bench order: every -p test, then every -n test, then -pg.
            int tests[MAX_LIST * 2 + 1][2], n_tests = 0;
            for (int k = 0; k < o->n_prompts; k++)
                if (o->prompts[k] > 0) tests[n_tests][0] = o->prompts[k], tests[n_tests++][1] = 0;
            for (int k = 0; k < o->n_gens; k++)
                if (o->gens[k] > 0) tests[n_tests][0] = 0, tests[n_tests++][1] = o->gens[k];
            if (o->pg[0] > 0 || o->pg[1] > 0) tests[n_tests][0] = o->pg[0], tests[n_tests++][1] = o->pg[1];
            for (int k = 0; k < n_tests; k++) {
                bn_bench_result *r = &results[*n_results];
                if (bn_bench_run_engine(eng, tests[k][0], tests[k][1], o->reps, o->warmup, r, err, errlen) != 0)
                    return -1;
                ++*n_results;
                if (!json) bn_bench_print_md_row(stdout, r), fflush(stdout);
            }
            // tg with several sequences at once (-npl values > 1) and in passes of several tokens (-nv values > 1)
            for (int k = 0; k < o->n_gens; k++)
                for (int q = 0; q < o->n_npls && o->gens[k] > 0; q++)
                    for (int v = 0; v < o->n_nvs; v++) {
                        if (o->npls[q] <= 1 && o->nvs[v] <= 1) continue; // the plain tg test above
                        bn_bench_result *r = &results[*n_results];
                        if (bn_bench_run_batched(eng, o->gens[k], o->npls[q] > 1 ? o->npls[q] : 1, o->nvs[v], o->reps,
                                                 o->warmup, r, err, errlen) != 0)
                            return -1;
                        ++*n_results;
                        if (!json) bn_bench_print_md_row(stdout, r), fflush(stdout);
                    }
            bn_engine_free(eng);
        }
    return 0;
}

int main(int argc, char **argv) {
    bench_opts o = {.prompts = {512}, .n_prompts = 1, .gens = {128}, .n_gens = 1, .threads = {bn_n_threads_default()},
                    .n_threads = 1, .reps = 5, .ngls = {0}, .n_ngls = 1, .npls = {1}, .n_npls = 1, .nvs = {1},
                    .n_nvs = 1, .warmup = true};
    const bn_arg_table tables[] = {BN_TABLE(bench_args, &o), BN_TABLE(bn_lora_args, &o.eng), {0}};
    bn_args_parse(&tool, tables, argc, argv);
    if (o.n_models == 0) bn_args_fail(&tool, "-m MODEL.gguf is required");
    if (bn_args_given("-pg") && o.n_pg != 2) bn_args_fail(&tool, "-pg takes P,G");
    const bool json = o.output == 1;
    const char *commit = getenv("BONSAI_BUILD_COMMIT") ? getenv("BONSAI_BUILD_COMMIT") : bn_build_commit();

    int max_results = o.n_models * o.n_ngls * o.n_threads * (o.n_prompts + o.n_gens * o.n_npls * o.n_nvs + 1);
    bn_bench_result *results = xcalloc((size_t)max_results, sizeof *results);
    int n_results = 0;
    if (!json) bn_bench_print_md_header(stdout);
    fflush(stdout);
    char err[512];
    for (int mi = 0; mi < o.n_models; mi++) {
        bn_model *m = bn_model_load(o.models[mi], err, sizeof err);
        if (!m || run_model(&o, m, results, &n_results, json, err, sizeof err) != 0) {
            fprintf(stderr, "bonsai-bench: %s\n", err);
            return 1;
        }
        bn_model_free(m);
    }
    if (json) bn_bench_print_json(stdout, results, n_results, commit, bn_build_number());
    else bn_bench_print_md_footer(stdout, commit, bn_build_number());
    free(results);
    return 0;
}
