// records/pairs.h — THE pair row (docs/antidoom.md §7.1 antidoom fields + §7.2 id extension) and the
// generation-log row, each <-> one JSONL line, read and written only here. Files are .jsonl or
// .jsonl.gz (by suffix); writes are atomic. Parsing is strict: a missing required field, a wrong
// type or inconsistent lengths give "line N: field 'x': ..." errors. Unknown top-level keys are
// kept in `extra` and written back unchanged.
//
// Required in a pair row: context_before, rejected_token, rejected_decoded, multi_chosen_tokens,
// multi_chosen_decoded (same length, >= 0), source, source_prompt, repetition{start_char,
// repeat_start_char, rejected_token_index, period, repeats, snippet}.
// Optional (the id extension; written only when set): context_ids + rejected_id + chosen_ids
// (together; chosen_ids has the length of multi_chosen_tokens), rejected_logprob,
// topk [[id, logprob], ...], gen{...}, prime{...} | null, split.
// Strings are written as valid UTF-8: invalid bytes (partial UTF-8 tokens) become U+FFFD.
#ifndef BONSAI_RECORDS_PAIRS_H
#define BONSAI_RECORDS_PAIRS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "detect/chosen.h"

struct json_t;

typedef struct {
    int64_t start_char, repeat_start_char;
    int64_t rejected_token_index; // -1: absent (generation-log rows do not have it)
    int64_t period, repeats;
    char *snippet;
} bn_pair_rep;

typedef struct {
    double temperature, top_p, min_p;
    int top_k, n_probs;
    int64_t seed;
    char *endpoint, *model_file, *model_sha256, *file_type; // NULL = absent
} bn_pair_gen;

typedef struct {
    char *phrase;
    int repeats;
    int64_t prefix_chars;
    char *scan_mode; // "completion" | "assistant"
} bn_pair_prime;

typedef struct {
    // antidoom fields (§7.1)
    char *context_before;
    char *rejected_token, *rejected_decoded;
    int n_chosen;
    char **chosen_tokens;   // {n_chosen} raw strings (multi_chosen_tokens)
    char **chosen_decoded;  // {n_chosen} surfaces (multi_chosen_decoded)
    char *source, *source_prompt;
    bn_pair_rep rep;
    // id extension (§7.2)
    bool has_ids;           // context_ids, rejected_id, chosen_ids present
    int n_context;
    int32_t *context_ids;   // {n_context}
    int32_t rejected_id;
    int32_t *chosen_ids;    // {n_chosen}
    bool has_rejected_logprob;
    double rejected_logprob;
    int n_topk;             // 0 with has_topk false = absent
    bool has_topk;
    bn_topk *topk;          // {n_topk}
    bool has_gen;
    bn_pair_gen gen;
    int prime_state;        // 0 absent, 1 null, 2 object
    bn_pair_prime prime;
    char *split;            // NULL = absent
    struct json_t *extra;   // unknown keys (object) or NULL
} bn_pair_row;

typedef struct {
    char *source, *prompt, *completion, *status;
    bool has_rep;           // repetition object vs null
    bn_pair_rep rep;
    struct json_t *extra;
} bn_gen_row;

// bn_pair_row_to_line: returns the row as one malloc'd JSON line (no newline), or NULL (err).
char *bn_pair_row_to_line(const bn_pair_row *r, char *err, size_t errlen);
// bn_pair_row_parse: fills r from one JSON line; returns 0 or -1 (err names the field).
int bn_pair_row_parse(const char *line, size_t len, bn_pair_row *r, char *err, size_t errlen);
// bn_pair_row_free: frees everything the row owns and zeroes it.
void bn_pair_row_free(bn_pair_row *r);
// bn_pair_row_copy: deep copy of src into dst.
void bn_pair_row_copy(bn_pair_row *dst, const bn_pair_row *src);

// bn_pair_row_fn: called by bn_pairs_each with one parsed row and its 1-based line number; it may take
// what the row owns (leaving *row zeroed). Returns 0 to go on, or -1 with err filled (the caller's
// message; bn_pairs_each puts "path:N: " before it).
typedef int (*bn_pair_row_fn)(bn_pair_row *row, int line, void *ctx, char *err, size_t errlen);
// bn_pairs_each: parses the rows of a .jsonl/.jsonl.gz file in order (blank lines skipped) and hands
// each to fn; returns 0, or -1 at the first bad row or fn error (err: "path:N: ...").
int bn_pairs_each(const char *path, bn_pair_row_fn fn, void *ctx, char *err, size_t errlen);
// bn_pairs_read: reads all rows of a .jsonl/.jsonl.gz file (blank lines skipped) into a malloc'd
// array; returns the count or -1 (err: "path:N: field ...").
int bn_pairs_read(const char *path, bn_pair_row **rows, char *err, size_t errlen);
// bn_pairs_write: writes rows atomically (gzip for ".gz"); returns 0 or -1.
int bn_pairs_write(const char *path, const bn_pair_row *rows, int n, char *err, size_t errlen);
// bn_pairs_free: frees n rows and the array.
void bn_pairs_free(bn_pair_row *rows, int n);

// bn_gen_row_to_line: returns the generation-log row as one malloc'd JSON line, or NULL.
char *bn_gen_row_to_line(const bn_gen_row *g, char *err, size_t errlen);
// bn_gen_row_parse: fills g from one JSON line; returns 0 or -1.
int bn_gen_row_parse(const char *line, size_t len, bn_gen_row *g, char *err, size_t errlen);
// bn_gen_row_free: frees what the row owns and zeroes it.
void bn_gen_row_free(bn_gen_row *g);

// bn_record_prompt_index: the integer "prompt_index" of one pair-row or generation-log line as mining
// writes them (resuming reads only this); returns it, or -1 when the line is not a complete JSON
// object with one. loop_detected (may be NULL) receives whether "status" is "loop_detected".
int bn_record_prompt_index(const char *line, size_t len, bool *loop_detected);
#endif
