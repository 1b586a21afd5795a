// eval/bench.h — llama-bench's method and output for our CPU engine (docs/server.md §12): pp<N> = one
// batched forward of N random tokens (BOS first if the vocab adds it), tg<N> = N one-token forwards
// from an empty state, each from a reset state; one untimed warm-up run (prompt run / 1 generated
// token); t/s = mean ± sample stddev of 1e9·(n_prompt + n_gen)/t_ns over the repetitions.
#ifndef BONSAI_BENCH_H
#define BONSAI_BENCH_H
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include "core/engine.h"
#include "core/model.h"

#define BN_BENCH_MAX_REPS 100

typedef struct {
    // model
    char model_filename[512];
    char model_type[128]; // bn_model_describe: "<arch> <size label> <ftype name>"
    uint64_t model_size;  // bytes of all tensors
    int64_t model_n_params;
    // test
    int n_prompt, n_gen, n_depth;
    int n_seq;          // sequences decoded at once in a tg test (bn_bench_run_batched; 0 or 1: one)
    int n_verify;       // tokens of each sequence per pass in a tg test (bn_bench_run_batched; 0 or 1: one)
    int n_threads;
    char backend[16];   // "CPU", "CUDA" or "CPU+CUDA" (the engine's name; "" reads as CPU)
    int n_gpu_layers;   // -ngl of the engine
    int reps;
    uint64_t samples_ns[BN_BENCH_MAX_REPS];
    char test_time[32]; // ISO 8601 UTC start time
} bn_bench_result;

// bn_bench_run: runs one test (n_prompt > 0 xor n_gen > 0, or both for pp+tg) reps times on model m
// with n_threads threads; fills r. Returns 0, or -1 with err filled.
int bn_bench_run(const bn_model *m, int n_prompt, int n_gen, int n_threads, int reps, bool warmup,
                 bn_bench_result *r, char *err, size_t errlen);
// bn_bench_run_engine: the same on any engine (core/engine.h: CPU or CUDA); returns 0 or -1.
int bn_bench_run_engine(const bn_engine *e, int n_prompt, int n_gen, int reps, bool warmup, bn_bench_result *r,
                        char *err, size_t errlen);

// bn_bench_run_batched: tg<n_gen> of n_seq sequences at once, each from a reset state. n_verify <= 1: n_gen steps of
// bn_engine_forward_batch with every sequence's logits row wanted, as tg's one-token forwards. n_verify > 1 (<= 64):
// ragged passes of n_verify tokens of every sequence (bn_engine_forward_multi; the last pass shorter when n_verify
// does not divide n_gen) as a greedy speculative verify asks for them: the argmax of every row and a snapshot after
// every token, so t/s is the decode ceiling of speculative slots whose n_verify − 1 drafts are always accepted
// (drafting not counted). t/s counts the tokens of all sequences. Returns 0 or -1.
int bn_bench_run_batched(const bn_engine *e, int n_gen, int n_seq, int n_verify, int reps, bool warmup,
                         bn_bench_result *r, char *err, size_t errlen);

// bn_bench_avg_ts / bn_bench_stdev_ts: mean / sample stddev (0 for one rep) of tokens per second.
double bn_bench_avg_ts(const bn_bench_result *r);
double bn_bench_stdev_ts(const bn_bench_result *r);
// bn_bench_test_name: "pp512", "tg128", "pp512+tg128", "tg128 x4" (4 sequences at once), "tg128 x4 v4" (passes of 4
// tokens of each) into buf; returns buf.
const char *bn_bench_test_name(const bn_bench_result *r, char *buf, size_t n);

// Markdown table exactly as llama-bench -o md prints it (CPU backend: threads column).
// bn_bench_print_md_header: writes the header and alignment rows to f.
void bn_bench_print_md_header(FILE *f);
// bn_bench_print_md_row: writes one result row (model, size, params, backend, threads, test, mean ± sd) to f.
void bn_bench_print_md_row(FILE *f, const bn_bench_result *r);
// bn_bench_print_md_footer: blank line then "build: <commit> (<number>)".
void bn_bench_print_md_footer(FILE *f, const char *commit, int number);
// bn_bench_print_json: a JSON array of the results with llama-bench's field names.
void bn_bench_print_json(FILE *f, const bn_bench_result *r, int n, const char *commit, int number);

#endif
