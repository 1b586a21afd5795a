// core/sampler.c — llama.cpp's sampler chain penalties → dry → top_k → top_p → min_p → temperature → dist(seed)
// (docs/server.md §3.1) with its own RNG (xoshiro256** seeded by splitmix64), and raw-softmax
// log-probs for n_probs (docs/server.md §5). Top-k selection is a bounded min-heap (O(n log k)),
// so n_vocab = 248,320 needs no full sort unless top_k <= 0.
#include "core/sampler.h"
#include "base/rng.h"
#include "base/util.h"
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t id;
    float logit;
    float p;
} cand;

// Greedy sampling without top_k/top_p/min_p keeps this many (p = 1, 0, 0, ...) candidates instead of
// the whole vocabulary (enough for any n_probs report; llama.cpp would list all of them).
#define GREEDY_MAX_CANDIDATES 1024

struct bn_sampler {
    bn_sampler_params par;
    bn_rng rng;
    cand *c;     // {cap} candidate scratch
    int cap, n;  // n = candidates after the last chain
    int32_t *out_ids; // {cap} last candidates (for post_sampling_probs)
    float *out_p;     // {cap}
    const int32_t *hist; // [n_hist] the caller's history (bn_sampler_set_history)
    int n_hist;
    float *pen;       // {pen_cap} the penalized logits row
    int *count;       // {pen_cap} occurrences per token in the window (all 0 between picks)
    int pen_cap;
};


void bn_sampler_reseed(bn_sampler *s, uint64_t seed) {
    bn_rng_seed(&s->rng, seed);
}

bn_sampler_params bn_sampler_params_default(void) {
    return (bn_sampler_params){.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .seed = 0, .min_keep = 0,
                               .repeat_last_n = 64, .repeat_penalty = 1.0f, .frequency_penalty = 0.0f,
                               .presence_penalty = 0.0f, .dry_multiplier = 0.0f, .dry_base = 1.75f,
                               .dry_allowed_length = 2, .dry_penalty_last_n = 64, .dry_breakers = NULL};
}

// repeat_on: whether p's repetition penalties change anything
static bool repeat_on(const bn_sampler_params *p) {
    return p->repeat_last_n != 0 &&
           (p->repeat_penalty != 1.0f || p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f);
}
bool bn_sampler_params_dry(const bn_sampler_params *p) {
    return p->dry_multiplier != 0.0f && p->dry_base >= 1.0f && p->dry_penalty_last_n != 0;
}

bool bn_sampler_params_penalized(const bn_sampler_params *p) {
    return repeat_on(p) || bn_sampler_params_dry(p) || p->n_logit_bias > 0;
}

const bn_arg bn_sampler_chain_args[] = {BN_SECTION("sampling"), BN_SAMPLER_CHAIN_ARGS(bn_sampler_params, ), {0}};

const bn_arg bn_sampler_penalty_args[] = {BN_SECTION("repetition penalties and DRY (llama.cpp's; off by default)"),
                                          BN_SAMPLER_PENALTY_ARGS(bn_sampler_params, ),
                                          {0}};

// breaker_fn: --dry-sequence-breaker S into the bn_sampler_args at base ("none": no breakers).
static int breaker_fn(void *base, const char *opt, const char *val, char *err, size_t errlen) {
    bn_sampler_args *a = base;
    if (a->n_dry_breakers == 32) return bn_err(err, errlen, "at most 32");
    a->dry_custom = true;
    if (strcmp(val, "none")) a->dry_breakers[a->n_dry_breakers++] = val;
    return 0;
}

const bn_arg bn_sampler_breaker_args[] = {
    BN_FN("--dry-sequence-breaker", breaker_fn, "S",
          "DRY sequence breaker, repeatable; replaces the defaults \\n : \" * (\"none\": none)"),
    {0}};

bn_dry_breakers *bn_sampler_args_breakers(bn_sampler_params *p, const bn_sampler_args *a, const bn_tokenizer *tok) {
    bn_dry_breakers *b = bn_sampler_params_dry(p)
                             ? bn_dry_breakers_new(tok, a->dry_custom ? a->dry_breakers : NULL, a->n_dry_breakers)
                             : NULL;
    p->dry_breakers = b;
    return b;
}

bool bn_sampler_needs_history(const bn_sampler *s) { return bn_sampler_params_penalized(&s->par); }

void bn_sampler_set_history(bn_sampler *s, const int32_t *tokens, int n) {
    s->hist = tokens;
    s->n_hist = tokens && n > 0 ? n : 0;
}

bn_sampler *bn_sampler_new(const bn_sampler_params *p) {
    bn_sampler *s = xcalloc(1, sizeof *s);
    s->par = p ? *p : bn_sampler_params_default();
    bn_sampler_reseed(s, s->par.seed);
    return s;
}

void bn_sampler_free(bn_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->out_ids);
    free(s->out_p);
    free(s->pen);
    free(s->count);
    free(s);
}

// ---- selection ----------------------------------------------------------------------------
// cand_before: higher logit first, lower id on ties.
static bool cand_before(const cand *a, const cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cand_cmp(const void *x, const void *y) {
    const cand *a = x, *b = y;
    return cand_before(a, b) ? -1 : cand_before(b, a) ? 1 : 0;
}

// heap of the k best so far: root = the worst kept candidate
static void sift_down(cand *h, int n, int i) {
    cand v = h[i];
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_before(&h[c], &h[c + 1])) c++; // pick the worse child
        if (!cand_before(&v, &h[c])) break;                   // v is worse than both: stop
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
}

// select_topk: the k best (logit desc, id asc) of logits into c[0..k), sorted; returns k.
static int select_topk(const float *logits, int n_vocab, int k, cand *c) {
    if (k > n_vocab) k = n_vocab;
    if (k <= 0) return 0;
    if ((int64_t)k * 8 >= n_vocab) { // large k: a full sort is as cheap
        for (int i = 0; i < n_vocab; i++) c[i] = (cand){i, logits[i], 0};
        qsort(c, (size_t)n_vocab, sizeof *c, cand_cmp);
        return k;
    }
    for (int i = 0; i < k; i++) c[i] = (cand){i, logits[i], 0};
    for (int i = k / 2 - 1; i >= 0; i--) sift_down(c, k, i);
    for (int i = k; i < n_vocab; i++) {
        cand x = {i, logits[i], 0};
        if (cand_before(&x, &c[0])) { c[0] = x; sift_down(c, k, 0); }
    }
    qsort(c, (size_t)k, sizeof *c, cand_cmp);
    return k;
}

// softmax over c[0..n) (sorted, so c[0] has the max logit), float accumulation as llama.cpp.
static void softmax_sorted(cand *c, int n) {
    float max_l = c[0].logit, sum = 0.0f;
    for (int i = 0; i < n; i++) { c[i].p = expf(c[i].logit - max_l); sum += c[i].p; }
    for (int i = 0; i < n; i++) c[i].p /= sum;
}

static void ensure_cap(bn_sampler *s, int n_vocab) {
    if (s->cap >= n_vocab) return;
    s->cap = n_vocab;
    s->c = xrealloc(s->c, (size_t)n_vocab * sizeof *s->c);
    s->out_ids = xrealloc(s->out_ids, (size_t)n_vocab * sizeof *s->out_ids);
    s->out_p = xrealloc(s->out_p, (size_t)n_vocab * sizeof *s->out_p);
}

static float softmax_denominator(const float *logits, int n_vocab, float *max_l);

// cutoff: how many of the sorted candidates c[0..m) survive top_p then min_p, with top_p's
// probabilities p_i = expf(l_i - max_l) / sum. *found = false when neither cut falls inside c[0..m)
// (more candidates are needed to decide); then m is returned.
static int cutoff(const bn_sampler_params *p, const cand *c, int m, float max_l, float sum, int min_keep, bool *found) {
    int keep = m;
    *found = false;
    if (p->top_p < 1.0f) { // smallest prefix with cumulative p >= top_p
        float cum = 0.0f, comp = 0.0f; // Kahan: a plain float running sum drifts over 10^5 terms
        for (int i = 0; i < m; i++) {
            float y = expf(c[i].logit - max_l) / sum - comp, t = cum + y;
            comp = (t - cum) - y;
            cum = t;
            if (cum >= p->top_p && i + 1 >= min_keep) { keep = i + 1; *found = true; break; }
        }
    }
    if (p->min_p > 0.0f) { // keep logit >= max_logit + log(min_p), i.e. p >= min_p * p_max
        float min_logit = c[0].logit + logf(p->min_p);
        for (int i = 1; i < keep; i++) {
            if (c[i].logit < min_logit && i >= min_keep) { keep = i; *found = true; break; }
        }
    }
    return keep;
}

// truncate_sorted: top_p / min_p over the m best candidates c[0..m) (sorted), their softmax taken over these m
// alone (top_k's chain); returns how many are kept.
static int truncate_sorted(const bn_sampler_params *p, const cand *c, int m, int min_keep) {
    if (!(p->top_p < 1.0f || p->min_p > 0.0f)) return m;
    float max_l = c[0].logit, sum = 0.0f, comp = 0.0f;
    for (int i = 0; i < m; i++) {
        float y = expf(c[i].logit - max_l) - comp, t = sum + y;
        comp = (t - sum) - y;
        sum = t;
    }
    bool found;
    return cutoff(p, c, m, max_l, sum, min_keep, &found);
}

// choose: the end of the chain over the kept candidates c[0..n) (sorted best first): greedy, or temperature +
// softmax + one uniform draw; records the candidate list; returns the picked id.
static int32_t choose(bn_sampler *s, cand *c, int n) {
    const bn_sampler_params *p = &s->par;
    int pick = 0;
    if (p->temperature <= 0.0f) { // llama.cpp's temp <= 0: only the max-logit candidate keeps a probability (1)
        for (int i = 0; i < n; i++) c[i].p = i == 0 ? 1.0f : 0.0f;
    } else {
        for (int i = 0; i < n; i++) c[i].logit /= p->temperature;
        softmax_sorted(c, n);
        // dist: walk the cumulative distribution with one uniform draw
        double r = bn_rng_uniform(&s->rng), cum = 0.0;
        pick = n - 1;
        for (int i = 0; i < n; i++) {
            cum += c[i].p;
            if (r < cum) { pick = i; break; }
        }
    }
    s->n = n;
    for (int i = 0; i < n; i++) { s->out_ids[i] = c[i].id; s->out_p[i] = c[i].p; }
    return c[pick].id;
}

// penalize: logits with the logit biases, then the repetition penalties (llama.cpp's penalties sampler) and DRY of s
// over its history applied, in s->pen; logits itself when s is not penalized, or has no biases and no history.
static const float *penalize(bn_sampler *s, const float *logits, int n_vocab) {
    const bn_sampler_params *p = &s->par;
    if (!bn_sampler_params_penalized(&s->par) || (s->n_hist == 0 && p->n_logit_bias == 0)) return logits;
    if (s->pen_cap < n_vocab) {
        free(s->pen);
        free(s->count);
        s->pen = xmalloc(sizeof(float) * (size_t)n_vocab);
        s->count = xcalloc((size_t)n_vocab, sizeof(int));
        s->pen_cap = n_vocab;
    }
    memcpy(s->pen, logits, sizeof(float) * (size_t)n_vocab);
    for (int i = 0; i < p->n_logit_bias; i++) {
        const bn_logit_bias *b = &p->logit_bias[i];
        if (b->id >= 0 && b->id < n_vocab) s->pen[b->id] += b->bias;
    }
    if (repeat_on(p)) {
        const int w = p->repeat_last_n < 0 || p->repeat_last_n > s->n_hist ? s->n_hist : p->repeat_last_n;
        const int32_t *win = s->hist + (s->n_hist - w);
        for (int i = 0; i < w; i++)
            if (win[i] >= 0 && win[i] < n_vocab) s->count[win[i]]++;
        for (int i = 0; i < w; i++) { // each token once: its count is cleared when it is penalized
            const int32_t id = win[i];
            if (id < 0 || id >= n_vocab || s->count[id] == 0) continue;
            float l = s->pen[id];
            l = l <= 0.0f ? l * p->repeat_penalty : l / p->repeat_penalty;
            s->pen[id] = l - (float)s->count[id] * p->frequency_penalty - p->presence_penalty;
            s->count[id] = 0;
        }
    }
    if (bn_sampler_params_dry(p)) // after the penalties, as in llama-server's default chain
        bn_dry_apply(p->dry_breakers, p->dry_multiplier, p->dry_base, p->dry_allowed_length, p->dry_penalty_last_n,
                     s->hist, s->n_hist, s->pen, n_vocab);
    return s->pen;
}

int32_t bn_sampler_sample(bn_sampler *s, const float *logits, int n_vocab) {
    const bn_sampler_params *p = &s->par;
    ensure_cap(s, n_vocab);
    logits = penalize(s, logits, n_vocab);
    cand *c = s->c;
    int min_keep = p->min_keep > 1 ? p->min_keep : 1;
    int n;
    int k = p->top_k > 0 && p->top_k < n_vocab ? p->top_k : n_vocab;
    bool truncating = p->top_p < 1.0f || p->min_p > 0.0f;
    bool greedy = p->temperature <= 0.0f;
    bool found;
    if (k == n_vocab && truncating && n_vocab > 8192) {
        // no top_k: find the top_p/min_p prefix by growing a partial selection instead of sorting
        // the whole vocabulary; top_p's softmax is over all logits
        float max_l, sum = softmax_denominator(logits, n_vocab, &max_l);
        for (int kk = 1024;; kk *= 8) {
            if ((int64_t)kk * 8 >= n_vocab) kk = n_vocab; // select_topk would sort everything anyway
            int m = select_topk(logits, n_vocab, kk, c);
            n = cutoff(p, c, m, max_l, sum, min_keep, &found);
            if (found || m == n_vocab) break;
        }
    } else if (k == n_vocab && !truncating && greedy && n_vocab > GREEDY_MAX_CANDIDATES) {
        // greedy without truncation: every other candidate has p = 0, keep only the first ones
        n = select_topk(logits, n_vocab, GREEDY_MAX_CANDIDATES, c);
    } else {
        n = truncate_sorted(p, c, select_topk(logits, n_vocab, k, c), min_keep);
    }
    return choose(s, c, n);
}

int bn_sampler_topk_needed(const bn_sampler *s, int k, int n_vocab) {
    if (bn_sampler_params_penalized(&s->par)) return 0; // the penalties change logits outside any row's top_k
    return s->par.top_k > 0 && s->par.top_k <= k && s->par.top_k < n_vocab ? s->par.top_k : 0;
}

int32_t bn_sampler_sample_topk(bn_sampler *s, const int32_t *ids, const float *vals, int k, int n_vocab) {
    const bn_sampler_params *p = &s->par;
    if (!bn_sampler_topk_needed(s, k, n_vocab)) return -1;
    ensure_cap(s, p->top_k);
    const int m = p->top_k; // the chain reads the top_k best only (bn_sampler_sample's last branch)
    for (int i = 0; i < m; i++) s->c[i] = (cand){ids[i], vals[i], 0};
    return choose(s, s->c, truncate_sorted(p, s->c, m, p->min_keep > 1 ? p->min_keep : 1));
}

bool bn_sampler_is_greedy(const bn_sampler *s) { return s->par.temperature <= 0.0f && !bn_sampler_params_penalized(&s->par); }

int bn_sampler_last_candidates(const bn_sampler *s, const int32_t **ids, const float **probs) {
    *ids = s->out_ids;
    *probs = s->out_p;
    return s->n;
}

// ---- raw log-probs ------------------------------------------------------------------------
// softmax_denominator: max logit in *max_l and the sum of expf(l - max) in float, Kahan-compensated:
// a plain float sum over 248,320 terms (llama.cpp) drifts by ~1e-4 relative; this one stays within
// ~1e-7 of the exact sum, so log-probs agree with a double softmax to 1e-5.
static float softmax_denominator(const float *logits, int n_vocab, float *max_l) {
    float m = -INFINITY, sum = 0.0f, comp = 0.0f;
    for (int i = 0; i < n_vocab; i++) m = logits[i] > m ? logits[i] : m;
    for (int i = 0; i < n_vocab; i++) {
        float y = expf(logits[i] - m) - comp;
        float t = sum + y;
        comp = (t - sum) - y;
        sum = t;
    }
    *max_l = m;
    return sum;
}

static float logprob_of(float logit, float max_l, float sum) {
    float p = expf(logit - max_l) / sum;
    return p > 0.0f ? logf(p) : -FLT_MAX;
}

bool bn_sampler_head_out(const bn_sampler *s, int n_vocab, bn_forward_out *out, int32_t *argmax, int32_t *ids,
                         float *vals) {
    if (bn_sampler_is_greedy(s)) {
        out->argmax = argmax;
        return true;
    }
    const int k = bn_sampler_topk_needed(s, BN_FORWARD_TOPK_MAX, n_vocab);
    if (!k) return false;
    out->topk = k, out->topk_ids = ids, out->topk_logits = vals;
    return true;
}

int32_t bn_sampler_pick(bn_sampler *s, const bn_forward_out *out, int j, int n_vocab) {
    if (out->argmax) return out->argmax[j];
    const size_t k = out->topk > 0 ? (size_t)out->topk : 0;
    if (k) return bn_sampler_sample_topk(s, out->topk_ids + j * k, out->topk_logits + j * k, out->topk, n_vocab);
    return bn_sampler_sample(s, out->logits + (size_t)j * n_vocab, n_vocab);
}

int bn_logits_topk_values(const float *logits, int n_vocab, int k, int32_t *ids, float *vals) {
    if (k > n_vocab) k = n_vocab;
    if (k <= 0) return 0;
    cand *c = xmalloc((size_t)((int64_t)k * 8 >= n_vocab ? n_vocab : k) * sizeof *c);
    k = select_topk(logits, n_vocab, k, c);
    for (int i = 0; i < k; i++) ids[i] = c[i].id, vals[i] = c[i].logit;
    free(c);
    return k;
}

int bn_logits_topk(const float *logits, int n_vocab, int k, int32_t *ids, float *logprobs) {
    if (k > n_vocab) k = n_vocab;
    if (k <= 0) return 0;
    cand *c = xmalloc((size_t)((int64_t)k * 8 >= n_vocab ? n_vocab : k) * sizeof *c);
    k = select_topk(logits, n_vocab, k, c);
    float max_l, sum = softmax_denominator(logits, n_vocab, &max_l);
    for (int i = 0; i < k; i++) {
        ids[i] = c[i].id;
        logprobs[i] = logprob_of(c[i].logit, max_l, sum);
    }
    free(c);
    return k;
}

float bn_logits_logprob(const float *logits, int n_vocab, int32_t id) {
    if (id < 0 || id >= n_vocab) return -FLT_MAX;
    float max_l, sum = softmax_denominator(logits, n_vocab, &max_l);
    return logprob_of(logits[id], max_l, sum);
}
