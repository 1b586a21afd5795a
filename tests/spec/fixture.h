// tests/spec/fixture.h — shared setup for the DSpark tests: a tiny random qwen35 target
// (synth/mkmodel.h preset "tiny", F32) and random drafters written to a temp directory; plain and
// speculative greedy decoding, decoders in lockstep (also used by tests/cuda/test_cuda_spec.c on the CUDA engine).
#ifndef BONSAI_TEST_DSPARK_FIXTURE_H
#define BONSAI_TEST_DSPARK_FIXTURE_H
#include "tests/test.h"
#include "spec/dspark.h"
#include "core/engine.h"
#include "core/sampler.h"
#include "synth/mkdrafter.h"
#include "synth/mkmodel.h"
#include "base/util.h"
#include "base/rng.h"
#include "train/lora.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

// fx_path: "<tmp>/bonsai-dspark-<pid>-<name>" into buf; returns buf.
static inline const char *fx_path(char *buf, size_t n, const char *name) {
    const char *tmp = getenv("TMPDIR");
    snprintf(buf, n, "%s/bonsai-dspark-%d-%s", tmp && *tmp ? tmp : "/tmp", (int)getpid(), name);
    return buf;
}

// fx_run: runs the shell command cmd (< 2048 bytes) with stderr into stdout, captured into out (cap
// bytes, NUL-terminated); returns its exit status (-1 when it did not exit normally).
static inline int fx_run(const char *cmd, char *out, size_t cap) {
    char full[2100];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *f = popen(full, "r");
    if (!f) return -1;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
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

// fx_load_pair: writes the tiny target and a default random drafter to "<tmp>/...-<tag>target.gguf"
// / "...-<tag>drafter.gguf" (paths into tpath / dpath, 512 bytes each; unlink them when done) and
// loads both into *m, *d; exits on failure.
static inline void fx_load_pair(const char *tag, char *tpath, char *dpath, bn_model **m, bn_drafter **d) {
    char name[128], err[512];
    snprintf(name, sizeof name, "%starget.gguf", tag);
    fx_target(fx_path(tpath, 512, name));
    bn_mkdrafter_params dp;
    bn_mkdrafter_defaults(&dp);
    snprintf(name, sizeof name, "%sdrafter.gguf", tag);
    fx_drafter(&dp, fx_path(dpath, 512, name));
    *m = bn_model_load(tpath, err, sizeof err);
    *d = *m ? bn_drafter_load(dpath, *m, err, sizeof err) : NULL;
    if (!*m || !*d) {
        fprintf(stderr, "load: %s\n", err);
        exit(1);
    }
}

// fx_adapter_engine: writes a random LoRA adapter for m to path (rank 8, alpha 16, every projection and the head; A
// PEFT-initialised, B ~ U(-amp/2, amp/2)) and opens the CPU engine (n_threads) that applies it; NULL with a failed
// check on error.
static inline bn_engine *fx_adapter_engine(const bn_model *m, const char *path, float amp, int n_threads) {
    char err[512];
    bn_lora *l = bn_lora_from_model(m, BN_LORA_ATTN | BN_LORA_FFN | BN_LORA_GDN | BN_LORA_HEAD, 8, 16.0f, 0, err,
                                    sizeof err);
    CHECK(l != NULL, "adapter: %s", err);
    if (!l) return NULL;
    bn_lora_init_peft(l, 3);
    bn_rng rng;
    bn_rng_seed(&rng, 4);
    for (int i = 0; i < l->n_tensors; i++)
        for (int64_t e = 0; e < l->t[i].n_out * l->r; e++)
            l->params[l->t[i].off_b + e] = amp * (float)(bn_rng_uniform(&rng) - 0.5);
    const int saved = bn_lora_save_gguf(l, path, err, sizeof err);
    bn_lora_free(l);
    CHECK(saved == 0, "save adapter: %s", err);
    bn_lora_set *set = saved == 0 ? bn_lora_set_open(m, &path, NULL, 1, err, sizeof err) : NULL;
    bn_engine *e = set ? bn_engine_open_lora(m, 0, n_threads, set, err, sizeof err) : NULL;
    CHECK(e != NULL, "engine with the adapter: %s", err);
    return e;
}

// fx_engine_greedy_logits: plain decoding on engine e (prompt in one batch, then one token per forward,
// argmax with ties → lowest id); writes n_gen tokens to out and, when all_logits is not NULL, the logits
// row that produced each token to all_logits [n_gen][V]. Returns 0.
static inline int fx_engine_greedy_logits(bn_engine *e, const int32_t *prompt, int n_prompt, int n_gen, int32_t *out,
                                          float *all_logits) {
    char err[256];
    bn_engine_state *s = bn_engine_state_new(e, 1024, err, sizeof err);
    if (!s) bn_die("state: %s", err);
    const int V = e->m->cfg.n_vocab;
    float *logits = xmalloc(sizeof(float) * (size_t)V);
    bn_forward_out o = {.logits = logits};
    if (bn_engine_forward(s, prompt, n_prompt, &o, err, sizeof err) != 0) bn_die("%s", err);
    for (int i = 0; i < n_gen; i++) {
        int32_t best = 0;
        for (int v = 1; v < V; v++)
            if (logits[v] > logits[best]) best = v;
        out[i] = best;
        if (all_logits) memcpy(all_logits + (size_t)i * V, logits, sizeof(float) * (size_t)V);
        if (i + 1 < n_gen && bn_engine_forward(s, &best, 1, &o, err, sizeof err) != 0) bn_die("%s", err);
    }
    free(logits);
    bn_engine_state_free(s);
    return 0;
}

// fx_engine_greedy: fx_engine_greedy_logits without the logits. Returns 0.
static inline int fx_engine_greedy(bn_engine *e, const int32_t *prompt, int n_prompt, int n_gen, int32_t *out) {
    return fx_engine_greedy_logits(e, prompt, n_prompt, n_gen, out, NULL);
}

// fx_plain_greedy: fx_engine_greedy on the CPU engine (all threads). Returns 0.
static inline int fx_plain_greedy(const bn_model *m, const int32_t *prompt, int n_prompt, int n_gen, int32_t *out) {
    bn_engine *e = bn_engine_cpu_new(m, 0);
    fx_engine_greedy(e, prompt, n_prompt, n_gen, out);
    bn_engine_free(e);
    return 0;
}

// fx_spec_sample_rows: prefills sp with prompt and generates with llama-server's default chain at temperature
// temp (0: greedy) and seed until at least n_gen tokens; writes them to gen (room for n_gen + 64); *n_steps (may
// be NULL) = steps made, *n_rows (may be NULL) = steps after which bn_spec_step_logits gave every emitted token's
// logits row (0 with params.no_step_logits). Returns the token count; dies on an error.
static inline int fx_spec_sample_rows(bn_spec *sp, const int32_t *prompt, int n_prompt, int n_gen, float temp,
                                      uint64_t seed, int32_t *gen, int *n_steps, int *n_rows) {
    bn_sampler_params sparams = bn_sampler_params_default();
    sparams.temperature = temp;
    sparams.seed = seed;
    bn_sampler *smp = bn_sampler_new(&sparams);
    char err[256];
    if (bn_spec_prefill(sp, prompt, n_prompt, err, sizeof err) != 0) bn_die("prefill: %s", err);
    int n = 0, steps = 0, rows = 0;
    int32_t out[64];
    while (n < n_gen) {
        int k = bn_spec_generate_step(sp, smp, out, 64, err, sizeof err);
        if (k < 1) bn_die("step: %s", err);
        steps++;
        bool all_rows = true;
        for (int i = 0; i < k; i++) all_rows = all_rows && bn_spec_step_logits(sp, i) != NULL;
        rows += all_rows;
        for (int i = 0; i < k; i++) gen[n++] = out[i];
    }
    bn_sampler_free(smp);
    if (n_steps) *n_steps = steps;
    if (n_rows) *n_rows = rows;
    return n;
}

// fx_spec_greedy_rows: fx_spec_sample_rows at temperature 0.
static inline int fx_spec_greedy_rows(bn_spec *sp, const int32_t *prompt, int n_prompt, int n_gen, int32_t *gen,
                                      int *n_steps, int *n_rows) {
    return fx_spec_sample_rows(sp, prompt, n_prompt, n_gen, 0.0f, 0, gen, n_steps, n_rows);
}

// fx_spec_greedy: fx_spec_greedy_rows without the step counts.
static inline int fx_spec_greedy(bn_spec *sp, const int32_t *prompt, int n_prompt, int n_gen, int32_t *gen) {
    return fx_spec_greedy_rows(sp, prompt, n_prompt, n_gen, gen, NULL, NULL);
}
// fx_rounds_lockstep: four decoders on engine e (DSpark n_max 4, 3 and 2 with drafter d, the oracle with every 3rd
// proposal wrong; prefixes of prompt[0..n_prompt) of different lengths, n_prompt >= 6) step n_steps (<= 24) rounds in lockstep through
// bn_spec_rounds_begin, one bn_engine_forward_multi over their verify passes and bn_spec_round_end each; CHECKs
// (tests/test.h) that every decoder emits greedy's tokens on e, and verifies the same drafts, step by step, as the same
// decoder stepping alone (bn_spec_generate_step), and that a decoder twice in one batch fails that round only.
static inline void fx_rounds_lockstep(bn_engine *e, const bn_drafter *d, const int32_t *prompt, int n_prompt_all,
                                      int n_steps) {
    enum { N_DEC = 4, MAX_STEPS = 24 };
    const int types[N_DEC] = {BN_SPEC_DSPARK, BN_SPEC_DSPARK, BN_SPEC_ORACLE, BN_SPEC_DSPARK};
    const int n_max[N_DEC] = {4, 3, 4, 2};
    const int n_prompt[N_DEC] = {n_prompt_all, n_prompt_all - 2, n_prompt_all - 5, n_prompt_all - 1};
    char err[256];
    bn_engine_state *st[2][N_DEC];
    bn_spec *sp[2][N_DEC]; // [0] in lockstep, [1] alone
    bn_sampler_params sparams = bn_sampler_params_default();
    sparams.temperature = 0;
    bn_sampler *smp = bn_sampler_new(&sparams);
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < N_DEC; i++) {
            bn_spec_params p = {.type = types[i], .n_max = n_max[i], .n_threads = 2, .oracle_miss_every = 3};
            st[w][i] = bn_engine_state_new(e, 256, err, sizeof err);
            sp[w][i] = st[w][i] ? bn_spec_new_engine(st[w][i], types[i] == BN_SPEC_ORACLE ? NULL : d, &p, err, sizeof err)
                                : NULL;
            if (!sp[w][i] || bn_spec_prefill(sp[w][i], prompt, n_prompt[i], err, sizeof err) != 0) bn_die("%s", err);
        }
    int32_t gen[N_DEC][MAX_STEPS * 5 + 8];
    int n_gen[N_DEC] = {0}, steps_same = 0, n_drafted = 0;
    if (n_steps > MAX_STEPS) n_steps = MAX_STEPS;
    for (int step = 0; step < n_steps; step++) {
        bn_spec_round r[N_DEC];
        bn_engine_seq passes[N_DEC];
        for (int i = 0; i < N_DEC; i++) r[i] = (bn_spec_round){.sp = sp[0][i], .smp = smp, .out_cap = 8};
        CHECK(bn_spec_rounds_begin(r, N_DEC) == 0, "rounds_begin: %s", r[0].err);
        for (int i = 0; i < N_DEC; i++) passes[i] = r[i].pass;
        CHECK(bn_engine_forward_multi(passes, N_DEC, err, sizeof err) == 0, "forward_multi: %s", err);
        for (int i = 0; i < N_DEC; i++) {
            int32_t out[8], out1[8];
            int nd0, nd1;
            const int k = bn_spec_round_end(sp[0][i], smp, 1.0, out, err, sizeof err);
            const int32_t *dr0 = bn_spec_step_drafts(sp[0][i], &nd0);
            int32_t drafts0[8];
            memcpy(drafts0, dr0, sizeof(int32_t) * (size_t)nd0);
            const int k1 = bn_spec_generate_step(sp[1][i], smp, out1, 8, err, sizeof err);
            const int32_t *dr1 = bn_spec_step_drafts(sp[1][i], &nd1);
            CHECK(k >= 1 && k1 >= 1, "step %d decoder %d: %s", step, i, err);
            const bool same_step = k == k1 && memcmp(out, out1, sizeof(int32_t) * (size_t)k) == 0 && nd0 == nd1 &&
                                   memcmp(drafts0, dr1, sizeof(int32_t) * (size_t)nd0) == 0;
            CHECK(same_step, "step %d decoder %d: lockstep emitted %d (%d drafts), alone %d (%d drafts)", step, i, k,
                  nd0, k1, nd1);
            steps_same += same_step;
            n_drafted += nd0;
            for (int t = 0; t < k && k > 0; t++) gen[i][n_gen[i]++] = out[t];
        }
    }
    for (int i = 0; i < N_DEC; i++) {
        int32_t ref[MAX_STEPS * 5 + 8];
        fx_engine_greedy(e, prompt, n_prompt[i], n_gen[i], ref);
        int at = 0;
        while (at < n_gen[i] && ref[at] == gen[i][at]) at++;
        CHECK(at == n_gen[i], "decoder %d in lockstep on %s: first difference from plain greedy at %d", i,
              bn_engine_name(e), at);
    }
    printf("%s: rounds in lockstep: %d of %d decoder steps as alone, %d drafts verified; tokens %d %d %d %d == plain greedy\n",
           bn_engine_name(e), steps_same, N_DEC * n_steps, n_drafted, n_gen[0], n_gen[1], n_gen[2], n_gen[3]);
    CHECK(n_drafted > n_steps, "the decoders must draft (%d)", n_drafted);
    // a decoder twice in one batch: that round fails, the other runs
    bn_spec_round r2[2] = {{.sp = sp[0][0], .smp = smp, .out_cap = 8}, {.sp = sp[0][0], .smp = smp, .out_cap = 8}};
    CHECK(bn_spec_rounds_begin(r2, 2) == 1 && r2[0].rc == 0 && r2[1].rc == -1 && strstr(r2[1].err, "twice"),
          "a decoder twice in a batch: %s", r2[1].err);
    CHECK(bn_engine_forward_multi(&r2[0].pass, 1, err, sizeof err) == 0, "%s", err);
    int32_t out[8];
    CHECK(bn_spec_round_end(sp[0][0], smp, 1.0, out, err, sizeof err) >= 1, "%s", err);
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < N_DEC; i++) bn_spec_free(sp[w][i]), bn_engine_state_free(st[w][i]);
    bn_sampler_free(smp);
}

#endif
