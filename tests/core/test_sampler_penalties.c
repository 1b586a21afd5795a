// tests/core/test_sampler_penalties.c — the sampler's repetition penalties (core/sampler.h: repeat_last_n,
// repeat_penalty, frequency_penalty, presence_penalty over the history set by bn_sampler_set_history):
//   - the post-chain probabilities (temperature 1, nothing truncated) equal the softmax of the penalized logits
//     computed here in double from llama.cpp's formula, for windows of 0, 5, 64 and -1 (all) tokens, within 1e-6;
//   - the same against llama.cpp's own penalties sampler (the prebuilt libllama, tests/ref) where it loads;
//   - greedy with a penalty is not the raw argmax (bn_sampler_is_greedy false, no top-k or argmax shortcut), and
//     a penalty without a history changes nothing.
#include "core/sampler.h"
#include "base/rng.h"
#include "tests/test.h"
#ifdef HAVE_LLAMA_REF
#include "tests/ref/llama_ref.h"
#endif
#include <math.h>
#include <string.h>

#define NV 300
#define NH 90

typedef struct {
    int last_n;
    float repeat, freq, present;
} pen_case;

// expected_probs: softmax (double) of logits penalized by c over the last window of hist, per token id
static void expected_probs(const float *logits, const int32_t *hist, int n_hist, const pen_case *c, double *p) {
    int count[NV] = {0};
    const int w = c->last_n < 0 || c->last_n > n_hist ? n_hist : c->last_n;
    for (int i = n_hist - w; i < n_hist; i++)
        if (hist[i] >= 0 && hist[i] < NV) count[hist[i]]++;
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < NV; i++) {
        double l = logits[i];
        if (count[i] > 0) {
            l = l <= 0 ? l * c->repeat : l / c->repeat;
            l -= count[i] * c->freq + c->present;
        }
        p[i] = l;
        mx = fmax(mx, l);
    }
    for (int i = 0; i < NV; i++) sum += (p[i] = exp(p[i] - mx));
    for (int i = 0; i < NV; i++) p[i] /= sum;
}

// sampled_probs: the sampler's post-chain probability of every token (temperature 1, no truncation)
static void sampled_probs(const float *logits, const int32_t *hist, int n_hist, const pen_case *c, double *p) {
    bn_sampler_params sp = {.temperature = 1.0f, .top_k = -1, .top_p = 1.0f, .min_p = 0.0f, .seed = 5,
                            .repeat_last_n = c->last_n, .repeat_penalty = c->repeat, .frequency_penalty = c->freq,
                            .presence_penalty = c->present};
    bn_sampler *s = bn_sampler_new(&sp);
    bn_sampler_set_history(s, hist, n_hist);
    bn_sampler_sample(s, logits, NV);
    const int32_t *ids;
    const float *probs;
    const int n = bn_sampler_last_candidates(s, &ids, &probs);
    CHECK(n == NV, "all %d candidates kept (got %d)", NV, n);
    for (int i = 0; i < NV; i++) p[i] = -1;
    for (int i = 0; i < n; i++) p[ids[i]] = probs[i];
    bn_sampler_free(s);
}

static double max_diff(const double *a, const double *b) {
    double d = 0;
    for (int i = 0; i < NV; i++) d = fmax(d, fabs(a[i] - b[i]));
    return d;
}

int main(void) {
    bn_rng r;
    bn_rng_seed(&r, 11);
    float logits[NV];
    for (int i = 0; i < NV; i++) logits[i] = (float)(6.0 * bn_rng_uniform(&r) - 3.0); // both signs
    int32_t hist[NH];
    for (int i = 0; i < NH; i++) hist[i] = (int32_t)(bn_rng_uniform(&r) * 40); // ids 0..39, many repeats
    hist[3] = -1, hist[7] = NV + 5;                                               // ignored: outside the vocabulary
    const pen_case cases[] = {
        {64, 1.3f, 0.0f, 0.0f}, {5, 1.1f, 0.5f, 0.2f}, {-1, 1.0f, 0.3f, 0.0f}, {0, 1.5f, 1.0f, 1.0f},
        {64, 0.8f, -0.2f, -0.4f}, {NH + 10, 1.2f, 0.1f, 0.3f},
    };
    double want[NV], got[NV], plain[NV];
    const pen_case off = {64, 1.0f, 0.0f, 0.0f};
    expected_probs(logits, hist, NH, &off, plain);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const pen_case *c = &cases[k];
        expected_probs(logits, hist, NH, c, want);
        sampled_probs(logits, hist, NH, c, got);
        const double d = max_diff(want, got), moved = max_diff(want, plain);
        printf("last_n %3d repeat %.2f freq %+.2f present %+.2f: max |dp| vs the formula %.2e (the penalty moves p by up to "
               "%.3f)\n", c->last_n, c->repeat, c->freq, c->present, d, moved);
        CHECK(d < 1e-6, "case %zu: probabilities off the formula by %g", k, d);
        CHECK(c->last_n == 0 ? moved == 0 : moved > 1e-3, "case %zu: the penalty moved p by %g", k, moved);
#ifdef HAVE_LLAMA_REF
        float ref[NV];
        // llama.cpp takes max(last_n, 0); common/ maps -1 to the context size before that
        if (llama_ref_penalties(logits, NV, hist, NH, c->last_n < 0 ? NH : c->last_n, c->repeat, c->freq, c->present,
                                ref) == 0) {
            double mx = -INFINITY, sum = 0, pr[NV];
            for (int i = 0; i < NV; i++) mx = fmax(mx, ref[i]);
            for (int i = 0; i < NV; i++) sum += (pr[i] = exp(ref[i] - mx));
            for (int i = 0; i < NV; i++) pr[i] /= sum;
            const double dr = max_diff(pr, got);
            printf("  vs llama.cpp's penalties sampler: max |dp| %.2e\n", dr);
            CHECK(dr < 1e-6, "case %zu: probabilities off llama.cpp's by %g", k, dr);
        } else if (k == 0) printf("  llama.cpp comparison skipped: the reference library is not available\n");
#endif
    }
    // greedy with a penalty: the best raw token (in the history) loses to the runner-up
    float two[NV];
    for (int i = 0; i < NV; i++) two[i] = -5.0f;
    two[10] = 2.0f, two[20] = 1.8f;
    const int32_t h10[] = {10, 3, 10};
    bn_sampler_params gp = bn_sampler_params_default();
    gp.temperature = 0.0f;
    gp.repeat_penalty = 1.2f;
    bn_sampler *g = bn_sampler_new(&gp);
    CHECK(bn_sampler_params_penalized(&gp) && !bn_sampler_is_greedy(g), "a penalized greedy sampler is not plain argmax");
    CHECK(bn_sampler_topk_needed(g, 64, NV) == 0, "a penalized sampler needs the whole row");
    bn_forward_out fo = {0};
    int32_t am, ids[64];
    float vals[64];
    CHECK(!bn_sampler_head_out(g, NV, &fo, &am, ids, vals), "no argmax / top-k shortcut with penalties");
    CHECK(bn_sampler_sample(g, two, NV) == 10, "no history: the raw argmax");
    bn_sampler_set_history(g, h10, 3);
    CHECK(bn_sampler_sample(g, two, NV) == 20, "10 in the history: 2.0 / 1.2 < 1.8, so 20");
    bn_sampler_set_history(g, h10 + 1, 1);
    CHECK(bn_sampler_sample(g, two, NV) == 10, "10 outside the history: 10 again");
    bn_sampler_free(g);
    const bn_sampler_params dflt = bn_sampler_params_default();
    CHECK(!bn_sampler_params_penalized(&dflt), "the defaults (repeat 1, freq 0, present 0) are not penalized");
    return test_done("sampler-penalties");
}
