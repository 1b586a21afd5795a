// tests/spec/test_dspark_spec.c — the speculative loop (docs/dspark.md §5.1, §6, §7) on the tiny
// qwen35 target (F32): greedy speculative output token-identical to plain decoding for 80 tokens
// with a random DSpark drafter (fixed and adaptive draft length) and with the oracle drafter
// (acceptance ≥ 95% there); rollback (snapshot, longer verify batch, restore, re-run) leaves a
// bit-identical recurrent state and KV cache; §7 counter relations; argmax-only verification
// (params.no_step_logits with a greedy sampler) and top-k verification (the same with temperature 0.8, top_k 40)
// give the same tokens and counters as the logits mode and no step logits.
// Decoders stepping together (bn_spec_rounds_begin: batched drafting, one ragged verify pass) emit and verify what
// each emits and verifies alone; a decoder whose context is full fails its round alone. With a LoRA adapter applied
// unmerged to the target (core/adapter.h), the random drafter still gives plain greedy's tokens with the adapter.
#include "tests/test.h"
#include "tests/spec/fixture.h"
#include "core/forward_impl.h"
#include "core/sampler.h"

#define N_GEN 80

static const int32_t prompt[] = {10, 200, 33, 47, 300, 5, 99, 123, 7, 64, 250, 18};
#define N_PROMPT ((int)(sizeof prompt / sizeof prompt[0]))

// run_spec_snaps: greedy speculative generation of >= N_GEN tokens (snap_bytes: bn_spec_params.cpu_snap_bytes, 0 =
// restore + re-run); fills gen, returns the spec (caller frees).
static bn_spec *run_spec_snaps(const bn_model *m, bn_state *ts, const bn_drafter *d, int type, int n_max,
                               bool adaptive, int miss_every, size_t snap_bytes, int32_t *gen) {
    bn_spec_params p = {.type = type, .n_max = n_max, .adaptive = adaptive, .n_threads = 2,
                        .oracle_miss_every = miss_every, .cpu_snap_bytes = snap_bytes};
    char err[256];
    bn_spec *sp = bn_spec_new(m, ts, d, &p, err, sizeof err);
    if (!sp) bn_die("spec_new: %s", err);
    fx_spec_greedy(sp, prompt, N_PROMPT, N_GEN, gen);
    return sp;
}

// run_spec: run_spec_snaps with the CPU's restore + re-run rollback.
static bn_spec *run_spec(const bn_model *m, bn_state *ts, const bn_drafter *d, int type, int n_max, bool adaptive,
                         int miss_every, int32_t *gen) {
    return run_spec_snaps(m, ts, d, type, n_max, adaptive, miss_every, 0, gen);
}

// n_mask_anchor: rounds whose anchor (id_last) is the mask token: the drafter must not draft there
// (prev = MASK is never evaluated), so a fixed-k run drafts in every other round.
static int n_mask_anchor;

static void check_counters(const bn_spec *sp, int n_max, bool fixed, const char *what) {
    const bn_spec_stats *s = bn_spec_stats_get(sp);
    CHECK(s->n_emitted == s->n_accept + s->n_steps, "%s: emitted %lld != accept %lld + steps %lld", what,
          (long long)s->n_emitted, (long long)s->n_accept, (long long)s->n_steps);
    CHECK(s->n_accept <= s->n_drafted, "%s: accept > drafted", what);
    int64_t sum = 0;
    for (int i = 0; i < 64; i++) {
        sum += s->acc_pos[i];
        if (i > 0) CHECK(s->acc_pos[i] <= s->acc_pos[i - 1], "%s: acc_pos not monotone at %d", what, i);
        CHECK(s->acc_pos[i] <= s->drafted_pos[i], "%s: acc_pos[%d] > drafted_pos", what, i);
    }
    CHECK(sum == s->n_accept, "%s: Σ acc_pos %lld != n_accept %lld", what, (long long)sum, (long long)s->n_accept);
    if (fixed) { // §7: fixed k, R rounds: n_drafted = k·R, τ = (n_accept + R)/R
        CHECK(s->n_drafted == (int64_t)n_max * s->n_rounds_spec, "%s: drafted %lld != %d × %lld rounds", what,
              (long long)s->n_drafted, n_max, (long long)s->n_rounds_spec);
        CHECK(s->n_rounds_spec + n_mask_anchor >= s->n_steps, "%s: %lld of %lld steps drafted (%d mask anchors)", what,
              (long long)s->n_rounds_spec, (long long)s->n_steps, n_mask_anchor);
        double tau = (double)(s->n_accept + s->n_rounds_spec) / (double)s->n_rounds_spec;
        CHECK_NEAR(tau, (double)s->n_emitted / (double)s->n_steps, 1e-12, "tau = tokens per target pass");
    }
}

static int same(const int32_t *a, const int32_t *b, int n) {
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) return i;
    return -1;
}

// rollback_check: state A runs prompt then T[0..j] as one batch; state B runs prompt, snapshots,
// runs T[0..k] (the longer verify batch), restores and runs T[0..j]. Both must be bit-identical.
static void rollback_check(const bn_model *m) {
    const int32_t T[5] = {17, 400, 3, 222, 81};
    char err[256];
    for (int j = 0; j < 4; j++) {
        bn_state *a = bn_state_new(m, 256, 1), *b = bn_state_new(m, 256, 1);
        bn_forward_out none = {0};
        bn_forward(m, a, prompt, N_PROMPT, &none, err, sizeof err);
        bn_forward(m, b, prompt, N_PROMPT, &none, err, sizeof err);
        bn_forward(m, a, T, j + 1, &none, err, sizeof err);
        bn_snapshot *snap = bn_state_snapshot(b);
        bn_forward(m, b, T, 5, &none, err, sizeof err);
        bn_state_restore(b, snap);
        bn_forward(m, b, T, j + 1, &none, err, sizeof err);
        CHECK(bn_state_pos(a) == bn_state_pos(b), "rollback j=%d: positions %d vs %d", j, bn_state_pos(a), bn_state_pos(b));
        CHECK(memcmp(a->recurrent, b->recurrent, a->n_recurrent * sizeof(float)) == 0,
              "rollback j=%d: recurrent state differs", j);
        const size_t kvw = (size_t)m->cfg.n_head_kv * m->cfg.head_dim;
        for (int il = 0; il < m->cfg.n_layer; il++) {
            if (!a->k_cache[il]) continue;
            size_t nb = kvw * (size_t)bn_state_pos(a) * sizeof(float);
            CHECK(memcmp(a->k_cache[il], b->k_cache[il], nb) == 0 && memcmp(a->v_cache[il], b->v_cache[il], nb) == 0,
                  "rollback j=%d: KV rows of layer %d differ", j, il);
        }
        bn_snapshot_free(snap);
        bn_state_free(a);
        bn_state_free(b);
    }
}

// full_check: two DSpark decoders in lockstep on engine e, one with room for only 4 positions after its prompt: once
// its context is full its round fails alone ("context full", no pass) while the other's rounds go on, and the other
// still emits plain greedy's tokens.
static void full_check(bn_engine *e, const bn_drafter *d) {
    char err[256];
    bn_engine_state *st[2] = {bn_engine_state_new(e, 256, err, sizeof err),
                              bn_engine_state_new(e, N_PROMPT + 4, err, sizeof err)};
    bn_spec_params p = {.type = BN_SPEC_DSPARK, .n_max = 3, .n_threads = 2};
    bn_spec *sp[2];
    for (int i = 0; i < 2; i++) {
        sp[i] = st[i] ? bn_spec_new_engine(st[i], d, &p, err, sizeof err) : NULL;
        if (!sp[i] || bn_spec_prefill(sp[i], prompt, N_PROMPT, err, sizeof err) != 0) bn_die("%s", err);
    }
    bn_sampler_params sparams = bn_sampler_params_default();
    sparams.temperature = 0;
    bn_sampler *smp = bn_sampler_new(&sparams);
    int32_t gen[64], ref[64];
    int n_gen = 0, full_at = -1;
    for (int step = 0; step < 12; step++) {
        bn_spec_round r[2] = {{.sp = sp[0], .smp = smp, .out_cap = 8}, {.sp = sp[1], .smp = smp, .out_cap = 8}};
        const int n_round = full_at < 0 ? 2 : 1; // the full decoder stops after its failed round
        const int failed = bn_spec_rounds_begin(r, n_round);
        if (n_round == 2 && r[1].rc != 0) {
            full_at = step;
            CHECK(failed == 1 && strstr(r[1].err, "context full") && r[0].rc == 0, "step %d: %d failed (%s)", step,
                  failed, r[1].err);
        } else CHECK(failed == 0, "step %d: %s / %s", step, r[0].err, r[1].err);
        bn_engine_seq passes[2] = {r[0].pass, r[1].pass};
        CHECK(bn_engine_forward_multi(passes, r[1].rc == 0 ? n_round : 1, err, sizeof err) == 0, "%s", err);
        int32_t out[8];
        for (int i = 0; i < n_round; i++) {
            if (r[i].rc != 0) continue;
            const int k = bn_spec_round_end(sp[i], smp, 1.0, out, err, sizeof err);
            CHECK(k >= 1, "step %d decoder %d: %s", step, i, err);
            for (int t = 0; i == 0 && t < k && n_gen < 48; t++) gen[n_gen++] = out[t];
        }
    }
    bn_engine *plain = bn_engine_cpu_new(e->m, 2);
    fx_engine_greedy(plain, prompt, N_PROMPT, n_gen, ref);
    bn_engine_free(plain);
    CHECK(full_at >= 1 && same(ref, gen, n_gen) < 0,
          "context full at step %d; the other decoder's first difference from plain greedy at %d", full_at,
          same(ref, gen, n_gen));
    printf("context full: the short decoder's round failed alone at step %d; the other emitted %d greedy tokens\n",
           full_at, n_gen);
    for (int i = 0; i < 2; i++) bn_spec_free(sp[i]), bn_engine_state_free(st[i]);
    bn_sampler_free(smp);
}

// adapter_check: the random DSpark drafter on the target with a LoRA adapter: plain greedy's tokens with the adapter
// (not ref, the tokens without it), rejections exercised.
static void adapter_check(const bn_model *m, const bn_drafter *d, const int32_t *ref) {
    char path[512], err[512];
    bn_engine *e = fx_adapter_engine(m, fx_path(path, sizeof path, "spec-lora.gguf"), 0.2f, 2);
    if (!e) return;
    int32_t plain[N_GEN], gen[N_GEN + 64];
    fx_engine_greedy(e, prompt, N_PROMPT, N_GEN, plain);
    CHECK(same(ref, plain, N_GEN) >= 0, "the adapter changes the greedy tokens");
    bn_engine_state *ts = bn_engine_state_new(e, 1024, err, sizeof err);
    bn_spec_params p = {.type = BN_SPEC_DSPARK, .n_max = 4, .adaptive = false, .n_threads = 2};
    bn_spec *sp = ts ? bn_spec_new_engine(ts, d, &p, err, sizeof err) : NULL;
    CHECK(sp != NULL, "spec with the adapter: %s", err);
    if (sp) {
        fx_spec_greedy(sp, prompt, N_PROMPT, N_GEN, gen);
        const bn_spec_stats *st = bn_spec_stats_get(sp);
        const int diff = same(plain, gen, N_GEN);
        printf("dspark + adapter: drafted %lld accepted %lld reruns %lld, first difference %d\n",
               (long long)st->n_drafted, (long long)st->n_accept, (long long)st->n_rerun, diff);
        CHECK(diff < 0, "dspark + adapter: first difference from plain greedy with the adapter at token %d", diff);
        CHECK(st->n_drafted > 0 && st->n_rerun > 0, "dspark + adapter: drafts made and some rejected");
    }
    bn_spec_free(sp);
    bn_engine_state_free(ts);
    bn_engine_free(e);
    unlink(path);
}

int main(void) {
    char tpath[512], dpath[512], err[512];
    bn_model *m;
    bn_drafter *d;
    fx_load_pair("", tpath, dpath, &m, &d);
    int32_t ref[N_GEN], gen[N_GEN + 64];
    fx_plain_greedy(m, prompt, N_PROMPT, N_GEN, ref);
    bn_state *ts = bn_state_new(m, 1024, 2);
    for (int i = 0; i < N_GEN; i++) n_mask_anchor += ref[i] == d->cfg.mask_token_id;
    printf("plain decode emitted the mask token %d times\n", n_mask_anchor);

    // 1. random DSpark drafter, fixed n_max 4
    bn_spec *sp = run_spec(m, ts, d, BN_SPEC_DSPARK, 4, false, 0, gen);
    int diff = same(ref, gen, N_GEN);
    CHECK(diff < 0, "dspark n_max 4: first difference at token %d", diff);
    check_counters(sp, 4, true, "dspark fixed");
    const bn_spec_stats *st = bn_spec_stats_get(sp);
    printf("dspark (random drafter) n_max 4: steps %lld drafted %lld accepted %lld reruns %lld\n",
           (long long)st->n_steps, (long long)st->n_drafted, (long long)st->n_accept, (long long)st->n_rerun);
    CHECK(st->n_rerun > 0, "a random drafter must be rejected sometimes (rollback path exercised)");
    // the drafter cache follows the committed positions
    bn_spec_free(sp);

    // 2. random DSpark drafter, adaptive
    sp = run_spec(m, ts, d, BN_SPEC_DSPARK, 4, true, 0, gen);
    diff = same(ref, gen, N_GEN);
    CHECK(diff < 0, "dspark adaptive: first difference at token %d", diff);
    check_counters(sp, 4, false, "dspark adaptive");
    st = bn_spec_stats_get(sp);
    printf("dspark adaptive: steps %lld drafted %lld accepted %lld, n_max now %d\n", (long long)st->n_steps,
           (long long)st->n_drafted, (long long)st->n_accept, st->n_max_now);
    CHECK(st->n_max_now == 0 && st->n_drafted < 4 * st->n_steps / 2,
          "adaptive drafting must switch off when nothing is accepted (n_max now %d, drafted %lld)", st->n_max_now,
          (long long)st->n_drafted);
    bn_spec_free(sp);

    // 3. oracle drafter (measurement aid): acceptance ~100%
    sp = run_spec(m, ts, NULL, BN_SPEC_ORACLE, 4, false, 0, gen);
    diff = same(ref, gen, N_GEN);
    CHECK(diff < 0, "oracle: first difference at token %d", diff);
    check_counters(sp, 4, true, "oracle");
    st = bn_spec_stats_get(sp);
    double acc = (double)st->n_accept / (double)st->n_drafted;
    printf("oracle: steps %lld drafted %lld accepted %lld (%.1f%%)\n", (long long)st->n_steps, (long long)st->n_drafted,
           (long long)st->n_accept, 100 * acc);
    CHECK(acc >= 0.95, "oracle acceptance %.3f < 0.95", acc);
    bn_spec_free(sp);

    // 3b. oracle with every 3rd proposal wrong: partial acceptance, rollback re-runs of 1..3 tokens
    sp = run_spec(m, ts, NULL, BN_SPEC_ORACLE, 4, false, 3, gen);
    diff = same(ref, gen, N_GEN);
    CHECK(diff < 0, "oracle miss 1/3: first difference at token %d", diff);
    check_counters(sp, 4, true, "oracle miss 1/3");
    st = bn_spec_stats_get(sp);
    printf("oracle miss 1/3: steps %lld drafted %lld accepted %lld reruns %lld, acc/pos %lld %lld %lld %lld\n",
           (long long)st->n_steps, (long long)st->n_drafted, (long long)st->n_accept, (long long)st->n_rerun,
           (long long)st->acc_pos[0], (long long)st->acc_pos[1], (long long)st->acc_pos[2], (long long)st->acc_pos[3]);
    CHECK(st->n_accept > 0 && st->n_rerun > 0 && st->acc_pos[1] > 0, "partial acceptance exercised");
    CHECK(!st->per_token_snaps, "cpu_snap_bytes 0: restore + re-run");
    const bn_spec_stats rerun_st = *st;
    bn_spec_free(sp);

    // 3d. the same with per-token snapshots (a rejection restores the one after the last accepted token): the same
    // tokens and counters without a re-run; a budget one byte short of n_max + 1 snapshots keeps the re-runs
    const size_t snaps_bytes = 5 * ts->n_recurrent * sizeof(float);
    for (int fit = 1; fit >= 0; fit--) {
        sp = run_spec_snaps(m, ts, NULL, BN_SPEC_ORACLE, 4, false, 3, fit ? snaps_bytes : snaps_bytes - 1, gen);
        diff = same(ref, gen, N_GEN);
        CHECK(diff < 0, "oracle miss 1/3, %s: first difference at token %d", fit ? "per-token snapshots" : "re-run",
              diff);
        st = bn_spec_stats_get(sp);
        printf("oracle miss 1/3, budget %zu of %zu bytes: steps %lld accepted %lld reruns %lld, per-token snapshots %d\n",
               fit ? snaps_bytes : snaps_bytes - 1, snaps_bytes, (long long)st->n_steps, (long long)st->n_accept,
               (long long)st->n_rerun, st->per_token_snaps);
        CHECK(st->per_token_snaps == fit && (st->n_rerun == 0) == fit, "budget %s: per-token %d, %lld re-runs",
              fit ? "fits" : "one byte short", st->per_token_snaps, (long long)st->n_rerun);
        CHECK(st->n_steps == rerun_st.n_steps && st->n_accept == rerun_st.n_accept &&
                  memcmp(st->acc_pos, rerun_st.acc_pos, sizeof st->acc_pos) == 0,
              "per-token snapshots: counters differ from restore + re-run");
        bn_spec_free(sp);
    }

    // 3e. the random DSpark drafter with per-token snapshots: plain greedy's tokens
    sp = run_spec_snaps(m, ts, d, BN_SPEC_DSPARK, 4, false, 0, SIZE_MAX, gen);
    diff = same(ref, gen, N_GEN);
    CHECK(diff < 0, "dspark n_max 4, per-token snapshots: first difference at token %d", diff);
    st = bn_spec_stats_get(sp);
    CHECK(st->per_token_snaps && st->n_rerun == 0 && st->n_accept < st->n_drafted,
          "dspark per-token snapshots: rejections restored without re-runs");
    bn_spec_free(sp);

    // 3c. adaptive: keeps drafting at ~100% acceptance (oracle, drafting cost kept out of the model)
    sp = run_spec(m, ts, NULL, BN_SPEC_ORACLE, 4, true, 0, gen);
    diff = same(ref, gen, N_GEN);
    CHECK(diff < 0, "oracle adaptive: first difference at token %d", diff);
    st = bn_spec_stats_get(sp);
    printf("oracle adaptive: steps %lld drafted %lld accepted %lld, n_max now %d\n", (long long)st->n_steps,
           (long long)st->n_drafted, (long long)st->n_accept, st->n_max_now);
    CHECK(st->n_max_now > 0, "adaptive drafting must stay on when every draft is accepted");
    bn_spec_free(sp);

    // 4. plain decoding through the loop (type none): 1 token per step
    sp = run_spec(m, ts, NULL, BN_SPEC_NONE, 4, false, 0, gen);
    diff = same(ref, gen, N_GEN);
    CHECK(diff < 0, "none: first difference at token %d", diff);
    CHECK(bn_spec_stats_get(sp)->n_drafted == 0, "none drafts nothing");
    bn_spec_free(sp);

    // 5. temperature 0.8, top_k 40 (sample-and-compare): same seed → same tokens; counters consistent; every
    //    emitted token's logits row is available in the first run; the second sets no_step_logits, so its verify
    //    passes return each row's 40 best logits only (bn_sampler_sample_topk): the same tokens and counters, no rows
    int32_t g1[N_GEN + 64], g2[N_GEN + 64];
    bn_spec_stats temp_st[2];
    for (int rep = 0; rep < 2; rep++) {
        bn_spec_params p = {.type = BN_SPEC_ORACLE, .n_max = 4, .n_threads = 2, .no_step_logits = rep == 1};
        sp = bn_spec_new(m, ts, NULL, &p, err, sizeof err);
        bn_sampler_params sparams = bn_sampler_params_default();
        sparams.temperature = 0.8f;
        sparams.seed = 1234;
        bn_sampler *smp = bn_sampler_new(&sparams);
        bn_spec_prefill(sp, prompt, N_PROMPT, err, sizeof err);
        int n = 0;
        int32_t out[64];
        while (n < N_GEN) {
            int k = bn_spec_generate_step(sp, smp, out, 64, err, sizeof err);
            CHECK(k >= 1, "temp step: %s", err);
            if (k < 1) break;
            CHECK((bn_spec_step_logits(sp, k - 1) != NULL) == (rep == 0) && bn_spec_step_logits(sp, k) == NULL,
                  "step logits rows (%s)", rep ? "top-k verification: none" : "logits mode");
            for (int i = 0; i < k; i++) (rep ? g2 : g1)[n++] = out[i];
        }
        check_counters(sp, 4, true, "oracle temp 0.8");
        st = bn_spec_stats_get(sp);
        temp_st[rep] = *st;
        if (rep == 0)
            printf("oracle temp 0.8: steps %lld drafted %lld accepted %lld\n", (long long)st->n_steps,
                   (long long)st->n_drafted, (long long)st->n_accept);
        bn_sampler_free(smp);
        bn_spec_free(sp);
    }
    CHECK(same(g1, g2, N_GEN) < 0, "temperature sampling with one seed must repeat (top-k verification included)");
    CHECK(temp_st[0].n_steps == temp_st[1].n_steps && temp_st[0].n_accept == temp_st[1].n_accept &&
              temp_st[0].n_drafted == temp_st[1].n_drafted,
          "top-k verification counters == logits mode");

    // 6. argmax-only steps (the engine's per-row argmax, no step logits) vs the logits mode: the same
    //    tokens and the same counters (random drafter: rejections + re-runs; oracle with misses: partial
    //    acceptance), bn_spec_step_logits NULL after every argmax-only step and set after every logits step
    const struct {
        const char *what;
        int type, miss_every;
    } am_runs[] = {{"dspark n_max 4", BN_SPEC_DSPARK, 0}, {"oracle miss 1/3", BN_SPEC_ORACLE, 3}};
    for (int r = 0; r < 2; r++) {
        bn_spec_stats sts[2];
        int32_t gens[2][N_GEN + 64];
        for (int mode = 0; mode < 2; mode++) { // 0: logits, 1: argmax only
            bn_spec_params p = {.type = am_runs[r].type, .n_max = 4, .n_threads = 2,
                                .oracle_miss_every = am_runs[r].miss_every, .no_step_logits = mode == 1};
            sp = bn_spec_new(m, ts, am_runs[r].type == BN_SPEC_DSPARK ? d : NULL, &p, err, sizeof err);
            if (!sp) bn_die("spec_new: %s", err);
            int n_steps = 0, n_rows = 0;
            fx_spec_greedy_rows(sp, prompt, N_PROMPT, N_GEN, gens[mode], &n_steps, &n_rows);
            sts[mode] = *bn_spec_stats_get(sp);
            CHECK(n_rows == (mode ? 0 : n_steps), "%s %s: step logits after %d of %d steps", am_runs[r].what,
                  mode ? "argmax-only" : "logits", n_rows, n_steps);
            bn_spec_free(sp);
        }
        diff = same(ref, gens[1], N_GEN);
        CHECK(diff < 0, "%s argmax-only: first difference from plain greedy at token %d", am_runs[r].what, diff);
        const bn_spec_stats *a = &sts[0], *b = &sts[1];
        const bool same_st = a->n_steps == b->n_steps && a->n_drafted == b->n_drafted && a->n_accept == b->n_accept &&
                             a->n_rerun == b->n_rerun && memcmp(a->acc_pos, b->acc_pos, sizeof a->acc_pos) == 0;
        printf("%s argmax-only: steps %lld drafted %lld accepted %lld reruns %lld (logits mode: %lld %lld %lld %lld)\n",
               am_runs[r].what, (long long)b->n_steps, (long long)b->n_drafted, (long long)b->n_accept,
               (long long)b->n_rerun, (long long)a->n_steps, (long long)a->n_drafted, (long long)a->n_accept,
               (long long)a->n_rerun);
        CHECK(same_st, "%s: argmax-only counters differ from the logits mode", am_runs[r].what);
        CHECK(b->n_accept > 0 || am_runs[r].type == BN_SPEC_DSPARK, "oracle accepted nothing");
        CHECK(b->n_rerun > 0, "%s: rejections exercised", am_runs[r].what);
    }

    rollback_check(m);
    adapter_check(m, d, ref);
    bn_engine *e = bn_engine_cpu_new(m, 2);
    fx_rounds_lockstep(e, d, prompt, N_PROMPT, 24);
    full_check(e, d);
    bn_engine_free(e);

    bn_state_free(ts);
    bn_drafter_free(d);
    bn_model_free(m);
    unlink(tpath);
    unlink(dpath);
    return test_done("dspark_spec");
}
