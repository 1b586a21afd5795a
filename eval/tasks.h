// eval/tasks.h — scores of completions against held-out task references (docs/antidoom.md §17): exact match of the
// first line (the next line / record) and token accuracy over the first N reference tokens (position by position,
// teacher-free), per family and overall, each with a 95% Wilson interval; as rows and JSON.
#ifndef BONSAI_EVAL_TASKS_H
#define BONSAI_EVAL_TASKS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

typedef struct {
    bool exact;    // the completion's first line equals the reference's
    int n_tokens;  // reference tokens compared: min(N, reference tokens)
    int n_correct; // of them, equal to the completion's token at the same position
} bn_task_score;

typedef struct {
    const char *family; // "all" for the overall row (points into the caller's strings)
    int64_t n, n_exact, n_tokens, n_correct;
    double exact_rate, exact_lo, exact_hi;   // n_exact / n, Wilson 95%
    double token_acc, token_lo, token_hi;    // n_correct / n_tokens, Wilson 95% over positions
} bn_task_stats;

struct bn_tokenizer;

// bn_task_tokens: the prompt text's ids (BOS when the vocabulary wants one; control-token texts parsed, as
// llama.cpp's completion does) into a malloc'd *prompt_ids, and the reference's ids as they follow the prompt: the
// tail of tokenize(prompt + reference) when it starts with the prompt's ids, else tokenize(reference) alone, into a
// malloc'd *ref_ids. Returns the prompt's count (> 0; *n_ref set), or -1 when the prompt tokenizes to nothing.
int bn_task_tokens(const struct bn_tokenizer *tok, const char *prompt, const char *reference, int32_t **prompt_ids,
                   int32_t **ref_ids, int *n_ref);
// bn_task_first_line: the byte length of text's first line: up to the first '\n' that follows a character other than
// '\n' (so leading newlines belong to it), or all of text when there is none.
size_t bn_task_first_line(const char *text, size_t len);
// bn_task_score_one: the score of a completion (text, and ids[0..n_gen)) against reference (text, and ref_ids[0..n_ref))
// over the first n_tokens reference tokens; positions the completion does not reach count as wrong.
bn_task_score bn_task_score_one(const char *gen, size_t gen_len, const int32_t *ids, int n_gen, const char *ref,
                                size_t ref_len, const int32_t *ref_ids, int n_ref, int n_tokens);
// bn_task_stats_compute: one row per family (in order of first appearance) then the overall row "all", into a
// malloc'd *out; returns the row count.
int bn_task_stats_compute(const char *const *family, const bn_task_score *s, int n, bn_task_stats **out);
// bn_task_stats_json: a new JSON array of the rows ({"family", "n", "exact", "exact_rate", "exact_rate_ci95",
// "tokens", "token_correct", "token_accuracy", "token_accuracy_ci95"}).
json_t *bn_task_stats_json(const bn_task_stats *rows, int n_rows);
// bn_task_stats_print: the rows as a table on f (n_tokens: the N of the heading).
void bn_task_stats_print(FILE *f, const bn_task_stats *rows, int n_rows, int n_tokens);
#endif
