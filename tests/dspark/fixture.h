// tests/dspark/fixture.h — shared setup for the DSpark tests: a tiny random qwen35 target
// (core/mkmodel.h preset "tiny", F32) and random drafters written to a temp directory.
#ifndef BONSAI_TEST_DSPARK_FIXTURE_H
#define BONSAI_TEST_DSPARK_FIXTURE_H
#include "core/dspark.h"
#include "core/mkdrafter.h"
#include "core/mkmodel.h"
#include "core/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// fx_path: "<tmp>/bonsai-dspark-<pid>-<name>" into buf; returns buf.
static inline const char *fx_path(char *buf, size_t n, const char *name) {
    const char *tmp = getenv("TMPDIR");
    snprintf(buf, n, "%s/bonsai-dspark-%d-%s", tmp && *tmp ? tmp : "/tmp", (int)getpid(), name);
    return buf;
}

// fx_target: writes the tiny F32 qwen35 target; exits on failure.
static inline void fx_target(const char *path) {
    bn_mkmodel_params p;
    bn_mkmodel_defaults(&p, "tiny");
    char err[512];
    if (bn_mkmodel_write(&p, path, err, sizeof err) != 0) {
        fprintf(stderr, "mkmodel: %s\n", err);
        exit(1);
    }
}

// fx_drafter: writes p to path; exits on failure.
static inline void fx_drafter(const bn_mkdrafter_params *p, const char *path) {
    char err[512];
    if (bn_mkdrafter_write(p, path, err, sizeof err) != 0) {
        fprintf(stderr, "mkdrafter: %s\n", err);
        exit(1);
    }
}

// fx_plain_greedy: plain decoding (prompt in one batch, then one token per forward, argmax with
// ties → lowest id); writes n_gen tokens to out. Returns 0.
static inline int fx_plain_greedy(const bn_model *m, const int32_t *prompt, int n_prompt, int n_gen, int32_t *out) {
    bn_state *s = bn_state_new(m, 1024, 0);
    const int V = m->cfg.n_vocab;
    float *logits = xmalloc(sizeof(float) * (size_t)V);
    char err[256];
    bn_forward_out o = {.logits = logits};
    if (bn_forward(m, s, prompt, n_prompt, &o, err, sizeof err) != 0) bn_die("%s", err);
    for (int i = 0; i < n_gen; i++) {
        int32_t best = 0;
        for (int v = 1; v < V; v++)
            if (logits[v] > logits[best]) best = v;
        out[i] = best;
        if (i + 1 < n_gen && bn_forward(m, s, &best, 1, &o, err, sizeof err) != 0) bn_die("%s", err);
    }
    free(logits);
    bn_state_free(s);
    return 0;
}
#endif
