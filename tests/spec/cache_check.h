// tests/spec/cache_check.h — the prompt cache with speculation (bn_spec_prefill_cached, spec/dspark.h) on
// any engine, shared by tests/spec/test_dspark_cache.c (CPU) and tests/cuda/test_cuda_spec_cache.c (CUDA
// and CPU+CUDA through the emulator). Include after tests/test.h. On the tiny qwen35 target (hybrid GDN +
// attention) with a random drafter, greedy, DSpark n_max 4:
//   request 1: P1 (12 tokens) from an empty cache (nothing reused), snapshot, generate n_gen (<= 24) tokens;
//   request 2: P2 = P1 + min(16, n_gen) of those tokens + 5 new ones with P1's entry: reuses 11 positions, and
//     its tokens, target logits, per-step drafts and §7 counters equal a fresh speculative prefill of P2
//     (the drafts prove the drafter's context rows of the reused prefix are the right ones), and its
//     tokens and logits equal plain greedy decoding of P2 without speculation;
//   request 3: P3 = P2 with token 3 changed, offered P2's entry: not a prefix, full prefill (0 reused),
//     output = plain greedy of P3;
//   request 4: P2 again with P2's entry: the snapshot's tokens are a prefix, but request 3 rewrote
//     positions >= 3 since, so the stale entry must not be used (0 reused), output = plain greedy of P2.
#ifndef BONSAI_TEST_DSPARK_CACHE_CHECK_H
#define BONSAI_TEST_DSPARK_CACHE_CHECK_H
#include "tests/spec/fixture.h"
#include <math.h>

#define CC_N_CTX 160
#define CC_N_GEN 24
#define CC_N_MAX 4

typedef struct {
    int n;                              // tokens generated and compared (<= CC_N_GEN)
    int32_t tok[CC_N_GEN];
    float *logits;                      // [CC_N_GEN][V] the target row that produced each token
    int n_steps;
    int32_t drafts[CC_N_GEN][CC_N_MAX]; // per step: the verified drafts
    int nd[CC_N_GEN];
    bn_spec_stats st;                   // counters of this request alone
} cc_run;

// cc_generate: greedy speculative steps after a prefill until r->n tokens; fills r.
static void cc_generate(bn_spec *sp, int V, cc_run *r) {
    bn_sampler_params sparams = bn_sampler_params_default();
    sparams.temperature = 0;
    bn_sampler *smp = bn_sampler_new(&sparams);
    const bn_spec_stats st0 = *bn_spec_stats_get(sp);
    char err[256];
    int32_t out[64];
    r->n_steps = 0;
    for (int n = 0; n < r->n;) {
        int k = bn_spec_generate_step(sp, smp, out, 64, err, sizeof err);
        if (k < 1) bn_die("step: %s", err);
        int nd;
        const int32_t *dr = bn_spec_step_drafts(sp, &nd);
        r->nd[r->n_steps] = nd;
        memcpy(r->drafts[r->n_steps], dr, sizeof(int32_t) * (size_t)nd);
        r->n_steps++;
        for (int i = 0; i < k && n < r->n; i++, n++) {
            r->tok[n] = out[i];
            memcpy(r->logits + (size_t)n * V, bn_spec_step_logits(sp, i), sizeof(float) * (size_t)V);
        }
    }
    const bn_spec_stats *st1 = bn_spec_stats_get(sp);
    r->st = *st1;
    r->st.n_steps -= st0.n_steps;
    r->st.n_rounds_spec -= st0.n_rounds_spec;
    r->st.n_drafted -= st0.n_drafted;
    r->st.n_accept -= st0.n_accept;
    r->st.n_emitted -= st0.n_emitted;
    for (int i = 0; i < 64; i++) r->st.acc_pos[i] -= st0.acc_pos[i], r->st.drafted_pos[i] -= st0.drafted_pos[i];
    bn_sampler_free(smp);
}

// cc_same_output: tokens identical and logits within tol; prints the largest logit difference.
static void cc_same_output(const cc_run *a, const cc_run *b, int V, double tol, const char *what) {
    int diff = -1;
    for (int i = 0; i < a->n && diff < 0; i++)
        if (a->tok[i] != b->tok[i]) diff = i;
    double worst = 0;
    for (size_t i = 0; i < (size_t)a->n * V; i++) worst = fmax(worst, fabs(a->logits[i] - b->logits[i]));
    printf("  %s: tokens %s, max |Δ logit| %.2e\n", what, diff < 0 ? "identical" : "DIFFER", worst);
    CHECK(diff < 0, "%s: first token difference at %d", what, diff);
    CHECK(worst <= tol, "%s: logits differ by %.2e (tolerance %.1e)", what, worst, tol);
}

// cc_sane: the §7 relations of one request's counters.
static void cc_sane(const bn_spec_stats *s, const char *what) {
    int64_t sum = 0;
    bool monotone = true;
    for (int i = 0; i < 64; i++) {
        sum += s->acc_pos[i];
        monotone = monotone && (i == 0 || s->acc_pos[i] <= s->acc_pos[i - 1]) && s->acc_pos[i] <= s->drafted_pos[i];
    }
    CHECK(s->n_emitted == s->n_accept + s->n_steps && s->n_accept <= s->n_drafted && sum == s->n_accept && monotone,
          "%s: counter relations (steps %lld drafted %lld accepted %lld emitted %lld)", what, (long long)s->n_steps,
          (long long)s->n_drafted, (long long)s->n_accept, (long long)s->n_emitted);
    CHECK(s->n_drafted > 0 && s->n_rounds_spec > 0, "%s: drafted nothing", what);
}

// cc_spec_new: a target state on e and a DSpark spec over it (fixed n_max 4).
static bn_spec *cc_spec_new(bn_engine *e, const bn_drafter *d, bn_engine_state **ts) {
    char err[256];
    *ts = bn_engine_state_new(e, CC_N_CTX, err, sizeof err);
    if (!*ts) bn_die("state: %s", err);
    bn_spec_params p = {.type = BN_SPEC_DSPARK, .n_max = CC_N_MAX, .n_threads = 2};
    bn_spec *sp = bn_spec_new_engine(*ts, d, &p, err, sizeof err);
    if (!sp) bn_die("spec_new: %s", err);
    return sp;
}

// cache_check: the four requests of the top comment on engine e, n_gen (<= CC_N_GEN) tokens each; tol bounds
// |Δ logit| between the cached run and a fresh prefill or plain decoding on the same engine.
static void cache_check(bn_engine *e, const bn_drafter *d, double tol, int n_gen) {
    static const int32_t p1[] = {10, 200, 33, 47, 300, 5, 99, 123, 7, 64, 250, 18};
    static const int32_t extra[] = {77, 401, 9, 260, 31};
    enum { N1 = 12, N_EXTRA = 5 };
    if (n_gen > CC_N_GEN) n_gen = CC_N_GEN;
    const int n_keep = n_gen < 16 ? n_gen : 16, n2 = N1 + n_keep + N_EXTRA;
    const char *en = bn_engine_name(e);
    const int V = e->m->cfg.n_vocab;
    char err[256];
    cc_run run[6]; // first, cached, fresh, plain P2, not-a-prefix, plain P3 (stale reuses "first")
    for (int i = 0; i < 6; i++) {
        run[i].n = n_gen;
        run[i].logits = xmalloc(sizeof(float) * (size_t)V * CC_N_GEN);
    }
    cc_run *first = &run[0], *cached = &run[1], *fresh = &run[2], *plain2 = &run[3], *other = &run[4],
           *plain3 = &run[5];
    printf("%s engine:\n", en);

    bn_engine_state *ts, *ts2;
    bn_spec *sp = cc_spec_new(e, d, &ts);
    bn_engine_snapshot *snap = bn_engine_snapshot_new(ts, err, sizeof err);
    if (!snap) bn_die("snapshot: %s", err);
    // request 1: empty cache
    int r = bn_spec_prefill_cached(sp, p1, N1, NULL, err, sizeof err);
    CHECK(r == 0, "%s: request 1 reused %d positions without a cache (%s)", en, r, err);
    if (bn_engine_snapshot_into(ts, snap, err, sizeof err) != 0) bn_die("snapshot: %s", err);
    cc_generate(sp, V, first);
    // request 2: P1 + generated + more, with P1's entry
    int32_t p2[N1 + 16 + N_EXTRA], p3[N1 + 16 + N_EXTRA];
    memcpy(p2, p1, sizeof p1);
    memcpy(p2 + N1, first->tok, sizeof(int32_t) * (size_t)n_keep);
    memcpy(p2 + N1 + n_keep, extra, sizeof extra);
    r = bn_spec_prefill_cached(sp, p2, n2, snap, err, sizeof err);
    CHECK(r == N1 - 1, "%s: request 2 reused %d positions (want %d) %s", en, r, N1 - 1, r < 0 ? err : "");
    CHECK(bn_spec_n_past(sp) == n2 - 1 && bn_engine_state_pos(ts) == n2 - 1, "%s: position after the cached prefill",
          en);
    if (bn_engine_snapshot_into(ts, snap, err, sizeof err) != 0) bn_die("snapshot: %s", err);
    cc_generate(sp, V, cached);
    // the same request on a fresh state and spec, and without speculation
    bn_spec *sp2 = cc_spec_new(e, d, &ts2);
    if (bn_spec_prefill(sp2, p2, n2, err, sizeof err) != 0) bn_die("prefill: %s", err);
    cc_generate(sp2, V, fresh);
    fx_engine_greedy_logits(e, p2, n2, n_gen, plain2->tok, plain2->logits);
    cc_same_output(cached, fresh, V, tol, "cached vs fresh speculative prefill");
    cc_same_output(cached, plain2, V, tol, "cached vs plain greedy");
    bool same_drafts = cached->n_steps == fresh->n_steps;
    for (int s = 0; same_drafts && s < cached->n_steps; s++)
        same_drafts = cached->nd[s] == fresh->nd[s] &&
                      memcmp(cached->drafts[s], fresh->drafts[s], sizeof(int32_t) * (size_t)cached->nd[s]) == 0;
    CHECK(same_drafts, "%s: the drafts after the cached prefix differ from a fresh prefill's", en);
    const bn_spec_stats *a = &cached->st, *b = &fresh->st;
    printf("  cached: %d steps, drafted %lld accepted %lld; fresh: drafted %lld accepted %lld\n", cached->n_steps,
           (long long)a->n_drafted, (long long)a->n_accept, (long long)b->n_drafted, (long long)b->n_accept);
    CHECK(a->n_steps == b->n_steps && a->n_rounds_spec == b->n_rounds_spec && a->n_drafted == b->n_drafted &&
              a->n_accept == b->n_accept && memcmp(a->acc_pos, b->acc_pos, sizeof a->acc_pos) == 0,
          "%s: acceptance counters of the cached request differ from the fresh one's", en);
    cc_sane(a, "cached request");
    cc_sane(&first->st, "first request");
    // request 3: not a prefix of the cached tokens → full prefill
    memcpy(p3, p2, sizeof(int32_t) * (size_t)n2);
    p3[3] = (p3[3] + 1) % V;
    r = bn_spec_prefill_cached(sp, p3, n2, snap, err, sizeof err);
    CHECK(r == 0, "%s: a cache that is not a prefix was used (%d positions)", en, r);
    cc_generate(sp, V, other);
    fx_engine_greedy_logits(e, p3, n2, n_gen, plain3->tok, plain3->logits);
    cc_same_output(other, plain3, V, tol, "not a prefix (full prefill) vs plain greedy");
    // request 4: P2's entry again, but its positions >= 3 were rewritten by request 3 → stale, not used
    r = bn_spec_prefill_cached(sp, p2, n2, snap, err, sizeof err);
    CHECK(r == 0, "%s: a stale cache entry was used (%d positions)", en, r);
    cc_generate(sp, V, first);
    cc_same_output(first, plain2, V, tol, "stale entry (full prefill) vs plain greedy");

    bn_engine_snapshot_free(snap);
    bn_spec_free(sp);
    bn_spec_free(sp2);
    bn_engine_state_free(ts);
    bn_engine_state_free(ts2);
    for (int i = 0; i < 6; i++) free(run[i].logits);
}
#endif
