// tests/records/fuzz_lines.c — libFuzzer target for the text the tools read from files and the network: a pair row
// (bonsai-ftpo-train's input), a generation-log row, a prompt line (bonsai-mine-pairs' input; the same bytes as a task
// line, bonsai-eval-tasks' input), a /completion response body (what bn_source_http reads from a remote server) and
// arbitrary text through the tokenizer and the frame-loop detector (its tokens and its word pieces). The
// first input byte picks the parser, the rest is its input. Checked beyond "no crash / no sanitizer report":
// a parsed pair row written back and parsed again gives the same line, and the tokenizer round-trips any bytes
// (decode(encode(s)) == s, core/tokenizer.h).
//
// In the suite (any compiler) test records_fuzz_replay runs it without libFuzzer: tests/fuzz_replay.c feeds it the seed
// corpus and fixed-seed mutants of it.
// Build and run (clang with libFuzzer; the library is instrumented too, so the fuzzer sees its branches):
//   CC=clang meson setup build-fuzz -Dfuzz=true -Dcuda=disabled -Db_sanitize=address,undefined -Db_lundef=false -Dc_args=-fsanitize=fuzzer-no-link
//   ninja -C build-fuzz tests/records/fuzz_lines
//   mkdir -p /tmp/lines-corpus && ./build-fuzz/tests/records/fuzz_lines -max_total_time=300 -max_len=2048 /tmp/lines-corpus tests/records/corpus
// The vocabulary: env BONSAI_FUZZ_VOCAB (a GGUF with tokenizer.* keys, e.g. third_party's ggml-vocab-qwen35.gguf),
// else the tiny generated model's synthetic one.
#include "records/pairs.h"
#include "records/prompts.h"
#include "records/tasks.h"
#include "detect/frame.h"
#include "mine/source_http.h"
#include "gguf/gguf.h"
#include "synth/mkmodel.h"
#include "core/tokenizer.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bn_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    char err[256], path[64];
    const char *vocab = getenv("BONSAI_FUZZ_VOCAB");
    if (!vocab) {
        snprintf(path, sizeof path, "/tmp/fuzz-lines-vocab-%d.gguf", (int)getpid());
        bn_mkmodel_params p;
        bn_mkmodel_defaults(&p, "tiny");
        if (bn_mkmodel_write(&p, path, err, sizeof err) != 0) fprintf(stderr, "fuzz_lines: %s\n", err), abort();
        vocab = path;
    }
    gguf_file *g = gguf_open(vocab, err, sizeof err);
    tok = g ? bn_tokenizer_from_gguf(g, err, sizeof err) : NULL;
    if (!tok) fprintf(stderr, "fuzz_lines: %s: %s\n", vocab, err), abort();
    gguf_close(g);
    if (vocab == path) unlink(path);
    return 0;
}

// pair_row: parse; when it parses, the written line parses again to the same line
static void pair_row(const char *s, size_t n) {
    char err[256];
    bn_pair_row r = {0};
    if (bn_pair_row_parse(s, n, &r, err, sizeof err) == 0) {
        char *line = bn_pair_row_to_line(&r, err, sizeof err);
        if (line) {
            bn_pair_row r2 = {0};
            if (bn_pair_row_parse(line, strlen(line), &r2, err, sizeof err) != 0) abort();
            char *line2 = bn_pair_row_to_line(&r2, err, sizeof err);
            if (!line2 || strcmp(line, line2) != 0) abort();
            free(line2);
            bn_pair_row_free(&r2);
            free(line);
        }
    }
    bn_pair_row_free(&r);
}

static void gen_row(const char *s, size_t n) {
    char err[256];
    bn_gen_row g = {0};
    if (bn_gen_row_parse(s, n, &g, err, sizeof err) == 0) free(bn_gen_row_to_line(&g, err, sizeof err));
    bn_gen_row_free(&g);
}

static void prompt_line(const char *s, size_t n, bool with_template) {
    char err[256];
    bn_prompt_opts o = bn_prompt_opts_default();
    if (with_template) o.template_ = BN_ANTIDOOM_TEMPLATE;
    bn_prompt p = {0};
    if (bn_prompt_parse_line(s, n, &o, &p, err, sizeof err) == 0) bn_prompt_free(&p);
    bn_task t;
    if (bn_task_parse_line(s, n, &t, err, sizeof err) == 0) {
        if (!t.id[0] || !t.prompt[0] || !t.reference[0]) abort(); // a parsed task has them non-empty
        bn_task_free(&t);
    }
}

// frame: the frame-loop detector over ids; a hit lies inside them
static void frame(const int32_t *ids, size_t n) {
    bn_frame_params p = bn_frame_params_default();
    bn_frame_hit h;
    if (bn_find_frame_loop(ids, n, &p, &h) == 1 &&
        !(h.start >= 0 && h.start < h.repeat_start && h.repeat_start < h.end && h.end <= (int64_t)n))
        abort();
}

static void completion_body(const char *s, size_t n, int n_probs) {
    char err[256];
    bn_gen_result r = {0};
    if (bn_http_completion_parse(s, n, n_probs, &r, err, sizeof err) == 0) bn_gen_result_free(&r);
}

// text: encode and decode with and without special-token parsing; the plain encoding must round-trip
static void text(const char *s, size_t n) {
    int32_t *ids = NULL;
    int k = bn_tokenize(tok, s, n, false, false, &ids);
    if (k < 0) abort();
    size_t len = 0;
    char *back = bn_detokenize(tok, ids, k, true, &len);
    if (len != n || memcmp(back, s, n) != 0) abort();
    free(back);
    frame(ids, (size_t)k);
    free(ids);
    ids = NULL;
    size_t nu = bn_frame_units(s, n, &ids);
    frame(ids, nu);
    free(ids);
    ids = NULL;
    k = bn_tokenize(tok, s, n, true, true, &ids);
    if (k >= 0) free(bn_detokenize(tok, ids, k, false, &len));
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    // a NUL-terminated copy: the parsers take (pointer, length) but some callers hand them C strings
    char *s = malloc(size);
    memcpy(s, data + 1, size - 1);
    s[size - 1] = 0;
    const size_t n = size - 1;
    switch (data[0] % 7) {
    case 0: pair_row(s, n); break;
    case 1: gen_row(s, n); break;
    case 2: prompt_line(s, n, false); break;
    case 3: prompt_line(s, n, true); break;
    case 4: completion_body(s, n, 0); break;
    case 5: completion_body(s, n, 1 + data[0] / 7 % 20); break;
    default: text(s, n); break;
    }
    free(s);
    return 0;
}
