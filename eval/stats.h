// eval/stats.h — loop-rate statistics for evaluation (docs/antidoom.md §13): the share of
// completions where the detector fired with a 95% Wilson score interval, the same for the frame-loop detector
// (detect/frame.h), the share that hit the length limit, mean/median completion length, and the mean share of
// repeated word 4-grams (seq-rep-4: repetition the verbatim detector does not count, e.g. a phrase that comes back
// with one word changed); as a struct and JSON.
#ifndef BONSAI_DETECT_STATS_H
#define BONSAI_DETECT_STATS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BN_Z95 1.959963984540054 // two-sided 95% normal quantile

typedef struct {
    int64_t n;                 // completions
    int64_t n_loops;           // detector fired
    int64_t n_length_limit;    // stopped by the length limit
    double loop_rate, ci_lo, ci_hi;   // n_loops / n and its Wilson interval
    double length_limit_share;
    double mean_len, median_len;      // completion length (tokens or chars, as given)
    int64_t n_rep;                    // completions with a seq-rep-4 (at least 5 words)
    double mean_rep4;                 // their mean seq-rep-4 (0 when n_rep is 0)
    bool has_frame;                   // the frame-loop fields are set (bn_loop_stats_frame)
    int64_t n_frame;                  // the frame-loop detector fired (detect/frame.h)
    double frame_rate, frame_ci_lo, frame_ci_hi; // n_frame / n and its Wilson interval
} bn_loop_stats;

// bn_seq_rep_n: seq-rep-n of text (Welleck et al. 2019): 1 − distinct word n-grams / word n-grams, words split at
// ASCII whitespace; 0 = no n-gram repeats, near 1 = one n-gram over and over. -1 when text has fewer than n + 1 words.
double bn_seq_rep_n(const char *text, size_t len, int n);

// bn_median: median of n doubles (mean of the two middle values for even n; 0 for n = 0).
double bn_median(const double *v, int n);
// bn_percentile: q-th percentile (0..100) with linear interpolation (numpy default); 0 for n = 0.
double bn_percentile(const double *v, int n, double q);

// bn_wilson: Wilson score interval for k successes in n trials at quantile z into *lo, *hi
// ([0, 1] when n == 0).
void bn_wilson(int64_t k, int64_t n, double z, double *lo, double *hi);
// bn_loop_stats_compute: fills s from per-completion flags, lengths and seq-rep-4 values (< 0: none; any array may
// be NULL).
void bn_loop_stats_compute(const bool *loop, const bool *hit_limit, const double *len, const double *rep4, int64_t n,
                           bn_loop_stats *s);
// bn_eval_n_predict_default: the generation length of a loop evaluation for a model trained on n_ctx_train tokens:
// n_ctx_train / 64 within 256..4000 (a loop shows within a few hundred tokens; 4000 only for long-context models).
int bn_eval_n_predict_default(int n_ctx_train);
// bn_loop_stats_frame: adds the frame-loop rate of n completions (frame[i]: the frame-loop detector fired) to s.
void bn_loop_stats_frame(bn_loop_stats *s, const bool *frame, int64_t n);
// bn_loop_stats_json: returns a malloc'd one-line JSON object (label included when non-NULL).
char *bn_loop_stats_json(const bn_loop_stats *s, const char *label);
#endif
