// train/pairs_in.h — FTPO training rows from a pair-row file (docs/antidoom.md §7), read through
// records/pairs.c (strict: every row is a complete pair row; errors name line and field).
// Ids come from context_ids / rejected_id / chosen_ids; rows without them (plain antidoom rows)
// are tokenised with the model's tokenizer when one is given (context_before with specials
// parsed; rejected/chosen raw token strings looked up in the vocab).
// Filters (§7.3): [TRIMMED_SOURCE_PROMPT] rows, chosen ids equal to the rejected id or repeated,
// rows with no chosen left, rows with len(context) + 1 > max_seq.
#ifndef BONSAI_TRAIN_PAIRS_IN_H
#define BONSAI_TRAIN_PAIRS_IN_H
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include "core/tokenizer.h"

typedef struct {
    int32_t *ctx;     // {n_ctx} context ids (the last one predicts the rejected token)
    int n_ctx;
    int32_t rejected;
    int32_t *chosen;  // {n_chosen} distinct, != rejected
    int n_chosen;
    bool heldout;     // split == "heldout"
    int line;         // 1-based line in the file
} bn_train_row;

typedef struct {
    bn_train_row *rows;
    int n_rows;
    int n_dropped_trimmed, n_dropped_long, n_dropped_no_chosen;
} bn_train_rows;

// bn_train_rows_load: reads path (.jsonl or .jsonl.gz); ids must be < n_vocab. tok may be NULL
// (then rows without context_ids are an error). Returns NULL with "path:line: ..." in err.
bn_train_rows *bn_train_rows_load(const char *path, const bn_tokenizer *tok, int n_vocab, int max_seq,
                                  char *err, size_t errlen);
// bn_train_rows_free: frees the rows (NULL is fine).
void bn_train_rows_free(bn_train_rows *r);

#endif
