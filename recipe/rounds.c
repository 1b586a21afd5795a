// recipe/rounds.c — the candidates of one output kind in on-policy rounds, and the pick (docs/antidoom.md §18):
//   round r: the train pairs of every round so far (round 1: the base's; round r > 1: mined with round r-1's pick on
//            the mining prompts), balanced (recipe/mining.h); one candidate per seed x λ_tether, each from the base;
//            the round's pick = the first candidate in the order of recipe/candidate.h (validation shortfall, then
//            |drift|); stop when the pick meets the goals on validation, when mining finds no new pair, or after
//            the last round; the kind's pick = the best round pick in the same order.
// Nothing here reads the held-out set.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/util.h"
#include "recipe/mining.h"
#include "recipe/run.h"
#include "train/device.h"

// mine_round: stage mine-K-rR: the previous pick's loops on the mining prompts, regularised, into out; the pairs
// mined (0: none, the rounds stop), or -1 (err).
static int mine_round(bn_recipe_run *r, bn_recipe_kind k, int round, const char *prev_model, uint64_t sig,
                      const char *out, char *err, size_t errlen) {
    const bn_recipe_cfg *c = r->c;
    char name[64], raw[BN_PATH], what[256];
    snprintf(name, sizeof name, "mine-%s-r%d", bn_recipe_kind_name(k), round);
    snprintf(what, sizeof what, "on-policy pairs: the loops of round %d's pick on the mining prompts", round - 1);
    json_t *done = bn_run_stage(r, name, sig, what);
    if (done) return (int)json_integer_value(json_object_get(done, "pairs"));
    bn_run_path(r, raw, sizeof raw, "pairs-%s-r%d-raw.jsonl", bn_recipe_kind_name(k), round);
    int per_file = c->mine_max > 0 ? (c->mine_max + c->n_mine_prompts - 1) / c->n_mine_prompts : 0;
    bn_mine_counts mc;
    if (bn_recipe_mine(c, prev_model, c->mine_prompts, c->n_mine_prompts, per_file, "train", c->mine_seed + 10 * round,
                       1000 + c->mine_seed + 10 * round, raw, &mc, err, errlen))
        return -1;
    fprintf(stderr, "  %d prompts x 2 modes: %d loops, %d pairs\n", mc.n_prompts, mc.n_loops, mc.n_pairs);
    int n = 0;
    if (mc.n_pairs > 0 && (n = bn_recipe_regularise(c, raw, out, err, errlen)) < 0) return -1;
    json_t *res = json_pack("{s:i,s:i,s:i,s:i}", "prompts", mc.n_prompts, "loops", mc.n_loops, "pairs_raw",
                            mc.n_pairs, "pairs", n);
    return bn_run_stage_done(r, name, sig, res, err, errlen) ? n : -1;
}

// candidate: stage cand-LABEL: trains and scores one candidate (or takes the finished one); 0 or -1 (err).
static int candidate(bn_recipe_run *r, bn_candidate *cd, const char *pairs, uint64_t chain, char *err, size_t errlen) {
    bn_candidate_label(cd);
    char name[128], what[256];
    snprintf(name, sizeof name, "cand-%s", cd->label);
    snprintf(what, sizeof what, "train %s candidate (round %d, seed %llu, tether %g), score it on validation",
             bn_recipe_kind_name(cd->kind), cd->round, (unsigned long long)cd->seed, cd->tether);
    uint64_t sig = bn_sig(chain, cd->label);
    json_t *done = bn_run_stage(r, name, sig, what);
    if (done && bn_candidate_from_json(done, cd) == 0) return 0;
    if (bn_candidate_train(r->c, r->c->out_dir, r->c->model, r->base[cd->kind], pairs,
                           r->n_val_pairs > 0 ? r->pairs_val : NULL, &r->vb[cd->kind], &r->g, cd, err, errlen))
        return -1;
    return bn_run_stage_done(r, name, sig, bn_candidate_json(cd), err, errlen) ? 0 : -1;
}

// run_round: the candidates of round `round` on pairs; the best into *best; 0 or -1 (err).
static int run_round(bn_recipe_run *r, bn_recipe_kind k, int round, const char *pairs, uint64_t chain,
                     bn_candidate *best, char *err, size_t errlen) {
    const bn_recipe_cfg *c = r->c;
    bool have = false;
    for (int t = 0; t < c->n_tethers[k]; t++)
        for (int s = 0; s < c->seeds; s++) {
            bn_candidate cd = {.kind = k, .round = round, .seed = c->seed + (uint64_t)s, .tether = c->tethers[k][t]};
            if (candidate(r, &cd, pairs, chain, err, errlen)) return -1;
            fprintf(stderr, "  %s: %lld steps%s%s, validation loop rate %.1f %%, drift %+.2f %%, chosen_win %.3f -> "
                            "shortfall %.4f\n",
                    cd.label, (long long)cd.steps, cd.early_stopped ? " (early stop)" : "",
                    cd.stalled ? " (chosen_win did not move)" : "", 100 * cd.val_loop, cd.val_drift, cd.val_cw,
                    cd.score);
            r->cands = xrealloc(r->cands, (size_t)(r->n_cands + 1) * sizeof *r->cands);
            r->cands[r->n_cands++] = cd;
            if (!have || bn_candidate_better(&cd, best)) *best = cd, have = true;
        }
    return 0;
}

int bn_run_kind_rounds(bn_recipe_run *r, bn_recipe_kind k, char *err, size_t errlen) {
    const bn_recipe_cfg *c = r->c;
    if (k == BN_KIND_F16 && (r->kinds & (1 << BN_KIND_ADAPTER))) {
        // the f16 output is the adapter merged into the F16 unpack: the adapter kind's candidates (each one's
        // LABEL.gguf is that merge) and its pick serve both
        snprintf(r->pick[k], sizeof r->pick[k], "%s", r->pick[BN_KIND_ADAPTER]);
        r->sig_kind[k] = r->sig_kind[BN_KIND_ADAPTER];
        r->n_rounds[k] = r->n_rounds[BN_KIND_ADAPTER];
        snprintf(r->stop_why[k], sizeof r->stop_why[k], "the adapter kind's candidates, merged");
        return 0;
    }
    const char *kn = bn_recipe_kind_name(k);
    char buf[512], pairs[BN_PATH], prev[BN_PATH];
    static char files[64][BN_PATH]; // 256 KiB: not on the stack
    // a kind trained on the GPU with bf16 GEMMs trains differently: its signature says so (fp32 GPU training is the
    // CPU's arithmetic)
    const bool bf16 = c->n_gpu_layers > 0 && bn_recipe_train_gemm(c) == BN_TRAIN_GEMM_BF16;
    snprintf(buf, sizeof buf, "train %g %d %d %g %s %g %d %d %g %g %s%s", c->lr, c->rank, c->epochs, c->early_stop,
             c->targets, c->lambda_nt, c->tether_ctx, c->tether_batch, c->goal_cut, c->goal_drift, kn,
             bf16 ? " gemm bf16" : "");
    uint64_t chain = bn_sig_file(bn_sig(r->sig_mine1 ^ r->sig_val, buf), c->tether_text);
    if (k == BN_KIND_Q1_0 || k == BN_KIND_Q2_0) chain ^= r->sig_head; // their STE and merges use it
    snprintf(files[0], BN_PATH, "%s", r->pairs_r1);
    bn_candidate best = {0};
    bool have = false;
    int nr = c->rounds < 64 ? c->rounds : 64;
    snprintf(r->stop_why[k], sizeof r->stop_why[k], "after %d rounds", nr);
    r->round_pairs[k][0] = -1;
    for (int round = 1; round <= nr; round++) {
        if (round > 1) {
            bn_run_path(r, files[round - 1], BN_PATH, "pairs-%s-r%d.jsonl", kn, round);
            int n = mine_round(r, k, round, prev, chain, files[round - 1], err, errlen);
            if (n < 0) return -1;
            r->round_pairs[k][round - 1] = n;
            if (n == 0) {
                snprintf(r->stop_why[k], sizeof r->stop_why[k], "round %d found no new pair", round);
                break;
            }
        }
        bn_run_path(r, pairs, sizeof pairs, "pairs-%s-r%d-train.jsonl", kn, round);
        const char *fp[64];
        for (int i = 0; i < round; i++) fp[i] = files[i];
        if (bn_recipe_round_pairs(fp, round, r->pairs_val, pairs, err, errlen) < 0) return -1;
        bn_candidate rb;
        if (run_round(r, k, round, pairs, chain, &rb, err, errlen)) return -1;
        r->n_rounds[k] = round;
        fprintf(stderr, "  round %d pick: %s (shortfall %.4f, validation drift %+.2f %%)\n", round, rb.label, rb.score,
                rb.val_drift);
        if (!have || bn_candidate_better(&rb, &best)) best = rb, have = true;
        bn_run_path(r, prev, sizeof prev, "%s.gguf", rb.label);
        chain = bn_sig(chain, rb.label);
        if (rb.score == 0) {
            snprintf(r->stop_why[k], sizeof r->stop_why[k], "round %d's pick met the goals on validation", round);
            break;
        }
    }
    snprintf(r->pick[k], sizeof r->pick[k], "%s", best.label);
    r->sig_kind[k] = bn_sig(chain, best.label);
    fprintf(stderr, "  %s pick: %s (%s)\n", kn, best.label, r->stop_why[k]);
    return 0;
}
