// eval/kld.c — llama-perplexity's KL-divergence files and statistics (see kld.h). The float/double
// mix of every expression follows llama.cpp so that numbers agree with llama-perplexity's.
#include "eval/kld.h"
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "base/util.h"

size_t bn_kld_row_len(int n_vocab) { return 2 * (((size_t)n_vocab + 1) / 2) + 4; }

double bn_kld_encode_row(const float *logits, int n_vocab, int32_t tok, uint16_t *row) {
    float max_logit = logits[0], min_logit = logits[0];
    for (int i = 1; i < n_vocab; i++) {
        max_logit = fmaxf(max_logit, logits[i]);
        min_logit = fminf(min_logit, logits[i]);
    }
    min_logit = fmaxf(min_logit, max_logit - 16);
    double sum_exp = 0.0;
    for (int i = 0; i < n_vocab; i++) sum_exp += expf(logits[i] - max_logit);
    const float log_sum_exp = (float)log(sum_exp);
    const float min_log_prob = min_logit - max_logit - log_sum_exp;
    const float scale = (max_logit - min_logit) / 65535.f;
    memcpy(row, &scale, sizeof scale);
    memcpy(row + 2, &min_log_prob, sizeof min_log_prob);
    uint16_t *code = row + 4;
    memset(code, 0, sizeof(uint16_t) * (bn_kld_row_len(n_vocab) - 4));
    if (scale != 0) {
        const float inv_scale = 1 / scale;
        // rintf = round half to even, like llama.cpp's nearest_int on [0, 65535]
        for (int i = 0; i < n_vocab; i++)
            code[i] = logits[i] > min_logit ? (uint16_t)rintf(inv_scale * (logits[i] - min_logit)) : 0;
    }
    return max_logit + log_sum_exp - logits[tok];
}

// push_values: appends one position's KLD and Δp to the per-position arrays.
static void push_values(bn_kld_stats *st, float kld, float p_diff) {
    if (st->count >= st->cap) {
        st->cap = st->cap ? st->cap * 2 : 1024;
        st->kld_values = xrealloc(st->kld_values, sizeof(float) * st->cap);
        st->p_diff_values = xrealloc(st->p_diff_values, sizeof(float) * st->cap);
    }
    st->kld_values[st->count] = kld;
    st->p_diff_values[st->count] = p_diff;
    st->count++;
}

double bn_kld_add_row(bn_kld_stats *st, const float *logits, int n_vocab, const uint16_t *base_row, int32_t tok) {
    float max_logit = logits[0];
    int imax = 0;
    for (int i = 1; i < n_vocab; i++)
        if (logits[i] > max_logit) max_logit = logits[i], imax = i;
    double sum_exp = 0.0;
    for (int i = 0; i < n_vocab; i++) sum_exp += expf(logits[i] - max_logit);
    const float log_sum_exp = (float)log(sum_exp);
    float scale, min_log_prob;
    memcpy(&scale, base_row, sizeof scale);
    memcpy(&min_log_prob, base_row + 2, sizeof min_log_prob);
    const uint16_t *code = base_row + 4;

    const float nll = max_logit + log_sum_exp - logits[tok];
    const float nll_base = -(scale * code[tok] + min_log_prob);
    st->sum_nll += nll;
    st->sum_nll2 += nll * nll;
    st->sum_nll_base += nll_base;
    st->sum_nll_base2 += nll_base * nll_base;
    st->sum_nll_nll_base += nll * nll_base;

    const float log_norm = max_logit + log_sum_exp; // log p_Q[i] = logits[i] − log_norm
    double kld = 0;
    int imax_base = -1;
    float p_log_base_max = 0;
    for (int i = 0; i < n_vocab; i++) {
        const float p_log_base = scale * code[i] + min_log_prob;
        if (i == 0 || p_log_base > p_log_base_max) p_log_base_max = p_log_base, imax_base = i;
        if (p_log_base > -16.f) kld += expf(p_log_base) * (p_log_base - logits[i] + log_norm);
    }
    st->sum_kld += kld;
    st->sum_kld2 += kld * kld;
    if (imax == imax_base) st->n_same_top++;

    const float p_diff = expf(-nll) - expf(-nll_base);
    const double p_diff2 = (double)p_diff * p_diff;
    st->sum_p_diff += p_diff;
    st->sum_p_diff2 += p_diff2;
    st->sum_p_diff4 += p_diff2 * p_diff2;
    st->max_p_diff = fmaxf(st->max_p_diff, fabsf(p_diff));

    push_values(st, (float)kld, p_diff);
    return kld;
}

// mean_unc: llama.cpp's mean and standard error of a sum (error 0 with ≤ 10 values).
static void mean_unc(double sum, double sum2, size_t count, double *mean, double *unc) {
    *mean = *unc = 0;
    if (count < 1) return;
    *mean = sum / count;
    double var = sum2 / count - *mean * *mean;
    *unc = var > 0 && count > 10 ? sqrt(var / (count - 1)) : 0.;
}

// covariance: of the two nll sums (0 with < 10 values).
static double covariance(double suma, double sumb, double sumab, size_t count) {
    if (count < 10) return 0.0;
    return (sumab / count - (suma / count) * (sumb / count)) / (count - 1);
}

double bn_kld_mean(const bn_kld_stats *st) { return st->count ? st->sum_kld / st->count : 0; }

void bn_kld_print_chunk(const bn_kld_stats *st, int chunk, FILE *f) {
    double lp, lpu, lb, lbu, kl, klu, mse, mseu;
    mean_unc(st->sum_nll, st->sum_nll2, st->count, &lp, &lpu);
    mean_unc(st->sum_nll_base, st->sum_nll_base2, st->count, &lb, &lbu);
    mean_unc(st->sum_kld, st->sum_kld2, st->count, &kl, &klu);
    mean_unc(st->sum_p_diff2, st->sum_p_diff4, st->count, &mse, &mseu);
    const double cov = covariance(st->sum_nll, st->sum_nll_base, st->sum_nll_nll_base, st->count);
    const double rms = sqrt(mse), top = (double)st->n_same_top / st->count;
    fprintf(f, "%4d    %9.4lf ± %9.4lf    %10.5lf ± %10.5lf    %10.5lf ± %10.5lf    %6.3lf ± %6.3lf %%    %6.3lf ± %6.3lf %%\n",
            chunk, exp(lp), exp(lp) * lpu, lp - lb, sqrt(lpu * lpu + lbu * lbu - 2.0 * cov), kl, klu, 100.0 * rms,
            100.0 * (rms > 0 ? 0.5 / rms * mseu : 0), 100.0 * top,
            100.0 * (st->count > 1 ? sqrt(top * (1 - top) / (st->count - 1)) : 0));
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

// percentile: linear interpolation on sorted values (llama.cpp's rule).
static float percentile(const float *v, size_t n, float fraction) {
    if (fraction <= 0) return v[0];
    if (fraction >= 1) return v[n - 1];
    float p = fraction * (n - 1);
    size_t ip = (size_t)p;
    p -= ip;
    return (1 - p) * v[ip] + p * v[ip + 1 < n ? ip + 1 : n - 1];
}

// median: middle value (mean of the two middle ones for even n).
static float median(const float *v, size_t n) { return n % 2 == 0 ? 0.5f * (v[n / 2] + v[n / 2 - 1]) : v[n / 2]; }

void bn_kld_print_summary(const bn_kld_stats *st, FILE *f) {
    const size_t n = st->count;
    if (n < 100) return; // as llama.cpp: no statistics on so few values
    float *kv = xmalloc(sizeof(float) * n), *pv = xmalloc(sizeof(float) * n);
    memcpy(kv, st->kld_values, sizeof(float) * n);
    memcpy(pv, st->p_diff_values, sizeof(float) * n);
    qsort(kv, n, sizeof(float), cmp_float);
    qsort(pv, n, sizeof(float), cmp_float);

    double lp, lpu, lb, lbu;
    mean_unc(st->sum_nll, st->sum_nll2, n, &lp, &lpu);
    mean_unc(st->sum_nll_base, st->sum_nll_base2, n, &lb, &lbu);
    const double ppl = exp(lp), ppl_unc = ppl * lpu, ppl_base = exp(lb), ppl_base_unc = ppl_base * lbu;
    const double cov = covariance(st->sum_nll, st->sum_nll_base, st->sum_nll_nll_base, n);
    const double ratio_log = lp - lb, ratio_log_unc = sqrt(lpu * lpu + lbu * lbu - 2.0 * cov);
    fprintf(f, "====== Perplexity statistics ======\n");
    fprintf(f, "Mean PPL(Q)                   : %10.6lf ± %10.6lf\n", ppl, ppl_unc);
    fprintf(f, "Mean PPL(base)                : %10.6lf ± %10.6lf\n", ppl_base, ppl_base_unc);
    fprintf(f, "Cor(ln(PPL(Q)), ln(PPL(base))): %6.2lf%%\n", 100.0 * cov / (lpu * lbu));
    fprintf(f, "Mean ln(PPL(Q)/PPL(base))     : %10.6lf ± %10.6lf\n", ratio_log, ratio_log_unc);
    fprintf(f, "Mean PPL(Q)/PPL(base)         : %10.6lf ± %10.6lf\n", exp(ratio_log), exp(ratio_log) * ratio_log_unc);
    const double ppl_cov = ppl * ppl_base * cov;
    fprintf(f, "Mean PPL(Q)-PPL(base)         : %10.6lf ± %10.6lf\n\n", ppl - ppl_base,
            sqrt(ppl_unc * ppl_unc + ppl_base_unc * ppl_base_unc - 2.0 * ppl_cov));

    double kl, klu;
    mean_unc(st->sum_kld, st->sum_kld2, n, &kl, &klu);
    fprintf(f, "====== KL divergence statistics ======\n");
    fprintf(f, "Mean    KLD: %10.6lf ± %10.6lf\n", kl, klu);
    fprintf(f, "Maximum KLD: %10.6f\n", kv[n - 1]);
    static const float fr_k[] = {0.999f, 0.990f, 0.950f, 0.900f};
    static const char *lb_k[] = {"99.9%", "99.0%", "95.0%", "90.0%"};
    for (int i = 0; i < 4; i++) fprintf(f, "%s   KLD: %10.6f\n", lb_k[i], percentile(kv, n, fr_k[i]));
    fprintf(f, "Median  KLD: %10.6f\n", median(kv, n));
    static const float fr_k2[] = {0.100f, 0.050f, 0.010f, 0.001f};
    static const char *lb_k2[] = {"10.0%", " 5.0%", " 1.0%", " 0.1%"};
    for (int i = 0; i < 4; i++) fprintf(f, "%s   KLD: %10.6f\n", lb_k2[i], percentile(kv, n, fr_k2[i]));
    fprintf(f, "Minimum KLD: %10.6f\n\n", kv[0]);

    double pd, pdu, mse, mseu;
    mean_unc(st->sum_p_diff, st->sum_p_diff2, n, &pd, &pdu);
    fprintf(f, "====== Token probability statistics ======\n");
    fprintf(f, "Mean    Δp: %6.3lf ± %5.3lf %%\n", 100.0 * pd, 100.0 * pdu);
    fprintf(f, "Maximum Δp: %6.3lf%%\n", 100.0 * pv[n - 1]);
    static const float fr_p[] = {0.999f, 0.990f, 0.950f, 0.900f, 0.750f};
    static const char *lb_p[] = {"99.9%", "99.0%", "95.0%", "90.0%", "75.0%"};
    for (int i = 0; i < 5; i++) fprintf(f, "%s   Δp: %6.3lf%%\n", lb_p[i], 100.0 * percentile(pv, n, fr_p[i]));
    fprintf(f, "Median  Δp: %6.3lf%%\n", 100.0 * median(pv, n));
    static const float fr_p2[] = {0.250f, 0.100f, 0.050f, 0.010f, 0.001f};
    static const char *lb_p2[] = {"25.0%", "10.0%", " 5.0%", " 1.0%", " 0.1%"};
    for (int i = 0; i < 5; i++) fprintf(f, "%s   Δp: %6.3lf%%\n", lb_p2[i], 100.0 * percentile(pv, n, fr_p2[i]));
    fprintf(f, "Minimum Δp: %6.3lf%%\n", 100.0 * pv[0]);
    mean_unc(st->sum_p_diff2, st->sum_p_diff4, n, &mse, &mseu);
    const double rms = sqrt(mse), top = (double)st->n_same_top / n;
    fprintf(f, "RMS Δp    : %6.3lf ± %5.3lf %%\n", 100.0 * rms, 100.0 * (rms > 0 ? 0.5 / rms * mseu : 0));
    fprintf(f, "Same top p: %6.3lf ± %5.3lf %%\n", 100.0 * top, 100.0 * sqrt(top * (1.0 - top) / (n - 1)));
    free(kv);
    free(pv);
}

void bn_kld_free(bn_kld_stats *st) {
    free(st->kld_values);
    free(st->p_diff_values);
    memset(st, 0, sizeof *st);
}

int bn_kld_base_open(bn_kld_base *b, const char *path, char *err, size_t errlen) {
    memset(b, 0, sizeof *b);
    b->f = fopen(path, "rb");
    if (!b->f) return bn_err(err, errlen, "cannot open %s: %s", path, strerror(errno));
    char magic[8];
    struct stat sb;
    if (fread(magic, 1, 8, b->f) != 8 || memcmp(magic, "_logits_", 8) != 0) {
        bn_kld_base_close(b);
        return bn_err(err, errlen, "%s does not look like a file containing log-probabilities (no _logits_ magic)", path);
    }
    if (fread(&b->n_ctx, 4, 1, b->f) != 1 || fread(&b->n_vocab, 4, 1, b->f) != 1 || fread(&b->n_chunk, 4, 1, b->f) != 1 ||
        fstat(fileno(b->f), &sb) != 0) {
        bn_kld_base_close(b);
        return bn_err(err, errlen, "%s: truncated header", path);
    }
    if (b->n_ctx < 4 || b->n_ctx > (1u << 24) || b->n_vocab < 1 || b->n_vocab > (1 << 24) || b->n_chunk < 1 ||
        b->n_chunk > (1 << 24)) {
        int32_t c = (int32_t)b->n_ctx, v = b->n_vocab, k = b->n_chunk;
        bn_kld_base_close(b);
        return bn_err(err, errlen, "%s: implausible header (n_ctx %d, n_vocab %d, n_chunk %d)", path, c, v, k);
    }
    b->row_len = bn_kld_row_len(b->n_vocab);
    const uint64_t n_tok = (uint64_t)b->n_chunk * b->n_ctx, rows = (uint64_t)b->n_chunk * (b->n_ctx - 1 - b->n_ctx / 2);
    const uint64_t need = 20 + 4 * n_tok + 2 * rows * b->row_len;
    if ((uint64_t)sb.st_size != need) {
        bn_err(err, errlen, "%s: size %lld bytes, expected %llu for %d chunks of %u tokens and a %d-token vocabulary "
               "(truncated, or not written by --kl-divergence-base)",
               path, (long long)sb.st_size, (unsigned long long)need, b->n_chunk, b->n_ctx, b->n_vocab);
        bn_kld_base_close(b);
        return -1;
    }
    b->tokens = xmalloc(sizeof(int32_t) * n_tok);
    if (fread(b->tokens, sizeof(int32_t), n_tok, b->f) != n_tok) {
        bn_kld_base_close(b);
        return bn_err(err, errlen, "%s: cannot read the tokens", path);
    }
    for (uint64_t i = 0; i < n_tok; i++)
        if (b->tokens[i] < 0 || b->tokens[i] >= b->n_vocab) {
            int32_t t = b->tokens[i];
            bn_kld_base_close(b);
            return bn_err(err, errlen, "%s: token %d at index %llu outside the vocabulary (%d)", path, t,
                          (unsigned long long)i, b->n_vocab);
        }
    return 0;
}

int bn_kld_base_read_chunk(bn_kld_base *b, uint16_t *rows, char *err, size_t errlen) {
    const size_t n = (size_t)(b->n_ctx - 1 - b->n_ctx / 2) * b->row_len;
    if (fread(rows, sizeof(uint16_t), n, b->f) != n) return bn_err(err, errlen, "base log-probabilities end early");
    return 0;
}

void bn_kld_base_close(bn_kld_base *b) {
    if (b->f) fclose(b->f);
    free(b->tokens);
    memset(b, 0, sizeof *b);
}
