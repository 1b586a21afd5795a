// mine/loop_eval.h — the loop evaluation bonsai-eval-loops and bonsai-antidoom share (docs/antidoom.md §13): one
// completion per prompt under the mining options (greedy with temperature 0), the verbatim and the frame-loop
// detector over each, its length and seq-rep-4; or the same outcomes for the completions of an existing generation
// log. eval/stats.h turns the outcomes into the loop rate with its Wilson interval and the JSON both write.
#ifndef BONSAI_MINE_LOOP_EVAL_H
#define BONSAI_MINE_LOOP_EVAL_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "base/lineout.h"
#include "eval/stats.h"
#include "mine/options.h"

// Per-completion outcomes, in prompt order (skipped prompts left out).
typedef struct {
    int n, cap;
    bool *looped;     // the verbatim detector fired
    bool *frame;      // the frame-loop detector fired (detect/frame.h)
    bool *limit;      // stopped by the length limit
    double *len;      // length in tokens (a log row without n_tokens: in code points)
    double *rep4;     // seq-rep-4 of the completion (-1: fewer than 5 words)
    int64_t n_tokens; // tokens generated in all
    double seconds;   // wall time of the generation
} bn_loop_outcomes;

// bn_loop_eval_run: one completion per prompt of prompts[0..n) on model m with the options o (sources and engine as
// o says; o->mine.chosen.max_tokens is set to 0: no pair rows); each generation-log row goes to log (NULL: none).
// Progress named label on stderr; a skipped prompt is reported as "who: prompt I (line L) skipped: why". Fills *out
// (free with bn_loop_outcomes_free, also on failure). Returns 0, or -1 with err (no engine or sources, the log failed).
int bn_loop_eval_run(bn_mine_opts *o, const struct bn_model *m, const struct bn_tokenizer *tok,
                     const bn_prompt *prompts, int n, const char *label, const char *who, bn_lineout *log,
                     bn_loop_outcomes *out, char *err, size_t errlen);
// bn_loop_eval_log: the outcomes of the completions in the generation log at path (.jsonl or .jsonl.gz, ours or
// antidoom's): the verbatim detector with rep, the frame-loop detector with frame over tok's tokens (tok NULL: word
// pieces), the length from the rows' n_tokens (else code points), the length-limit flag from their hit_limit. Fills
// *out (free with bn_loop_outcomes_free, also on failure). Returns 0, or -1 with err ("PATH:LINE: why" for a bad row).
int bn_loop_eval_log(const char *path, const struct bn_tokenizer *tok, const bn_rep_params *rep,
                     const bn_frame_params *frame, bn_loop_outcomes *out, char *err, size_t errlen);
// bn_loop_outcomes_stats: the statistics of out into *st, with the frame-loop fields when with_frame.
void bn_loop_outcomes_stats(const bn_loop_outcomes *out, bool with_frame, bn_loop_stats *st);
// bn_loop_outcomes_free: frees out's arrays and zeroes it.
void bn_loop_outcomes_free(bn_loop_outcomes *out);
#endif
