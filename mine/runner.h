// mine/runner.h — runs bn_mine_one over a range of prompts on one or more completion sources
// in parallel (one worker thread per source; e.g. several connections to a llama-server with
// -np slots) and hands the results to a callback in prompt order, so outputs are written in
// order and resuming stays exact.
#ifndef BONSAI_DETECT_RUNNER_H
#define BONSAI_DETECT_RUNNER_H
#include <stdbool.h>
#include "mine/options.h"

// Called on the calling thread for prompt i in increasing order: rc 0 (r filled; the runner frees
// it afterwards) or -1 (err says why). Return false to stop (prompts not yet delivered are dropped).
typedef bool (*bn_run_cb)(void *ctx, int i, int rc, bn_mine_result *r, const char *err);

// bn_mine_run: prompts [first, last) with parameters bn_mine_opts_for_prompt(o, i); returns the
// number of results delivered.
int bn_mine_run(bn_source **srcs, int n_src, const struct bn_tokenizer *tok, const bn_prompt *prompts, int first,
                int last, const bn_mine_opts *o, bn_run_cb cb, void *ctx);
#endif
