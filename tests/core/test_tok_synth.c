// tests/core/test_tok_synth.c — small synthetic byte-level BPE vocabularies (256 byte tokens
// + merges + specials), as the model generator writes them: hand-computed merge results, leftmost
// merge on equal ranks, byte fallback for a merge result missing from the vocab, special tokens,
// EOG set, round trips on arbitrary bytes (invalid UTF-8 included); then the vocabulary that
// bn_mkmodel_write puts into the tiny model.
#include "core/tokenizer.h"
#include "base/unicode.h"
#include "synth/mkmodel.h"
#include "base/util.h"
#include "tests/test.h"
#include <string.h>
#include <unistd.h>

#define G "\xc4\xa0" // 'Ġ'

typedef struct {
    char *tok[400];
    int32_t type[400];
    int n;
    const char *merges[64];
    int n_merges;
} synth;

static int add_tok(synth *s, const char *text, int type) {
    s->tok[s->n] = xstrdup(text);
    s->type[s->n] = type;
    return s->n++;
}

static bn_tokenizer *load(const char *path) {
    char err[256];
    gguf_file *g = gguf_open(path, err, sizeof err);
    if (!g) { fprintf(stderr, "%s\n", err); return NULL; }
    bn_tokenizer *t = bn_tokenizer_from_gguf(g, err, sizeof err);
    if (!t) fprintf(stderr, "%s\n", err);
    gguf_close(g);
    return t;
}

static int tok_ids(const bn_tokenizer *t, const char *text, bool special, int32_t *out, int cap) {
    int32_t *ids;
    int n = bn_tokenize(t, text, strlen(text), false, special, &ids);
    for (int i = 0; i < n && i < cap; i++) out[i] = ids[i];
    free(ids);
    return n;
}

static void roundtrip(const bn_tokenizer *t, const char *s, size_t n, const char *what) {
    int32_t *ids;
    int k = bn_tokenize(t, s, n, false, false, &ids);
    size_t dl;
    char *d = bn_detokenize(t, ids, k, true, &dl);
    CHECK(k >= 0 && dl == n && memcmp(d, s, n) == 0, "round trip %s (%d ids)", what, k);
    free(d);
    free(ids);
}

static void test_handmade(const char *dir) {
    synth s = {0};
    for (int b = 0; b < 256; b++) {
        char c[4] = {0};
        bn_utf8_encode(bn_byte_to_cp((uint8_t)b), c);
        add_tok(&s, c, BN_TOKEN_NORMAL);
    }
    // merges (rank = order); "x y" → "xy" is deliberately NOT a vocab token (byte fallback)
    const char *m[] = {"h e", G " t", G "t he", "l l", "a b", "b a", "x y", "xy z"};
    int ids_of[8];
    for (int i = 0; i < 8; i++) {
        s.merges[s.n_merges++] = m[i];
        if (i == 6) { ids_of[i] = -1; continue; }
        char merged[32];
        const char *sp = strchr(m[i], ' ');
        snprintf(merged, sizeof merged, "%.*s%s", (int)(sp - m[i]), m[i], sp + 1);
        ids_of[i] = add_tok(&s, merged, BN_TOKEN_NORMAL);
    }
    int eot = add_tok(&s, "<|endoftext|>", BN_TOKEN_CONTROL);
    int ims = add_tok(&s, "<|im_start|>", BN_TOKEN_CONTROL);
    int ime = add_tok(&s, "<|im_end|>", BN_TOKEN_CONTROL);
    int ud = add_tok(&s, "<ud>", BN_TOKEN_USER_DEFINED);
    int pad = add_tok(&s, "[PAD999]", BN_TOKEN_UNUSED);
    char path[1024];
    snprintf(path, sizeof path, "%s/synth-vocab.gguf", dir);
    gguf_writer *w = gguf_writer_new();
    gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_set_str(w, "tokenizer.ggml.pre", "qwen35");
    gguf_set_arr_str(w, "tokenizer.ggml.tokens", (uint64_t)s.n, (const char *const *)s.tok);
    gguf_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, (uint64_t)s.n, s.type);
    gguf_set_arr_str(w, "tokenizer.ggml.merges", (uint64_t)s.n_merges, s.merges);
    gguf_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eot);
    char err[256];
    CHECK(gguf_writer_write(w, path, NULL, NULL, err, sizeof err) == 0, "write: %s", err);
    gguf_writer_free(w);
    bn_tokenizer *t = load(path);
    CHECK(t != NULL, "load synthetic vocab");
    if (!t) return;
    CHECK(bn_tokenizer_n_vocab(t) == s.n, "n_vocab %d", bn_tokenizer_n_vocab(t));
    int32_t o[64];
    int n;
    n = tok_ids(t, " the", false, o, 64); // Ġ t h e: "h e" (rank 0) first, then "Ġ t", then "Ġt he"
    CHECK(n == 1 && o[0] == ids_of[2], "' the' -> Ġthe (n = %d, id %d)", n, o[0]);
    n = tok_ids(t, "the", false, o, 64); // t + he; no "t he" merge
    CHECK(n == 2 && o[0] == 't' && o[1] == ids_of[0], "'the' -> t, he (n = %d)", n);
    n = tok_ids(t, "hello", false, o, 64); // he, l l → ll, o
    CHECK(n == 3 && o[0] == ids_of[0] && o[1] == ids_of[3] && o[2] == 'o', "'hello' -> he ll o (n = %d)", n);
    // "aba": "a b" (rank 4) beats "b a" (rank 5) → ab, a
    n = tok_ids(t, "aba", false, o, 64);
    CHECK(n == 2 && o[0] == ids_of[4] && o[1] == 'a', "'aba' -> ab a (n = %d)", n);
    // "abab": pairs (a,b)@0 rank 4, (b,a)@1 rank 5, (a,b)@2 rank 4: leftmost equal rank first → ab ab
    n = tok_ids(t, "abab", false, o, 64);
    CHECK(n == 2 && o[0] == ids_of[4] && o[1] == ids_of[4], "'abab' -> ab ab (n = %d)", n);
    // "xyz": x y → "xy" (not a token) → xy z → "xyz" token
    n = tok_ids(t, "xyz", false, o, 64);
    CHECK(n == 1 && o[0] == ids_of[7], "'xyz' via a non-vocab intermediate (n = %d)", n);
    // "xy" alone: merged symbol "xy" is not in the vocab → byte tokens x, y
    n = tok_ids(t, "xy", false, o, 64);
    CHECK(n == 2 && o[0] == 'x' && o[1] == 'y', "'xy' falls back to bytes (n = %d)", n);
    // space and newline bytes map to Ġ / Ċ tokens (ids 256 + k in the byte table order = byte ids here)
    n = tok_ids(t, "a\nb", false, o, 64);
    CHECK(n == 3 && o[1] == '\n', "newline byte token id 10 (n = %d)", n);
    // specials
    n = tok_ids(t, "<|im_start|>hello<|im_end|>", true, o, 64);
    CHECK(n == 5 && o[0] == ims && o[4] == ime, "specials parsed (n = %d)", n);
    n = tok_ids(t, "<|im_start|>", false, o, 64);
    CHECK(n == 12, "specials as text with parse_special off (n = %d)", n);
    n = tok_ids(t, "a<ud>b", false, o, 64);
    CHECK(n == 3 && o[1] == ud, "user-defined token always cut (n = %d)", n);
    n = tok_ids(t, "[PAD999]", true, o, 64);
    CHECK(n > 1, "unused token never matched as special (n = %d)", n);
    CHECK(bn_token_is_eog(t, eot) && bn_token_is_eog(t, ime) && !bn_token_is_eog(t, ims), "EOG set");
    CHECK(bn_token_eos(t) == eot && bn_token_bos(t) == -1 && !bn_tokenizer_add_bos(t), "eos/bos");
    char piece[8];
    CHECK(bn_token_to_piece(t, pad, piece, 8, true) == 0, "unused token renders empty");
    CHECK(bn_token_lookup(t, G "the") == ids_of[2], "lookup Ġthe");
    // round trips over awkward bytes
    const char *samples[] = {"", " ", "  \n\n\t x", "the theme thesis", "héllo wörld ✓ 🙂", "it's we'LL 123 4567",
                             "a\r\nb\r\n", "\xff\xfe bad \xc3 utf8 \xe2\x82"};
    for (size_t i = 0; i < sizeof samples / sizeof *samples; i++) roundtrip(t, samples[i], strlen(samples[i]), samples[i]);
    char all[256];
    for (int b = 0; b < 256; b++) all[b] = (char)b;
    roundtrip(t, all, 256, "all 256 bytes");
    bn_tokenizer_free(t);
    unlink(path);
    for (int i = 0; i < s.n; i++) free(s.tok[i]);
}

// test_errors: unsupported model / pre type and missing keys give NULL and a message.
static void test_errors(const char *dir) {
    const char *toks[] = {"a", "b", "ab"};
    const char *merges[] = {"a b"};
    const char *cases[][2] = {{"gpt2", "no-such-pre"}, {"bert", "default"}, {"gpt2", NULL}};
    for (int c = 0; c < 4; c++) {
        gguf_writer *w = gguf_writer_new();
        if (c < 3) gguf_set_str(w, "tokenizer.ggml.model", cases[c][0]);
        if (c < 3 && cases[c][1]) gguf_set_str(w, "tokenizer.ggml.pre", cases[c][1]);
        gguf_set_arr_str(w, "tokenizer.ggml.tokens", 3, toks);
        if (c != 2) gguf_set_arr_str(w, "tokenizer.ggml.merges", 1, merges);
        char path[1024], err[256] = "";
        snprintf(path, sizeof path, "%s/bad-%d.gguf", dir, c);
        CHECK(gguf_writer_write(w, path, NULL, NULL, err, sizeof err) == 0, "write: %s", err);
        gguf_writer_free(w);
        gguf_file *g = gguf_open(path, err, sizeof err);
        bn_tokenizer *t = g ? bn_tokenizer_from_gguf(g, err, sizeof err) : NULL;
        CHECK(t == NULL && strstr(err, "tokenizer") != NULL, "bad vocab %d rejected: '%s'", c, err);
        bn_tokenizer_free(t);
        gguf_close(g);
        unlink(path);
    }
}

// test_default_pre: no pre key → llama.cpp's default split chain (4 regexes); digits of 4+ split in 3s.
static void test_default_pre(const char *dir) {
    char *toks[256];
    for (int b = 0; b < 256; b++) {
        char c[4] = {0};
        bn_utf8_encode(bn_byte_to_cp((uint8_t)b), c);
        toks[b] = xstrdup(c);
    }
    const char *merges[] = {"1 2", "12 3"};
    gguf_writer *w = gguf_writer_new();
    gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
    char *all[258];
    memcpy(all, toks, sizeof toks);
    all[256] = "12";
    all[257] = "123";
    gguf_set_arr_str(w, "tokenizer.ggml.tokens", 258, (const char *const *)all);
    gguf_set_arr_str(w, "tokenizer.ggml.merges", 2, merges);
    char path[1024], err[256] = "";
    snprintf(path, sizeof path, "%s/default-pre.gguf", dir);
    CHECK(gguf_writer_write(w, path, NULL, NULL, err, sizeof err) == 0, "write: %s", err);
    gguf_writer_free(w);
    bn_tokenizer *t = load(path);
    CHECK(t && strcmp(bn_tokenizer_pre(t), "default") == 0, "default pre-tokenizer");
    if (t) {
        int32_t o[16];
        // "\p{N}+" then "[0-9][0-9][0-9]": "123123" → 123 | 123 ; "1234" → 123 | 4
        int n = tok_ids(t, "1234", false, o, 16);
        CHECK(n == 2 && o[0] == 257 && o[1] == '4', "'1234' -> 123, 4 (n = %d)", n);
        roundtrip(t, "Hello, world!! 12345 $x+y <= z ^_^", 34, "default pre text");
        bn_tokenizer_free(t);
    }
    unlink(path);
    for (int b = 0; b < 256; b++) free(toks[b]);
}

static void test_mkmodel_vocab(const char *dir) {
    bn_mkmodel_params p;
    bn_mkmodel_defaults(&p, "tiny");
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/synth-tiny.gguf", dir);
    if (bn_mkmodel_write(&p, path, err, sizeof err) != 0) {
        CHECK(0, "mkmodel tiny: %s", err);
        return;
    }
    bn_tokenizer *t = load(path);
    CHECK(t != NULL, "tokenizer of the mkmodel tiny model");
    if (!t) return;
    int32_t o[64];
    int32_t the = bn_token_lookup(t, G "the"), ims = bn_token_lookup(t, "<|im_start|>"),
            ime = bn_token_lookup(t, "<|im_end|>");
    CHECK(the >= 256 && ims > 0 && ime > 0, "mkmodel vocab has Ġthe, <|im_start|>, <|im_end|>");
    int n = tok_ids(t, " the", false, o, 64);
    CHECK(n == 1 && o[0] == the, "mkmodel: ' the' -> Ġthe (n = %d)", n);
    n = tok_ids(t, "<|im_start|>user\nhi<|im_end|>\n", true, o, 64);
    CHECK(n >= 4 && o[0] == ims && o[n - 2] == ime, "mkmodel: ChatML specials (n = %d)", n);
    CHECK(bn_token_is_eog(t, ime) && bn_token_is_eog(t, bn_token_eos(t)), "mkmodel: EOG");
    const char *text = "The quick brown fox, jumps over the lazy dog.\nAnd again!  ";
    roundtrip(t, text, strlen(text), "mkmodel vocab text");
    bn_tokenizer_free(t);
    unlink(path);
}

// test_byte_map: GPT-2 bytes_to_unicode (docs/model.md §11.1 step 3) and its inverse.
static void test_byte_map(void) {
    int k = 0, bad = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        uint32_t want = printable ? (uint32_t)b : 0x100u + (uint32_t)k++;
        bad += bn_byte_to_cp((uint8_t)b) != want || bn_cp_to_byte(want) != b;
    }
    CHECK(bad == 0 && k == 68, "byte map: %d wrong, %d remapped", bad, k);
    CHECK(bn_byte_to_cp(' ') == 0x120 && bn_byte_to_cp('\n') == 0x10A && bn_byte_to_cp('\t') == 0x109, "Ġ Ċ ĉ");
    CHECK(bn_cp_to_byte(0x144) == -1 && bn_cp_to_byte(0x20) == -1 && bn_cp_to_byte(0xAD) == -1, "unmapped cps");
}

// test_utf8_helpers: valid prefix, complete length (streaming) and sanitising.
static void test_utf8_helpers(void) {
    const char *s = "a\xc3\xa9\xe2\x82"; // a é + the first 2 bytes of €
    CHECK(bn_utf8_valid_prefix(s, 5) == 3, "valid prefix stops before a cut character");
    CHECK(bn_utf8_complete_len(s, 5) == 3, "complete_len drops the cut character");
    CHECK(bn_utf8_complete_len(s, 3) == 3 && bn_utf8_complete_len("", 0) == 0, "complete_len of complete text");
    const char *bad = "x\xffy\xc3\xa9";
    CHECK(bn_utf8_valid_prefix(bad, 5) == 1, "valid prefix stops at an invalid byte");
    CHECK(bn_utf8_complete_len(bad, 5) == 5, "complete_len keeps invalid bytes in the middle");
    size_t n;
    char *clean = bn_utf8_sanitize(bad, 5, &n);
    CHECK(n == 7 && strcmp(clean, "x\xef\xbf\xbdy\xc3\xa9") == 0, "sanitize -> U+FFFD (%zu bytes)", n);
    free(clean);
    clean = bn_utf8_sanitize("\xed\xa0\x80", 3, &n); // a UTF-16 surrogate encoded in UTF-8 is invalid
    CHECK(n == 9, "surrogate bytes each replaced (%zu bytes)", n);
    free(clean);
}

int main(void) {
    test_byte_map();
    test_utf8_helpers();
    char dir[] = "/tmp/bonsai-tok-XXXXXX";
    if (!mkdtemp(dir)) return test_skip("cannot create a temp dir");
    test_handmade(dir);
    test_errors(dir);
    test_default_pre(dir);
    test_mkmodel_vocab(dir);
    rmdir(dir);
    return test_done("test_tok_synth");
}
