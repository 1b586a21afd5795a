// mine/mine.h — one prompt through the mining pipeline (docs/antidoom.md §1-7): render the chat
// prompt, (prime mode) build a context that already repeats a phrase, generate with recorded
// top-K, detect a loop on the completion text, localise the rejected token, choose alternatives
// and build the pair row (antidoom fields + ids) and the generation-log row.
//
// Prime mode (§3, the reconstruction in steps 1-6): greedy prefix of prime_prefix_tokens tokens cut
// after its last sentence end (. ! ? or newline; empty when none), then " " (when the prefix ends
// in a non-space) + phrase x prime_repeats appended as tokens; the detector scans the completion
// only (scan_mode "completion"), or with scan_assistant the primed assistant text + completion
// (scan_mode "assistant"; a loop must reach into the completion, and an onset inside the primed
// text makes the first generated token the rejected one, with that position's top-K).
// Status "escaped" when the model leaves the loop. Repetition char offsets are relative to the
// scanned text; rejected_token_index counts completion tokens.
// Over-long prompts (max_prompt_tokens) are trimmed like antidoom: such rows are marked and are
// discarded at training time (docs/antidoom.md §2, §7.3).
// Token surfaces are pieces without control-token text (like a server's skip_special_tokens);
// a generated EOG token ends the completion and is not part of it.
#ifndef BONSAI_DETECT_MINE_H
#define BONSAI_DETECT_MINE_H
#include <stdbool.h>
#include "detect/chosen.h"
#include "records/pairs.h"
#include "records/prompts.h"
#include "detect/repetition.h"
#include "detect/frame.h"
#include "mine/source.h"

struct bn_tokenizer;

typedef enum { BN_MINE_SAMPLE, BN_MINE_PRIME } bn_mine_mode;
// Which detector's loops are mined (docs/antidoom.md §16.4): the verbatim one (antidoom's, the default), the frame one,
// or both (the verbatim hit when there is one, else the frame hit). Both detectors always run; the result says each.
typedef enum { BN_DETECT_VERBATIM, BN_DETECT_FRAME, BN_DETECT_BOTH } bn_detect_mode;

#define BN_DEFAULT_PRIME_PHRASE "Wait, let me re-check the calculation. "

typedef struct {
    bn_mine_mode mode;
    bn_gen_params gen;          // sampling of the completion
    bn_rep_params rep;          // detector thresholds
    bn_frame_params frame;      // frame-loop detector thresholds
    bn_detect_mode detect;      // whose loops are localised and mined (BN_DETECT_VERBATIM)
    bn_chosen_params chosen;    // its temperature is replaced by gen.temperature
    int thinking;               // chat template: 1 on (<think>\n), 0 off, -1 plain ChatML
    const char *system;         // system message, NULL/"" = none (antidoom: "")
    const char *prime_phrase;   // BN_DEFAULT_PRIME_PHRASE
    bool phrase_from_prefix;    // use the prefix's last sentence (20-200 chars) as the phrase when there is one
    int prime_repeats;          // 3
    int prime_prefix_tokens;    // 48
    bool scan_assistant;        // prime mode: scan primed assistant text + completion (scan_mode
                                // "assistant", §3 step 7) instead of the completion only
    int max_prompt_tokens;      // 2000: longer prompts get the last user turn cut (head kept) and the
                                // row's source_prompt prefixed "[TRIMMED_SOURCE_PROMPT]"; <= 0 = off
    const char *model_file, *model_sha256, *file_type; // recorded in gen{} (may be NULL)
    const char *split;          // recorded when non-NULL
} bn_mine_params;

typedef struct {
    bn_gen_row gen;     // the generation-log row (always filled on success)
    bool looped;        // the detector(s) of mp->detect fired (status "loop_detected")
    bool loop_verbatim; // the verbatim detector fired
    bool loop_frame;    // the frame-loop detector fired
    bool has_pair;      // a pair row was made
    bn_pair_row pair;
    bool hit_limit;     // the completion stopped at n_predict
    int n_generated;    // completion tokens
} bn_mine_result;

// bn_mine_params_default: antidoom generation/detector/chosen defaults, sample mode, thinking 1.
bn_mine_params bn_mine_params_default(void);
// bn_mine_one: runs prompt p (its index is recorded as "prompt_index"); returns 0 (r filled,
// free with bn_mine_result_free) or -1 with err filled (e.g. the prompt does not fit).
int bn_mine_one(bn_source *src, const struct bn_tokenizer *tok, const bn_prompt *p, int prompt_index,
                const bn_mine_params *mp, bn_mine_result *r, char *err, size_t errlen);
// bn_mine_result_free: releases the rows.
void bn_mine_result_free(bn_mine_result *r);
#endif
