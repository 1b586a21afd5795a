// tests/compat/test_compat_perplexity.c — bn_perplexity (llama-perplexity's method, docs/server.md §14) on
// generated tiny models: (1) equals the same method computed from our engine's full-sequence logits
// (checks chunking, BOS replacement, second-half scoring, the 32-token logit pieces) to 1e-6 in ln PPL (the two
// run the chunk in different pieces, and the F32 matrix products round by the piece's shape on some CPUs: under
// 1e-9 on one machine, 3.1e-7 and 4.6e-7 on an AMD EPYC; a scoring mistake moves ln PPL by far more);
// (2) matches the method applied to llama.cpp's logits of the same chunks: |Δ ln PPL| ≤ 2e-3
// (measured: qwen3 1.5e-7, qwen35 3.3e-6); (3) refuses fewer than 2·n_ctx tokens.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/test.h"
#include "tests/compat/compat_common.h"
#include "eval/perplexity.h"
#include "base/util.h"
#include "quant/quant.h"
#ifdef HAVE_LLAMA_REF
#include "tests/ref/llama_ref.h"
#endif

#define N_CTX 64
#define N_CHUNK 4
#define TOL_SELF 1e-6
#define TOL_REF 2e-3

// method_on_logits: llama-perplexity's sums for one chunk given its [n_ctx][n_vocab] logits.
static void method_on_logits(const float *logits, int n_vocab, const int32_t *chunk_tokens, double *nll, int *count) {
    for (int p = N_CTX / 2; p < N_CTX - 1; p++) {
        *nll += bn_ppl_nll_token(logits + (size_t)p * n_vocab, n_vocab, chunk_tokens[p + 1]);
        (*count)++;
    }
}

static void run_preset(const char *preset, const char *dir) {
    char err[512], path[700];
    snprintf(path, sizeof path, "%s/%s.gguf", dir, preset);
    int rc = compat_make_model(preset, BN_F32, 77, path, err, sizeof err);
    CHECK(rc == 0, "%s: %s", preset, err);
    bn_model *m = rc == 0 ? bn_model_load(path, err, sizeof err) : NULL;
    CHECK(m != NULL, "%s: %s", preset, err);
    if (!m) return;
    int n_vocab = m->cfg.n_vocab, n_tok = N_CTX * N_CHUNK + 5;
    int32_t *toks = xmalloc(sizeof(int32_t) * (size_t)n_tok), chunk[N_CTX];
    compat_random_tokens(42, 0, n_vocab, n_tok, toks);
    int32_t bos = 1; // any id: checks that the first token of every chunk is replaced

    bn_ppl_result r;
    bn_engine *eng = bn_engine_cpu_new(m, 1);
    rc = bn_perplexity(eng, toks, n_tok, N_CTX, -1, bos, NULL, &r, err, sizeof err);
    CHECK(rc == 0, "bn_perplexity: %s", err);
    CHECK(r.n_chunk == N_CHUNK && r.count == N_CHUNK * (N_CTX / 2 - 1), "chunks %d count %d", r.n_chunk, r.count);

    float *logits = xmalloc(sizeof(float) * (size_t)N_CTX * n_vocab);
    bn_state *st = bn_state_new(m, N_CTX, 1);
    double nll_self = 0, nll_ref = 0;
    int cnt_self = 0, cnt_ref = 0;
#ifdef HAVE_LLAMA_REF
    // no llama.cpp library: the comparison is skipped; a library that refuses our file fails the test
    llama_ref *ref = NULL;
    if (!llama_ref_available(err, sizeof err)) printf("%s: llama.cpp comparison skipped: %s\n", preset, err);
    else CHECK((ref = llama_ref_load(path, N_CTX, 1, err, sizeof err)) != NULL, "llama.cpp loads %s: %s", path, err);
#endif
    for (int c = 0; c < N_CHUNK; c++) {
        memcpy(chunk, toks + c * N_CTX, sizeof chunk);
        chunk[0] = bos;
        CHECK(compat_forward_all(m, st, chunk, N_CTX, 0, logits, err, sizeof err) == 0, "forward: %s", err);
        method_on_logits(logits, n_vocab, chunk, &nll_self, &cnt_self);
#ifdef HAVE_LLAMA_REF
        if (ref) {
            CHECK(llama_ref_eval(ref, chunk, N_CTX, logits) == 0, "llama_ref_eval failed");
            method_on_logits(logits, n_vocab, chunk, &nll_ref, &cnt_ref);
        }
#endif
    }
    double ln_ours = r.nll / r.count, ln_self = nll_self / cnt_self;
    printf("%s: PPL %.4f +/- %.5f over %d chunks; same method on our full logits %.4f (|d ln| %.3g, bound %g)\n", preset,
           r.ppl, r.ppl_err, r.n_chunk, exp(ln_self), fabs(ln_ours - ln_self), TOL_SELF);
    CHECK(fabs(ln_ours - ln_self) <= TOL_SELF, "%s: ln PPL %.12f vs %.12f", preset, ln_ours, ln_self);
    if (cnt_ref) {
        double ln_ref = nll_ref / cnt_ref;
        printf("%s: on llama.cpp logits PPL %.4f (|d ln PPL| %.3g, bound %g)\n", preset, exp(ln_ref),
               fabs(ln_ours - ln_ref), TOL_REF);
        CHECK(fabs(ln_ours - ln_ref) <= TOL_REF, "%s: ln PPL %.6f vs llama.cpp logits %.6f", preset, ln_ours, ln_ref);
    }
    rc = bn_perplexity(eng, toks, 2 * N_CTX - 1, N_CTX, -1, -1, NULL, &r, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "at least"), "too few tokens must be refused (rc %d, '%s')", rc, err);
#ifdef HAVE_LLAMA_REF
    llama_ref_free(ref);
#endif
    bn_state_free(st);
    bn_engine_free(eng);
    free(logits);
    free(toks);
    bn_model_free(m);
}

int main(void) {
    const char *dir = compat_tmpdir();
    if (!dir) { perror("mkdtemp"); return 1; }
    run_preset("qwen3-tiny", dir);
    run_preset("tiny", dir);
    compat_rmdir(dir);
    return test_done("compat-perplexity");
}
