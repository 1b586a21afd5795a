// tests/core/test_sampler.c — sampler chain and raw log-probs (core/sampler.h):
// greedy == argmax; top_k = 1 == argmax; same seed → same draws; empirical frequencies at
// temperature 1 match softmax (chi-square, 4 dof, 200k draws, threshold 20 ≈ p 5e-4);
// exact top_p / min_p truncation sets on hand-made logits; top-k log-probs vs a double-precision
// softmax on 248,320 random logits (|Δ| <= 1e-5); sampling from a row's 64 best logits == from the row.
#include "core/sampler.h"
#include "base/util.h"
#include "tests/test.h"
#include <float.h>
#include <string.h>

#define NV 248320

static uint64_t lcg = 12345;
static float frand(void) { // deterministic uniform in [0, 1)
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((lcg >> 40) * 0x1.0p-24);
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static void test_greedy(float *logits) {
    for (int trial = 0; trial < 5; trial++) {
        for (int i = 0; i < NV; i++) logits[i] = 10.0f * frand() - 5.0f;
        int want = argmax(logits, NV);
        bn_sampler_params p = bn_sampler_params_default();
        p.temperature = trial % 2 ? 0.0f : -1.0f;
        p.seed = (uint64_t)trial;
        bn_sampler *s = bn_sampler_new(&p);
        CHECK(bn_sampler_sample(s, logits, NV) == want, "greedy (temp %g) = argmax %d", p.temperature, want);
        bn_sampler_free(s);
        p.temperature = 1.0f;
        p.top_k = 1;
        s = bn_sampler_new(&p);
        CHECK(bn_sampler_sample(s, logits, NV) == want, "top_k = 1 -> argmax %d", want);
        bn_sampler_free(s);
    }
    // greedy still runs the truncation chain: post-sampling candidates are the top_k with probs 1, 0, ...
    {
        bn_sampler_params p = bn_sampler_params_default();
        p.temperature = 0.0f;
        p.top_p = 1.0f;
        p.min_p = 0.0f;
        bn_sampler *s = bn_sampler_new(&p);
        int32_t id = bn_sampler_sample(s, logits, NV);
        const int32_t *ids;
        const float *pp;
        int n = bn_sampler_last_candidates(s, &ids, &pp);
        CHECK(n == 40 && ids[0] == id && pp[0] == 1.0f && pp[1] == 0.0f && pp[39] == 0.0f,
              "greedy candidates: top_k 40 with probs 1, 0, ... (n = %d)", n);
        CHECK(n > 1 && logits[ids[1]] <= logits[ids[0]], "greedy candidates sorted by logit");
        bn_sampler_free(s);
    }
    // ties: lowest id wins
    float tie[4] = {1, 3, 3, 2};
    bn_sampler_params p = {.temperature = 0};
    bn_sampler *s = bn_sampler_new(&p);
    CHECK(bn_sampler_sample(s, tie, 4) == 1, "greedy tie -> lowest id");
    bn_sampler_free(s);
}

static void test_determinism(const float *logits) {
    bn_sampler_params p = bn_sampler_params_default();
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.temperature = 3.0f; // flat enough that draws vary
    int32_t a[50], b[50], c[50];
    for (int round = 0; round < 3; round++) {
        p.seed = round == 2 ? 43 : 42;
        bn_sampler *s = bn_sampler_new(&p);
        int32_t *dst = round == 0 ? a : round == 1 ? b : c;
        for (int i = 0; i < 50; i++) dst[i] = bn_sampler_sample(s, logits, 1000);
        bn_sampler_free(s);
    }
    CHECK(memcmp(a, b, sizeof a) == 0, "same seed -> same 50 draws");
    CHECK(memcmp(a, c, sizeof a) != 0, "different seed -> different draws");
    bn_sampler_params q = p;
    q.seed = 42;
    bn_sampler *s = bn_sampler_new(&q);
    for (int i = 0; i < 10; i++) bn_sampler_sample(s, logits, 1000);
    bn_sampler_reseed(s, 42);
    int32_t d[50];
    for (int i = 0; i < 50; i++) d[i] = bn_sampler_sample(s, logits, 1000);
    CHECK(memcmp(a, d, sizeof a) == 0, "reseed restarts the sequence");
    bn_sampler_free(s);
}

static void test_distribution(void) {
    const double probs[5] = {0.05, 0.1, 0.2, 0.25, 0.4};
    float logits[5];
    for (int i = 0; i < 5; i++) logits[i] = (float)log(probs[i]) + 1.5f; // shift: softmax is invariant
    bn_sampler_params p = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 7};
    bn_sampler *s = bn_sampler_new(&p);
    const int N = 200000;
    int count[5] = {0};
    for (int i = 0; i < N; i++) count[bn_sampler_sample(s, logits, 5)]++;
    double chi2 = 0;
    for (int i = 0; i < 5; i++) {
        double e = N * probs[i];
        chi2 += (count[i] - e) * (count[i] - e) / e;
    }
    printf("distribution: counts %d %d %d %d %d, chi2 = %.2f (4 dof, threshold 20)\n", count[0], count[1], count[2],
           count[3], count[4], chi2);
    CHECK(chi2 < 20.0, "chi-square %.2f < 20", chi2);
    bn_sampler_free(s);

    // temperature 0.5 squares the probabilities (renormalised)
    p.temperature = 0.5f;
    s = bn_sampler_new(&p);
    bn_sampler_sample(s, logits, 5);
    const int32_t *ids;
    const float *pp;
    int n = bn_sampler_last_candidates(s, &ids, &pp);
    double z = 0;
    for (int i = 0; i < 5; i++) z += probs[i] * probs[i];
    CHECK(n == 5, "temp 0.5: 5 candidates");
    for (int i = 0; i < n; i++) CHECK_NEAR(pp[i], probs[ids[i]] * probs[ids[i]] / z, 1e-6, "temp 0.5 candidate prob");
    bn_sampler_free(s);
}

// chain_set: candidate ids after the chain, sorted by id, into out; returns the count.
static int chain_set(bn_sampler_params p, const float *logits, int n_vocab, int32_t *out) {
    bn_sampler *s = bn_sampler_new(&p);
    int32_t id = bn_sampler_sample(s, logits, n_vocab);
    const int32_t *ids;
    const float *pp;
    int n = bn_sampler_last_candidates(s, &ids, &pp);
    bool in = false;
    for (int i = 0; i < n; i++) { out[i] = ids[i]; in |= ids[i] == id; }
    CHECK(in, "sampled id %d is a surviving candidate", id);
    bn_sampler_free(s);
    return n;
}

static void test_truncation(void) {
    // probabilities 0.5, 0.3, 0.15, 0.05 at ids 2, 0, 3, 1
    float logits[4] = {logf(0.3f), logf(0.05f), logf(0.5f), logf(0.15f)};
    int32_t set[4];
    bn_sampler_params p = {.temperature = 1.0f, .top_k = 0, .top_p = 0.75f, .min_p = 0.0f, .seed = 1};
    int n = chain_set(p, logits, 4, set);
    CHECK(n == 2 && set[0] == 2 && set[1] == 0, "top_p 0.75 keeps {2, 0} (n = %d)", n);
    p.top_p = 0.85f;
    n = chain_set(p, logits, 4, set);
    CHECK(n == 3 && set[2] == 3, "top_p 0.85 keeps {2, 0, 3} (n = %d)", n);
    p.top_p = 0.4f;
    n = chain_set(p, logits, 4, set);
    CHECK(n == 1 && set[0] == 2, "top_p 0.4 keeps {2} (n = %d)", n);
    p.top_p = 0.4f;
    p.min_keep = 3;
    n = chain_set(p, logits, 4, set);
    CHECK(n == 3, "top_p 0.4 with min_keep 3 keeps 3 (n = %d)", n);
    p.min_keep = 0;
    p.top_p = 1.0f;
    p.min_p = 0.25f; // threshold 0.125: keeps 0.5, 0.3, 0.15
    n = chain_set(p, logits, 4, set);
    CHECK(n == 3 && set[0] == 2 && set[1] == 0 && set[2] == 3, "min_p 0.25 keeps {2, 0, 3} (n = %d)", n);
    p.min_p = 0.7f; // threshold 0.35: keeps 0.5
    n = chain_set(p, logits, 4, set);
    CHECK(n == 1 && set[0] == 2, "min_p 0.7 keeps {2} (n = %d)", n);
    p.min_p = 0.0f;
    p.top_k = 2;
    n = chain_set(p, logits, 4, set);
    CHECK(n == 2 && set[0] == 2 && set[1] == 0, "top_k 2 keeps {2, 0} (n = %d)", n);
    // chain order: top_k 3 then top_p 0.9 on the renormalised top-3 (0.5/0.95, 0.3/0.95 -> cum 0.842 < 0.9)
    p.top_k = 3;
    p.top_p = 0.9f;
    n = chain_set(p, logits, 4, set);
    CHECK(n == 3, "top_k 3 → top_p 0.9 keeps 3 (n = %d)", n);
    // top_p is applied before temperature: a high temperature does not widen the set
    p.top_k = 0;
    p.top_p = 0.75f;
    p.temperature = 5.0f;
    n = chain_set(p, logits, 4, set);
    CHECK(n == 2, "top_p before temperature (n = %d)", n);
}

static int cmp_desc(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x > y ? -1 : x < y;
}

// expected_keep: top_p then min_p survivors of the whole vocabulary, computed in double.
static int expected_keep(const float *logits, int n, double top_p, double min_p) {
    double *l = xmalloc((size_t)n * sizeof *l), sum = 0;
    for (int i = 0; i < n; i++) l[i] = logits[i];
    qsort(l, (size_t)n, sizeof *l, cmp_desc);
    for (int i = 0; i < n; i++) sum += exp(l[i] - l[0]);
    int keep = n;
    double cum = 0;
    for (int i = 0; i < n && top_p < 1; i++) {
        cum += exp(l[i] - l[0]) / sum;
        if (cum >= top_p) { keep = i + 1; break; }
    }
    if (min_p > 0)
        for (int i = 1; i < keep; i++)
            if (l[i] < l[0] + log(min_p)) { keep = i; break; }
    free(l);
    return keep;
}

// test_no_topk: top_k = 0 on the full vocabulary (partial selection that grows as needed).
static void test_no_topk(float *logits) {
    const struct { float scale; float top_p, min_p; } cases[] = {
        {8.0f, 0.9f, 0.0f},   // peaked: the prefix fits the first partial selection
        {0.5f, 0.9f, 0.0f},   // flat: most of the vocabulary survives, full sort
        {8.0f, 1.0f, 0.05f},  // min_p only
        {2.0f, 0.95f, 0.01f}, // both
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        for (int i = 0; i < NV; i++) logits[i] = cases[c].scale * (frand() + frand() + frand());
        bn_sampler_params p = {.temperature = 0.7f, .top_k = 0, .top_p = cases[c].top_p, .min_p = cases[c].min_p,
                               .seed = 3};
        bn_sampler *s = bn_sampler_new(&p);
        double t0 = bn_time_ms();
        bn_sampler_sample(s, logits, NV);
        double ms = bn_time_ms() - t0;
        const int32_t *ids;
        const float *pp;
        int n = bn_sampler_last_candidates(s, &ids, &pp);
        int want = expected_keep(logits, NV, cases[c].top_p, cases[c].min_p);
        // tolerance: +-1 candidate (float vs double cumulative sums at the boundary)
        CHECK(abs(n - want) <= 1, "top_k 0, top_p %g, min_p %g: %d candidates, want %d", cases[c].top_p,
              cases[c].min_p, n, want);
        printf("top_k 0, top_p %.2f, min_p %.2f (scale %g): %d candidates in %.2f ms\n", cases[c].top_p, cases[c].min_p,
               cases[c].scale, n, ms);
        bn_sampler_free(s);
    }
}

static void test_logprobs(float *logits) {
    for (int i = 0; i < NV; i++) logits[i] = 20.0f * frand() - 10.0f;
    logits[777] = 14.0f;
    logits[5] = 14.0f; // tie with 777: lower id first
    double max_l = -1e30, sum = 0;
    for (int i = 0; i < NV; i++) max_l = logits[i] > max_l ? logits[i] : max_l;
    for (int i = 0; i < NV; i++) sum += exp((double)logits[i] - max_l);
    const int K = 20;
    int32_t ids[20];
    float lp[20];
    double t0 = bn_time_ms();
    int k = bn_logits_topk(logits, NV, K, ids, lp);
    double ms = bn_time_ms() - t0;
    CHECK(k == K, "topk returns %d", k);
    CHECK(ids[0] == 5 && ids[1] == 777, "tied maxima ordered by id: %d %d", ids[0], ids[1]);
    // the k-th largest logit bounds every other logit
    float kth = logits[ids[K - 1]];
    int above = 0;
    for (int i = 0; i < NV; i++) above += logits[i] > kth;
    CHECK(above <= K - 1, "top-%d really are the largest (%d above the last)", K, above);
    for (int i = 0; i < k; i++) {
        double want = (double)logits[ids[i]] - max_l - log(sum);
        CHECK_NEAR(lp[i], want, 1e-5, "topk logprob vs double softmax");
        if (i) CHECK(lp[i] <= lp[i - 1], "descending at %d", i);
    }
    CHECK_NEAR(bn_logits_logprob(logits, NV, 12345), (double)logits[12345] - max_l - log(sum), 1e-5,
               "logprob of one id vs double softmax");
    float two[2] = {0.0f, -1.0e4f};
    CHECK(bn_logits_logprob(two, 2, 1) == -FLT_MAX, "p == 0 -> -FLT_MAX");
    CHECK(bn_logits_logprob(two, 2, 0) == 0.0f, "p == 1 -> 0");
    int32_t all_ids[3];
    float all_lp[3];
    CHECK(bn_logits_topk(two, 2, 3, all_ids, all_lp) == 2, "k clamped to n_vocab");
    printf("logits_topk(k=20, n=%d): %.2f ms\n", NV, ms);

    bn_sampler_params p = bn_sampler_params_default();
    bn_sampler *s = bn_sampler_new(&p);
    t0 = bn_time_ms();
    for (int i = 0; i < 20; i++) bn_sampler_sample(s, logits, NV);
    printf("sample(default chain, n=%d): %.2f ms per token\n", NV, (bn_time_ms() - t0) / 20);
    bn_sampler_free(s);
}

// test_topk_sampling: bn_sampler_sample_topk from a row's 64 best logits (bn_logits_topk_values; what an engine
// returns as bn_forward_out.topk) == bn_sampler_sample over the whole row: pick, RNG draws and candidate list,
// 200 draws for each chain whose top_k fits (1, 5, 40, 64; with top_p / min_p / min_keep / temperatures 0, 0.3,
// 0.8, 1.5), on logits with ties among the best; chains it cannot serve (top_k 0 or 65) are refused.
static void test_topk_sampling(float *logits) {
    for (int i = 0; i < NV; i++) logits[i] = 12.0f * frand();
    logits[1000] = logits[2000] = logits[3000] = 13.0f; // tied maxima
    logits[4000] = logits[5000] = 12.5f;
    enum { K = 64 };
    int32_t ids[K];
    float vals[K];
    CHECK(bn_logits_topk_values(logits, NV, K, ids, vals) == K && ids[0] == 1000 && ids[1] == 2000 && ids[2] == 3000 &&
              vals[0] == 13.0f && ids[3] == 4000,
          "top-%d values: descending, ties by id", K);
    const struct { int top_k; float top_p, min_p, temp; int min_keep; } cs[] = {
        {1, 1.0f, 0.0f, 0.8f, 0}, {5, 1.0f, 0.0f, 1.0f, 0}, {40, 0.95f, 0.05f, 0.8f, 0}, {40, 0.5f, 0.0f, 1.5f, 3},
        {64, 1.0f, 0.3f, 0.3f, 0}, {64, 0.9f, 0.0f, 0.0f, 0}, {40, 1.0f, 0.0f, 0.0f, 0}};
    int n_draws = 0, n_differ = 0;
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        bn_sampler_params p = {.temperature = cs[c].temp, .top_k = cs[c].top_k, .top_p = cs[c].top_p,
                               .min_p = cs[c].min_p, .seed = 99 + c, .min_keep = cs[c].min_keep};
        bn_sampler *full = bn_sampler_new(&p), *top = bn_sampler_new(&p);
        CHECK(bn_sampler_topk_needed(top, K, NV) == cs[c].top_k, "top_k %d fits %d values", cs[c].top_k, K);
        for (int d = 0; d < 200; d++) {
            const int32_t a = bn_sampler_sample(full, logits, NV), b = bn_sampler_sample_topk(top, ids, vals, K, NV);
            const int32_t *ia, *ib;
            const float *pa, *pb;
            const int na = bn_sampler_last_candidates(full, &ia, &pa), nb = bn_sampler_last_candidates(top, &ib, &pb);
            n_draws++;
            n_differ += a != b || na != nb || memcmp(ia, ib, sizeof *ia * na) || memcmp(pa, pb, sizeof *pa * na);
        }
        bn_sampler_free(full), bn_sampler_free(top);
    }
    CHECK(n_differ == 0, "sample_topk == sample: %d of %d draws differ", n_differ, n_draws);
    bn_sampler_params p0 = {.temperature = 0.8f, .top_k = 0, .top_p = 0.95f}, p65 = p0;
    p65.top_k = 65;
    bn_sampler *s0 = bn_sampler_new(&p0), *s65 = bn_sampler_new(&p65);
    CHECK(!bn_sampler_topk_needed(s0, K, NV) && !bn_sampler_topk_needed(s65, K, NV) &&
              bn_sampler_sample_topk(s65, ids, vals, K, NV) == -1,
          "top_k 0 (whole vocabulary) and top_k 65 > 64 values are refused");
    bn_sampler_free(s0), bn_sampler_free(s65);
}

int main(void) {
    float *logits = xmalloc(NV * sizeof *logits);
    test_greedy(logits);
    test_determinism(logits);
    test_distribution();
    test_truncation();
    test_no_topk(logits);
    test_logprobs(logits);
    test_topk_sampling(logits);
    free(logits);
    return test_done("test_sampler");
}
