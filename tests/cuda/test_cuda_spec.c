// tests/cuda/test_cuda_spec.c — DSpark speculative decoding (spec/dspark.h) with the target on the
// CUDA engine (core/engine.h, -ngl 99) next to the CPU engine, on the tiny F32 qwen35 target and a
// random drafter of tests/spec/fixture.h. Per engine: greedy speculative output token-identical
// to the same engine's plain greedy decoding (random DSpark drafter n_max 4: rejections restore
// the per-token device snapshot of the verify pass on CUDA; oracle drafter n_max 4; oracle with
// every 3rd proposal wrong: partial acceptance). Across engines: the oracle runs' counters
// (steps, drafted, accepted, acc_pos) are identical, and CUDA's plain greedy tokens equal the
// CPU's (F32 weights: logits agree to ~2e-5, notes/cuda.md). First, bn_engine_forward_snaps
// itself: taps/logits of a verify pass on both engines, and restoring a mid-pass snapshot. Every run
// again with params.no_step_logits (verify passes return each row's argmax only): the same tokens and
// counters (re-runs included), no step logits, and on CUDA no logits bytes copied to the host; so does a
// sampled DSpark run (temperature 0.8, top_k 40: top-k verification).
// On the CUDA engine, four decoders stepping together (fx_rounds_lockstep: device drafters started at once, one ragged
// verify pass) emit and verify what each does alone.
// With the arguments `tool BIN` (BIN relative to BONSAI_BUILD_ROOT, a CUDA-linked
// bonsai-speculative): BIN -ngl 99 prints the same greedy text and draft counters as
// tools/bonsai-speculative on the CPU. Linked twice: `cuda_spec`/`cuda_spec_tool` on a real GPU
// (skip without a device) and `cuda_spec_emu`/`cuda_spec_tool_emu` through the CPU emulator.
#include "tests/test.h"
#include "tests/spec/fixture.h"
#include "core/engine.h"
#include "cuda/cuda_engine.h"

#define N_GEN 16
#define N_CTX 128

static const int32_t prompt[] = {10, 200, 33, 47, 300, 5, 99, 123, 7, 64, 250, 18};
#define N_PROMPT ((int)(sizeof prompt / sizeof prompt[0]))

// run_spec: speculative generation of >= N_GEN tokens on e at temperature temp (0: greedy; else the default chain,
// top_k 40, seed 7) (argmax_only: params.no_step_logits: argmax or top-k verification); fills gen and *st;
// *logit_bytes = host logits bytes of the CUDA engine during the run; CHECKs that every step had step logits
// (logits mode) or none.
static void run_spec(bn_engine *e, const bn_drafter *d, int type, int miss_every, bool argmax_only, float temp,
                     int32_t *gen, bn_spec_stats *st, size_t *logit_bytes) {
    char err[256];
    bn_engine_state *ts = bn_engine_state_new(e, N_CTX, err, sizeof err);
    if (!ts) bn_die("state: %s", err);
    bn_spec_params p = {.type = type, .n_max = 4, .n_threads = 2, .oracle_miss_every = miss_every,
                        .no_step_logits = argmax_only};
    bn_spec *sp = bn_spec_new_engine(ts, d, &p, err, sizeof err);
    if (!sp) bn_die("spec_new: %s", err);
    const size_t bytes0 = bn_cuda_host_logit_bytes();
    int n_steps = 0, n_rows = 0;
    fx_spec_sample_rows(sp, prompt, N_PROMPT, N_GEN, temp, 7, gen, &n_steps, &n_rows);
    *logit_bytes = bn_cuda_host_logit_bytes() - bytes0;
    CHECK(n_rows == (argmax_only ? 0 : n_steps), "%s %s: step logits after %d of %d steps", bn_engine_name(e),
          argmax_only ? "argmax-only" : "logits mode", n_rows, n_steps);
    CHECK(bn_spec_n_past(sp) == bn_engine_state_pos(ts), "%s: spec n_past %d != target position %d",
          bn_engine_name(e), bn_spec_n_past(sp), bn_engine_state_pos(ts));
    *st = *bn_spec_stats_get(sp);
    bn_spec_free(sp);
    bn_engine_state_free(ts);
}

// snaps_taps_check: one verify-shaped pass (5 tokens after the prompt) through
// bn_engine_forward_snaps on both engines: taps and logits of every row agree between CPU and CUDA
// (F32: logits bound 2e-3, observed 4.6e-4; taps bound 1e-4, observed 4.5e-6), and restoring the
// snapshot after token 2 then decoding token 3 again reproduces that row's logits on each engine
// (bound 1e-4; CPU 8.6e-6 from the batched vs one-token sum order, CUDA 0).
static void snaps_taps_check(bn_engine *const eng[2], const bn_drafter *d) {
    enum { N = 5 };
    const int32_t T[N] = {17, 400, 3, 222, 81};
    const int V = eng[0]->m->cfg.n_vocab, E = eng[0]->m->cfg.n_embd, C = d->cfg.n_taps;
    float *logits[2], *taps[2], *again = xmalloc(sizeof(float) * (size_t)V);
    char err[256];
    for (int e = 0; e < 2; e++) {
        logits[e] = xmalloc(sizeof(float) * (size_t)V * N);
        taps[e] = xmalloc(sizeof(float) * (size_t)E * (size_t)C * N);
        bn_engine_state *s = bn_engine_state_new(eng[e], N_CTX, err, sizeof err);
        bn_engine_snapshot *snaps[N];
        for (int t = 0; t < N; t++) snaps[t] = bn_engine_snapshot_new(s, err, sizeof err);
        bn_forward_out none = {0};
        bn_forward_out out = {.logits = logits[e], .all_logits = true, .tap_layers = d->cfg.tap_layers, .n_taps = C,
                              .taps = taps[e]};
        int rc = bn_engine_forward(s, prompt, N_PROMPT, &none, err, sizeof err);
        if (rc == 0) rc = bn_engine_forward_snaps(s, T, N, &out, snaps, err, sizeof err);
        bn_forward_out one = {.logits = again};
        if (rc == 0) rc = bn_engine_restore(s, snaps[2], err, sizeof err);
        CHECK(rc == 0 && bn_engine_state_pos(s) == N_PROMPT + 3, "%s: forward_snaps/restore: %s",
              bn_engine_name(eng[e]), err);
        if (rc == 0) rc = bn_engine_forward(s, &T[3], 1, &one, err, sizeof err);
        double worst = 0;
        for (int v = 0; rc == 0 && v < V; v++) worst = fmax(worst, fabs(again[v] - logits[e][(size_t)3 * V + v]));
        printf("%s: restore snaps[2] + token 3: max |Δ logit| %.2e\n", bn_engine_name(eng[e]), worst);
        CHECK(rc == 0 && worst < 1e-4, "%s: restored continuation differs by %.2e (bound 1e-4)", bn_engine_name(eng[e]),
              worst);
        for (int t = 0; t < N; t++) bn_engine_snapshot_free(snaps[t]);
        bn_engine_state_free(s);
    }
    double dl = 0, dt = 0;
    for (size_t i = 0; i < (size_t)V * N; i++) dl = fmax(dl, fabs(logits[0][i] - logits[1][i]));
    for (size_t i = 0; i < (size_t)E * C * N; i++) dt = fmax(dt, fabs(taps[0][i] - taps[1][i]));
    printf("forward_snaps CPU vs CUDA: max |Δ logit| %.2e, max |Δ tap| %.2e\n", dl, dt);
    CHECK(dl < 2e-3 && dt < 1e-4, "forward_snaps CPU vs CUDA: logits %.2e (bound 2e-3) taps %.2e (bound 1e-4)", dl, dt);
    for (int e = 0; e < 2; e++) free(logits[e]), free(taps[e]);
    free(again);
}

static int first_diff(const int32_t *a, const int32_t *b, int n) {
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) return i;
    return -1;
}

// same_counters: the acceptance counters agree (re-runs are engine-specific: CPU only).
static bool same_counters(const bn_spec_stats *a, const bn_spec_stats *b) {
    return a->n_steps == b->n_steps && a->n_rounds_spec == b->n_rounds_spec && a->n_drafted == b->n_drafted &&
           a->n_accept == b->n_accept && memcmp(a->acc_pos, b->acc_pos, sizeof a->acc_pos) == 0;
}

static void print_stats(const char *what, const char *engine, const bn_spec_stats *s) {
    printf("%-22s %-4s: steps %3lld drafted %3lld accepted %3lld reruns %2lld acc/pos %lld %lld %lld %lld\n", what,
           engine, (long long)s->n_steps, (long long)s->n_drafted, (long long)s->n_accept, (long long)s->n_rerun,
           (long long)s->acc_pos[0], (long long)s->acc_pos[1], (long long)s->acc_pos[2], (long long)s->acc_pos[3]);
}

// tool_check: `bin -ngl 99` vs tools/bonsai-speculative (CPU) for draft-dspark and draft-oracle:
// identical output up to the timing lines (text, n_predict, n_drafted, n_accept, accept %).
static int tool_check(const char *bin) {
    const char *br = getenv("BONSAI_BUILD_ROOT");
    if (!br) return test_skip("BONSAI_BUILD_ROOT not set (run through meson test)");
    char tpath[512], dpath[512], cmd[2048];
    bn_model *m;
    bn_drafter *d;
    fx_load_pair("cuda-spec-tool-", tpath, dpath, &m, &d);
    static char out[2][1 << 15];
    const char *types[] = {"draft-dspark", "draft-oracle"};
    for (int ti = 0; ti < 2; ti++) {
        for (int e = 0; e < 2; e++) {
            snprintf(cmd, sizeof cmd, "%s/%s -ngl %d -m %s -md %s --spec-type %s -p 'the cat sat' -n 12 -t 2 "
                     "--spec-draft-n-max 3 --no-adaptive", br, e ? bin : "tools/bonsai-speculative", e ? 99 : 0,
                     tpath, dpath, types[ti]);
            CHECK(fx_run(cmd, out[e], sizeof out[e]) == 0, "%s: %s", cmd, out[e]);
        }
        // compare everything before the timing lines, then the counter lines after them
        const char *enc[2] = {strstr(out[0], "encoded "), strstr(out[1], "encoded ")};
        const char *cnt[2] = {strstr(out[0], "n_draft "), strstr(out[1], "n_draft ")};
        const char *end[2] = {strstr(out[0], "\n\nspec:"), strstr(out[1], "\n\nspec:")};
        bool ok = enc[0] && enc[1] && cnt[0] && cnt[1] && end[0] && end[1] && enc[0] - out[0] == enc[1] - out[1] &&
                  memcmp(out[0], out[1], (size_t)(enc[0] - out[0])) == 0 && end[0] - cnt[0] == end[1] - cnt[1] &&
                  memcmp(cnt[0], cnt[1], (size_t)(end[0] - cnt[0])) == 0;
        CHECK(ok, "%s: CUDA tool output differs from the CPU's:\n%s\n---\n%s", types[ti], out[0], out[1]);
        if (cnt[1] && end[1]) printf("%s -ngl 99: %.*s\n", types[ti], (int)(end[1] - cnt[1]), cnt[1]);
    }
    bn_drafter_free(d);
    bn_model_free(m);
    unlink(tpath);
    unlink(dpath);
    return test_done("cuda_spec tool");
}

int main(int argc, char **argv) {
    char err[512];
    if (!bn_cuda_available(err, sizeof err)) {
        printf("SKIP: %s\n", err);
        return 77;
    }
    if (argc == 3 && strcmp(argv[1], "tool") == 0) return tool_check(argv[2]);
    char tpath[512], dpath[512];
    bn_model *m;
    bn_drafter *d;
    fx_load_pair("cuda-spec-", tpath, dpath, &m, &d);
    bn_engine *eng[2] = {bn_engine_open(m, 0, 2, err, sizeof err), bn_engine_open(m, 99, 2, err, sizeof err)};
    if (!eng[0] || !eng[1]) bn_die("engine: %s", err);

    snaps_taps_check(eng, d);
    fx_rounds_lockstep(eng[1], d, prompt, N_PROMPT, 6); // device drafters started together, one ragged verify pass

    int32_t ref[2][N_GEN], gen[N_GEN + 64];
    for (int e = 0; e < 2; e++) fx_engine_greedy(eng[e], prompt, N_PROMPT, N_GEN, ref[e]);
    int diff = first_diff(ref[0], ref[1], N_GEN);
    CHECK(diff < 0, "plain greedy: CUDA differs from CPU at token %d", diff);

    struct {
        const char *what;
        int type, miss_every;
        bool cross_engine; // counters must match between engines
    } runs[] = {
        {"dspark (random) n_max 4", BN_SPEC_DSPARK, 0, false},
        {"oracle n_max 4", BN_SPEC_ORACLE, 0, true},
        {"oracle miss 1/3", BN_SPEC_ORACLE, 3, true},
    };
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        bn_spec_stats st[2];
        for (int e = 0; e < 2; e++) {
            const char *en = bn_engine_name(eng[e]);
            const bn_drafter *dr = runs[r].type == BN_SPEC_DSPARK ? d : NULL;
            size_t bytes, bytes_am;
            run_spec(eng[e], dr, runs[r].type, runs[r].miss_every, false, 0.0f, gen, &st[e], &bytes);
            print_stats(runs[r].what, en, &st[e]);
            diff = first_diff(ref[e], gen, N_GEN);
            CHECK(diff < 0, "%s on %s: first difference from plain greedy at token %d", runs[r].what, en, diff);
            bn_spec_stats st_am;
            run_spec(eng[e], dr, runs[r].type, runs[r].miss_every, true, 0.0f, gen, &st_am, &bytes_am);
            printf("%-22s %-4s: argmax-only %s counters, host logits bytes %zu (logits mode %zu)\n", runs[r].what, en,
                   same_counters(&st[e], &st_am) && st[e].n_rerun == st_am.n_rerun ? "same" : "DIFFERENT", bytes_am,
                   bytes);
            diff = first_diff(ref[e], gen, N_GEN);
            CHECK(diff < 0, "%s on %s argmax-only: first difference from plain greedy at token %d", runs[r].what, en,
                  diff);
            CHECK(same_counters(&st[e], &st_am) && st[e].n_rerun == st_am.n_rerun,
                  "%s on %s: argmax-only counters differ from the logits mode", runs[r].what, en);
            if (e == 1) CHECK(bytes_am == 0 && bytes > 0, "%s on CUDA: %zu host logits bytes in argmax-only mode (want 0; "
                              "logits mode %zu)", runs[r].what, bytes_am, bytes);
            CHECK(st[e].n_emitted == st[e].n_accept + st[e].n_steps && st[e].n_accept <= st[e].n_drafted,
                  "%s on %s: counter relations", runs[r].what, en);
            // CPU rolls back by re-running the accepted prefix, CUDA by restoring a per-token snapshot
            bool rejected = st[e].n_accept < st[e].n_drafted;
            if (e == 1) CHECK(st[e].n_rerun == 0, "%s on CUDA: %lld re-runs (must restore)", runs[r].what,
                              (long long)st[e].n_rerun);
            if (e == 0 && rejected) CHECK(st[e].n_rerun > 0, "%s on CPU: rejections without a re-run", runs[r].what);
        }
        if (runs[r].type == BN_SPEC_DSPARK)
            CHECK(st[1].n_accept < st[1].n_drafted, "a random drafter must be rejected sometimes (restore exercised)");
        if (runs[r].miss_every)
            CHECK(st[1].n_accept > 0 && st[1].acc_pos[1] > 0 && st[1].n_accept < st[1].n_drafted,
                  "partial acceptance exercised on CUDA");
        if (runs[r].cross_engine)
            CHECK(same_counters(&st[0], &st[1]), "%s: CPU and CUDA acceptance counters differ", runs[r].what);
    }

    // sampled (temperature 0.8, top_k 40, one seed): with params.no_step_logits the verify passes return each
    // row's 40 best logits only (CUDA: the device top-k, 0 host logits bytes); the same tokens and counters as
    // the logits mode on each engine
    for (int e = 0; e < 2; e++) {
        int32_t gen_top[N_GEN + 64];
        bn_spec_stats sa, sb;
        size_t bytes, bytes_top;
        run_spec(eng[e], d, BN_SPEC_DSPARK, 0, false, 0.8f, gen, &sa, &bytes);
        run_spec(eng[e], d, BN_SPEC_DSPARK, 0, true, 0.8f, gen_top, &sb, &bytes_top);
        diff = first_diff(gen, gen_top, N_GEN);
        printf("%-22s %-4s: top-k verification %s tokens, %s counters, host logits bytes %zu (logits mode %zu)\n",
               "dspark temp 0.8", bn_engine_name(eng[e]), diff < 0 ? "same" : "DIFFERENT",
               same_counters(&sa, &sb) ? "same" : "DIFFERENT", bytes_top, bytes);
        CHECK(diff < 0 && same_counters(&sa, &sb), "%s temp 0.8: top-k verification differs from the logits mode "
              "(first token at %d)", bn_engine_name(eng[e]), diff);
        if (e == 1) CHECK(bytes_top == 0 && bytes > 0, "CUDA temp 0.8: %zu host logits bytes with top-k verification",
                          bytes_top);
    }

    bn_engine_free(eng[0]);
    bn_engine_free(eng[1]);
    bn_drafter_free(d);
    bn_model_free(m);
    unlink(tpath);
    unlink(dpath);
    return test_done("cuda_spec");
}
