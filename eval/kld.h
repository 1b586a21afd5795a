// eval/kld.h — llama-perplexity's KL-divergence mode (docs/server.md §14): a base model's log-probabilities
// are saved once (`--kl-divergence-base FILE`), then another model (a quantization, an antidoom merge)
// is scored against them (`--kl-divergence`): KLD, Δp, same-top share, PPL(Q)/PPL(base).
//
// File layout (llama.cpp's, so files are interchangeable with llama-perplexity), little endian:
//   "_logits_"  u32 n_ctx  i32 n_vocab  i32 n_chunk  i32 tokens[n_chunk * n_ctx]  (as tokenized, no BOS)
//   then for every chunk, n_ctx - 1 - n_ctx/2 rows (the scored positions) of bn_kld_row_len(n_vocab)
//   u16: {f32 scale, f32 min_log_prob} in the first 4 u16, then one code per vocabulary entry, where
//   log p[i] ≈ scale·code[i] + min_log_prob (logits clamped to max − 16; code 0 below), rest padding.
#ifndef BONSAI_KLD_H
#define BONSAI_KLD_H
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>

// bn_kld_row_len: u16 entries per saved row (2·⌈n_vocab/2⌉ + 4).
size_t bn_kld_row_len(int n_vocab);
// bn_kld_encode_row: fills row (bn_kld_row_len entries) from one position's logits; returns that
// position's −log p[tok] (llama.cpp's float arithmetic).
double bn_kld_encode_row(const float *logits, int n_vocab, int32_t tok, uint16_t *row);

// Running statistics of a model Q against the saved base (sums as llama.cpp keeps them).
typedef struct {
    double sum_nll, sum_nll2, sum_nll_base, sum_nll_base2, sum_nll_nll_base;
    double sum_kld, sum_kld2, sum_p_diff, sum_p_diff2, sum_p_diff4;
    float max_p_diff;
    size_t n_same_top, count;
    float *kld_values, *p_diff_values; // [count] per position, for the percentiles
    size_t cap;
} bn_kld_stats;

// bn_kld_add_row: scores one position: logits of Q {n_vocab} against the base row for target tok;
// returns the position's KL(base ‖ Q).
double bn_kld_add_row(bn_kld_stats *st, const float *logits, int n_vocab, const uint16_t *base_row, int32_t tok);
// bn_kld_print_chunk: llama-perplexity's per-chunk line (chunk, PPL, ln ratio, KLD, Δp RMS, same top).
void bn_kld_print_chunk(const bn_kld_stats *st, int chunk, FILE *f);
// bn_kld_print_summary: the three statistics blocks (perplexity, KL divergence, token probability);
// prints nothing with fewer than 100 positions (as llama.cpp).
void bn_kld_print_summary(const bn_kld_stats *st, FILE *f);
// bn_kld_mean: mean KLD so far (0 when empty).
double bn_kld_mean(const bn_kld_stats *st);
// bn_kld_free: frees the per-position arrays.
void bn_kld_free(bn_kld_stats *st);

// A saved base file opened for reading.
typedef struct {
    FILE *f;
    uint32_t n_ctx;
    int32_t n_vocab, n_chunk;
    int32_t *tokens;   // [n_chunk * n_ctx]
    size_t row_len;    // u16 per row
} bn_kld_base;

// bn_kld_base_open: reads and checks the header and tokens (size against the file length); 0 or -1 (err).
int bn_kld_base_open(bn_kld_base *b, const char *path, char *err, size_t errlen);
// bn_kld_base_read_chunk: the next chunk's rows into rows (n_ctx − 1 − n_ctx/2 rows); 0 or -1 (err).
int bn_kld_base_read_chunk(bn_kld_base *b, uint16_t *rows, char *err, size_t errlen);
// bn_kld_base_close: closes the file and frees the tokens.
void bn_kld_base_close(bn_kld_base *b);

#endif
