// tests/compat/test_compat_logits.c — our engine vs llama.cpp (prebuilt npm libllama) on a generated
// model: teacher-forced log-probs on several token sequences (batched prefill, chunked prefill and the
// one-token decode path) and greedy decoding.
//   test_compat_logits PRESET TYPE TOL_ROW TOL_MEAN MIN_GREEDY
// PRESET: mkmodel preset ("tiny" = qwen35, "qwen3-tiny"); TYPE: f32, f16 (generated directly) or a
// quantized type (the F32 model converted with every quantizable tensor → TYPE, like
// `llama-quantize --pure`). TOL_ROW: bound on max |Δ logprob| over every position and vocab entry.
// TOL_MEAN: bound on the mean |Δ logprob| of the teacher-forced (next) tokens over all sequences.
// MIN_GREEDY: greedy tokens (of 64 per prompt) that must agree before the first divergence.
// Also: the argmax must agree on >= 98% of all teacher-forced positions.
// BONSAI_COMPAT_POS=1 also prints max |dlogit| per position (where the two engines part).
// Why quantized bounds are looser: both engines round activations to Q8_0 (or Q8_K) before the dot
// products, so a 1-ulp float difference upstream (attention, DeltaNet chunking, summation order) can
// flip one int8 rounding; flips cascade through layers on these random models. Measured on the tiny
// models: qwen3 F32 ≤ 3e-5, qwen35 F32 ≤ 0.011 (llama.cpp runs DeltaNet prefill chunked), F16 ≤ 0.023
// (llama.cpp rounds activations to f16 for F16 weights; we do not), quantized 0.23–0.45 with
// first sequences exact to 1e-5. Since the engine quantizes activations exactly as llama.cpp's CPU
// backend does (127/amax, ties to even; byte-identical, tests/quant/test_act_cpu.c) the rounding rule is
// no longer a source: on Gaussian rows the old rule differed in ~1e-6 of the int8 codes, and the
// measured bounds barely moved (Q8_0 mean 0.0316 -> 0.0312, Q1_0 0.0208 -> 0.0219, Q2_0 0.041 -> 0.0377,
// worst rows 0.283/0.204/0.447 -> 0.283/0.23/0.447). What remains is the fp32 upstream differences above:
// per position (BONSAI_COMPAT_POS=1) qwen3-tiny Q1_0 is exact to 2e-6 until one position jumps (seq 3
// pos 24: 0.147 with the AVX2 kernels; pos 62 with BONSAI_SIMD=scalar), i.e. a single int8 flip from a
// 1-ulp difference in fp32 block-sum order; qwen35 tiny parts at positions 2-6 in every sequence.
// Per-case bounds and their measured values: tests/compat/meson.build.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/test.h"
#include "tests/compat/compat_common.h"
#include "base/util.h"
#include "quant/quant.h"
#ifdef HAVE_LLAMA_REF
#include "tests/ref/llama_ref.h"
#endif

#define N_CTX 192
#define N_GEN 64
#define N_THREADS 1

#ifndef HAVE_LLAMA_REF
int main(void) { return test_skip("llama.cpp headers missing in third_party/ (run scripts/fetch-llamacpp.sh)"); }
#else

// ftype_of: general.file_type for a pure conversion to type (docs/formats.md §4).
static int ftype_of(int type) {
    switch (type) {
    case BN_F32: return 0;
    case BN_F16: return 1;
    case BN_Q8_0: return 7;
    case BN_Q1_0: return 40;
    case BN_Q2_0: return 41;
    default: return -1;
    }
}

int main(int argc, char **argv) {
    if (argc != 6) { fprintf(stderr, "usage: %s PRESET TYPE TOL_ROW TOL_MEAN MIN_GREEDY\n", argv[0]); return 1; }
    const char *preset = argv[1], *type_name = argv[2];
    double tol_row = atof(argv[3]), tol_mean = atof(argv[4]);
    int min_greedy = atoi(argv[5]);
    char err[512], name[64];
    snprintf(name, sizeof name, "compat-%s-%s", preset, type_name);
    if (!llama_ref_available(err, sizeof err)) {
        char why[700];
        snprintf(why, sizeof why, "llama.cpp reference unavailable: %s", err);
        return test_skip(why);
    }
    int type = bn_type_from_name(type_name);
    if (type < 0) { fprintf(stderr, "unknown type %s\n", type_name); return 1; }

    const char *dir = compat_tmpdir();
    if (!dir) { perror("mkdtemp"); return 1; }
    char base[600], path[600];
    snprintf(base, sizeof base, "%s/base.gguf", dir);
    snprintf(path, sizeof path, "%s/model-%s.gguf", dir, type_name);
    bool direct = type == BN_F32 || type == BN_F16;
    int rc = compat_make_model(preset, direct ? type : BN_F32, 1234, direct ? path : base, err, sizeof err);
    if (rc == 0 && !direct) rc = compat_requant(base, path, type, (uint32_t)type, ftype_of(type), err, sizeof err);
    if (rc != 0) { fprintf(stderr, "%s: model: %s\n", name, err); compat_rmdir(dir); return 1; }

    bn_model *m = bn_model_load(path, err, sizeof err);
    CHECK(m != NULL, "bn_model_load: %s", err);
    llama_ref *ref = llama_ref_load(path, N_CTX, N_THREADS, err, sizeof err);
    CHECK(ref != NULL, "llama_ref_load: %s", err);
    if (!m || !ref) { compat_rmdir(dir); return test_done(name); }
    int n_vocab = m->cfg.n_vocab;
    CHECK(llama_ref_n_vocab(ref) == n_vocab, "n_vocab %d vs llama.cpp %d", n_vocab, llama_ref_n_vocab(ref));
    bn_state *st = bn_state_new(m, N_CTX, N_THREADS);

    // Sequences: random ids over the whole vocabulary, plus text tokenized by llama.cpp.
    enum { N_SEQ = 5 };
    static const int lens[N_SEQ] = {9, 40, 100, N_CTX, 0};
    static const int chunks[N_SEQ] = {1, 7, 0, 0, 0}; // our feeding: 1 = decode path, 0 = one batch
    int32_t *seqs[N_SEQ];
    int seq_len[N_SEQ];
    for (int q = 0; q < N_SEQ - 1; q++) {
        seqs[q] = xmalloc(sizeof(int32_t) * N_CTX);
        seq_len[q] = lens[q];
        compat_random_tokens(100 + q, 0, n_vocab, lens[q], seqs[q]);
    }
    const char *text = "The quick brown fox jumps over the lazy dog. 1234 + 5678 = 6912!\nWhy? Because.";
    seqs[N_SEQ - 1] = xmalloc(sizeof(int32_t) * N_CTX);
    seq_len[N_SEQ - 1] = llama_ref_tokenize(ref, text, (int)strlen(text), seqs[N_SEQ - 1], N_CTX, false, false);
    CHECK(seq_len[N_SEQ - 1] > 0, "llama.cpp tokenize of the text prompt failed");

    float *ours = xmalloc(sizeof(float) * (size_t)N_CTX * n_vocab);
    float *theirs = xmalloc(sizeof(float) * (size_t)N_CTX * n_vocab);
    double worst_row = 0, worst_next = 0, sum_next = 0;
    int n_next = 0, n_argmax_diff = 0, n_pos = 0;
    for (int q = 0; q < N_SEQ; q++) {
        int n = seq_len[q];
        if (n <= 0) continue;
        int rc_ours = compat_forward_all(m, st, seqs[q], n, chunks[q], ours, err, sizeof err);
        CHECK(rc_ours == 0, "bn_forward (seq %d): %s", q, err);
        int rc_ref = llama_ref_eval(ref, seqs[q], n, theirs);
        CHECK(rc_ref == 0, "llama_ref_eval (seq %d) failed", q);
        if (rc_ours || rc_ref) continue;
        compat_diff d;
        compat_diff_logits(ours, theirs, n, n_vocab, seqs[q] + 1, &d);
        if (getenv("BONSAI_COMPAT_POS")) {   // diagnostics: max |dlogit| per position
            for (int t = 0; t < n; t++) {
                double mx = 0;
                for (int v = 0; v < n_vocab; v++) {
                    double dv = fabs((double)ours[(size_t)t * n_vocab + v] - theirs[(size_t)t * n_vocab + v]);
                    mx = dv > mx ? dv : mx;
                }
                printf("  seq %d pos %3d: max|dlogit| %.3g\n", q, t, mx);
            }
        }
        printf("%s seq %d (n %3d, feed %s): max|dlogprob| row %.3g, next-token max %.3g mean %.3g, argmax diff %d/%d\n",
               name, q, n, chunks[q] == 1 ? "1 by 1" : chunks[q] ? "chunks of 7" : "one batch", d.max_abs_row,
               d.max_abs_next, d.mean_abs_next, d.argmax_diff, d.n_pos);
        worst_row = d.max_abs_row > worst_row ? d.max_abs_row : worst_row;
        worst_next = d.max_abs_next > worst_next ? d.max_abs_next : worst_next;
        sum_next += d.mean_abs_next * (n - 1);
        n_next += n - 1;
        n_argmax_diff += d.argmax_diff;
        n_pos += n;
    }
    double mean_next = n_next ? sum_next / n_next : 0;
    printf("%s: worst max|dlogprob| %.3g (bound %g); teacher-forced token max %.3g, mean %.3g (bound %g); "
           "argmax differs at %d of %d positions\n", name, worst_row, tol_row, worst_next, mean_next, tol_mean,
           n_argmax_diff, n_pos);
    CHECK(worst_row <= tol_row, "max |dlogprob| %.4g exceeds %g", worst_row, tol_row);
    CHECK(mean_next <= tol_mean, "mean teacher-forced |dlogprob| %.4g exceeds %g", mean_next, tol_mean);
    CHECK(n_argmax_diff * 50 <= n_pos, "argmax differs at %d of %d positions (> 2%%)", n_argmax_diff, n_pos);

    // Greedy: 64 tokens from two prompts; count agreement before the first divergence.
    for (int q = 0; q < 2; q++) {
        const int32_t *prompt = q == 0 ? seqs[0] : seqs[N_SEQ - 1];
        int n_prompt = q == 0 ? 5 : (seq_len[N_SEQ - 1] < 12 ? seq_len[N_SEQ - 1] : 12);
        if (n_prompt <= 0) continue;
        int32_t g_ours[N_GEN], g_ref[N_GEN];
        int rc_ours = compat_greedy(m, st, prompt, n_prompt, N_GEN, g_ours, err, sizeof err);
        CHECK(rc_ours == 0, "greedy (ours): %s", err);
        int rc_ref = llama_ref_generate_greedy(ref, prompt, n_prompt, N_GEN, g_ref);
        CHECK(rc_ref == N_GEN, "greedy (llama.cpp) failed");
        if (rc_ours || rc_ref != N_GEN) continue;
        int same = 0;
        while (same < N_GEN && g_ours[same] == g_ref[same]) same++;
        printf("%s greedy prompt %d: %d/%d tokens identical before divergence (required >= %d)\n", name, q, same,
               N_GEN, min_greedy);
        if (same < N_GEN)
            printf("  diverges at step %d: ours %d, llama.cpp %d\n", same, g_ours[same], g_ref[same]);
        CHECK(same >= min_greedy, "greedy agreement %d < %d", same, min_greedy);
    }

    for (int q = 0; q < N_SEQ; q++) free(seqs[q]);
    free(ours);
    free(theirs);
    bn_state_free(st);
    bn_model_free(m);
    llama_ref_free(ref);
    compat_rmdir(dir);
    return test_done(name);
}
#endif
