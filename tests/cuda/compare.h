// tests/cuda/compare.h — comparisons shared by the CUDA tests (engine vs engine): max |Δ log-softmax| of
// logit rows, max |Δ| of float arrays, argmax and the top-2 gap for greedy identity checks, and the emulator's
// launch count.
#ifndef BONSAI_TESTS_CUDA_COMPARE_H
#define BONSAI_TESTS_CUDA_COMPARE_H
#include "base/util.h"
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#ifdef BONSAI_CUDA_EMU
#include "cuda/emu/emu_api.h"
#endif

// launches_now: kernel launches the emulator has run so far (graph replays count each node); 0 on a GPU.
static inline uint64_t launches_now(void) {
#ifdef BONSAI_CUDA_EMU
    bn_cuda_emu_stats st;
    bn_cuda_emu_get_stats(&st);
    return st.launches;
#else
    return 0;
#endif
}

// log_softmax of n logits into lp.
static inline void log_softmax(const float *x, double *lp, int n) {
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    for (int i = 0; i < n; i++) sum += exp(x[i] - mx);
    for (int i = 0; i < n; i++) lp[i] = x[i] - mx - log(sum);
}

// max_dlogprob: max |Δ log-softmax| over rows of n_vocab.
static inline double max_dlogprob(const float *a, const float *b, int rows, int n_vocab) {
    double *la = xmalloc(sizeof(double) * n_vocab), *lb = xmalloc(sizeof(double) * n_vocab), worst = 0;
    for (int r = 0; r < rows; r++) {
        log_softmax(a + (size_t)r * n_vocab, la, n_vocab);
        log_softmax(b + (size_t)r * n_vocab, lb, n_vocab);
        for (int i = 0; i < n_vocab; i++) worst = fmax(worst, fabs(la[i] - lb[i]));
    }
    free(la), free(lb);
    return worst;
}

// max_abs_diff: max |a[i] − b[i]| over n floats.
static inline double max_abs_diff(const float *a, const float *b, size_t n) {
    double w = 0;
    for (size_t i = 0; i < n; i++) w = fmax(w, fabs((double)a[i] - (double)b[i]));
    return w;
}

// argmax: index of the largest of n values (ties → lowest index).
static inline int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

// top2_gap: largest minus second largest of n values.
static inline float top2_gap(const float *x, int n) {
    const int a = argmax(x, n);
    float second = -INFINITY;
    for (int i = 0; i < n; i++)
        if (i != a && x[i] > second) second = x[i];
    return x[a] - second;
}
#endif
