// tests/train/test_adamw.c — AdamW (torch semantics, docs/antidoom.md §11) against a hand-derived first
// step and a float64 transcription of torch.optim.AdamW for 3 steps; HF linear warmup/decay
// schedule values; global-norm clipping; gradient accumulation scaling; the update over 3 threads gives the
// single thread's bits.
#include <string.h>
#include "tests/test.h"
#include "base/util.h"
#include "train/adamw.h"
#include "train/backward.h"

static void test_adamw_steps(void) {
    enum { N = 4 };
    float p[N] = {1.0f, -2.0f, 0.5f, 0.0f};
    const float g[3][N] = {{0.5f, -1.0f, 2.0f, 0.0f}, {-0.25f, 0.5f, 1.0f, 1e-3f}, {0.1f, 0.1f, -3.0f, -2.0f}};
    const double lr[3] = {1e-2, 2e-2, 5e-3};
    bn_adamw_cfg cfg = bn_adamw_cfg_default();
    bn_adamw *o = bn_adamw_new(N);
    // step 1 by hand: m̂ = g, v̂ = g² → θ ← θ(1 − lr·wd) − lr·g/(|g| + 1e-8)
    float p1[N];
    memcpy(p1, p, sizeof p);
    bn_adamw_step(o, &cfg, (float)lr[0], p1, g[0]);
    const double hand[N] = {1.0 * (1 - 1e-4) - 1e-2, -2.0 * (1 - 1e-4) + 1e-2, 0.5 * (1 - 1e-4) - 1e-2, 0.0};
    for (int i = 0; i < N; i++) CHECK_NEAR(p1[i], hand[i], 1e-6, "AdamW step 1 vs hand value (abs 1e-6)");
    // steps 2, 3 vs a float64 transcription of torch's AdamW
    double P[N], M[N] = {0}, Vv[N] = {0};
    for (int i = 0; i < N; i++) P[i] = p[i];
    for (int t = 1; t <= 3; t++) {
        if (t > 1) bn_adamw_step(o, &cfg, (float)lr[t - 1], p1, g[t - 1]);
        for (int i = 0; i < N; i++) {
            P[i] *= 1 - lr[t - 1] * 0.01;
            M[i] = 0.9 * M[i] + 0.1 * g[t - 1][i];
            Vv[i] = 0.999 * Vv[i] + 0.001 * (double)g[t - 1][i] * g[t - 1][i];
            double mh = M[i] / (1 - pow(0.9, t)), vh = Vv[i] / (1 - pow(0.999, t));
            P[i] -= lr[t - 1] * mh / (sqrt(vh) + 1e-8);
        }
    }
    for (int i = 0; i < N; i++) CHECK_NEAR(p1[i], P[i], 2e-6, "AdamW after 3 steps vs float64 torch (abs 2e-6)");
    CHECK(o->t == 3, "step counter %lld", (long long)o->t);
    bn_adamw_free(o);
}

static void test_schedule(void) {
    // 40 rows, batch 1, GA 4, 12 epochs → S = 120, W = 12
    int64_t S = bn_sched_total_steps(40, 1, 4, 12), W = bn_sched_warmup_steps(S, 0.1);
    CHECK(S == 120 && W == 12, "S %lld W %lld (expected 120, 12)", (long long)S, (long long)W);
    CHECK(bn_sched_lr(3e-5, 0, S, W) == 0.0, "first update has lr 0");
    CHECK_NEAR(bn_sched_lr(3e-5, 6, S, W), 1.5e-5, 1e-15, "warmup midpoint");
    CHECK_NEAR(bn_sched_lr(3e-5, 12, S, W), 3e-5, 1e-15, "peak at k = W");
    CHECK_NEAR(bn_sched_lr(3e-5, 66, S, W), 1.5e-5, 1e-15, "decay midpoint (S−k)/(S−W) = 54/108");
    CHECK_NEAR(bn_sched_lr(3e-5, 119, S, W), 3e-5 / 108, 1e-15, "last update");
    CHECK(bn_sched_lr(3e-5, 130, S, W) == 0.0, "past the end: 0");
    // remainder rows round up: 41 rows → 11 steps per epoch
    S = bn_sched_total_steps(41, 1, 4, 12);
    W = bn_sched_warmup_steps(S, 0.1);
    CHECK(S == 132 && W == 14, "S %lld W %lld (expected 132, 14)", (long long)S, (long long)W);
    CHECK(bn_sched_warmup_steps(30, 0.1) == 3, "ceil(0.1·30) = 3 (not 4 from float rounding)");
    CHECK(bn_sched_total_steps(12000, 4, 4, 1) == 750, "antidoom shipped: 12000/16 = 750 steps");
}

static void test_clip(void) {
    float g[2] = {3.0f, 4.0f};
    double n = bn_grad_clip(g, 2, 2.5f);
    CHECK_NEAR(n, 5.0, 1e-12, "norm before clipping");
    CHECK_NEAR(g[0], 3.0 * 2.5 / (5.0 + 1e-6), 1e-6, "clipped g0");
    CHECK_NEAR(bn_grad_norm(g, 2), 2.5, 1e-5, "norm after clipping ≈ max_norm");
    float h[3] = {0.6f, 0.0f, -0.8f};
    bn_grad_clip(h, 3, 2.5f);
    CHECK(h[0] == 0.6f && h[2] == -0.8f, "norm 1 < 2.5 left unchanged");
    float a[2] = {1.0f, 2.0f};
    bn_grad_scale(a, 2, 0.25f);
    CHECK(a[0] == 0.25f && a[1] == 0.5f, "gradient accumulation: divide by GA");
}

// run_steps: 3 AdamW steps over n parameters from fixed values with n_threads training threads, into params.
static void run_steps(int n_threads, int64_t n, float *params) {
    bn_train_set_threads(n_threads);
    float *g = xmalloc(sizeof(float) * (size_t)n);
    bn_adamw *o = bn_adamw_new(n);
    const bn_adamw_cfg cfg = bn_adamw_cfg_default();
    for (int64_t i = 0; i < n; i++) params[i] = (float)((i * 37) % 101) * 1e-2f - 0.5f;
    for (int k = 0; k < 3; k++) {
        for (int64_t i = 0; i < n; i++) g[i] = (float)((i * (k + 13)) % 97 - 48) * 1e-3f;
        bn_adamw_step(o, &cfg, 1e-2f, params, g);
    }
    bn_adamw_free(o);
    free(g);
    bn_train_set_threads(1);
}

// test_threads: the update split over 3 threads equals the single thread's to the bit.
static void test_threads(void) {
    const int64_t n = 100003;
    float *one = xmalloc(sizeof(float) * n), *three = xmalloc(sizeof(float) * n);
    run_steps(1, n, one);
    run_steps(3, n, three);
    CHECK(memcmp(one, three, sizeof(float) * n) == 0 && one[5] != (float)((5 * 37) % 101) * 1e-2f - 0.5f,
          "AdamW over 3 threads differs from one thread (or did not move the parameters)");
    free(one);
    free(three);
}

int main(void) {
    test_adamw_steps();
    test_threads();
    test_schedule();
    test_clip();
    return test_done("train_adamw");
}
