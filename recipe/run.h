// recipe/run.h — the state of one bonsai-antidoom run shared by its stage files (pipeline.c: the order and the base
// stages; rounds.c: candidates, picks and on-policy rounds per kind; output.c: the outputs and their held-out
// evaluation): the settings, the manifest, the stage counter with its ETA, and the base models' files and figures.
#ifndef BONSAI_RECIPE_RUN_H
#define BONSAI_RECIPE_RUN_H
#include <jansson.h>
#include <stdint.h>
#include "recipe/candidate.h"
#include "recipe/config.h"
#include "recipe/manifest.h"
#include "recipe/measure.h"

#define BN_PATH 4096

typedef struct {
    const bn_recipe_cfg *c;
    bn_manifest *man;
    int kinds;                      // mask of 1 << bn_recipe_kind
    bn_measure_gen g;
    double t0;                      // ms
    int stage_no, stage_plan;       // stages run or reused so far / planned (rounds may end early)
    double stage_ms;                // time spent in stages that ran (not reused)
    double stage_start;             // when the current stage began, ms
    int stages_run;
    uint64_t sig_base, sig_gen, sig_val, sig_mine1; // signature chains (recipe/config.h's bn_sig)
    uint64_t sig_head; // the q1_0 / q2_0 kinds' output.weight type (0: the rule): in their bases' and rounds' signatures
    char base[BN_KIND_COUNT][BN_PATH]; // the same-type base file per kind (adapter / f16: the F16 unpack)
    bn_val_base vb[BN_KIND_COUNT];  // its validation figures
    char pairs_val[BN_PATH];        // validation pairs (held-out split)
    int n_val_pairs;                // their count (0: chosen_win is not measured, -1 in the results)
    char pairs_r1[BN_PATH];         // round 1's regularised train pairs (the base's own loops)
    char pick[BN_KIND_COUNT][96];   // the final pick's label per kind ("" when none)
    uint64_t sig_kind[BN_KIND_COUNT]; // the signature chain of a kind's rounds (its output stage starts from it)
    bn_candidate *cands;            // every candidate of this run, in training order (the report's)
    int n_cands;
    int round_pairs[BN_KIND_COUNT][64]; // train pairs mined in round r (index r - 1) of each kind
    int n_rounds[BN_KIND_COUNT];    // rounds run per kind
    char stop_why[BN_KIND_COUNT][128]; // why a kind's rounds ended
} bn_recipe_run;

// bn_run_path: DIR/<printf> into buf; returns buf.
const char *bn_run_path(const bn_recipe_run *r, char *buf, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
// bn_run_stage: starts stage name (one line on stderr: its number, what it does, elapsed time and ETA); returns its
// result when it finished before with signature sig (then nothing is to be done), else NULL.
json_t *bn_run_stage(bn_recipe_run *r, const char *name, uint64_t sig, const char *what);
// bn_run_stage_done: records stage name's result (taken) as done; returns it (borrowed), or NULL with err.
json_t *bn_run_stage_done(bn_recipe_run *r, const char *name, uint64_t sig, json_t *result, char *err, size_t errlen);
// bn_run_kind_rounds: the candidates and on-policy rounds of kind k, then its pick in r->pick[k]; 0 or -1 (err).
int bn_run_kind_rounds(bn_recipe_run *r, bn_recipe_kind k, char *err, size_t errlen);
// bn_run_output: kind k's output file(s) from its pick and their held-out evaluation; 0 or -1 (err).
int bn_run_output(bn_recipe_run *r, bn_recipe_kind k, char *err, size_t errlen);
// bn_run_eval_model: the held-out figures of one model file (with adapter applied by the engine; NULL: none): loop
// rate, perplexity, the unseen prompts, size, speed, as a JSON object, with files DIR/eval-NAME.json and
// gen-NAME.jsonl; NULL with err.
json_t *bn_run_eval_model(bn_recipe_run *r, const char *name, const char *model, const char *adapter,
                          double size_bytes, char *err, size_t errlen);
#endif
