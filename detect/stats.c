// detect/stats.c — loop rate, Wilson interval, length statistics.
#include "detect/stats.h"
#include "detect/regularise.h"
#include "core/util.h"
#include <jansson.h>
#include <math.h>
#include <stdlib.h>

void bn_wilson(int64_t k, int64_t n, double z, double *lo, double *hi) {
    if (n <= 0) { *lo = 0; *hi = 1; return; }
    double p = (double)k / n, z2 = z * z;
    double denom = 1 + z2 / n;
    double center = (p + z2 / (2.0 * n)) / denom;
    double half = z / denom * sqrt(p * (1 - p) / n + z2 / (4.0 * n * n));
    *lo = fmax(0.0, center - half);
    *hi = fmin(1.0, center + half);
}

void bn_loop_stats_compute(const bool *loop, const bool *hit_limit, const double *len, int64_t n, bn_loop_stats *s) {
    *s = (bn_loop_stats){.n = n};
    for (int64_t i = 0; i < n; i++) {
        s->n_loops += loop && loop[i];
        s->n_length_limit += hit_limit && hit_limit[i];
    }
    s->loop_rate = n ? (double)s->n_loops / n : 0;
    s->length_limit_share = n ? (double)s->n_length_limit / n : 0;
    bn_wilson(s->n_loops, n, BN_Z95, &s->ci_lo, &s->ci_hi);
    if (len && n > 0) {
        double sum = 0;
        for (int64_t i = 0; i < n; i++) sum += len[i];
        s->mean_len = sum / n;
        s->median_len = bn_median(len, (int)n);
    }
}

char *bn_loop_stats_json(const bn_loop_stats *s, const char *label) {
    json_t *o = json_object();
    if (label) json_object_set_new(o, "label", json_string(label));
    json_object_set_new(o, "n", json_integer(s->n));
    json_object_set_new(o, "loops", json_integer(s->n_loops));
    json_object_set_new(o, "loop_rate", json_real(s->loop_rate));
    json_object_set_new(o, "loop_rate_ci95", json_pack("[f,f]", s->ci_lo, s->ci_hi));
    json_object_set_new(o, "length_limit", json_integer(s->n_length_limit));
    json_object_set_new(o, "length_limit_share", json_real(s->length_limit_share));
    json_object_set_new(o, "mean_length", json_real(s->mean_len));
    json_object_set_new(o, "median_length", json_real(s->median_len));
    char *out = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    return out;
}
