// recipe/pipeline.c — the order of bonsai-antidoom's stages and the stages on the base model: its unpacked and
// requantized files, its held-out and validation figures, and the pairs mined from it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "base/progress.h"
#include "base/util.h"
#include "quantize/quantize.h"
#include "recipe/mining.h"
#include "recipe/recipe.h"
#include "recipe/report.h"
#include "recipe/run.h"

static double file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (double)st.st_size : 0;
}

// base_quantize_params: bonsai-quantize's settings for the base files (the run's threads, no log, requantizing).
static bn_quantize_params base_quantize_params(const bn_recipe_run *r) {
    bn_quantize_params p = bn_quantize_params_default();
    p.n_threads = r->c->threads;
    p.log = NULL;
    p.allow_requantize = true;
    return p;
}

// make_lowbit_bases: the requantized Q1_0 / Q2_0 bases of the kinds asked (all of them when fresh, else only the
// missing ones: a kind added on resume); 0 or -1.
static int make_lowbit_bases(bn_recipe_run *r, const char *f16, bool fresh, char *err, size_t errlen) {
    bn_quantize_params p = base_quantize_params(r);
    p.output_type = bn_recipe_output_type(r->c);
    const char *types[] = {"Q1_0", "Q2_0"};
    for (int i = 0; i < 2; i++) {
        const char *out = r->base[BN_KIND_Q1_0 + i];
        if (!(r->kinds & (1 << (BN_KIND_Q1_0 + i))) || (!fresh && file_size(out) > 0)) continue;
        p.type = types[i];
        if (bn_quantize_file(&p, f16, out, err, errlen)) return -1;
    }
    return 0;
}

// stage_base: the F16 unpack of the model and its requantized Q1_0 / Q2_0 (for the kinds asked); 0 or -1.
static int stage_base(bn_recipe_run *r, char *err, size_t errlen) {
    char f16[BN_PATH];
    bn_run_path(r, f16, sizeof f16, "base-f16.gguf");
    snprintf(r->base[BN_KIND_ADAPTER], BN_PATH, "%s", f16); // evaluated through the F16 merge: its base, the unpack
    snprintf(r->base[BN_KIND_F16], BN_PATH, "%s", f16);
    bn_run_path(r, r->base[BN_KIND_Q1_0], BN_PATH, "base-q1_0.gguf");
    bn_run_path(r, r->base[BN_KIND_Q2_0], BN_PATH, "base-q2_0.gguf");
    uint64_t sig = r->sig_base ^ r->sig_head;
    if (bn_run_stage(r, "base", sig, "the model unpacked to F16 and requantized (Q1_0, Q2_0)"))
        return make_lowbit_bases(r, f16, false, err, errlen);
    bn_quantize_params p = base_quantize_params(r);
    p.type = "F16";
    if (bn_quantize_file(&p, r->c->model, f16, err, errlen) || make_lowbit_bases(r, f16, true, err, errlen)) return -1;
    return bn_run_stage_done(r, "base", sig, json_object(), err, errlen) ? 0 : -1;
}

// base_needed: true when kind k's same-type base is evaluated (a kind asked uses it).
static bool base_needed(const bn_recipe_run *r, bn_recipe_kind k) {
    if (k == BN_KIND_F16) return r->kinds & (1 << BN_KIND_F16 | 1 << BN_KIND_ADAPTER);
    return k != BN_KIND_ADAPTER && (r->kinds & (1 << k));
}

// stage_eval_base: held-out and validation figures of each base that a kind asked compares with; 0 or -1.
static int stage_eval_base(bn_recipe_run *r, char *err, size_t errlen) {
    const bn_recipe_cfg *c = r->c;
    for (int k = BN_KIND_F16; k < BN_KIND_COUNT; k++) {
        if (!base_needed(r, (bn_recipe_kind)k)) continue;
        char name[64], what[128], js[BN_PATH];
        uint64_t head = k == BN_KIND_F16 ? 0 : r->sig_head; // a low-bit base's output.weight type
        snprintf(name, sizeof name, "eval-base-%s", bn_recipe_kind_name(k));
        snprintf(what, sizeof what, "held-out figures of the %s base", bn_recipe_kind_name(k));
        uint64_t sig = bn_sig(r->sig_val, name) ^ head;
        sig = bn_sig_file(bn_sig_file(bn_sig_file(sig, c->heldout_prompts), c->heldout_text), c->unseen_prompts);
        sig = bn_sig_file(sig, c->other_prompts);
        if (!bn_run_stage(r, name, sig, what)) {
            json_t *res = bn_run_eval_model(r, name + strlen("eval-"), r->base[k], NULL, file_size(r->base[k]), err,
                                            errlen);
            if (!res || !bn_run_stage_done(r, name, sig, res, err, errlen)) return -1;
        }
        snprintf(name, sizeof name, "val-base-%s", bn_recipe_kind_name(k));
        snprintf(what, sizeof what, "validation figures of the %s base (data/val)", bn_recipe_kind_name(k));
        json_t *v = bn_run_stage(r, name, bn_sig(r->sig_val, name) ^ head, what);
        if (!v) {
            bn_loop_stats st;
            bn_run_path(r, js, sizeof js, "val-base-%s.json", bn_recipe_kind_name(k));
            if (bn_measure_loops(r->base[k], c->val_loop_prompts, c->val_max, &r->g, "validation prompts", js, NULL,
                                 &st, NULL, err, errlen))
                return -1;
            double ppl = bn_measure_ppl(r->base[k], c->val_text, 128, &r->g, err, errlen);
            if (ppl < 0) return -1;
            v = bn_run_stage_done(r, name, bn_sig(r->sig_val, name) ^ head,
                                  json_pack("{s:f,s:f}", "val_loop", st.loop_rate, "val_ppl", ppl), err, errlen);
            if (!v) return -1;
        }
        r->vb[k].loop = json_real_value(json_object_get(v, "val_loop"));
        r->vb[k].ppl = json_real_value(json_object_get(v, "val_ppl"));
        fprintf(stderr, "  %s base on validation: loop rate %.1f %%, perplexity %.3f\n", bn_recipe_kind_name(k),
                100 * r->vb[k].loop, r->vb[k].ppl);
    }
    r->vb[BN_KIND_ADAPTER] = r->vb[BN_KIND_F16];
    return 0;
}

// stage_mine: round 1's pairs (the base's own loops on the mining prompts, regularised) and the validation pairs;
// 0 or -1.
static int stage_mine(bn_recipe_run *r, char *err, size_t errlen) {
    const bn_recipe_cfg *c = r->c;
    char raw[BN_PATH];
    bn_run_path(r, raw, sizeof raw, "pairs-r1-raw.jsonl");
    bn_run_path(r, r->pairs_r1, sizeof r->pairs_r1, "pairs-r1.jsonl");
    bn_run_path(r, r->pairs_val, sizeof r->pairs_val, "pairs-val.jsonl");
    int per_file = c->mine_max > 0 ? (c->mine_max + c->n_mine_prompts - 1) / c->n_mine_prompts : 0;
    if (!bn_run_stage(r, "mine-r1", r->sig_mine1, "the base's loops on the mining prompts, primed and sampled, "
                                                  "regularised")) {
        bn_mine_counts mc;
        if (bn_recipe_mine(c, c->model, c->mine_prompts, c->n_mine_prompts, per_file, "train", c->mine_seed,
                           1000 + c->mine_seed, raw, &mc, err, errlen))
            return -1;
        fprintf(stderr, "  %d prompts x 2 modes: %d loops, %d pairs\n", mc.n_prompts, mc.n_loops, mc.n_pairs);
        int n = bn_recipe_regularise(c, raw, r->pairs_r1, err, errlen);
        if (n < 0 || !bn_run_stage_done(r, "mine-r1", r->sig_mine1,
                                        json_pack("{s:i,s:i,s:i,s:i}", "prompts", mc.n_prompts, "loops", mc.n_loops,
                                                  "pairs_raw", mc.n_pairs, "pairs", n),
                                        err, errlen))
            return -1;
    }
    uint64_t sig = bn_sig(r->sig_val, "mine-val");
    json_t *done = bn_run_stage(r, "mine-val", sig, "validation pairs: the base's loops on the validation prompts "
                                                   "(never trained on)");
    if (!done) {
        bn_mine_counts mc;
        const char *files[] = {c->val_pair_prompts};
        if (bn_recipe_mine(c, c->model, files, 1, c->val_max, "heldout", 2000 + c->mine_seed, 3000 + c->mine_seed,
                           r->pairs_val, &mc, err, errlen))
            return -1;
        fprintf(stderr, "  %d validation pairs%s\n", mc.n_pairs,
                mc.n_pairs ? "" : " (chosen_win is not measured: more validation prompts would give some)");
        if (!(done = bn_run_stage_done(r, "mine-val", sig, json_pack("{s:i}", "pairs", mc.n_pairs), err, errlen)))
            return -1;
    }
    r->n_val_pairs = (int)json_integer_value(json_object_get(done, "pairs"));
    return 0;
}

// signatures: the chains every stage's signature starts from.
static void signatures(bn_recipe_run *r) {
    const bn_recipe_cfg *c = r->c;
    char buf[512];
    r->sig_base = bn_sig_file(bn_sig(0, "base"), c->model);
    const char *head = bn_recipe_output_type(c);
    r->sig_head = head ? bn_sig(bn_sig(0, "output.weight"), head) : 0;
    snprintf(buf, sizeof buf, "gen %d %d %d", c->n_predict, c->thinking, c->n_ctx);
    r->sig_gen = bn_sig(r->sig_base, buf);
    snprintf(buf, sizeof buf, "val %d %llu%s", c->val_max, (unsigned long long)c->mine_seed,
             c->mine_spread ? " spread" : ""); // the validation pairs are mined the same way
    r->sig_val = bn_sig_file(bn_sig_file(bn_sig_file(bn_sig(r->sig_gen, buf), c->val_pair_prompts),
                                         c->val_loop_prompts), c->val_text);
    snprintf(buf, sizeof buf, "mine%s %d %d %d %s %g %llu", c->mine_spread ? " spread" : "", c->mine_max,
             c->prime_repeats, c->prime_prefix_tokens, c->temps, c->headroom, (unsigned long long)c->mine_seed);
    r->sig_mine1 = bn_sig(r->sig_gen, buf);
    for (int i = 0; i < c->n_mine_prompts; i++) r->sig_mine1 = bn_sig_file(r->sig_mine1, c->mine_prompts[i]);
}

// plan: the stages a run takes when every round runs (the ETA's denominator).
static int plan(const bn_recipe_cfg *c, int kinds) {
    int n = 3, n_kinds = 0; // base, mine-r1, mine-val
    for (int k = 0; k < BN_KIND_COUNT; k++) {
        if (!(kinds & (1 << k))) continue;
        n_kinds++;
        if (k != BN_KIND_F16 || !(kinds & (1 << BN_KIND_ADAPTER))) // f16 shares the adapter's candidates
            n += c->rounds * c->seeds * c->n_tethers[k] + (c->rounds - 1); // candidates, on-policy mining
        n++; // the output
    }
    return n + 2 * (n_kinds + 1);
}

int bn_recipe_main(const bn_recipe_cfg *c, char *err, size_t errlen) {
    bn_recipe_run r = {.c = c, .t0 = bn_time_ms(),
                       .g = {.n_predict = c->n_predict, .thinking = c->thinking, .n_ctx = c->n_ctx,
                             .threads = c->threads, .n_gpu_layers = c->n_gpu_layers}};
    if ((r.kinds = bn_recipe_parse_kinds(c->kinds, err, errlen)) < 0) return -1;
    if (!(r.man = bn_manifest_open(c->out_dir, err, errlen))) return -1;
    char *cj = bn_recipe_cfg_json(c);
    int rc = bn_manifest_set_config(r.man, cj, err, errlen);
    free(cj);
    r.stage_plan = plan(c, r.kinds);
    signatures(&r);
    if (rc == 0) rc = stage_base(&r, err, errlen);
    if (rc == 0) rc = stage_mine(&r, err, errlen); // first: the bases' chosen_win reads the validation pairs
    if (rc == 0) rc = stage_eval_base(&r, err, errlen);
    for (int k = 0; k < BN_KIND_COUNT && rc == 0; k++)
        if (r.kinds & (1 << k)) rc = bn_run_kind_rounds(&r, (bn_recipe_kind)k, err, errlen);
    for (int k = 0; k < BN_KIND_COUNT && rc == 0; k++)
        if (r.kinds & (1 << k)) rc = bn_run_output(&r, (bn_recipe_kind)k, err, errlen);
    if (rc == 0) rc = bn_recipe_report(&r, err, errlen);
    if (rc == 0) {
        char el[32];
        fprintf(stderr, "bonsai-antidoom: done in %s; %s/report.md, %s/report.html\n",
                bn_format_duration(el, sizeof el, (bn_time_ms() - r.t0) / 1000), c->out_dir, c->out_dir);
    }
    bn_manifest_free(r.man);
    return rc;
}
