// tests/core/test_tok_vectors.c — llama.cpp's tokenizer test vectors (docs/model.md §11.4):
// every string of models/ggml-vocab-<name>.gguf.inp must tokenize (add_special = false,
// parse_special = false) to exactly the ids of the .out line; decode(encode(s)) == s for the
// byte-level BPE vocabs (SPM: " " + s, the space prefix). Also special-token parsing on/off on
// the qwen2 vocab, random bytes (invalid UTF-8) round trips, long inputs, and the speed on ~1 MB of text (printed, not asserted).
#include "core/tokenizer.h"
#include "base/unicode.h"
#include "base/util.h"
#include "tests/test.h"
#include <string.h>
#include <unistd.h>

#define SEP "\n__ggml_vocab_test__\n"

typedef struct {
    char *text;
    size_t len;
    int32_t *ids;
    int n_ids;
} vec;

// load_vectors: parses .inp/.out; returns the number of vectors (or -1).
static int load_vectors(const char *inp_path, const char *out_path, vec **out) {
    char err[256];
    size_t inp_n, out_n;
    char *inp = bn_read_file(inp_path, &inp_n, err, sizeof err);
    char *outs = bn_read_file(out_path, &out_n, err, sizeof err);
    if (!inp || !outs) { free(inp); free(outs); return -1; }
    vec *v = NULL;
    int n = 0;
    char *p = inp, *end = inp + inp_n;
    while (p < end) {
        char *s = memmem(p, (size_t)(end - p), SEP, strlen(SEP));
        if (!s) break;
        v = xrealloc(v, (size_t)(n + 1) * sizeof *v);
        v[n].len = (size_t)(s - p);
        v[n].text = xmalloc(v[n].len + 1);
        memcpy(v[n].text, p, v[n].len);
        v[n].text[v[n].len] = 0;
        v[n].ids = NULL;
        v[n].n_ids = 0;
        n++;
        p = s + strlen(SEP);
    }
    // .out: one line per vector
    char *line = outs;
    for (int i = 0; i < n; i++) {
        char *nl = strchr(line, '\n');
        if (!nl) nl = outs + out_n;
        char *q = line;
        while (q < nl) {
            char *e;
            long id = strtol(q, &e, 10);
            if (e == q) break;
            v[i].ids = xrealloc(v[i].ids, (size_t)(v[i].n_ids + 1) * sizeof *v[i].ids);
            v[i].ids[v[i].n_ids++] = (int32_t)id;
            q = e;
        }
        line = nl < outs + out_n ? nl + 1 : nl;
    }
    free(inp);
    free(outs);
    *out = v;
    return n;
}

static bn_tokenizer *open_vocab(const char *name, gguf_file **gout) {
    char path[1024], rel[256], err[256];
    snprintf(rel, sizeof rel, "llama.cpp/models/ggml-vocab-%s.gguf", name);
    test_third_party(path, sizeof path, rel);
    gguf_file *g = gguf_open(path, err, sizeof err);
    if (!g) { fprintf(stderr, "%s: %s\n", name, err); return NULL; }
    bn_tokenizer *t = bn_tokenizer_from_gguf(g, err, sizeof err);
    if (!t) fprintf(stderr, "%s: %s\n", name, err);
    if (gout) *gout = g;
    else gguf_close(g);
    return t;
}

// check_vocab: all vectors of one vocab; returns the number of vectors checked.
static int check_vocab(const char *name, bool byte_level) {
    char inp[1024], outp[1024], rel[256];
    snprintf(rel, sizeof rel, "llama.cpp/models/ggml-vocab-%s.gguf.inp", name);
    test_third_party(inp, sizeof inp, rel);
    snprintf(rel, sizeof rel, "llama.cpp/models/ggml-vocab-%s.gguf.out", name);
    test_third_party(outp, sizeof outp, rel);
    bn_tokenizer *t = open_vocab(name, NULL);
    CHECK(t != NULL, "open %s", name);
    if (!t) return 0;
    vec *v = NULL;
    int n = load_vectors(inp, outp, &v);
    CHECK(n > 0, "vectors for %s", name);
    int exact = 0, roundtrip = 0;
    for (int i = 0; i < n; i++) {
        int32_t *ids;
        int k = bn_tokenize(t, v[i].text, v[i].len, false, false, &ids);
        bool same = k == v[i].n_ids && (k == 0 || memcmp(ids, v[i].ids, (size_t)k * sizeof *ids) == 0);
        exact += same;
        CHECK(same, "%s vector %d ('%.40s'): got %d ids, want %d", name, i, v[i].text, k, v[i].n_ids);
        if (!same) {
            fprintf(stderr, "  got :");
            for (int j = 0; j < k && j < 40; j++) fprintf(stderr, " %d", ids[j]);
            fprintf(stderr, "\n  want:");
            for (int j = 0; j < v[i].n_ids && j < 40; j++) fprintf(stderr, " %d", v[i].ids[j]);
            fprintf(stderr, "\n");
        }
        size_t dl;
        char *d = bn_detokenize(t, ids, k, false, &dl);
        bool rt;
        if (byte_level) rt = dl == v[i].len && memcmp(d, v[i].text, dl) == 0;
        else rt = (v[i].len == 0 && dl == 0) || (dl == v[i].len + 1 && d[0] == ' ' && memcmp(d + 1, v[i].text, v[i].len) == 0);
        roundtrip += rt;
        CHECK(rt, "%s vector %d round trip: '%.40s' -> '%.40s'", name, i, v[i].text, d);
        free(d);
        free(ids);
        free(v[i].text);
        free(v[i].ids);
    }
    printf("%-10s pre=%-9s %d/%d vectors exact, %d/%d round trips\n", name, bn_tokenizer_pre(t), exact, n, roundtrip, n);
    free(v);
    bn_tokenizer_free(t);
    return n;
}

static bool ids_equal(const int32_t *a, int na, const int32_t *b, int nb) {
    return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

// check_special: control-token parsing on the qwen2 vocab (docs/model.md §11.2 ids).
static void check_special(const bn_tokenizer *t) {
    const char *s = "<|im_start|>user\nHello<|im_end|>\n<|endoftext|>";
    int32_t *on, *off, *plain;
    int n_on = bn_tokenize(t, s, strlen(s), false, true, &on);
    int n_off = bn_tokenize(t, s, strlen(s), false, false, &off);
    int n_plain = bn_tokenize(t, "user\nHello", 10, false, false, &plain);
    CHECK(n_on == n_plain + 4, "parse_special on: %d ids (want %d)", n_on, n_plain + 4);
    if (n_on == n_plain + 4) {
        CHECK(on[0] == 151644, "<|im_start|> -> %d", on[0]);
        CHECK(ids_equal(on + 1, n_plain, plain, n_plain), "text between specials tokenized alone");
        CHECK(on[n_plain + 1] == 151645, "<|im_end|> -> %d", on[n_plain + 1]);
        CHECK(on[n_plain + 2] == 198, "\\n -> %d", on[n_plain + 2]);
        CHECK(on[n_plain + 3] == 151643, "<|endoftext|> -> %d", on[n_plain + 3]);
    }
    bool any_special = false;
    for (int i = 0; i < n_off; i++) any_special |= off[i] >= 151643;
    CHECK(!any_special && n_off > n_on, "parse_special off: no control ids (%d ids)", n_off);
    size_t dl;
    char *d = bn_detokenize(t, off, n_off, false, &dl);
    CHECK(dl == strlen(s) && memcmp(d, s, dl) == 0, "decode(parse_special off) == input: '%s'", d);
    free(d);
    d = bn_detokenize(t, on, n_on, true, &dl);
    CHECK(dl == strlen(s) && memcmp(d, s, dl) == 0, "decode(special on, render specials) == input: '%s'", d);
    free(d);
    d = bn_detokenize(t, on, n_on, false, &dl);
    CHECK(strcmp(d, "user\nHello\n") == 0, "control tokens hidden without special: '%s'", d);
    free(d);
    // user-defined tokens ([PAD151646], type 4) match even with parse_special = false
    int32_t *pad;
    int n_pad = bn_tokenize(t, "a[PAD151646]b", 13, false, false, &pad);
    CHECK(n_pad == 3 && pad[1] == 151646, "user-defined token cut with parse_special off (%d ids, [1] = %d)", n_pad,
          n_pad > 1 ? pad[1] : -1);
    free(pad);
    CHECK(bn_token_is_eog(t, 151643) && bn_token_is_eog(t, 151645), "EOG: <|endoftext|>, <|im_end|>");
    CHECK(!bn_token_is_eog(t, 151644) && !bn_token_is_eog(t, 198), "not EOG: <|im_start|>, \\n");
    CHECK(bn_token_lookup(t, "<|im_end|>") == 151645, "lookup <|im_end|>");
    CHECK(bn_token_lookup(t, "Ġthe") == 279, "lookup Ġthe -> %d", bn_token_lookup(t, "Ġthe"));
    CHECK(bn_token_lookup(t, "no such token here") == -1, "lookup miss");
    CHECK(strcmp(bn_token_text(t, 198), "Ċ") == 0, "text of 198 is Ċ");
    CHECK(!bn_tokenizer_add_bos(t), "qwen2: no BOS");
    char piece[16];
    int pl = bn_token_to_piece(t, 198, piece, sizeof piece, false);
    CHECK(pl == 1 && piece[0] == '\n', "piece of 198 is \\n");
    CHECK(bn_token_to_piece(t, 151645, piece, sizeof piece, false) == 0, "control piece hidden");
    CHECK(bn_token_to_piece(t, 151645, piece, 3, true) == -10, "too small buffer -> -needed");
    free(on); free(off); free(plain);
}

// check_long: 100k-character inputs (one huge word, whitespace runs) and ~1 MB of mixed text.
static void check_long(const bn_tokenizer *t, const char *name) {
    size_t n = 100000;
    char *s = xmalloc(n + 1);
    const char *fills[] = {"a", " ", "\n", "ab", "é"};
    for (int f = 0; f < 5; f++) {
        size_t fl = strlen(fills[f]), m = 0;
        while (m + fl <= n) { memcpy(s + m, fills[f], fl); m += fl; }
        double t0 = bn_time_ms();
        int32_t *ids;
        int k = bn_tokenize(t, s, m, false, false, &ids);
        double ms = bn_time_ms() - t0;
        size_t dl;
        char *d = bn_detokenize(t, ids, k, false, &dl);
        CHECK(k > 0 && dl == m && memcmp(d, s, m) == 0, "%s: 100k x '%s' round trip (%d ids)", name, fills[f], k);
        printf("%s: %zu bytes of '%s' -> %d ids in %.1f ms\n", name, m, strcmp(fills[f], "\n") ? fills[f] : "\\n", k, ms);
        free(d);
        free(ids);
    }
    free(s);
    // ~1 MB: the test strings of the vocab repeated
    char path[1024];
    test_third_party(path, sizeof path, "llama.cpp/models/ggml-vocab-qwen2.gguf.inp");
    size_t inp_n;
    char err[256];
    char *inp = bn_read_file(path, &inp_n, err, sizeof err);
    if (!inp) return;
    size_t total = 1 << 20;
    char *big = xmalloc(total);
    for (size_t m = 0; m < total; m += inp_n) memcpy(big + m, inp, m + inp_n <= total ? inp_n : total - m);
    size_t cut = bn_utf8_valid_prefix(big, total); // the last copy may be cut mid-character
    double t0 = bn_time_ms();
    int32_t *ids;
    int k = bn_tokenize(t, big, cut, false, false, &ids);
    double ms = bn_time_ms() - t0;
    size_t dl;
    char *d = bn_detokenize(t, ids, k, false, &dl);
    CHECK(dl == cut && memcmp(d, big, cut) == 0, "%s: 1 MB round trip", name);
    printf("%s: 1 MB -> %d ids in %.1f ms (%.2f MB/s)\n", name, k, ms, cut / 1048576.0 / (ms / 1000.0));
    free(d); free(ids); free(big); free(inp);
}

// check_random_bytes: arbitrary bytes (invalid UTF-8 included) round-trip exactly, with and without
// special-token parsing.
static void check_random_bytes(const bn_tokenizer *t, const char *name) {
    uint64_t x = 0x243F6A8885A308D3ull;
    char buf[300];
    int bad = 0;
    for (int i = 0; i < 2000; i++) {
        int n = (int)(x % 300);
        for (int j = 0; j < n; j++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            int r = (int)(x % 8);
            buf[j] = (char)(r < 3 ? (x >> 8) & 0xFF : r < 5 ? ' ' + ((x >> 8) % 95) : r == 5 ? '\n' : r == 6 ? 0xC3 : '<');
        }
        for (int sp = 0; sp < 2; sp++) {
            int32_t *ids;
            int k = bn_tokenize(t, buf, (size_t)n, false, sp, &ids);
            size_t dl;
            char *d = bn_detokenize(t, ids, k, true, &dl);
            bad += k < 0 || dl != (size_t)n || memcmp(d, buf, (size_t)n) != 0;
            free(d);
            free(ids);
        }
        x = x * 6364136223846793005ull + 1442695040888963407ull;
    }
    CHECK(bad == 0, "%s: %d of 4000 random byte strings do not round-trip", name, bad);
}

int main(void) {
    char probe[1024];
    test_third_party(probe, sizeof probe, "llama.cpp/models/ggml-vocab-qwen2.gguf");
    if (access(probe, R_OK) != 0)
        return test_skip("llama.cpp vocab files missing (third_party/; run ./scripts/fetch-llamacpp.sh)");
    check_vocab("qwen35", true);
    check_vocab("qwen2", true);
    check_vocab("gpt-2", true);
    check_vocab("llama-bpe", true);
    check_vocab("llama-spm", false);
    bn_tokenizer *t = open_vocab("qwen2", NULL);
    if (t) {
        check_special(t);
        check_random_bytes(t, "qwen2");
        check_long(t, "qwen2");
        bn_tokenizer_free(t);
    }
    return test_done("test_tok_vectors");
}
