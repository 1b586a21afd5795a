// tests/core/test_tok_ref.c — the tokenizer against llama.cpp itself (prebuilt npm libllama
// through tests/ref/llama_ref.h) on five vocabularies (qwen35, qwen2, gpt-2, llama-bpe, llama-spm):
//   - the piece of EVERY token (special and non-special rendering) is byte-identical,
//   - the EOG flag of every token and the add-BOS flag agree,
//   - ~1 MB of text (qwen35) gives identical ids,
//   - 1,500 random valid UTF-8 strings per vocab (Unicode whitespace, combining marks, digits of
//     other scripts, letters of many scripts, emoji, punctuation, contractions, special-token texts)
//     tokenize to identical ids with add_special on/off and parse_special on/off.
// Skips (exit 77) when the reference is missing. Invalid UTF-8 is not compared (llama.cpp maps
// bad bytes to U+FFFD; we keep the bytes so decode(encode(s)) == s).
#include "core/tokenizer.h"
#include "base/unicode.h"
#include "base/util.h"
#include "tests/test.h"
#include <string.h>
#ifdef HAVE_LLAMA_REF
#include "tests/ref/llama_ref.h"
#endif

#ifndef HAVE_LLAMA_REF
int main(void) { return test_skip("llama.cpp reference shim not built (third_party/llama.cpp headers missing)"); }
#else

#define MAX_IDS 4096

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(uint32_t n) {
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (uint32_t)(rs % n);
}

// random_text: a mix of code points chosen to stress the pre-tokenizer classes; returns the length.
static size_t random_text(char *buf, int n_units) {
    static const uint32_t space[] = {' ', ' ', ' ', '\n', '\n', '\t', '\r', 0x0B, 0x0C, 0x85, 0xA0, 0x1680, 0x2000,
                                     0x2009, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0x200B, 0xFEFF};
    static const uint32_t marks[] = {0x300, 0x301, 0x308, 0x327, 0x489, 0x5B4, 0x64B, 0x93E, 0x94D, 0xE31,
                                     0x17B6, 0x17C1, 0x20DD, 0x302A, 0xFE0F, 0x1AB0};
    static const uint32_t digits[] = {'0', '5', '9', 0xB2, 0xBD, 0x660, 0x966, 0xFF11, 0x2160, 0x2460, 0x1D7CE, 0x3007};
    static const uint32_t letters[] = {'a', 'Z', 's', 't', 'e', 0xE9, 0xDF, 0x3B1, 0x416, 0x5D0, 0x627, 0x915, 0xE01,
                                       0x1780, 0x4E2D, 0x6587, 0x3042, 0x30A2, 0xAC00, 0x2C6F, 0x1D400, 0x20000, 0x2B0};
    static const uint32_t punct[] = {'.', ',', '!', '?', '\'', '"', '-', '_', '(', ')', '<', '>', '|', '$', '+', '^',
                                     '~', '=', '#', '@', '/', '\\', 0xA1, 0xBF, 0x2014, 0x2019, 0x201C, 0x3001, 0x3002,
                                     0xFF01, 0x1F600, 0x1F44B, 0x1F1FA, 0x2764, 0x20AC, 0xA9, 0x2122};
    static const char *const frags[] = {"'s", "'T", "'re", "'VE", "'m", "'ll", "'D", "<|im_start|>", "<|im_end|>",
                                        "<|endoftext|>", "<think>", "</think>", "[PAD151700]", "<s>", "</s>", "<unk>",
                                        "  ", "\r\n", "\n\n\n", "123456", "don't", "http://x.io/a?b=c"};
    size_t len = 0;
    for (int i = 0; i < n_units; i++) {
        uint32_t k = rnd(12), cp;
        if (k == 0) {
            const char *f = frags[rnd(sizeof frags / sizeof *frags)];
            memcpy(buf + len, f, strlen(f));
            len += strlen(f);
            continue;
        }
        if (k <= 2) cp = space[rnd(sizeof space / sizeof *space)];
        else if (k == 3) cp = marks[rnd(sizeof marks / sizeof *marks)];
        else if (k == 4) cp = digits[rnd(sizeof digits / sizeof *digits)];
        else if (k <= 7) cp = letters[rnd(sizeof letters / sizeof *letters)];
        else if (k <= 9) cp = punct[rnd(sizeof punct / sizeof *punct)];
        else cp = 32 + rnd(95);
        len += (size_t)bn_utf8_encode(cp, buf + len);
    }
    buf[len] = 0;
    return len;
}

static int n_mismatch_print;

static void compare(const bn_tokenizer *t, llama_ref *ref, const char *name, const char *s, size_t n, bool add_special,
                    bool parse_special) {
    static int32_t want[MAX_IDS];
    int nw = llama_ref_tokenize(ref, s, (int)n, want, MAX_IDS, add_special, parse_special);
    int32_t *got;
    int ng = bn_tokenize(t, s, n, add_special, parse_special, &got);
    bool same = ng == nw && (ng <= 0 || memcmp(got, want, (size_t)ng * sizeof *got) == 0);
    CHECK(same, "%s: ids differ (add_special %d, parse_special %d)", name, add_special, parse_special);
    if (!same && n_mismatch_print++ < 6) {
        fprintf(stderr, "  text (%zu B): \"%.*s\"\n  ours (%d):", n, (int)(n < 120 ? n : 120), s, ng);
        for (int i = 0; i < ng && i < 30; i++) fprintf(stderr, " %d", got[i]);
        fprintf(stderr, "\n  llama.cpp (%d):", nw);
        for (int i = 0; i < nw && i < 30; i++) fprintf(stderr, " %d", want[i]);
        fprintf(stderr, "\n");
    }
    free(got);
}

static void run_vocab(const char *name) {
    char path[1024], rel[256], err[512];
    snprintf(rel, sizeof rel, "llama.cpp/models/ggml-vocab-%s.gguf", name);
    test_third_party(path, sizeof path, rel);
    gguf_file *g = gguf_open(path, err, sizeof err);
    CHECK(g != NULL, "open %s: %s", name, err);
    if (!g) return;
    bn_tokenizer *t = bn_tokenizer_from_gguf(g, err, sizeof err);
    gguf_close(g);
    llama_ref *ref = llama_ref_load_vocab(path, err, sizeof err);
    CHECK(t && ref, "%s: load tokenizer / reference: %s", name, err);
    if (!t || !ref) { bn_tokenizer_free(t); llama_ref_free(ref); return; }
    int nv = bn_tokenizer_n_vocab(t);
    CHECK(nv == llama_ref_n_vocab(ref), "%s: n_vocab %d vs %d", name, nv, llama_ref_n_vocab(ref));
    CHECK(bn_tokenizer_add_bos(t) == llama_ref_add_bos(ref), "%s: add_bos", name);
    CHECK(bn_token_bos(t) == llama_ref_bos(ref) || !bn_tokenizer_add_bos(t), "%s: bos id %d vs %d", name,
          bn_token_bos(t), llama_ref_bos(ref));

    // every token's piece and EOG flag
    int piece_bad = 0, eog_bad = 0;
    char a[512], b[512];
    for (int32_t id = 0; id < nv; id++) {
        for (int sp = 0; sp < 2; sp++) {
            int na = bn_token_to_piece(t, id, a, sizeof a, sp);
            int nb = llama_ref_token_to_piece(ref, id, b, sizeof b, sp);
            if (na != nb || (na > 0 && memcmp(a, b, (size_t)na) != 0)) {
                if (piece_bad++ < 5)
                    fprintf(stderr, "  %s piece of %d (special %d): ours %d B '%.*s', llama.cpp %d B '%.*s'\n", name, id,
                            sp, na, na > 0 ? na : 0, a, nb, nb > 0 ? nb : 0, b);
            }
        }
        if (bn_token_is_eog(t, id) != llama_ref_is_eog(ref, id) && eog_bad++ < 5)
            fprintf(stderr, "  %s EOG of %d '%s': ours %d\n", name, id, bn_token_text(t, id), bn_token_is_eog(t, id));
    }
    CHECK(piece_bad == 0, "%s: %d token pieces differ from llama.cpp", name, piece_bad);
    CHECK(eog_bad == 0, "%s: %d EOG flags differ from llama.cpp", name, eog_bad);

    // random strings
    int before = test_failures;
    char *buf = xmalloc(64 * 1024);
    const int N = 1500;
    for (int i = 0; i < N; i++) {
        size_t n = random_text(buf, 1 + (int)rnd(i % 10 == 0 ? 400 : 40));
        compare(t, ref, name, buf, n, (i & 1) != 0, (i & 2) != 0);
    }
    free(buf);
    if (strcmp(name, "qwen35") == 0) { // ~1 MB: the .inp strings repeated, one call each, timed
        char inp_path[1024];
        snprintf(rel, sizeof rel, "llama.cpp/models/ggml-vocab-%s.gguf.inp", name);
        test_third_party(inp_path, sizeof inp_path, rel);
        size_t inp_n;
        char *inp = bn_read_file(inp_path, &inp_n, err, sizeof err);
        if (inp) {
            size_t total = 1 << 20;
            char *big = xmalloc(total);
            for (size_t m = 0; m < total; m += inp_n) memcpy(big + m, inp, m + inp_n <= total ? inp_n : total - m);
            size_t cut = bn_utf8_valid_prefix(big, total);
            int32_t *want = xmalloc(sizeof(int32_t) << 20), *got;
            double t0 = bn_time_ms();
            int ng = bn_tokenize(t, big, cut, false, false, &got);
            double t1 = bn_time_ms();
            int nw = llama_ref_tokenize(ref, big, (int)cut, want, 1 << 20, false, false);
            double t2 = bn_time_ms();
            CHECK(ng == nw && ng > 0 && memcmp(got, want, (size_t)ng * sizeof *got) == 0,
                  "1 MB text: %d vs %d ids", ng, nw);
            printf("%-10s 1 MB: %d ids, ours %.0f ms, llama.cpp %.0f ms\n", name, ng, t1 - t0, t2 - t1);
            free(got); free(want); free(big); free(inp);
        }
    }
    printf("%-10s %d token pieces x2 and EOG flags, %d random strings: %s\n", name, nv, N,
           test_failures == before ? "identical to llama.cpp" : "MISMATCHES");
    bn_tokenizer_free(t);
    llama_ref_free(ref);
}

int main(void) {
    char err[512];
    if (!llama_ref_available(err, sizeof err)) {
        char msg[600];
        snprintf(msg, sizeof msg, "llama.cpp reference unavailable: %s", err);
        return test_skip(msg);
    }
    const char *vocabs[] = {"qwen35", "qwen2", "gpt-2", "llama-bpe", "llama-spm"};
    for (size_t i = 0; i < sizeof vocabs / sizeof *vocabs; i++) run_vocab(vocabs[i]);
    return test_done("test_tok_ref");
}
#endif
