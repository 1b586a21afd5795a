// detect/localise.h — token-space localisation of the rejected token (docs/antidoom.md §5): map the
// detector's hit onto generated tokens, slide the seed left by token period, skip boundary-only
// tokens, apply the sentence-restart rule (27 RESTART_WORDS) and skip whitespace tokens.
// Input is a bn_toktext (detect/toktext.h) built from the decoded surfaces of the generated tokens;
// the hit's char offsets are code points of that same concatenation.
#ifndef BONSAI_DETECT_LOCALISE_H
#define BONSAI_DETECT_LOCALISE_H
#include <stdbool.h>
#include "detect/repetition.h"
#include "detect/toktext.h"

#define BN_LOC_SKIP_MAX_TOKENS 4   // step 5 budget: boundary-only tokens skipped
#define BN_LOC_SKIP_MAX_CHARS 12   // step 5 budget: their surface chars
#define BN_LOC_PUNCT_MAX_TOKENS 3  // step 6: run of boundary tokens after the target word
#define BN_LOC_PUNCT_MAX_CHARS 8

typedef struct {
    int seed, rep;         // tokens holding hit.start / hit.repeat_start (-1 when missing)
    int seed_slid;         // seed after sliding left (step 3)
    int period_tokens;     // rep - seed (0 on fallback)
    bool fallback;         // step 1 fallback used
    bool restart_moved;    // step 6 moved the target onto a restart word
} bn_loc_info;

// bn_localise: returns the rejected token's index, or -1 when no row should be made.
// info may be NULL.
int bn_localise(const bn_toktext *t, const bn_rep_hit *hit, bn_loc_info *info);
// bn_is_restart_word: returns true when the UTF-8 word (already normalised) is one of the 27.
bool bn_is_restart_word(const uint32_t *w, size_t n);
#endif
