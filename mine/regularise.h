// mine/regularise.h — dataset regularisation of pair rows (docs/antidoom.md §8), deterministic for a
// seed. Order of steps:
//   1. de-duplicate identical contexts (context_ids when present, else context_before; first kept);
//   2. chosen flattening: per row de-duplicate chosen entries by normalised surface (strip+lower);
//      a chosen token seen in c rows with c > ref (95th-percentile count, floor 50) keeps
//      round(c * (ref/c)^s) of its entries (seeded choice); rows whose last entry goes are dropped;
//   3. N = min(max_rows (0 = pool), floor(headroom * pool)) — the 70% headroom rule;
//   4. rejected flattening: c_t per rejected token, median m, w_t = 1 if c_t <= m else (m/c_t)^s,
//      rho_t = w_t c_t / sum w c, caps round(rho_t N) (round half to even); antidoom's greedy pick of
//      the (token, source) bucket maximising (rho_t - seen_t/|sel|, share_src - sel_src/|sel|),
//      first within the token caps, then without them until N; then a seeded shuffle.
//   Source balancing (off | sqrt | equal) sets share_src (count share, or equal, or ∝ sqrt(count))
//   and, when not off, hard per-source caps ceil(share_src N). max_rejected_share (0 = off) is a
//   hard cap floor(share N) (>= 1) on any single rejected token in both passes.
// The source label is the first string among source_dataset, source_task, source_eval_key (extra
// keys of the row) and source.
#ifndef BONSAI_DETECT_REGULARISE_H
#define BONSAI_DETECT_REGULARISE_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "records/pairs.h"

typedef enum { BN_BALANCE_OFF, BN_BALANCE_SQRT, BN_BALANCE_EQUAL } bn_balance_mode;

typedef struct {
    double rejected_strength;     // s of rejected flattening (antidoom 0.3; 0 = proportional)
    double chosen_strength;       // chosen flattening (antidoom 0.5; 0 = off)
    int chosen_min_ref;           // 50 (MIN_REF_COUNT)
    double chosen_ref_percentile; // 95 (REF_PERCENTILE, linear interpolation like numpy)
    bn_balance_mode balance;      // off
    int max_rows;                 // max_train_examples; 0 = no explicit limit
    double headroom;              // 0.7; >= 1 disables the headroom rule
    double max_rejected_share;    // 0 = off; e.g. 0.25 for small primed sets
    bool dedupe_contexts;         // true
    uint64_t seed;                // 3407
} bn_reg_params;

typedef struct {
    int n_in;                 // rows given
    int n_duplicates;         // dropped as identical contexts
    int n_chosen_pruned;      // chosen entries removed by chosen flattening (incl. in-row duplicates)
    int n_rows_no_chosen;     // rows dropped because their last chosen entry went
    int n_pool;               // rows entering the selection
    int n_target;             // N
    int n_out;                // rows selected
} bn_reg_stats;

// bn_reg_params_default: returns antidoom's shipped settings (0.3, 0.5, 50, 95, off, 0, 0.7, 0, true, 3407).
bn_reg_params bn_reg_params_default(void);
// bn_balance_parse: "off" | "sqrt" | "equal" -> mode; returns 0 or -1.
int bn_balance_parse(const char *s, bn_balance_mode *mode);
// bn_regularise: selects and prunes rows; *out receives deep copies (free with bn_pairs_free);
// returns the number of rows out (st may be NULL).
int bn_regularise(const bn_pair_row *rows, int n, const bn_reg_params *p, bn_pair_row **out, bn_reg_stats *st);
// bn_split_heldout: sets every row's split to "heldout" or "train" by group (the prime phrase when
// the row has one, else source_prompt): round(share * groups) of the distinct groups (at least 1
// when share > 0 and there are >= 2 groups), chosen by a seeded shuffle, are held out. Returns the
// number of held-out rows.
int bn_split_heldout(bn_pair_row *rows, int n, double share, uint64_t seed);
// bn_reg_print_stats: one paragraph on f saying what regularisation did and why: rows in and out, what each step
// dropped, and what set the target N (the headroom, --max-rows, or the whole pool).
void bn_reg_print_stats(FILE *f, const bn_reg_params *p, const bn_reg_stats *st);
// bn_reg_print_top: prints the `top` most frequent rejected tokens with their shares to f.
void bn_reg_print_top(FILE *f, const bn_pair_row *rows, int n, int top, const char *title);
#endif
