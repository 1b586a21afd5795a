// recipe/measure.h — the figures bonsai-antidoom measures a model by, in-process: the greedy loop rate over a prompt
// set (mine/loop_eval.h and eval/stats.h, with the decode speed), the perplexity over a text (eval/perplexity.h) and
// chosen_win over the held-out rows of a pair file (train/trainer.h's bn_ftpo_eval), each with progress on stderr.
#ifndef BONSAI_RECIPE_MEASURE_H
#define BONSAI_RECIPE_MEASURE_H
#include <stddef.h>
#include "eval/stats.h"

// How every model of a run generates (the same for all, so figures compare).
typedef struct {
    int n_predict;   // new tokens per prompt
    int thinking;    // core/chat.h; -2: from the model's chat template
    int n_ctx;       // context
    int threads;
    int n_gpu_layers; // -ngl: 0 the CPU
    const char *adapter; // a LoRA adapter the engine applies unmerged (core/adapter.h; NULL: none)
} bn_measure_gen;

// bn_measure_loops: greedy completions of model on the first max_prompts (0: all) prompts of prompts_path: loop
// statistics into *st, decode tokens per second into *tok_s (may be NULL); json_out / log_out (may be NULL) get the
// bonsai-eval-loops JSON and the generation log, written atomically. label names the progress. Returns 0 or -1 (err).
int bn_measure_loops(const char *model, const char *prompts_path, int max_prompts, const bn_measure_gen *g,
                     const char *label, const char *json_out, const char *log_out, bn_loop_stats *st, double *tok_s,
                     char *err, size_t errlen);
// bn_measure_ppl: llama-perplexity's figure of model over text_path with a context of n_ctx tokens (g's threads and
// -ngl); returns it, or a negative value with err.
double bn_measure_ppl(const char *model, const char *text_path, int n_ctx, const bn_measure_gen *g, char *err,
                      size_t errlen);
// bn_measure_chosen_win: chosen_win of model (with adapter applied; NULL: none) over the held-out-split rows of
// pairs_path; returns it (0..1), or a negative value with err (no held-out rows, a bad file).
double bn_measure_chosen_win(const char *model, const char *adapter, const char *pairs_path, char *err,
                             size_t errlen);
#endif
