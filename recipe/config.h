// recipe/config.h — the settings of bonsai-antidoom (docs/antidoom.md §18): one struct, its defaults, a JSON config
// file read into it (every key named in one table, with its type, its range and its flag, if any, so the JSON keys
// and bonsai-antidoom's flags agree; an unknown key or a wrong type is an error naming the key and the file), and the
// per-stage signatures that decide which finished stages a rerun may reuse.
#ifndef BONSAI_RECIPE_CONFIG_H
#define BONSAI_RECIPE_CONFIG_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "base/args.h"

// Output kinds. adapter: the base file untouched + a LoRA adapter (plain LoRA, applied in float at inference);
// f16: that adapter merged into the F16 unpack; q1_0 / q2_0: trained through the quantizer (STE), merged and
// requantized (docs/antidoom.md §12).
typedef enum { BN_KIND_ADAPTER, BN_KIND_F16, BN_KIND_Q1_0, BN_KIND_Q2_0, BN_KIND_COUNT } bn_recipe_kind;

#define BN_RECIPE_MAX_LIST 16

typedef struct {
    // run
    const char *model;      // -m: the base model (GGUF)
    const char *out_dir;    // --out: every stage's output, the manifest and the report
    const char *kinds;      // "q1_0" (comma list of adapter,f16,q1_0,q2_0)
    int threads;            // -t (2)
    int n_ctx;              // -c (2048): generation context
    int n_gpu_layers;       // -ngl (0): generation, mining, perplexity and every kind's training on the GPU (the
                            // merged kinds through the quantizer there too)
    const char *train_gemm; // --train-gemm ("bf16"): that GPU training's base-weight GEMMs, "bf16" or "f32"
                            // (bonsai-ftpo-train --train-gemm)
    uint64_t seed;          // -s: LoRA init / shuffles / tether windows of the first candidate (then seed+1, ...) (1)
    uint64_t mine_seed;     // --mine-seed: mining's sampling (1); apart from -s, so runs of several -s share mining
    bool full;              // --full: the demo's budget (all prompts, 3 seeds × tethers)
    int n_mine_flags;       // --mine-prompts flags read so far (the first replaces the list; not a config key)
    // data (paths relative to the working directory)
    const char *mine_prompts[BN_RECIPE_MAX_LIST]; // prompts mined for pairs
    int n_mine_prompts;
    int mine_max;           // prompts mined per round (0: all), split over the files
    bool mine_spread;       // evenly spaced prompts of each file instead of the first ones (false)
    const char *heldout_prompts, *heldout_text; // the held-out evaluation (never used by a pick)
    const char *unseen_prompts;                 // a prompt source no stage touches, evaluated at the end ("": none)
    const char *other_prompts;                  // the same, from other text than the model's (data/val/prompts-other)
    const char *val_pair_prompts;               // validation pairs (chosen_win) are mined on these
    const char *val_loop_prompts;               // validation loop rate
    const char *val_text;                       // validation perplexity (drift)
    const char *tether_text;                    // the plain-text KL tether of training
    int val_max;            // validation prompts used of each file (0: all)
    // generation
    int n_predict;          // 256
    int thinking;           // -2: from the model's chat template; 1 | 0 | -1 (core/chat.h)
    // mining
    int prime_repeats, prime_prefix_tokens; // 3, 24
    const char *temps;      // sampled mining temperatures "0.1,0.5,0.8"
    double headroom;        // regularisation headroom (1: off)
    // training
    int seeds;              // candidates per tether strength: seeds seed, seed+1, ...
    double tethers[BN_KIND_COUNT][BN_RECIPE_MAX_LIST]; // λ_tether of the candidates per kind
    int n_tethers[BN_KIND_COUNT];
    int rounds;             // most on-policy rounds (3)
    double lr;              // 0: the size preset's
    int rank;               // 0: the size preset's
    int epochs;             // 12
    double early_stop;      // 0.8
    const char *targets;    // "lm_head"
    const char *output_type; // q1_0 / q2_0 kinds: output.weight's type in their bases, STE and merges, as
                             // bonsai-quantize --output-tensor-type ("q6_k"; "" = bonsai-quantize's rule: low-bit)
    double lambda_nt;       // 1
    int tether_ctx, tether_batch; // 64, 2
    // pick (validation only)
    double goal_cut;        // 0.9: loop-rate cut the pick aims at
    double goal_drift;      // 1.0: validation drift (%) the pick allows before counting a shortfall
} bn_recipe_cfg;

// bn_recipe_cfg_default: the defaults above (the data paths under root, e.g. "." for a checkout).
bn_recipe_cfg bn_recipe_cfg_default(void);
// bn_recipe_cfg_full: turns *c into the --full budget (all prompts, three rounds, two seeds, the demo's Q1_0 tethers).
void bn_recipe_cfg_full(bn_recipe_cfg *c);
// bn_recipe_cfg_load_json: reads the JSON object in path into *c (keys as in docs/antidoom.md §18); the parsed
// document stays referenced by *c's strings, *doc gets it (free with bn_recipe_json_free). Returns 0, or -1 with err
// naming the file and the key (unknown key, wrong type, value out of range).
int bn_recipe_cfg_load_json(bn_recipe_cfg *c, const char *path, void **doc, char *err, size_t errlen);
// bn_recipe_args: the flags of the settings that have one (the same keys, types and ranges as the JSON config) as a
// base/args.h table over a bn_recipe_cfg into out[0..cap), ended by {0}; returns the entries before the end, or -1
// when cap is too small (BN_RECIPE_N_ARGS is enough).
#define BN_RECIPE_N_ARGS 64
int bn_recipe_args(bn_arg *out, int cap);
// bn_recipe_json_free: frees what bn_recipe_cfg_load_json left in *doc.
void bn_recipe_json_free(void *doc);
// bn_recipe_parse_kinds: the kinds in s (comma list) as a mask of 1 << bn_recipe_kind; -1 (err) for an unknown one.
int bn_recipe_parse_kinds(const char *s, char *err, size_t errlen);
// bn_recipe_kind_name: "adapter", "f16", "q1_0", "q2_0".
const char *bn_recipe_kind_name(bn_recipe_kind k);
// bn_recipe_output_type: the q1_0 / q2_0 kinds' output.weight type (c->output_type), or NULL for bonsai-quantize's
// rule (unset or "").
const char *bn_recipe_output_type(const bn_recipe_cfg *c);
// bn_recipe_fit_output_type: when the q1_0 / q2_0 kinds are asked and the model's output head rows do not fit the
// head type's blocks (q6_k on a model 128 wide), sets c->output_type to llama-quantize's fallback for that shape and
// writes a one-line note (else note = ""); 0, or -1 (err: the model unreadable, or no type fits).
int bn_recipe_fit_output_type(bn_recipe_cfg *c, char *note, size_t notelen, char *err, size_t errlen);
// bn_recipe_train_gemm: c->train_gemm as train/device.h's bn_train_gemm, or -1 when it is neither "bf16" nor "f32".
int bn_recipe_train_gemm(const bn_recipe_cfg *c);
// bn_recipe_parse_reals: a comma list of numbers into out[0..max); returns the count or -1 (err).
int bn_recipe_parse_reals(const char *s, double *out, int max, char *err, size_t errlen);
// bn_recipe_cfg_json: the settings as a malloc'd JSON text (the manifest keeps it; the report prints it).
char *bn_recipe_cfg_json(const bn_recipe_cfg *c);
// bn_sig: FNV-1a 64 of text mixed into h (start with 0); signatures of stages are chains of these.
uint64_t bn_sig(uint64_t h, const char *text);
// bn_sig_file: bn_sig over a file's size and modification time and its path (0 for a missing file).
uint64_t bn_sig_file(uint64_t h, const char *path);
#endif
