// tests/cuda/test_cuda_dspark.c — the DSpark drafter on the CUDA device (cuda/cuda_dspark.h) against
// the CPU drafter (spec/dspark.h, the reference) on random drafters over the tiny qwen35 target of
// tests/spec/fixture.h, and bn_spec on a CUDA target drafting on the device.
//   part "drafter" (F32, Q8_0, Q8_0 block 16): encoder g of 20 random tap rows, then process 20 rows,
//     the block pass's h and base logits at n_past 20, drafts (n_max = B) and, after truncating to 13
//     rows and re-processing, drafts again; with p_min the truncation rule; for the Q8_0 drafters the fused
//     Q8 producers of the block pass bit-identical to BONSAI_CUDA_FUSE=0 (fusion_check);
//     batched drafting of 10 states (bn_cuda_drafter_draft_multi) == each state drafting alone (batch_check);
//   part "spec": greedy speculative decoding (n_max 3) on the CUDA engine with a Q8_0 device drafter ==
//     plain greedy on the CUDA engine over 64 tokens, rollbacks by snapshot restore (no re-runs);
//   part "counters": the same over 24 tokens, and its §7 counters == those of the run with the drafter
//     forced onto the CPU (params.cpu_drafter) and of the device drafter fed through host taps
//     (params.host_taps); the default run moves 0 tap bytes over PCIe (bn_cuda_host_tap_bytes);
//   part "taps": the device tap hand-over at the API level: a target state writing its taps into its
//     device tap buffer (bn_cuda_state_tap_buffer) + bn_cuda_drafter_process_dev vs a second pair going
//     through host taps (bn_cuda_forward host taps + bn_cuda_drafter_process), over a prefill and
//     verify-sized passes (bn_cuda_forward_snaps): drafts, block h and base logits bit-identical, 0 host
//     tap bytes on the device path and exactly 2 × rows × C × E × 4 on the host path;
//   part "graph": the k = 0 step stays on plain decoding's graph path: DSpark with n_max 0 and adaptive
//     DSpark with the random drafter (switched off) replay a captured graph of the target on every step,
//     k = 0 steps and verify passes alike (bn_cuda_state_graph_counts), output == plain greedy over 64 tokens;
//     with n_max 0 the tap buffer's 64 rows hold the taps of the last 64 committed positions (deferred rows);
//   part "replay": BN_SPEC_REPLAY (the real drafter runs on the device, the recorded greedy
//     continuation is proposed): the same 64 tokens, every draft accepted.
// Linked twice: `cuda_dspark` on a GPU (skips without a device) and `cuda_dspark_emu` in the emulator.
#include "tests/test.h"
#include "tests/spec/fixture.h"
#include "tests/cuda/compare.h"
#include "core/engine.h"
#include "cuda/cuda_engine.h"
#include "cuda/cuda_dspark.h"
#include "base/rng.h"
#include "quant/quant.h"
#include <math.h>
#include <string.h>

#define N_CTX 160
#define N_ROWS 20
#define N_GEN 64

static const int32_t prompt[] = {10, 200, 33, 47, 300, 5, 99, 123, 7, 64, 250, 18};
#define N_PROMPT ((int)(sizeof prompt / sizeof prompt[0]))

static double max_abs(const float *a, size_t n) {
    double w = 0;
    for (size_t i = 0; i < n; i++) w = fmax(w, fabs((double)a[i]));
    return w;
}

// drafter_check: device vs CPU drafter for one drafter file. tol_g / tol_h: max |Δ| of g and h (both
// unit-RMS rows); tol_l: max |Δ| of base logits relative to their max |value|.
static void drafter_check(const char *what, const bn_model *m, const char *dpath, double tol_g, double tol_h,
                          double tol_l) {
    char err[512];
    bn_drafter *d = bn_drafter_load(dpath, m, err, sizeof err);
    if (!d) bn_die("%s: %s", what, err);
    const int E = d->cfg.n_embd, C = d->cfg.n_taps, V = d->cfg.n_vocab, B = d->cfg.block_size;
    bn_cuda_drafter *cd = bn_cuda_drafter_upload(d, err, sizeof err);
    bn_cuda_dstate *gs = cd ? bn_cuda_dstate_new(cd, N_CTX, err, sizeof err) : NULL;
    if (!gs) bn_die("%s: device drafter: %s", what, err);
    bn_dstate *cs = bn_dstate_new(d, N_CTX, 2);
    const size_t nt = (size_t)N_ROWS * C * E;
    float *taps = xmalloc(sizeof(float) * nt);
    bn_rng rng;
    bn_rng_seed(&rng, 42);
    for (size_t i = 0; i < nt; i++) taps[i] = 2.0f * bn_rng_uniform(&rng) - 1.0f;
    float *g[2], *h[2], *base[2];
    for (int e = 0; e < 2; e++) {
        g[e] = xmalloc(sizeof(float) * (size_t)N_ROWS * E);
        h[e] = xmalloc(sizeof(float) * (size_t)B * E);
        base[e] = xmalloc(sizeof(float) * (size_t)B * V);
    }
    // encoder
    bn_drafter_encode(d, cs, taps, N_ROWS, g[0]);
    CHECK(bn_cuda_drafter_encode(gs, taps, N_ROWS, g[1], err, sizeof err) == 0, "%s: encode: %s", what, err);
    const double dg = max_abs_diff(g[0], g[1], (size_t)N_ROWS * E);
    // process + block pass
    int rc = bn_drafter_process(d, cs, taps, N_ROWS, 0, err, sizeof err);
    if (rc == 0) rc = bn_cuda_drafter_process(gs, taps, N_ROWS, 0, err, sizeof err);
    CHECK(rc == 0 && bn_cuda_dstate_n_cache(gs) == N_ROWS, "%s: process: %s", what, err);
    const int32_t id_last = 77;
    rc = bn_drafter_block(d, cs, id_last, N_ROWS, B, h[0], base[0], err, sizeof err);
    if (rc == 0) rc = bn_cuda_drafter_block(gs, id_last, N_ROWS, B, h[1], base[1], err, sizeof err);
    CHECK(rc == 0, "%s: block: %s", what, err);
    const double dh = max_abs_diff(h[0], h[1], (size_t)B * E);
    const double dl = max_abs_diff(base[0], base[1], (size_t)B * V) / max_abs(base[0], (size_t)B * V);
    printf("%s: max |Δ g| %.2e (bound %.0e), |Δ h| %.2e (bound %.0e), |Δ base logit| / max %.2e (bound %.0e)\n",
           what, dg, tol_g, dh, tol_h, dl, tol_l);
    CHECK(dg < tol_g && dh < tol_h && dl < tol_l, "%s: device drafter outside the bounds", what);
    // drafts: identical ids, before and after a truncation + re-process (the rollback path). A chain may
    // part only at a near-tie: where the device's pick differs, the CPU's own step logits must hold the two
    // picks within tie_tol (twice the base-logit bound: each side's logit may be off by it); the rest of
    // that chain follows a different token and is not compared. (In the emulator every chain is identical;
    // on the H200 2 of 6 Q8_0 chains parted, at gaps the Q8_1-vs-Q8_0 activation rounding explains.)
    int32_t dr[2][16];
    float conf[16];
    float *step = xmalloc(sizeof(float) * (size_t)V), *cbase = xmalloc(sizeof(float) * (size_t)B * V);
    const double tie_tol = 2.0 * tol_l * max_abs(base[0], (size_t)B * V);
    int n_ties = 0, n_chains = 0;
    for (int round = 0; round < 2; round++) {
        const int n_past = round == 0 ? N_ROWS : 13;
        if (round == 1) {
            bn_dstate_truncate(cs, 7);
            bn_cuda_dstate_truncate(gs, 7);
            rc = bn_drafter_process(d, cs, taps + (size_t)7 * C * E, 6, 7, err, sizeof err);
            if (rc == 0) rc = bn_cuda_drafter_process(gs, taps + (size_t)7 * C * E, 6, 7, err, sizeof err);
            CHECK(rc == 0, "%s: re-process: %s", what, err);
        }
        for (int tok = 0; tok < 3; tok++) {
            const int32_t last = (int32_t)(tok * 131 + 5) % V;
            int n0 = bn_drafter_draft(d, cs, last, n_past, B, 0, dr[0], err, sizeof err);
            int n1 = bn_cuda_drafter_draft(gs, last, n_past, B, 0, dr[1], conf, err, sizeof err);
            CHECK(n0 == B && n1 == B, "%s: drafts after %d at n_past %d: CPU %d, device %d (want %d)", what, last,
                  n_past, n0, n1, B);
            int i = 0;
            while (i < B && dr[0][i] == dr[1][i]) i++;
            n_chains++;
            if (i < B) { // parted at row i: a near-tie in the CPU's own logits of that step?
                CHECK(bn_drafter_block(d, cs, last, n_past, B, NULL, cbase, err, sizeof err) == 0, "%s: %s", what, err);
                bn_drafter_step_logits(d, cs, cbase + (size_t)i * V, i == 0 ? last : dr[0][i - 1], step);
                const double gap = (double)step[dr[0][i]] - step[dr[1][i]];
                printf("%s: drafts after %d at n_past %d part at row %d: CPU %d, device %d, CPU logit gap %.3g "
                       "(tie bound %.3g)\n", what, last, n_past, i, dr[0][i], dr[1][i], gap, tie_tol);
                CHECK(gap >= 0 && gap <= tie_tol, "%s: drafts after %d at n_past %d differ at row %d beyond a tie", what,
                      last, n_past, i);
                n_ties++;
                if (i < 2) continue; // the p_min check below needs rows 0 and 1 to agree
            }
            // p_min between two confidences: both stop at the same row
            float p_min = 0.5f * (conf[0] + conf[1]);
            n0 = bn_drafter_draft(d, cs, last, n_past, B, p_min, dr[0], err, sizeof err);
            n1 = bn_cuda_drafter_draft(gs, last, n_past, B, p_min, dr[1], NULL, err, sizeof err);
            CHECK(n0 == n1 && n0 < B, "%s: p_min %.3f: CPU %d drafts, device %d", what, p_min, n0, n1);
        }
    }
    printf("%s: drafts identical in %d of %d chains (2 rounds x 3 anchors, n_max %d; the rest parted at near-ties), "
           "p_min truncation identical\n", what, n_chains - n_ties, n_chains, B);
    CHECK(2 * n_ties <= n_chains, "%s: %d of %d chains parted (near-ties should be rare)", what, n_ties, n_chains);
    if (tol_l <= 1e-5) CHECK(n_ties == 0, "%s: fp32 drafters must draft identically", what);
    free(step);
    free(cbase);
    for (int e = 0; e < 2; e++) free(g[e]), free(h[e]), free(base[e]);
    free(taps);
    bn_dstate_free(cs);
    bn_cuda_dstate_free(gs);
    bn_cuda_drafter_free(cd);
    bn_drafter_free(d);
}

// quantized: whether a product with weight w quantizes its input (the block pass fuses only those).
static int quantized(const bn_weight *w) { return w->type != BN_F32 && w->type != BN_F16 && w->type != BN_BF16; }

// fusion_check: the drafter's block pass with the fused Q8 producers (default) against a state created with
// BONSAI_CUDA_FUSE=0 (each product quantizes its own input): after processing N_ROWS tap rows, the block pass's
// h and base logits and two drafts (n_max = B; the second replays the draft graph captured by the first) must be
// BIT-IDENTICAL (the producers run quantize_act's arithmetic; the K/V the encoder injects are compared through the
// block pass that attends to them). The emulator counts the launches of the replayed draft: fused must save one per
// quantized q|k|v group, attn_output, ffn gate|up and ffn_down of every layer, and the head's (head_dim % 32 == 0
// in these drafters); and of the process call: one per layer (g quantized once for every layer's K/V).
static void fusion_check(const char *what, const bn_model *m, const char *dpath) {
    char err[512];
    bn_drafter *d = bn_drafter_load(dpath, m, err, sizeof err);
    if (!d) bn_die("%s: %s", what, err);
    const int E = d->cfg.n_embd, C = d->cfg.n_taps, V = d->cfg.n_vocab, B = d->cfg.block_size;
    bn_cuda_drafter *cd = bn_cuda_drafter_upload(d, err, sizeof err);
    if (!cd) bn_die("%s: device drafter: %s", what, err);
    bn_cuda_dstate *gs[2]; // 0: fused, 1: unfused
    gs[0] = bn_cuda_dstate_new(cd, N_CTX, err, sizeof err);
    setenv("BONSAI_CUDA_FUSE", "0", 1);
    gs[1] = gs[0] ? bn_cuda_dstate_new(cd, N_CTX, err, sizeof err) : NULL;
    unsetenv("BONSAI_CUDA_FUSE");
    if (!gs[1]) bn_die("%s: fusion states: %s", what, err);
    const size_t nt = (size_t)N_ROWS * C * E;
    float *taps = xmalloc(sizeof(float) * nt);
    bn_rng rng;
    bn_rng_seed(&rng, 7);
    for (size_t i = 0; i < nt; i++) taps[i] = 2.0f * bn_rng_uniform(&rng) - 1.0f;
    float *h[2], *base[2];
    int32_t dr[2][2][16] = {{{0}}}; // rows past B stay 0 in both
    uint64_t per_draft[2] = {0, 0}, per_process[2] = {0, 0};
    for (int e = 0; e < 2; e++) {
        h[e] = xmalloc(sizeof(float) * (size_t)B * E), base[e] = xmalloc(sizeof(float) * (size_t)B * V);
        const uint64_t p0 = launches_now();
        int rc = bn_cuda_drafter_process(gs[e], taps, N_ROWS, 0, err, sizeof err);
        per_process[e] = launches_now() - p0;
        if (rc == 0) rc = bn_cuda_drafter_block(gs[e], 77, N_ROWS, B, h[e], base[e], err, sizeof err);
        for (int k = 0; rc == 0 && k < 2; k++) {
            const uint64_t l0 = launches_now();
            rc = bn_cuda_drafter_draft(gs[e], 5 + 40 * k, N_ROWS, B, 0, dr[e][k], NULL, err, sizeof err) == B ? 0 : -1;
            if (k == 1) per_draft[e] = launches_now() - l0;
        }
        CHECK(rc == 0, "%s: %s state: %s", what, e ? "unfused" : "fused", err);
    }
    const bool same_h = !memcmp(h[0], h[1], sizeof(float) * (size_t)B * E);
    const bool same_base = !memcmp(base[0], base[1], sizeof(float) * (size_t)B * V);
    const bool same_drafts = !memcmp(dr[0], dr[1], sizeof dr[0]);
    int saved = quantized(&d->output);
    for (int il = 0; il < d->cfg.n_layer; il++)
        saved += quantized(&d->layers[il].attn_q) + quantized(&d->layers[il].attn_output) +
                 quantized(&d->layers[il].ffn_gate) + quantized(&d->layers[il].ffn_down);
    printf("%s: fused == unfused: h %s, base logits %s, drafts %s; launches per replayed draft: unfused %llu, "
           "fused %llu (%d fewer expected in the emulator); per process of %d rows: unfused %llu, fused %llu (%d fewer "
           "expected: g quantized once for every layer's K/V)\n", what, same_h ? "same" : "DIFFER",
           same_base ? "same" : "DIFFER", same_drafts ? "same" : "DIFFER", (unsigned long long)per_draft[1],
           (unsigned long long)per_draft[0], saved, N_ROWS, (unsigned long long)per_process[1],
           (unsigned long long)per_process[0], d->cfg.n_layer);
    CHECK(same_h && same_base && same_drafts, "%s: the fused block pass is not bit-identical to the unfused one", what);
#ifdef BONSAI_CUDA_EMU
    CHECK(saved > 0 && per_draft[0] > 0 && per_draft[0] + (uint64_t)saved == per_draft[1],
          "%s: fused draft launches %llu, unfused %llu, expected %d fewer", what, (unsigned long long)per_draft[0],
          (unsigned long long)per_draft[1], saved);
    CHECK(per_process[0] > 0 && per_process[0] + (uint64_t)d->cfg.n_layer == per_process[1],
          "%s: fused process launches %llu, unfused %llu, expected %d fewer", what, (unsigned long long)per_process[0],
          (unsigned long long)per_process[1], d->cfg.n_layer);
#endif
    for (int e = 0; e < 2; e++) free(h[e]), free(base[e]), bn_cuda_dstate_free(gs[e]);
    free(taps);
    bn_cuda_drafter_free(cd);
    bn_drafter_free(d);
}

// batch_check: bn_cuda_drafter_draft_multi over N_BATCH states of one device drafter (context rows 5..14 each, n_max
// B, 7 or 0, a MASK anchor: more rows than one 64-row pass and more states than one 8-state pass) drafts what
// bn_cuda_drafter_draft drafts for each state alone, twice (the second time from the kept graphs), and leaves every
// cache as it was; two entries on one state are refused.
static void batch_check(const char *what, const bn_model *m, const char *dpath) {
    enum { N_BATCH = 10 };
    char err[512];
    bn_drafter *d = bn_drafter_load(dpath, m, err, sizeof err);
    if (!d) bn_die("%s: %s", what, err);
    const int E = d->cfg.n_embd, C = d->cfg.n_taps, B = d->cfg.block_size;
    bn_cuda_drafter *cd = bn_cuda_drafter_upload(d, err, sizeof err);
    if (!cd) bn_die("%s: device drafter: %s", what, err);
    const size_t nt = (size_t)(5 + 2 * N_BATCH) * C * E; // state i: rows i .. i + 4 + i
    float *taps = xmalloc(sizeof(float) * nt);
    bn_rng rng;
    bn_rng_seed(&rng, 11);
    for (size_t i = 0; i < nt; i++) taps[i] = 2.0f * bn_rng_uniform(&rng) - 1.0f;
    bn_cuda_dstate *gs[N_BATCH];
    int32_t ids[N_BATCH], dr_multi[2][N_BATCH][16], dr_alone[N_BATCH][16], *outs[N_BATCH];
    int past[N_BATCH], n_max[N_BATCH], counts[2][N_BATCH], rows = 0;
    for (int i = 0; i < N_BATCH; i++) {
        gs[i] = bn_cuda_dstate_new(cd, N_CTX, err, sizeof err);
        if (!gs[i]) bn_die("%s: state: %s", what, err);
        past[i] = 5 + i;
        CHECK(bn_cuda_drafter_process(gs[i], taps + (size_t)i * C * E, past[i], 0, err, sizeof err) == 0, "%s: %s",
              what, err);
        ids[i] = i == 4 ? d->cfg.mask_token_id : (int32_t)(3 + 17 * i);
        n_max[i] = i == 6 ? 0 : i % 3 == 1 ? 7 : B;
        rows += i == 4 ? 0 : n_max[i] > B ? B : n_max[i];
    }
    int same = 0;
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < N_BATCH; i++) outs[i] = dr_multi[round][i];
        CHECK(bn_cuda_drafter_draft_multi(gs, ids, past, n_max, N_BATCH, 0.0f, outs, counts[round], err, sizeof err) == 0,
              "%s: draft_multi: %s", what, err);
    }
    for (int i = 0; i < N_BATCH; i++) {
        const int n = bn_cuda_drafter_draft(gs[i], ids[i], past[i], n_max[i], 0.0f, dr_alone[i], NULL, err, sizeof err);
        CHECK(bn_cuda_dstate_n_cache(gs[i]) == past[i], "%s: state %d: block rows stayed in the cache", what, i);
        bool eq = true;
        for (int round = 0; round < 2; round++)
            eq = eq && n == counts[round][i] && memcmp(dr_alone[i], dr_multi[round][i], sizeof(int32_t) * (size_t)n) == 0;
        CHECK(eq, "%s: state %d: batched %d / %d drafts, alone %d (first %d / %d vs %d)", what, i, counts[0][i],
              counts[1][i], n, dr_multi[0][i][0], dr_multi[1][i][0], dr_alone[i][0]);
        same += eq;
    }
    CHECK(counts[0][4] == 0 && counts[0][6] == 0 && counts[0][0] == B, "%s: MASK anchor / n_max 0 / full block: %d %d %d",
          what, counts[0][4], counts[0][6], counts[0][0]);
    printf("%s: batched drafting of %d states (%d block rows: 64-row passes of up to 8 states) == each alone in %d of %d, "
           "twice\n", what, N_BATCH, rows, same, N_BATCH);
    // 40 row-count pairs of two states: more keys than the 32 kept graphs (replacement), then the first ones again
    int lru_same = 0;
    for (int it = 0; it < 48; it++) {
        const int c = it % 40, nm[2] = {1 + c % 8, 1 + c / 8};
        int32_t *o2[2] = {dr_multi[0][0], dr_multi[0][1]};
        int cnt[2];
        CHECK(bn_cuda_drafter_draft_multi(gs, ids, past, nm, 2, 0.0f, o2, cnt, err, sizeof err) == 0, "%s: %s", what, err);
        bool eq = true;
        for (int i = 0; i < 2; i++) {
            int32_t alone[16];
            const int n = bn_cuda_drafter_draft(gs[i], ids[i], past[i], nm[i], 0.0f, alone, NULL, err, sizeof err);
            eq = eq && n == cnt[i] && memcmp(alone, o2[i], sizeof(int32_t) * (size_t)n) == 0;
        }
        lru_same += eq;
    }
    CHECK(lru_same == 48, "%s: %d of 48 batched drafts over 40 row-count pairs equal the states' own", what, lru_same);
    bn_cuda_dstate *two[2] = {gs[0], gs[0]};
    CHECK(bn_cuda_drafter_draft_multi(two, ids, past, n_max, 2, 0.0f, outs, counts[0], err, sizeof err) != 0 &&
              strstr(err, "share"), "%s: two entries on one state must fail (%s)", what, err);
    for (int i = 0; i < N_BATCH; i++) bn_cuda_dstate_free(gs[i]);
    free(taps);
    bn_cuda_drafter_free(cd);
    bn_drafter_free(d);
}

static int part_drafter(void) {
    char tpath[512], dpath[512], qpath[512], err[512];
    bn_model *m;
    bn_drafter *d0;
    fx_load_pair("cuda-dspark-", tpath, dpath, &m, &d0);
    bn_drafter_free(d0);
    // F32: fp32 math on both sides, only the summation order differs
    drafter_check("F32 drafter", m, dpath, 1e-5, 1e-5, 1e-5);
    // Q8_0: CPU rounds activations to Q8_0, the device to Q8_1 (cuda/mm.cuh): a few 1e-2
    bn_mkdrafter_params dp;
    bn_mkdrafter_defaults(&dp);
    dp.type = BN_Q8_0;
    if (bn_mkdrafter_write(&dp, fx_path(qpath, sizeof qpath, "cuda-dspark-q8.gguf"), err, sizeof err) != 0)
        bn_die("%s", err);
    drafter_check("Q8_0 drafter", m, qpath, 0.1, 0.1, 0.05);
    fusion_check("Q8_0 drafter", m, qpath);
    // block 16: the device block pass runs its products in two chunks of 8 columns (mm_block)
    dp.block_size = 16;
    if (bn_mkdrafter_write(&dp, qpath, err, sizeof err) != 0) bn_die("%s", err);
    drafter_check("Q8_0 drafter, block 16", m, qpath, 0.1, 0.1, 0.05);
    fusion_check("Q8_0 drafter, block 16", m, qpath);
    batch_check("Q8_0 drafter, block 16", m, qpath);
    bn_model_free(m);
    unlink(tpath);
    unlink(dpath);
    unlink(qpath);
    return test_done("cuda_dspark drafter");
}

static bool same_counters(const bn_spec_stats *a, const bn_spec_stats *b) {
    return a->n_steps == b->n_steps && a->n_rounds_spec == b->n_rounds_spec && a->n_drafted == b->n_drafted &&
           a->n_accept == b->n_accept && memcmp(a->acc_pos, b->acc_pos, sizeof a->acc_pos) == 0;
}

// What run() reads from the target state before freeing it (part "graph").
typedef struct {
    int64_t replays; // graph replays (bn_cuda_state_graph_counts)
    float *taps;     // [64][C][E]: its device tap buffer (bn_spec's 64 rows)
} run_probe;

// run: greedy speculative generation of n_gen tokens on the CUDA engine; returns the drafter's device.
// probe (NULL: not wanted): filled from the target state at the end.
static const char *run(bn_engine *e, const bn_drafter *d, bn_spec_params p, int n_gen, int32_t *gen,
                       bn_spec_stats *st, run_probe *probe) {
    char err[256];
    bn_engine_state *ts = bn_engine_state_new(e, N_CTX, err, sizeof err);
    if (!ts) bn_die("state: %s", err);
    bn_spec *sp = bn_spec_new_engine(ts, d, &p, err, sizeof err);
    if (!sp) bn_die("spec_new: %s", err);
    const char *dev = bn_spec_drafter_device(sp);
    double t0 = bn_time_ms();
    fx_spec_greedy(sp, prompt, N_PROMPT, n_gen, gen);
    *st = *bn_spec_stats_get(sp);
    printf("(%.0f ms) ", bn_time_ms() - t0);
    printf("%-28s drafter on %-4s: steps %3lld drafted %3lld accepted %3lld reruns %lld acc/pos %lld %lld %lld %lld\n",
           p.type == BN_SPEC_REPLAY ? "replay" : "dspark", dev, (long long)st->n_steps, (long long)st->n_drafted,
           (long long)st->n_accept, (long long)st->n_rerun, (long long)st->acc_pos[0], (long long)st->acc_pos[1],
           (long long)st->acc_pos[2], (long long)st->acc_pos[3]);
    if (probe) {
        bn_cuda_state *cs = (bn_cuda_state *)ts->st;
        bn_cuda_state_graph_counts(cs, &probe->replays, NULL);
        const size_t n = (size_t)64 * d->cfg.n_taps * d->cfg.n_embd;
        if (bn_cuda_state_tap_buffer_read(cs, probe->taps, n, err, sizeof err) != 0) bn_die("tap buffer: %s", err);
    }
    bn_spec_free(sp);
    bn_engine_state_free(ts);
    return dev;
}

static int first_diff(const int32_t *a, const int32_t *b, int n) {
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) return i;
    return -1;
}

// part_spec: what = "spec" (device drafter == plain greedy over N_GEN tokens), "counters" (device vs
// CPU drafter over N_GEN_COUNTERS tokens: same tokens, same §7 counters) or "replay" (forced acceptance).
// n_max 3: the emulator's F32 matvec for 4 columns costs half that of 5 (the test stays < 60 s).
#define N_GEN_COUNTERS 24
static int part_spec(const char *what) {
    char tpath[512], dpath[512], err[512];
    bn_model *m;
    bn_drafter *d;
    fx_load_pair("cuda-dspark-spec-", tpath, dpath, &m, &d);
    if (strcmp(what, "spec") == 0) { // a Q8_0 drafter here: the quantized device path in the loop (and
        bn_drafter_free(d);          // in the emulator its mmvq kernels cost less than the F32 ones)
        bn_mkdrafter_params dp;
        bn_mkdrafter_defaults(&dp);
        dp.type = BN_Q8_0;
        fx_drafter(&dp, dpath);
        if (!(d = bn_drafter_load(dpath, m, err, sizeof err))) bn_die("%s", err);
    }
    bn_engine *e = bn_engine_open(m, 99, 2, err, sizeof err);
    if (!e) bn_die("engine: %s", err);
    int32_t ref[N_GEN], gen[N_GEN + 64];
    const bool counters = strcmp(what, "counters") == 0;
    const int n_gen = counters ? N_GEN_COUNTERS : N_GEN;
    fx_engine_greedy(e, prompt, N_PROMPT, n_gen, ref);
    bn_spec_params p = {.type = BN_SPEC_DSPARK, .n_max = 3, .n_threads = 2};
    bn_spec_stats st[2];
    if (strcmp(what, "replay") == 0) { // forced acceptance with the drafter's work done
        bn_spec_params r = {.type = BN_SPEC_REPLAY, .n_max = 3, .n_threads = 2, .replay = ref, .n_replay = n_gen};
        const char *dev = run(e, d, r, n_gen, gen, &st[0], NULL);
        CHECK(dev && strcmp(dev, "CUDA") == 0, "replay: drafter on %s, not CUDA", dev ? dev : "-");
        int diff = first_diff(ref, gen, n_gen);
        CHECK(diff < 0, "replay: output differs from plain greedy at token %d", diff);
        CHECK(st[0].n_drafted > 0 && st[0].n_accept == st[0].n_drafted && st[0].ms_draft > 0,
              "replay: %lld of %lld drafts accepted (must be all), draft ms %.2f", (long long)st[0].n_accept,
              (long long)st[0].n_drafted, st[0].ms_draft);
    } else {
        const size_t bytes0 = bn_cuda_host_tap_bytes();
        const char *dev = run(e, d, p, n_gen, gen, &st[0], NULL);
        const size_t dev_bytes = bn_cuda_host_tap_bytes() - bytes0;
        printf("device drafter, device taps: %zu tap bytes over PCIe\n", dev_bytes);
        CHECK(dev_bytes == 0, "device taps: %zu tap bytes crossed between host and device (must be 0)", dev_bytes);
        CHECK(dev && strcmp(dev, "CUDA") == 0, "the drafter of a CUDA target runs on %s, not CUDA", dev ? dev : "-");
        int diff = first_diff(ref, gen, n_gen);
        CHECK(diff < 0, "device drafter: speculative output differs from plain greedy at token %d", diff);
        CHECK(st[0].n_rerun == 0 && st[0].n_accept < st[0].n_drafted, "device drafter: restores only, drafts rejected");
    }
    if (counters) {
        p.host_taps = true; // the device drafter fed through host memory (the path before device taps)
        size_t bytes0 = bn_cuda_host_tap_bytes();
        const char *dev = run(e, d, p, n_gen, gen, &st[1], NULL);
        const size_t host_bytes = bn_cuda_host_tap_bytes() - bytes0;
        printf("device drafter, host taps: %zu tap bytes over PCIe\n", host_bytes);
        CHECK(dev && strcmp(dev, "CUDA") == 0, "host_taps: drafter on %s", dev ? dev : "-");
        CHECK(first_diff(ref, gen, n_gen) < 0, "device drafter, host taps: output differs from plain greedy");
        CHECK(same_counters(&st[0], &st[1]), "device drafter, device vs host taps: different §7 counters");
        CHECK(host_bytes > 0, "host_taps: no tap bytes counted (the counter does not see the host path)");
        p.host_taps = false;
        p.cpu_drafter = true;
        dev = run(e, d, p, n_gen, gen, &st[1], NULL);
        CHECK(dev && strcmp(dev, "CPU") == 0, "cpu_drafter: drafter on %s", dev ? dev : "-");
        CHECK(first_diff(ref, gen, n_gen) < 0, "CPU drafter on a CUDA target: output differs from plain greedy");
        CHECK(same_counters(&st[0], &st[1]), "device and CPU drafter runs: different §7 counters");
    }
    bn_engine_free(e);
    bn_drafter_free(d);
    bn_model_free(m);
    unlink(tpath);
    unlink(dpath);
    return test_done(what);
}

// check_tap_rows: after n_max 0 generation, the target's device tap buffer (64 rows) holds the taps of the last
// 64 committed positions, one per row: every k = 0 step wrote its own row (behind the pending ones). Against
// a fresh batched pass over the committed tokens (host taps; bound 1e-3: the batched and one-token matmuls
// sum in other orders, a wrong row differs by O(1)).
static void check_tap_rows(bn_engine *e, const bn_drafter *d, const int32_t *gen, const float *buf) {
    char err[256];
    const int C = d->cfg.n_taps, E = d->cfg.n_embd, n_pos = N_PROMPT + N_GEN - 1; // prompt + gen[0..N_GEN-2]
    const size_t row = (size_t)C * E;
    int32_t tok[N_PROMPT + N_GEN];
    memcpy(tok, prompt, sizeof prompt);
    memcpy(tok + N_PROMPT, gen, sizeof(int32_t) * (N_GEN - 1));
    float *ref = xmalloc(sizeof(float) * row * n_pos);
    bn_engine_state *rs = bn_engine_state_new(e, N_CTX, err, sizeof err);
    bn_forward_out o = {.tap_layers = d->cfg.tap_layers, .n_taps = C, .taps = ref};
    if (!rs || bn_engine_forward(rs, tok, n_pos, &o, err, sizeof err) != 0) bn_die("reference taps: %s", err);
    bool seen[N_PROMPT + N_GEN] = {false};
    double worst = 0;
    int n_ok = 0;
    for (int r = 0; r < 64; r++) { // the position each row holds: the closest reference row
        int best = -1;
        double best_d = INFINITY;
        for (int p = 0; p < n_pos; p++) {
            const double dd = max_abs_diff(buf + (size_t)r * row, ref + (size_t)p * row, row);
            if (dd < best_d) best_d = dd, best = p;
        }
        const bool ok = best_d <= 1e-3 && best >= n_pos - 64 && !seen[best];
        CHECK(ok, "tap buffer row %d: closest committed position %d (|d| %.3g), want a new one of the last 64", r, best,
              best_d);
        seen[best] = true;
        worst = fmax(worst, best_d);
        n_ok += ok;
    }
    printf("n_max 0: the 64 tap buffer rows hold the taps of the last 64 committed positions (%d of 64 rows), max "
           "|d| %.2e vs a batched pass (bound 1e-3)\n", n_ok, worst);
    bn_engine_state_free(rs);
    free(ref);
}

// part_graph: the k = 0 step (DSpark with drafting off) stays on the captured-graph path of plain decoding,
// and so do the verify passes (<= 4 tokens): with n_max 0 and adaptive (n_max 3, the random drafter switches
// itself off) every step replays a captured graph of the target (taps into the device tap buffer, per-token
// device snapshots); both outputs == plain greedy. With n_max 0 the taps of the k = 0 steps (deferred for
// the drafter) sit in their own rows of the tap buffer (check_tap_rows). Adaptive again with argmax-only
// verification (params.no_step_logits: the argmax inside the captured passes): every step replays, the same
// tokens, and no logits bytes reach the host (bn_cuda_host_logit_bytes).
static int part_graph(void) {
    char tpath[512], dpath[512], err[512];
    bn_model *m;
    bn_drafter *d;
    fx_load_pair("cuda-dspark-graph-", tpath, dpath, &m, &d);
    bn_engine *e = bn_engine_open(m, 99, 2, err, sizeof err);
    if (!e) bn_die("engine: %s", err);
    int32_t ref[N_GEN], gen[N_GEN + 64];
    fx_engine_greedy(e, prompt, N_PROMPT, N_GEN, ref);
    const bn_spec_params ps[3] = {{.type = BN_SPEC_DSPARK, .n_max = 0, .n_threads = 2},
                                  {.type = BN_SPEC_DSPARK, .n_max = 3, .n_threads = 2, .adaptive = true},
                                  {.type = BN_SPEC_DSPARK, .n_max = 3, .n_threads = 2, .adaptive = true,
                                   .no_step_logits = true}};
    run_probe probe = {.taps = xmalloc(sizeof(float) * 64 * d->cfg.n_taps * d->cfg.n_embd)};
    for (int i = 0; i < 3; i++) {
        bn_spec_stats st;
        probe.replays = -1;
        const size_t bytes0 = bn_cuda_host_logit_bytes();
        run(e, d, ps[i], N_GEN, gen, &st, &probe);
        const size_t logit_bytes = bn_cuda_host_logit_bytes() - bytes0;
        const long long k0 = (long long)(st.n_steps - st.n_rounds_spec); // steps that verified no draft
        printf("%s: %lld steps, %lld without drafts, %lld graph replays (n_max now %d), host logits bytes %zu\n",
               i == 2 ? "adaptive argmax-only" : i ? "adaptive n_max 3" : "n_max 0", (long long)st.n_steps, k0,
               (long long)probe.replays, st.n_max_now, logit_bytes);
        CHECK(i == 2 ? logit_bytes == 0 : logit_bytes > 0, "run %d: %zu host logits bytes", i, logit_bytes);
        int diff = first_diff(ref, gen, N_GEN);
        CHECK(diff < 0, "%s: output differs from plain greedy at token %d", i ? "adaptive" : "n_max 0", diff);
        CHECK(probe.replays == st.n_steps, "%s: %lld graph replays for %lld steps (%lld without drafts): every step "
              "must replay", i ? "adaptive" : "n_max 0", (long long)probe.replays, (long long)st.n_steps, k0);
        // the random drafter is rejected: adaptive drafting switches off, leaving most steps at k = 0
        CHECK(i == 0 ? k0 == st.n_steps : 2 * k0 > st.n_steps, "%s: only %lld of %lld steps at k = 0",
              i ? "adaptive" : "n_max 0", k0, (long long)st.n_steps);
        if (i == 0 && st.n_steps == N_GEN) check_tap_rows(e, d, gen, probe.taps);
    }
    free(probe.taps);
    bn_engine_free(e);
    bn_drafter_free(d);
    bn_model_free(m);
    unlink(tpath);
    unlink(dpath);
    return test_done("graph");
}

// tap_pair: a target state and a device drafter state fed either through the target's device tap
// buffer (dev_taps != NULL) or through the host buffer host_taps.
typedef struct {
    bn_cuda_state *t;
    bn_cuda_dstate *g;
    float *dev_taps, *host_taps;
    size_t tap_bytes; // bn_cuda_host_tap_bytes moved by this pair's calls
} tap_pair;

// tap_pair_forward: n tokens through the pair's target (with per-token device snapshots when snaps) and
// their taps through the pair's drafter at the target's old position.
static void tap_pair_forward(tap_pair *tp, const bn_drafter *d, const int32_t *tok, int n,
                             bn_cuda_snapshot *const *snaps) {
    char err[256];
    const int pos0 = bn_cuda_state_pos(tp->t);
    const size_t bytes0 = bn_cuda_host_tap_bytes();
    bn_forward_out out = {.tap_layers = d->cfg.tap_layers, .n_taps = d->cfg.n_taps,
                          .taps = tp->dev_taps ? tp->dev_taps : tp->host_taps};
    int rc = snaps ? bn_cuda_forward_snaps(tp->t, tok, n, &out, snaps, err, sizeof err)
                   : bn_cuda_forward(tp->t, tok, n, &out, err, sizeof err);
    if (rc == 0) rc = tp->dev_taps ? bn_cuda_drafter_process_dev(tp->g, tp->dev_taps, n, pos0, err, sizeof err)
                                   : bn_cuda_drafter_process(tp->g, tp->host_taps, n, pos0, err, sizeof err);
    if (rc != 0) bn_die("tap pair (%s taps): %s", tp->dev_taps ? "device" : "host", err);
    tp->tap_bytes += bn_cuda_host_tap_bytes() - bytes0;
}

static int part_taps(void) {
    char tpath[512], dpath[512], err[512];
    bn_model *m;
    bn_drafter *d;
    fx_load_pair("cuda-dspark-taps-", tpath, dpath, &m, &d);
    const int E = d->cfg.n_embd, C = d->cfg.n_taps, V = d->cfg.n_vocab, B = d->cfg.block_size;
    const int ROWS = 64; // bn_spec's tap rows
    bn_cuda_model *cm = bn_cuda_model_upload(m, err, sizeof err);
    bn_cuda_drafter *cd = cm ? bn_cuda_drafter_upload(d, err, sizeof err) : NULL;
    if (!cd) bn_die("upload: %s", err);
    tap_pair tp[2]; // 0: device taps, 1: host taps
    bn_cuda_snapshot *snaps[2][8];
    for (int i = 0; i < 2; i++) {
        memset(&tp[i], 0, sizeof tp[i]);
        tp[i].t = bn_cuda_state_new(cm, N_CTX, BN_F16, err, sizeof err);
        tp[i].g = tp[i].t ? bn_cuda_dstate_new(cd, N_CTX, err, sizeof err) : NULL;
        if (!tp[i].g) bn_die("states: %s", err);
        for (int k = 0; k < B + 1; k++)
            if (!(snaps[i][k] = bn_cuda_snapshot_new(tp[i].t, err, sizeof err))) bn_die("snapshot: %s", err);
    }
    tp[0].dev_taps = bn_cuda_state_tap_buffer(tp[0].t, C, ROWS, err, sizeof err);
    CHECK(tp[0].dev_taps != NULL, "tap buffer: %s", err);
    CHECK(bn_cuda_state_tap_buffer(tp[0].t, C, 8, err, sizeof err) == tp[0].dev_taps,
          "a smaller request must return the same buffer");
    tp[1].host_taps = xmalloc(sizeof(float) * (size_t)ROWS * C * E);
    // too many rows for the device buffer: refused before anything runs
    int32_t many[65];
    for (int i = 0; i < 65; i++) many[i] = (i * 37 + 3) % V;
    bn_forward_out big = {.tap_layers = d->cfg.tap_layers, .n_taps = C, .taps = tp[0].dev_taps};
    CHECK(bn_cuda_forward(tp[0].t, many, 65, &big, err, sizeof err) != 0 && bn_cuda_state_pos(tp[0].t) == 0,
          "65 rows into a 64-row device tap buffer must fail and leave the state at 0");
    for (int i = 0; i < 2; i++) tap_pair_forward(&tp[i], d, prompt, N_PROMPT - 1, NULL);
    float *h[2], *base[2];
    for (int i = 0; i < 2; i++) {
        h[i] = xmalloc(sizeof(float) * (size_t)B * E);
        base[i] = xmalloc(sizeof(float) * (size_t)B * V);
    }
    int32_t id_last = prompt[N_PROMPT - 1];
    int rows = N_PROMPT - 1, n_same = 0;
    for (int round = 0; round < 4; round++) {
        int32_t dr[2][16];
        int nd[2];
        const int n_past = bn_cuda_state_pos(tp[0].t);
        for (int i = 0; i < 2; i++) {
            int rc = bn_cuda_drafter_block(tp[i].g, id_last, n_past, B, h[i], base[i], err, sizeof err);
            nd[i] = rc == 0 ? bn_cuda_drafter_draft(tp[i].g, id_last, n_past, B, 0, dr[i], NULL, err, sizeof err) : -1;
            if (nd[i] < 0) bn_die("draft: %s", err);
        }
        const bool same = nd[0] == nd[1] && memcmp(dr[0], dr[1], sizeof(int32_t) * (size_t)nd[0]) == 0 &&
                          memcmp(h[0], h[1], sizeof(float) * (size_t)B * E) == 0 &&
                          memcmp(base[0], base[1], sizeof(float) * (size_t)B * V) == 0;
        CHECK(same, "round %d: device-tap and host-tap drafters differ (drafts %d/%d, h or base logits)", round,
              nd[0], nd[1]);
        n_same += same;
        // verify-sized pass [id_last, drafts...] with per-token device snapshots, all rows committed
        int32_t tok[17];
        tok[0] = id_last;
        memcpy(tok + 1, dr[0], sizeof(int32_t) * (size_t)nd[0]);
        for (int i = 0; i < 2; i++) tap_pair_forward(&tp[i], d, tok, nd[0] + 1, snaps[i]);
        rows += nd[0] + 1;
        id_last = (int32_t)((dr[0][nd[0] - 1] * 7 + round) % V);
        if (id_last == d->cfg.mask_token_id) id_last = (id_last + 1) % V; // MASK as anchor drafts nothing
    }
    const size_t expect = 2 * (size_t)rows * C * E * sizeof(float); // down from the target, up to the drafter
    printf("taps: %d rows (prefill %d + 4 verify passes), drafts/h/base identical in %d of 4 rounds; host tap bytes: "
           "device path %zu, host path %zu (expected %zu)\n",
           rows, N_PROMPT - 1, n_same, tp[0].tap_bytes, tp[1].tap_bytes, expect);
    CHECK(tp[0].tap_bytes == 0, "device taps: %zu bytes crossed PCIe", tp[0].tap_bytes);
    CHECK(tp[1].tap_bytes == expect, "host taps: %zu bytes counted, expected %zu", tp[1].tap_bytes, expect);
    for (int i = 0; i < 2; i++) {
        for (int k = 0; k < B + 1; k++) bn_cuda_snapshot_free(snaps[i][k]);
        bn_cuda_dstate_free(tp[i].g);
        bn_cuda_state_free(tp[i].t);
        free(h[i]), free(base[i]);
    }
    free(tp[1].host_taps);
    bn_cuda_drafter_free(cd);
    bn_cuda_model_free(cm);
    bn_drafter_free(d);
    bn_model_free(m);
    unlink(tpath);
    unlink(dpath);
    return test_done("taps");
}

int main(int argc, char **argv) {
    char err[512];
    if (!bn_cuda_available(err, sizeof err)) {
        printf("SKIP: %s\n", err);
        return 77;
    }
    if (argc == 2 && strcmp(argv[1], "drafter") == 0) return part_drafter();
    if (argc == 2 && strcmp(argv[1], "taps") == 0) return part_taps();
    if (argc == 2 && strcmp(argv[1], "graph") == 0) return part_graph();
    if (argc == 2 && (strcmp(argv[1], "spec") == 0 || strcmp(argv[1], "counters") == 0 ||
                      strcmp(argv[1], "replay") == 0))
        return part_spec(argv[1]);
    fprintf(stderr, "usage: %s drafter|taps|spec|counters|replay|graph\n", argv[0]);
    return 1;
}
