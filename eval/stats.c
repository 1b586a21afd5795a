// eval/stats.c — loop rate, Wilson interval, length statistics, median and percentile.
#include "eval/stats.h"
#include "base/util.h"
#include <jansson.h>
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// sorted_copy: a sorted copy of v[0..n) (the caller frees it).
static double *sorted_copy(const double *v, int n) {
    double *s = xmalloc((size_t)n * sizeof *s);
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return s;
}

double bn_median(const double *v, int n) {
    if (n <= 0) return 0;
    double *s = sorted_copy(v, n);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

double bn_percentile(const double *v, int n, double q) {
    if (n <= 0) return 0;
    double *s = sorted_copy(v, n);
    double pos = q / 100.0 * (n - 1);
    int lo = (int)floor(pos);
    int hi = lo + 1 < n ? lo + 1 : n - 1;
    double r = s[lo] + (pos - lo) * (s[hi] - s[lo]);
    free(s);
    return r;
}

void bn_wilson(int64_t k, int64_t n, double z, double *lo, double *hi) {
    if (n <= 0) { *lo = 0; *hi = 1; return; }
    double p = (double)k / n, z2 = z * z;
    double denom = 1 + z2 / n;
    double center = (p + z2 / (2.0 * n)) / denom;
    double half = z / denom * sqrt(p * (1 - p) / n + z2 / (4.0 * n * n));
    *lo = fmax(0.0, center - half);
    *hi = fmin(1.0, center + half);
}

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

double bn_seq_rep_n(const char *text, size_t len, int n) {
    if (n < 1) return -1;
    size_t cap = 64, nw = 0;
    uint64_t *w = xmalloc(cap * sizeof *w); // one FNV-1a hash per word
    for (size_t i = 0; i < len;) {
        while (i < len && isspace((unsigned char)text[i])) i++;
        if (i == len) break;
        uint64_t h = 1469598103934665603ull;
        for (; i < len && !isspace((unsigned char)text[i]); i++) h = (h ^ (unsigned char)text[i]) * 1099511628211ull;
        if (nw == cap) w = xrealloc(w, (cap *= 2) * sizeof *w);
        w[nw++] = h;
    }
    if (nw < (size_t)n + 1) {
        free(w);
        return -1;
    }
    const size_t ng = nw - (size_t)n + 1;
    for (size_t i = 0; i < ng; i++) { // n-gram i's hash in place of word i's (words i+1.. are still words)
        uint64_t h = 0;
        for (int k = 0; k < n; k++) h = (h ^ w[i + k]) * 0x9E3779B97F4A7C15ull + (uint64_t)k;
        w[i] = h;
    }
    qsort(w, ng, sizeof *w, cmp_u64);
    size_t distinct = ng > 0;
    for (size_t i = 1; i < ng; i++) distinct += w[i] != w[i - 1];
    free(w);
    return 1.0 - (double)distinct / (double)ng;
}

void bn_loop_stats_compute(const bool *loop, const bool *hit_limit, const double *len, const double *rep4, int64_t n,
                           bn_loop_stats *s) {
    *s = (bn_loop_stats){.n = n};
    double rep_sum = 0;
    for (int64_t i = 0; i < n; i++) {
        s->n_loops += loop && loop[i];
        s->n_length_limit += hit_limit && hit_limit[i];
        if (rep4 && rep4[i] >= 0) rep_sum += rep4[i], s->n_rep++;
    }
    s->mean_rep4 = s->n_rep ? rep_sum / (double)s->n_rep : 0;
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

void bn_loop_stats_frame(bn_loop_stats *s, const bool *frame, int64_t n) {
    s->has_frame = true;
    s->n_frame = 0;
    for (int64_t i = 0; i < n; i++) s->n_frame += frame[i];
    s->frame_rate = n ? (double)s->n_frame / n : 0;
    bn_wilson(s->n_frame, n, BN_Z95, &s->frame_ci_lo, &s->frame_ci_hi);
}

char *bn_loop_stats_json(const bn_loop_stats *s, const char *label) {
    json_t *o = json_object();
    if (label) json_object_set_new(o, "label", json_string(label));
    json_object_set_new(o, "n", json_integer(s->n));
    json_object_set_new(o, "loops", json_integer(s->n_loops));
    json_object_set_new(o, "loop_rate", json_real(s->loop_rate));
    json_object_set_new(o, "loop_rate_ci95", json_pack("[f,f]", s->ci_lo, s->ci_hi));
    if (s->has_frame) {
        json_object_set_new(o, "frame_loops", json_integer(s->n_frame));
        json_object_set_new(o, "frame_loop_rate", json_real(s->frame_rate));
        json_object_set_new(o, "frame_loop_rate_ci95", json_pack("[f,f]", s->frame_ci_lo, s->frame_ci_hi));
    }
    json_object_set_new(o, "length_limit", json_integer(s->n_length_limit));
    json_object_set_new(o, "length_limit_share", json_real(s->length_limit_share));
    json_object_set_new(o, "mean_length", json_real(s->mean_len));
    json_object_set_new(o, "median_length", json_real(s->median_len));
    json_object_set_new(o, "seq_rep4", s->n_rep ? json_real(s->mean_rep4) : json_null());
    json_object_set_new(o, "seq_rep4_n", json_integer(s->n_rep));
    char *out = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    return out;
}

int bn_eval_n_predict_default(int n_ctx_train) {
    int n = n_ctx_train / 64;
    return n < 256 ? 256 : n > 4000 ? 4000 : n;
}
