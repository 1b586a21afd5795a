// tests/cuda/test_cuda_source.c — the in-process completion source of the mining tools (mine/source.h) on the
// CUDA engine (bn_source_engine, what bonsai-mine-pairs / bonsai-eval-loops -ngl 99 run) against the CPU source,
// on the tiny qwen35 model of the DSpark fixture, 48 tokens per case (raw log-probs bound 2e-3: test_cuda_spec's
// CPU-vs-CUDA logits bound on this model, measured ~4e-4 here):
//   greedy (top_k 50, n_probs 20) and sampled (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, one seed):
//     the device brings back each position's top-k logits and ln Σ exp only — the same tokens, the same top-20
//     ids (two neighbours may swap only where the CPU's own log-probs of them are within the bound), raw log-probs
//     within the bound, and no logits row copied to the host (bn_cuda_host_logit_bytes);
//   sampled with top_k 0 (the chain reads the whole row): the row path — the same tokens and log-probs, rows
//     copied;
//   3 sources generating at once through one step batcher (bonsai-mine-pairs --parallel -ngl): bit-identical to
//     one source alone, and steps of several sequences did run.
// Linked twice: `cuda_source` on a real GPU (skips without a device) and `cuda_source_emu` in the emulator.
#include "tests/test.h"
#include "tests/spec/fixture.h"
#include "core/engine.h"
#include "core/tokenizer.h"
#include "cuda/cuda_engine.h"
#include "spec/step_batch.h"
#include "mine/source.h"
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

// A source's generation in a thread (parallel_case).
typedef struct {
    bn_source *src;
    const int32_t *prompt;
    int n_prompt;
    bn_gen_params gp;
    bn_gen_result g;
    int rc;
} gen_job;

static void *gen_thread(void *arg) {
    gen_job *j = arg;
    char err[256];
    j->rc = j->src->generate(j->src, j->prompt, j->n_prompt, &j->gp, &j->g, err, sizeof err);
    if (j->rc) fprintf(stderr, "generate: %s\n", err);
    return NULL;
}

// parallel_case: 3 sources on the CUDA engine sharing a step batcher (what bonsai-mine-pairs --parallel 3 -ngl 99
// makes), each generating in its own thread from its own prompt (greedy, sampled, greedy), against the same
// generations on one source alone: the same tokens and the same raw log-probs bit for bit (the batched step is
// bit-identical to one-token steps on CUDA), and the batcher ran steps of more than one sequence.
static void parallel_case(bn_engine *gpu, const bn_tokenizer *tok) {
    char err[512];
    enum { NP = 3 };
    const char *texts[NP] = {"the cat sat", "once upon a time there", "hello"};
    int32_t *prompts[NP];
    int n_prompts[NP];
    bn_step_batcher *bat = bn_step_batcher_new(2000);
    gen_job alone[NP], par[NP];
    bn_source *solo = bn_source_engine(gpu, tok, 256, NULL, err, sizeof err), *src[NP];
    if (!solo) bn_die("solo source: %s", err);
    for (int i = 0; i < NP; i++) {
        n_prompts[i] = bn_tokenize(tok, texts[i], (int)strlen(texts[i]), false, false, &prompts[i]);
        bn_gen_params gp = bn_gen_params_default();
        gp.temperature = i == 1 ? 0.8f : 0.0f, gp.seed = 11, gp.n_predict = 32, gp.n_probs = 10;
        alone[i] = (gen_job){.src = solo, .prompt = prompts[i], .n_prompt = n_prompts[i], .gp = gp};
        gen_thread(&alone[i]);
        if (!(src[i] = bn_source_engine(gpu, tok, 256, bat, err, sizeof err))) bn_die("batched source: %s", err);
        par[i] = (gen_job){.src = src[i], .prompt = prompts[i], .n_prompt = n_prompts[i], .gp = gp};
    }
    pthread_t th[NP];
    for (int i = 0; i < NP; i++) pthread_create(&th[i], NULL, gen_thread, &par[i]);
    for (int i = 0; i < NP; i++) pthread_join(th[i], NULL);
    int differ = 0;
    for (int i = 0; i < NP; i++) {
        const bn_gen_result *a = &alone[i].g, *b = &par[i].g;
        bool same = !alone[i].rc && !par[i].rc && a->n == b->n && a->k == b->k &&
                    !memcmp(a->ids, b->ids, sizeof *a->ids * a->n) &&
                    !memcmp(a->logprob, b->logprob, sizeof *a->logprob * a->n);
        for (size_t e = 0; same && e < (size_t)a->n * a->k; e++) // field by field: bn_topk has padding
            same = a->topk[e].id == b->topk[e].id && a->topk[e].logprob == b->topk[e].logprob;
        differ += !same;
    }
    for (int i = 0; i < NP; i++) { // where a generation parted (diagnostics)
        const bn_gen_result *a = &alone[i].g, *b = &par[i].g;
        int at = -1;
        for (int t = 0; t < (a->n < b->n ? a->n : b->n) && at < 0; t++)
            if (a->ids[t] != b->ids[t] || a->logprob[t] != b->logprob[t]) at = t;
        if (at >= 0 || a->n != b->n)
            printf("  source %d: %d / %d tokens, first difference at %d (ids %d / %d, logprob %.6g / %.6g)\n", i, a->n,
                   b->n, at, at >= 0 ? a->ids[at] : -1, at >= 0 ? b->ids[at] : -1, at >= 0 ? a->logprob[at] : 0,
                   at >= 0 ? b->logprob[at] : 0);
    }
    uint64_t batches, steps, round_batches, rounds;
    bn_step_batcher_counts(bat, &batches, &steps, &round_batches, &rounds);
    printf("3 sources in parallel on one batcher: %d of %d generations differ from alone; %llu steps in %llu batches\n",
           differ, NP, (unsigned long long)steps, (unsigned long long)batches);
    CHECK(differ == 0, "batched parallel sources differ from one source alone (%d of %d)", differ, NP);
    CHECK(batches > 0 && steps > batches, "the parallel sources never shared a step (%llu in %llu batches)",
          (unsigned long long)steps, (unsigned long long)batches);
    for (int i = 0; i < NP; i++) {
        bn_gen_result_free(&alone[i].g), bn_gen_result_free(&par[i].g);
        bn_source_free(src[i]);
        free(prompts[i]);
    }
    bn_source_free(solo);
    bn_step_batcher_free(bat);
}

int main(void) {
    char err[512], path[512];
    if (!bn_cuda_available(err, sizeof err)) return test_skip(err);
    fx_target(fx_path(path, sizeof path, "cuda-source-target.gguf"));
    bn_model *m = bn_model_load(path, err, sizeof err);
    bn_tokenizer *tok = m ? bn_tokenizer_from_gguf(m->gguf, err, sizeof err) : NULL;
    if (!tok) bn_die("model: %s", err);
    bn_engine *gpu = bn_engine_open(m, 99, 2, err, sizeof err);
    if (!gpu) bn_die("CUDA engine: %s", err);
    bn_source *src[2] = {bn_source_inprocess(m, tok, 256, 2), bn_source_engine(gpu, tok, 256, NULL, err, sizeof err)};
    if (!src[1]) bn_die("CUDA source: %s", err);
    int32_t *prompt;
    const char *text = "hello world, the cat sat on the";
    const int n_prompt = bn_tokenize(tok, text, (int)strlen(text), false, false, &prompt);
    const struct {
        const char *what;
        float temp, top_p, min_p;
        int top_k;
        bool rows; // the device copies logits rows (the chain reads more than the top 64)
    } cases[] = {{"greedy", 0.0f, 1.0f, 0.01f, 50, false},
                 {"sampled T 0.8 top_k 40", 0.8f, 0.95f, 0.05f, 40, false},
                 {"sampled T 0.8 top_k 0", 0.8f, 1.0f, 0.05f, 0, true}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        bn_gen_params gp = bn_gen_params_default();
        gp.temperature = cases[c].temp, gp.top_k = cases[c].top_k, gp.top_p = cases[c].top_p;
        gp.min_p = cases[c].min_p, gp.seed = 3, gp.n_predict = 48, gp.n_probs = 20;
        bn_gen_result g[2];
        size_t bytes = 0;
        for (int e = 0; e < 2; e++) {
            const size_t b0 = bn_cuda_host_logit_bytes();
            CHECK(src[e]->generate(src[e], prompt, n_prompt, &gp, &g[e], err, sizeof err) == 0, "%s %s: %s",
                  cases[c].what, e ? "CUDA" : "CPU", err);
            if (e == 1) bytes = bn_cuda_host_logit_bytes() - b0;
        }
        const int n = g[0].n < g[1].n ? g[0].n : g[1].n, k = g[0].k;
        const double bound = 2e-3;
        int first_diff = g[0].n == g[1].n ? -1 : n, id_diffs = 0, swaps = 0;
        double d_lp = 0, d_top = 0;
        for (int i = 0; i < n; i++) {
            if (g[0].ids[i] != g[1].ids[i] && first_diff < 0) first_diff = i;
            d_lp = fmax(d_lp, fabs(g[0].logprob[i] - g[1].logprob[i]));
            for (int j = 0; j < k; j++) {
                const bn_topk a = g[0].topk[(size_t)i * k + j], b = g[1].topk[(size_t)i * k + j];
                d_top = fmax(d_top, fabs(a.logprob - b.logprob));
                if (a.id == b.id) continue;
                // a near-tie: the CPU ranks b's id next to rank j with a log-prob within the bound of a's
                bool tie = false;
                for (int dj = -1; dj <= 1; dj += 2) {
                    const int jj = j + dj;
                    if (jj < 0 || jj >= k) continue;
                    const bn_topk nb = g[0].topk[(size_t)i * k + jj];
                    tie |= nb.id == b.id && fabs(nb.logprob - a.logprob) <= bound;
                }
                swaps += tie, id_diffs += !tie;
            }
        }
        printf("%-24s: %d / %d tokens, first difference %d, top-%d ids differing %d (+ %d near-tie swaps), max |d "
               "logprob| token %.2e top-k %.2e; host logits bytes on CUDA %zu\n", cases[c].what, g[0].n, g[1].n,
               first_diff, k, id_diffs, swaps, d_lp, d_top, bytes);
        CHECK(g[0].n > 8 && first_diff < 0 && g[0].k == g[1].k && id_diffs == 0,
              "%s: CUDA source differs from the CPU's (first token %d, %d top-k ids)", cases[c].what, first_diff,
              id_diffs);
        CHECK(d_lp <= bound && d_top <= bound, "%s: raw log-probs differ by %.2e / %.2e (bound %.0e)", cases[c].what,
              d_lp, d_top, bound);
        CHECK(cases[c].rows ? bytes > 0 : bytes == 0, "%s: %zu host logits bytes (%s)", cases[c].what, bytes,
              cases[c].rows ? "the row path copies rows" : "want 0: top-k + lse only");
        for (int e = 0; e < 2; e++) bn_gen_result_free(&g[e]);
    }
    free(prompt);
    parallel_case(gpu, tok);
    for (int e = 0; e < 2; e++) bn_source_free(src[e]);
    bn_engine_free(gpu);
    bn_tokenizer_free(tok);
    bn_model_free(m);
    unlink(path);
    return test_done("cuda_source");
}
