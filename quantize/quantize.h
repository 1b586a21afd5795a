// quantize/quantize.h — the requantize driver behind bonsai-quantize, callable in-process (train's
// merge, the demo). Reads any supported GGUF, picks each tensor's type with quantize/rules.h
// (docs/formats.md §5), dequantizes to fp32 row chunks and re-quantizes them on N threads, streaming one
// tensor at a time into an atomically written GGUF (never the whole model in RAM).
#ifndef BONSAI_QUANTIZE_H
#define BONSAI_QUANTIZE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// Parameters. Initialise with bn_quantize_params_default(), then set what you need.
typedef struct {
    const char *type;             // TYPE: "Q1_0", "Q2_0", "PQ2_0", "Q4_0", "Q8_0", "Q6_K", "F16", ... or a numeric ftype
    bool q2_g128;                 // Q2_0 in the legacy g128 layout stored as id 42 (published Bonsai files)
    bool pure;                    // --pure
    bool llama_mix;               // --llama-mix: llama-quantize's Q6_K output / Q4_K token_embd also for Q1_0/Q2_0/PQ2_0
    bool leave_output;            // --leave-output-tensor
    bool allow_requantize;        // quantized sources may be re-quantized to another quantized type
    const char *output_type;      // --output-tensor-type, or NULL
    const char *token_embd_type;  // --token-embedding-type, or NULL
    const char *const *tensor_types; // --tensor-type REGEX=T rules (first match wins)
    int n_tensor_types;
    int n_threads;                // <= 0: all CPUs
    bool dry_run;                 // choose types and print the table, write nothing
    FILE *log;                    // table, warnings and summary (NULL = silent)
    bool no_table;                // log only warnings and the summary, not the per-tensor table
    bool progress;                // progress on stderr (base/progress.h: a bar on a terminal, else plain lines)
} bn_quantize_params;

// Totals of one run (filled by bn_quantize_file_stats).
typedef struct {
    int n_tensors, n_quantized, n_copied, n_fallback;
    uint64_t bytes_in, bytes_out;   // tensor data bytes (no header)
    uint64_t n_elements;            // all tensor elements
    double seconds;
} bn_quantize_stats;

// bn_quantize_params_default: TYPE NULL, all flags off, threads = all CPUs, log = stderr.
bn_quantize_params bn_quantize_params_default(void);

// bn_quantize_file: quantizes in → out; returns 0, or -1 with err filled and no file left at out.
int bn_quantize_file(const bn_quantize_params *p, const char *in, const char *out, char *err, size_t errlen);
// bn_quantize_file_stats: same, also filling *stats (may be NULL).
int bn_quantize_file_stats(const bn_quantize_params *p, const char *in, const char *out, bn_quantize_stats *stats,
                           char *err, size_t errlen);

// bn_quantize_rows: converts nrows rows of n_per_row elements from src_type to dst_type
// (dequantize to fp32, then the reference quantizer or plain conversion), on n_threads threads;
// bit-identical to doing it row by row. Returns 0 or -1 (err: a type without codec here).
int bn_quantize_rows(int src_type, const void *src, int dst_type, void *dst, int64_t nrows, int64_t n_per_row,
                     int n_threads, char *err, size_t errlen);

#endif
