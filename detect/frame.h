// detect/frame.h — the frame-loop detector (docs/antidoom.md §16): a completion that keeps re-entering one frame
// whose slots change ("Why did the chicken cross the road? To get to X. Why did ... To get to Y. ...") is missed by
// the verbatim detector (detect/repetition.h), which needs exact copies. Over token ids: an anchor (anchor_len
// consecutive tokens) that comes back, each gap at most max_period tokens, where every stretch between two entries (a
// period) is within min_similarity of the next one in token edit distance (1 - distance / the longer one's length):
// min_repeats entries, or min_repeats_verbatim when the periods are all the same (a verbatim loop counts here with
// the verbatim detector's count; looser copies need more of them).
#ifndef BONSAI_DETECT_FRAME_H
#define BONSAI_DETECT_FRAME_H
#include <stddef.h>
#include <stdint.h>
#include "detect/repetition.h"
#include "detect/toktext.h"

typedef struct {
    int anchor_len;        // 4: tokens of the n-gram that marks each entry into the frame
    int min_repeats;       // 6: entries into the frame, counting the first
    int min_repeats_verbatim; // 4: the same when every period equals the next (the verbatim detector's count)
    int min_tokens;        // 16: tokens from the first entry to the end of the last period, at least
    int max_period;        // 256: tokens between two entries, at most
    double min_similarity; // 0.5: 1 - edit distance / longer length of every two successive periods, at least
} bn_frame_params;

typedef struct {
    int64_t start;         // token of the first entry
    int64_t repeat_start;  // token of the second entry: where the completion re-enters the frame
    int64_t end;           // one past the last period (the last entry plus the previous period's length, clipped)
    int64_t period;        // tokens of the first period (repeat_start - start)
    int64_t repeats;       // entries into the frame, counting the first
    double similarity;     // the lowest similarity of two successive periods (1: verbatim)
} bn_frame_hit;

// bn_frame_params_default: returns the defaults (anchor 4, entries 6 / verbatim 4, 16 tokens, period 256, 0.5).
bn_frame_params bn_frame_params_default(void);
// bn_find_frame_loop: scans n token ids; returns 1 and fills hit (the earliest first entry that qualifies), or 0.
int bn_find_frame_loop(const int32_t *ids, size_t n, const bn_frame_params *p, bn_frame_hit *hit);
// bn_frame_rep_hit: the hit over tokens of t (the ids' decoded surfaces) in t's code points, as the verbatim detector
// reports one (period = code points of the first period, snippet = its text), for the localiser (detect/localise.h:
// its slide-left and seam rules then act on the first two entries); returns it.
bn_rep_hit bn_frame_rep_hit(const bn_toktext *t, const bn_frame_hit *f);
// bn_frame_units: splits UTF-8 text into word pieces (a run of letters/digits with the spaces before it, or one other
// character with them) as ids (a hash of each piece), for text without its tokens; returns the count (*out malloc'd).
size_t bn_frame_units(const char *s, size_t len, int32_t **out);
#endif
