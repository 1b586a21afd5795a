// recipe/candidate.c — train, merge and score one bonsai-antidoom candidate.
#include "recipe/candidate.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/util.h"
#include "core/model.h"
#include "core/tokenizer.h"
#include "train/merge.h"
#include "train/trainer.h"

void bn_candidate_label(bn_candidate *cd) {
    snprintf(cd->label, sizeof cd->label, "%s-r%d-s%llu-t%g", bn_recipe_kind_name(cd->kind), cd->round,
             (unsigned long long)cd->seed, cd->tether);
}

double bn_candidate_score(const bn_recipe_cfg *c, const bn_val_base *vb, double loop, double drift) {
    double cut = vb->loop > 0 ? (vb->loop - loop) / vb->loop : 0;
    return fmax(0, c->goal_cut - cut) + fmax(0, fabs(drift) - c->goal_drift) / 10;
}

bool bn_candidate_better(const bn_candidate *a, const bn_candidate *b) {
    if (!b) return true;
    if (a->score != b->score) return a->score < b->score;
    return fabs(a->val_drift) < fabs(b->val_drift);
}

// train_opts: the trainer's options for cd (the tether tokens and paths are the caller's).
static bn_ftpo_train_opts train_opts(const bn_recipe_cfg *c, const bn_model *m, const bn_candidate *cd, char *err,
                                     size_t errlen, int *ok) {
    bn_ftpo_train_opts t = bn_ftpo_train_defaults();
    float lr;
    int rank;
    bn_ftpo_size_preset(bn_model_n_params(m), &lr, &rank);
    t.lr = c->lr > 0 ? (float)c->lr : lr;
    t.rank = c->rank > 0 ? c->rank : rank;
    t.alpha = 0; // the rank: scale 1
    int mask = bn_lora_parse_targets(c->targets, err, errlen);
    *ok = mask > 0;
    t.targets = mask > 0 ? (unsigned)mask : 0;
    t.epochs = c->epochs;
    t.batch = 4;
    t.grad_accum = 1;
    t.seed = cd->seed;
    t.early_stop = (float)c->early_stop;
    t.loss = bn_ftpo_cfg_antidoom();
    t.loss.lambda_nt = (float)c->lambda_nt;
    t.ste_type = cd->kind == BN_KIND_Q1_0 ? "Q1_0" : cd->kind == BN_KIND_Q2_0 ? "Q2_0" : NULL;
    t.ste_keep_scales = cd->kind == BN_KIND_Q2_0; // a Q2_0 block's scale is its max |w| (docs/antidoom.md §12)
    t.ste_output_type = t.ste_type ? bn_recipe_output_type(c) : NULL;
    t.n_gpu_layers = c->n_gpu_layers;
    t.train_gemm = bn_recipe_train_gemm(c) == BN_TRAIN_GEMM_F32 ? BN_TRAIN_GEMM_F32 : BN_TRAIN_GEMM_BF16;
    t.lambda_tether = (float)cd->tether;
    t.tether_ctx = c->tether_ctx;
    t.tether_batch = c->tether_batch;
    t.quiet = true;
    t.progress = true;
    return t;
}

// train_one: the training run of cd on the model at base; 0 or -1 (err).
static int train_one(const bn_recipe_cfg *c, const char *base, const char *pairs, const char *adapter,
                     const char *log, bn_candidate *cd, char *err, size_t errlen) {
    bn_model *m = bn_model_load(base, err, errlen);
    bn_tokenizer *tok = m ? bn_tokenizer_from_gguf(m->gguf, err, errlen) : NULL;
    bn_train_rows *rows = tok ? bn_train_rows_load(pairs, tok, m->cfg.n_vocab, 6000, err, errlen) : NULL;
    size_t n_text = 0;
    char *text = rows && cd->tether > 0 ? bn_read_file(c->tether_text, &n_text, err, errlen) : NULL;
    int rc = -1, ok = 0;
    if (rows && (cd->tether <= 0 || text)) {
        bn_ftpo_train_opts t = train_opts(c, m, cd, err, errlen, &ok);
        int32_t *tt = NULL;
        if (text) t.n_tether_tokens = bn_tokenize(tok, text, n_text, false, false, &tt);
        t.tether_tokens = tt;
        t.out_adapter = adapter;
        t.log_jsonl = log;
        bn_ftpo_train_result res;
        if (ok && (rc = bn_ftpo_train(m, rows, &t, &res, err, errlen)) == 0) {
            cd->steps = res.steps;
            cd->early_stopped = res.early_stopped;
            cd->stalled = res.stalled;
            cd->cw_first = res.first_chosen_win;
            cd->cw_last = res.chosen_win_avg;
        }
        free(tt);
    }
    free(text);
    bn_train_rows_free(rows);
    bn_tokenizer_free(tok);
    bn_model_free(m);
    return rc;
}

// merge_one: the adapter into base_f16 as cd's kind writes it; 0 or -1 (err).
static int merge_one(const bn_recipe_cfg *c, const char *base_f16, const char *adapter, const char *out,
                     bn_recipe_kind kind, char *err, size_t errlen) {
    bn_lora *l = bn_lora_load_gguf(adapter, err, errlen);
    if (!l) return -1;
    int rc = kind == BN_KIND_Q1_0 || kind == BN_KIND_Q2_0
                 ? bn_lora_merge_requant(base_f16, l, 1.0f, kind == BN_KIND_Q1_0 ? "q1_0" : "q2_0",
                                         bn_recipe_output_type(c), kind == BN_KIND_Q2_0, out, NULL, err, errlen)
                 : bn_lora_merge_gguf(base_f16, l, 1.0f, BN_MERGE_F16, out, NULL, err, errlen);
    bn_lora_free(l);
    return rc;
}

int bn_candidate_train(const bn_recipe_cfg *c, const char *dir, const char *base, const char *base_f16,
                       const char *pairs, const char *val_pairs, const bn_val_base *vb, const bn_measure_gen *g,
                       bn_candidate *cd, char *err, size_t errlen) {
    char adapter[4096], model[4096], log[4096], js[4096];
    bn_candidate_label(cd);
    snprintf(adapter, sizeof adapter, "%s/%s.adapter.gguf", dir, cd->label);
    snprintf(model, sizeof model, "%s/%s.gguf", dir, cd->label);
    snprintf(log, sizeof log, "%s/%s.log.jsonl", dir, cd->label);
    snprintf(js, sizeof js, "%s/%s.val.json", dir, cd->label);
    // adapter kind: evaluated through its F16 merge (base + adapter as the engine would compute it) until the engine
    // applies --lora adapters itself
    if (train_one(c, base, pairs, adapter, log, cd, err, errlen) ||
        merge_one(c, base_f16, adapter, model, cd->kind, err, errlen))
        return -1;
    bn_loop_stats st;
    if (bn_measure_loops(model, c->val_loop_prompts, c->val_max, g, "validation prompts", js, NULL, &st, NULL, err,
                         errlen))
        return -1;
    cd->val_loop = st.loop_rate;
    if ((cd->val_ppl = bn_measure_ppl(model, c->val_text, 128, g, err, errlen)) < 0) return -1;
    cd->val_drift = 100 * (cd->val_ppl - vb->ppl) / vb->ppl;
    cd->val_cw = -1; // no validation pairs: not measured
    if (val_pairs && (cd->val_cw = bn_measure_chosen_win(model, NULL, val_pairs, err, errlen)) < 0) return -1;
    cd->score = bn_candidate_score(c, vb, cd->val_loop, cd->val_drift);
    return 0;
}

json_t *bn_candidate_json(const bn_candidate *cd) {
    return json_pack("{s:s,s:i,s:I,s:f,s:s,s:I,s:b,s:b,s:f,s:f,s:f,s:f,s:f,s:f,s:f}", "kind",
                     bn_recipe_kind_name(cd->kind), "round", cd->round, "seed", (json_int_t)cd->seed, "tether",
                     cd->tether, "label", cd->label, "steps", (json_int_t)cd->steps, "early_stopped", cd->early_stopped,
                     "stalled", cd->stalled, "cw_first", cd->cw_first, "cw_last", cd->cw_last, "val_loop", cd->val_loop,
                     "val_ppl", cd->val_ppl, "val_drift", cd->val_drift, "val_cw", cd->val_cw, "score", cd->score);
}

int bn_candidate_from_json(const json_t *j, bn_candidate *cd) {
    const char *kind = NULL, *label = NULL;
    json_int_t seed = 0, steps = 0;
    int early = 0, stalled = 0;
    memset(cd, 0, sizeof *cd);
    if (json_unpack((json_t *)j, "{s:s,s:i,s:I,s:F,s:s,s:I,s:b,s:b,s:F,s:F,s:F,s:F,s:F,s:F,s:F}", "kind", &kind,
                    "round", &cd->round, "seed", &seed, "tether", &cd->tether, "label", &label, "steps", &steps,
                    "early_stopped", &early, "stalled", &stalled, "cw_first", &cd->cw_first, "cw_last", &cd->cw_last,
                    "val_loop", &cd->val_loop, "val_ppl", &cd->val_ppl, "val_drift", &cd->val_drift, "val_cw",
                    &cd->val_cw, "score", &cd->score))
        return -1;
    char e[64];
    int mask = bn_recipe_parse_kinds(kind, e, sizeof e);
    if (mask <= 0) return -1;
    cd->kind = (bn_recipe_kind)__builtin_ctz((unsigned)mask);
    cd->seed = (uint64_t)seed;
    cd->steps = steps;
    cd->early_stopped = early, cd->stalled = stalled;
    snprintf(cd->label, sizeof cd->label, "%s", label);
    return 0;
}
