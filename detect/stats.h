// detect/stats.h — loop-rate statistics for evaluation (ANTIDOOM.md §13): the share of
// completions where the detector fired with a 95% Wilson score interval, the share that hit the
// length limit, and mean/median completion length; as a struct and as JSON.
#ifndef BONSAI_DETECT_STATS_H
#define BONSAI_DETECT_STATS_H
#include <stdbool.h>
#include <stdint.h>

#define BN_Z95 1.959963984540054 // two-sided 95% normal quantile

typedef struct {
    int64_t n;                 // completions
    int64_t n_loops;           // detector fired
    int64_t n_length_limit;    // stopped by the length limit
    double loop_rate, ci_lo, ci_hi;   // n_loops / n and its Wilson interval
    double length_limit_share;
    double mean_len, median_len;      // completion length (tokens or chars, as given)
} bn_loop_stats;

// bn_wilson: Wilson score interval for k successes in n trials at quantile z into *lo, *hi
// ([0, 1] when n == 0).
void bn_wilson(int64_t k, int64_t n, double z, double *lo, double *hi);
// bn_loop_stats_compute: fills s from per-completion flags and lengths (any array may be NULL).
void bn_loop_stats_compute(const bool *loop, const bool *hit_limit, const double *len, int64_t n, bn_loop_stats *s);
// bn_loop_stats_json: returns a malloc'd one-line JSON object (label included when non-NULL).
char *bn_loop_stats_json(const bn_loop_stats *s, const char *label);
#endif
