// mine/options.h — command-line options shared by bonsai-mine-pairs and bonsai-eval-loops (generation, detector,
// chosen selection, priming, prompts) as base/args.h tables.
#ifndef BONSAI_DETECT_MINEOPTS_H
#define BONSAI_DETECT_MINEOPTS_H
#include <stdio.h>
#include "mine/mine.h"
#include "records/prompts.h"
#include "core/engine.h"
#include "spec/step_batch.h"

typedef struct {
    bn_mine_params mine;
    bn_prompt_opts prompts;
    bn_engine_opts eng; // -m (the model; with --server its tokenizer), -t (0: all CPUs), -c (6000), -ngl N: in-process
                        // generation on the engine bn_engine_open gives for N (0: the CPU); the tool opens it
                        // (bn_mine_opts_engine) and passes it to bn_mine_opts_sources
    const char *prompts_path;
    const char *server_url; // --server: generate through llama-server's /completion instead of in-process
    int timeout_s;   // per request with --server (1800)
    const char *skip_raw[16]; // --chosen-skip-raw-substring (repeatable)
    char **phrases;  // --prime-phrases FILE: one phrase per line (prompt i uses phrases[i % n]); NULL = none
    int n_phrases;
    int n_parallel;  // --parallel N: N sources working at once (default 1)
    float temps[32]; // --temps a,b,...: prompt i samples at temps[i % n_temps] (antidoom's temperatures list)
    int n_temps;
    const char *dry_breakers[32]; // --dry-sequence-breaker S (repeatable; "none": no breakers): mine.gen's list
    int n_dry_breakers;
} bn_mine_opts;

#define BN_THINKING_AUTO (-2) // bn_mine_opts' thinking until bn_mine_opts_for_model: from the model's template

// bn_mine_opts_default: antidoom defaults (see bn_mine_params_default), ctx 6000, thinking BN_THINKING_AUTO.
bn_mine_opts bn_mine_opts_default(void);
// bn_mine_opts_for_model: settles what depends on model m: thinking BN_THINKING_AUTO becomes what m's chat template
// implies (bn_chat_thinking_for_template).
void bn_mine_opts_for_model(bn_mine_opts *o, const struct bn_model *m);
// The shared options (base/args.h) over a bn_mine_opts (the table's base): bn_mine_args, the prompts, generation,
// priming, server and detector/chosen options (read with bn_engine_args over its .eng for -m, -t, -c, -ngl);
// bn_mine_penalty_args, the repetition penalties and DRY (bonsai-eval-loops: mining refuses them).
extern const bn_arg bn_mine_args[];
extern const bn_arg bn_mine_penalty_args[];
// bn_mine_opts_greedy: true when every prompt is decoded greedily (temperature <= 0, every --temps entry too).
bool bn_mine_opts_greedy(const bn_mine_opts *o);
// bn_mine_opts_for_prompt: the mining parameters for prompt i (seed + i, its prime phrase, its
// temperature when --temps is given).
bn_mine_params bn_mine_opts_for_prompt(const bn_mine_opts *o, int i);
// bn_mine_opts_free: releases what the flags loaded (phrase list).
void bn_mine_opts_free(bn_mine_opts *o);
// bn_mine_opts_sources: n_parallel sources: HTTP ones with --server, else in-process ones on engine (the
// caller's -ngl engine, which must outlive them, with batcher, the caller's too, batching their decode steps
// when n_parallel > 1) or, engine NULL, on the CPU splitting the threads. NULL (err) on a bad URL, --parallel
// with a device engine but no batcher, or no device memory for a state.
bn_source **bn_mine_opts_sources(const bn_mine_opts *o, const struct bn_model *m, const struct bn_tokenizer *tok,
                                 const struct bn_engine *engine, struct bn_step_batcher *batcher, char *err,
                                 size_t errlen);
// bn_mine_opts_engine: for -ngl > 0 or --lora without --server, the engine (*eng: a device one, or the CPU one that
// applies the adapters) and, with --parallel > 1, the step batcher its sources share (*batch); else both NULL. Returns 0, or -1 with err (no device memory, ...). Free the
// batcher and then the engine after the sources.
int bn_mine_opts_engine(const bn_mine_opts *o, const struct bn_model *m, bn_engine **eng, bn_step_batcher **batch,
                        char *err, size_t errlen);
// bn_mine_opts_sources_free: frees what bn_mine_opts_sources returned.
void bn_mine_opts_sources_free(const bn_mine_opts *o, bn_source **srcs);

// The completion sources of a run and what they run on (the engine and step batcher of bn_mine_opts_engine).
typedef struct {
    bn_engine *eng;         // NULL: CPU or HTTP sources
    bn_step_batcher *batch; // NULL: none
    bn_source **srcs;       // n_parallel of them (at least 1)
} bn_mine_gen;
// bn_mine_gen_open: bn_mine_opts_engine, then bn_mine_opts_sources on what it opened, into *g; returns 0, or -1 with
// err and nothing left open. Close with bn_mine_gen_close.
int bn_mine_gen_open(const bn_mine_opts *o, const struct bn_model *m, const struct bn_tokenizer *tok, bn_mine_gen *g,
                     char *err, size_t errlen);
// bn_mine_gen_close: frees g's sources, then its batcher, then its engine (o: the options it was opened with).
void bn_mine_gen_close(const bn_mine_opts *o, bn_mine_gen *g);
#endif
