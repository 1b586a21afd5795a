// detect/repetition.h — antidoom's doom-loop detector find_inner_repetition (docs/antidoom.md §4):
// fingerprint probes every sample_interval characters, a forward then a backward candidate
// period per probe, verified by counting contiguous copies both ways. Indices are Unicode code
// points (Python str semantics). The quirks are kept on purpose: effective minimum period is
// sample_len (a short true period is reported as a multiple >= 16), loops between probes can be
// missed, and the first verified hit in scan order wins.
#ifndef BONSAI_DETECT_REPETITION_H
#define BONSAI_DETECT_REPETITION_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int min_repeats;         // 4: occurrences of the unit, counting the first
    int min_total_repeated;  // 60: repeats * period >= this many characters
    int min_period;          // 1
    int max_period;          // 1024
    int sample_len;          // 16: fingerprint width
    int sample_interval;     // 128: stride between fingerprint probes
} bn_rep_params;

#define BN_REP_SNIPPET_MAX 100 // code points of the unit kept in the snippet (then "...")

typedef struct {
    int64_t start;         // first char of the earliest verified copy
    int64_t end;           // one past the last full copy
    int64_t period;        // unit length in chars
    int64_t repeats;       // contiguous copies, counting the first
    int64_t repeat_start;  // start + period: first char of the 2nd copy (loop onset)
    char snippet[4 * BN_REP_SNIPPET_MAX + 8]; // UTF-8: unit[:100] (+ "..." when longer)
} bn_rep_hit;

// bn_rep_params_default: returns the antidoom defaults (4, 60, 1, 1024, 16, 128).
bn_rep_params bn_rep_params_default(void);
// bn_find_repetition: scans n code points; returns 1 and fills hit, or 0 when no loop.
int bn_find_repetition(const uint32_t *text, size_t n, const bn_rep_params *p, bn_rep_hit *hit);
// bn_find_repetition_utf8: same on UTF-8 bytes (decoded with U+FFFD replacement); returns 1/0.
int bn_find_repetition_utf8(const char *s, size_t len, const bn_rep_params *p, bn_rep_hit *hit);
#endif
