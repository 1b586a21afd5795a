// tests/train/fd.h — central finite differences in float64 for the train/ backward tests.
// A test keeps its inputs in double arrays (values exactly representable in float), writes a
// float64 forward returning L = Σ r ⊙ y for fixed random r, and compares the fp32 backward
// (run with dy = r) against (L(x + h) − L(x − h)) / 2h, h = 1e-6·max(1, |x|).
#ifndef BONSAI_TEST_TRAIN_FD_H
#define BONSAI_TEST_TRAIN_FD_H
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include "tests/test.h"

typedef double (*fd_loss_fn)(void *ctx);

static uint64_t fd_rng_state = 0x1234567887654321ULL;
// fd_rand: uniform in [lo, hi), rounded to float so the fp32 and fp64 paths see the same input.
static inline double fd_rand(double lo, double hi) {
    fd_rng_state = fd_rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    double u = (double)(fd_rng_state >> 11) * (1.0 / 9007199254740992.0);
    return (double)(float)(lo + (hi - lo) * u);
}
static inline void fd_fill(double *x, int n, double lo, double hi) { for (int i = 0; i < n; i++) x[i] = fd_rand(lo, hi); }
static inline float *fd_to_f32(const double *x, int n) {
    float *f = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int i = 0; i < n; i++) f[i] = (float)x[i];
    return f;
}

// fd_check: max |analytic − fd| / (max |fd| + 1e-3) over all n elements must be <= tol.
// Returns that relative error.
static double fd_check(const char *what, fd_loss_fn f, void *ctx, double *x, int n, const float *analytic, double tol) {
    double max_fd = 0, max_err = 0;
    int worst = -1;
    for (int i = 0; i < n; i++) {
        double save = x[i];
        double h = 1e-6 * (fabs(save) > 1 ? fabs(save) : 1);
        x[i] = save + h;
        double lp = f(ctx);
        x[i] = save - h;
        double lm = f(ctx);
        x[i] = save;
        double fd = (lp - lm) / (2 * h);
        if (fabs(fd) > max_fd) max_fd = fabs(fd);
        double e = fabs(fd - analytic[i]);
        if (e > max_err) { max_err = e; worst = i; }
    }
    double rel = max_err / (max_fd + 1e-3);
    CHECK(rel <= tol, "%s: relative gradient error %.3g > %.1g (worst element %d, max |fd| %.3g)", what, rel, tol, worst, max_fd);
    printf("  %-28s n=%-5d max|fd|=%-10.4g rel err=%.3g\n", what, n, max_fd, rel);
    return rel;
}
#endif
