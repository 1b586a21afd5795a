// core/tokenizer.c — GGUF vocabularies as llama.cpp runs them (MODEL.md §11):
//   1. special-token partition (longest text first; control/unknown only with parse_special),
//   2. BPE (`gpt2`): PCRE2 pre-tokenizer regex(es) → GPT-2 byte map → merges by rank (binary heap,
//      leftmost on ties) → ids, symbols missing from the vocab fall back to byte tokens;
//   3. SPM (`llama`): "▁" for spaces, greedy best-score bigram merges, byte fallback `<0xXX>`.
// Strings are interned once: every vocab text and every merge part/result gets a symbol index,
// so merging compares integers. Pieces for decoding are precomputed per token.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "core/tokenizer.h"
#include "core/unicode.h"
#include "core/util.h"
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REGEX 4

enum tok_kind { KIND_BPE, KIND_SPM };

// Interned string: bytes [off, off+len) of the intern arena; tok = vocab id or -1.
typedef struct {
    uint32_t off, len;
    int32_t tok;
} intern_sym;

struct bn_tokenizer {
    enum tok_kind kind;
    char pre[32];
    int n_vocab;
    // per token
    uint32_t *text_off, *text_len; // {n_vocab} into `arena`
    uint8_t *type;                 // {n_vocab} enum bn_token_type (after EOG forcing)
    float *score;                  // {n_vocab} SPM scores (0 when absent)
    uint32_t *piece_off, *piece_len; // {n_vocab} decoded bytes (special rendering) into `pieces`
    uint8_t *is_eog;               // {n_vocab}
    char *pieces;
    // intern table (vocab texts + merge strings)
    char *arena;
    size_t arena_len, arena_cap;
    intern_sym *syms;
    size_t n_syms, syms_cap;
    uint32_t *ht; // sym index + 1, 0 = empty
    size_t ht_cap;
    // merges: (left sym, right sym) → rank, result sym
    uint64_t *mkey;
    int32_t *mrank, *mres;
    size_t m_cap;
    // special tokens for the partition, longest first
    int32_t *specials;
    int n_specials;
    // pre-tokenizer
    pcre2_code *re[MAX_REGEX];
    int n_re;
    bool ignore_merges;
    // flags and ids
    bool add_bos, add_eos, add_space_prefix;
    int32_t bos, eos, unk;
    int32_t byte_tok[256]; // byte → token id (mapped char or <0xXX>), -1 if none
    uint32_t byte_sym[256]; // byte → intern sym of its mapped char (+1; 0 = none)
    char byte_utf8[256][4];  // byte → UTF-8 of its GPT-2 mapped char
    uint8_t byte_utf8_len[256];
};

// ---- hashing / interning ------------------------------------------------------------------
static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27; x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// intern_find: sym index of s[0..n) or -1.
static int64_t intern_find(const bn_tokenizer *t, const char *s, size_t n) {
    if (!t->ht_cap) return -1;
    size_t mask = t->ht_cap - 1;
    for (size_t i = hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
        uint32_t v = t->ht[i];
        if (!v) return -1;
        const intern_sym *y = &t->syms[v - 1];
        if (y->len == n && memcmp(t->arena + y->off, s, n) == 0) return v - 1;
    }
}

static void intern_grow(bn_tokenizer *t) {
    size_t cap = t->ht_cap ? t->ht_cap * 2 : 1024;
    uint32_t *ht = xcalloc(cap, sizeof *ht);
    for (size_t k = 0; k < t->n_syms; k++) {
        const intern_sym *y = &t->syms[k];
        size_t i = hash_bytes(t->arena + y->off, y->len) & (cap - 1);
        while (ht[i]) i = (i + 1) & (cap - 1);
        ht[i] = (uint32_t)k + 1;
    }
    free(t->ht);
    t->ht = ht;
    t->ht_cap = cap;
}

// arena_add: copies s[0..n) (plus a NUL) into the arena; returns its offset.
static uint32_t arena_add(bn_tokenizer *t, const char *s, size_t n) {
    if (t->arena_len + n + 1 > t->arena_cap) {
        size_t cap = t->arena_cap ? t->arena_cap : 1 << 16;
        while (cap < t->arena_len + n + 1) cap *= 2;
        t->arena = xrealloc(t->arena, cap);
        t->arena_cap = cap;
    }
    uint32_t off = (uint32_t)t->arena_len;
    memcpy(t->arena + off, s, n);
    t->arena[off + n] = 0;
    t->arena_len += n + 1;
    return off;
}

// intern: sym index of s[0..n), inserting it if new.
static int64_t intern(bn_tokenizer *t, const char *s, size_t n) {
    int64_t found = intern_find(t, s, n);
    if (found >= 0) return found;
    if ((t->n_syms + 1) * 2 > t->ht_cap) intern_grow(t);
    if (t->n_syms == t->syms_cap) {
        t->syms_cap = t->syms_cap ? t->syms_cap * 2 : 1024;
        t->syms = xrealloc(t->syms, t->syms_cap * sizeof *t->syms);
    }
    intern_sym *y = &t->syms[t->n_syms];
    y->off = arena_add(t, s, n);
    y->len = (uint32_t)n;
    y->tok = -1;
    size_t mask = t->ht_cap - 1, i = hash_bytes(s, n) & mask;
    while (t->ht[i]) i = (i + 1) & mask;
    t->ht[i] = (uint32_t)t->n_syms + 1;
    return (int64_t)t->n_syms++;
}

// merge_find: rank of merging syms (a, b) (result sym in *res), or -1.
static int32_t merge_find(const bn_tokenizer *t, uint32_t a, uint32_t b, int32_t *res) {
    if (!t->m_cap) return -1;
    uint64_t key = ((uint64_t)a << 32) | b;
    size_t mask = t->m_cap - 1;
    for (size_t i = hash_u64(key) & mask;; i = (i + 1) & mask) {
        if (t->mrank[i] < 0) return -1;
        if (t->mkey[i] == key) { *res = t->mres[i]; return t->mrank[i]; }
    }
}

// merge_add: records (a, b) → res at rank unless the pair already has a (lower) rank.
static void merge_add(bn_tokenizer *t, uint32_t a, uint32_t b, int32_t res, int32_t rank) {
    uint64_t key = ((uint64_t)a << 32) | b;
    size_t mask = t->m_cap - 1, i = hash_u64(key) & mask;
    while (t->mrank[i] >= 0) {
        if (t->mkey[i] == key) return;
        i = (i + 1) & mask;
    }
    t->mkey[i] = key;
    t->mrank[i] = rank;
    t->mres[i] = res;
}

// ---- loading ------------------------------------------------------------------------------
static bool str_in(const char *s, const char *const *list) {
    for (; *list; list++)
        if (strcmp(s, *list) == 0) return true;
    return false;
}

// pre-tokenizer regexes (llama.cpp llm_tokenizer_bpe, per pre type)
static const char *RE_QWEN2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char *RE_QWEN35 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char *RE_LLAMA3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char *RE_GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
static const char *RE_DEFAULT[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "\\p{N}+",
    "[0-9][0-9][0-9]",
};

static int add_regex(bn_tokenizer *t, const char *pattern, char *err, size_t errlen) {
    int code;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return bn_err(err, errlen, "tokenizer: regex compile failed at %zu: %s", (size_t)off, (char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); // falls back to the interpreter if JIT is unavailable
    t->re[t->n_re++] = re;
    return 0;
}

// setup_pre: regexes and flags for the pre type (llama.cpp llama_vocab::impl::load).
static int setup_pre(bn_tokenizer *t, const char *pre, char *err, size_t errlen) {
    static const char *const qwen2[] = {"qwen2", "deepseek-r1-qwen", "stablelm2", "hunyuan", NULL};
    static const char *const llama3[] = {"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral", NULL};
    static const char *const gpt2[] = {"gpt-2", "phi-2", "jina-es", "jina-de", "mpt", "olmo", NULL};
    snprintf(t->pre, sizeof t->pre, "%s", pre && *pre ? pre : "default");
    if (!pre || !*pre || strcmp(pre, "default") == 0) {
        for (int i = 0; i < 4; i++)
            if (add_regex(t, RE_DEFAULT[i], err, errlen)) return -1;
        return 0;
    }
    if (str_in(pre, qwen2)) return add_regex(t, RE_QWEN2, err, errlen);
    if (strcmp(pre, "qwen35") == 0) return add_regex(t, RE_QWEN35, err, errlen);
    if (str_in(pre, gpt2)) return add_regex(t, RE_GPT2, err, errlen);
    if (str_in(pre, llama3)) {
        t->ignore_merges = true;
        t->add_bos = true;
        return add_regex(t, RE_LLAMA3, err, errlen);
    }
    return bn_err(err, errlen, "tokenizer: unsupported pre-tokenizer '%s' (supported: qwen2, qwen35, gpt-2, llama-bpe, default)", pre);
}

static int32_t get_id(const gguf_file *g, const char *key, int n_vocab) {
    uint32_t v;
    if (!gguf_get_u32(g, key, &v) || v >= (uint32_t)n_vocab) return -1;
    return (int32_t)v;
}

// find_text: id of the exact vocab text, or -1 (used during loading).
static int32_t find_text(const bn_tokenizer *t, const char *s) {
    int64_t y = intern_find(t, s, strlen(s));
    return y < 0 ? -1 : t->syms[y].tok;
}

// setup_eog: MODEL.md §11.1 step 7, llama.cpp's text lists: these EOG texts and the FIM texts are
// forced to control type; eos/eot/eom ids from the GGUF and FIM pad/repo/sep are EOG as well.
static void setup_eog(bn_tokenizer *t, const gguf_file *g) {
    static const char *const eog_texts[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
        "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
        "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
        "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>", "[e~[", NULL};
    static const char *const fim_eog_texts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]",
                                                "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>",
                                                "<|file_sep|>", NULL};
    static const char *const fim_texts[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>",
                                            "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", "<|fim_suffix|>",
                                            "<fim-suffix>", "<fim_suffix>", "<SUF>", "\xe2\x96\x81<SUF>",
                                            "<|code_suffix|>", "<|suffix|>", "<|fim_middle|>", "<fim-middle>",
                                            "<fim_middle>", "<MID>", "\xe2\x96\x81<MID>", "<|code_middle|>",
                                            "<|middle|>", NULL};
    const char *id_keys[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                             "tokenizer.ggml.eom_token_id", "tokenizer.ggml.fim_pad_token_id",
                             "tokenizer.ggml.fim_rep_token_id", "tokenizer.ggml.fim_sep_token_id"};
    for (size_t k = 0; k < sizeof id_keys / sizeof *id_keys; k++) {
        int32_t id = get_id(g, id_keys[k], t->n_vocab);
        if (id >= 0) t->is_eog[id] = 1;
    }
    for (int list = 0; list < 3; list++) {
        const char *const *texts = list == 0 ? eog_texts : list == 1 ? fim_eog_texts : fim_texts;
        for (const char *const *s = texts; *s; s++) {
            int32_t id = find_text(t, *s);
            if (id < 0) continue;
            if (list < 2) t->is_eog[id] = 1;
            t->type[id] = BN_TOKEN_CONTROL;
        }
    }
}

static int cmp_special_len(const void *a, const void *b, void *ctx) {
    const bn_tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t->text_len[x] != t->text_len[y]) return t->text_len[x] > t->text_len[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

// byte_value: the byte a BYTE-type token stands for ("<0xAB>" or a GPT-2 mapped char), or -1.
static int byte_value(const bn_tokenizer *t, int32_t id) {
    const char *s = t->arena + t->text_off[id];
    uint32_t n = t->text_len[id];
    if (n == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>') return (int)strtol(s + 3, NULL, 16);
    int len;
    int32_t cp = bn_utf8_decode((const uint8_t *)s, n, &len);
    if (cp >= 0 && (uint32_t)len == n) return bn_cp_to_byte((uint32_t)cp);
    return -1;
}

// build_pieces: decoded bytes of every token (special rendering), as llama.cpp's piece cache.
static void build_pieces(bn_tokenizer *t) {
    size_t cap = t->arena_len + 16, len = 0;
    t->pieces = xmalloc(cap);
    for (int id = 0; id < t->n_vocab; id++) {
        const char *s = t->arena + t->text_off[id];
        uint32_t n = t->text_len[id];
        if (len + 4 * (size_t)n + 8 > cap) {
            cap = (len + 4 * (size_t)n + 8) * 2;
            t->pieces = xrealloc(t->pieces, cap);
        }
        char *out = t->pieces + len;
        size_t m = 0;
        int type = t->type[id];
        if (type == BN_TOKEN_BYTE) {
            int b = byte_value(t, id);
            if (b >= 0) out[m++] = (char)b;
        } else if (type == BN_TOKEN_NORMAL || type == BN_TOKEN_UNDEFINED) {
            for (uint32_t i = 0; i < n;) {
                if (t->kind == KIND_SPM) {
                    if (i + 3 <= n && memcmp(s + i, "\xE2\x96\x81", 3) == 0) { out[m++] = ' '; i += 3; }
                    else out[m++] = s[i++];
                    continue;
                }
                int cl;
                int32_t cp = bn_utf8_decode((const uint8_t *)s + i, n - i, &cl);
                int b = cp >= 0 ? bn_cp_to_byte((uint32_t)cp) : -1;
                if (b >= 0) out[m++] = (char)b;
                else { memcpy(out + m, s + i, (size_t)cl); m += (size_t)cl; }
                i += (uint32_t)cl;
            }
        } else if (type != BN_TOKEN_UNUSED) { // control, user-defined, unknown: text as-is
            memcpy(out, s, n);
            m = n;
        }
        t->piece_off[id] = (uint32_t)len;
        t->piece_len[id] = (uint32_t)m;
        len += m;
    }
}

// load_merges: "left right" strings → merge table (split at the first space from index 1).
static int load_merges(bn_tokenizer *t, const gguf_kv *mk, char *err, size_t errlen) {
    size_t n = mk ? mk->n : 0;
    t->m_cap = 16;
    while (t->m_cap < 2 * n + 16) t->m_cap *= 2;
    t->mkey = xmalloc(t->m_cap * sizeof *t->mkey);
    t->mrank = xmalloc(t->m_cap * sizeof *t->mrank);
    t->mres = xmalloc(t->m_cap * sizeof *t->mres);
    memset(t->mrank, 0xff, t->m_cap * sizeof *t->mrank);
    char *buf = NULL;
    size_t buf_cap = 0;
    for (size_t i = 0; i < n; i++) {
        const char *s = mk->strs[i];
        size_t len = mk->str_lens[i];
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp) return bn_err(err, errlen, "tokenizer: merge %zu has no space: '%.40s'", i, s);
        size_t ln = (size_t)(sp - s), rn = len - ln - 1;
        if (ln + rn + 1 > buf_cap) { buf_cap = (ln + rn + 1) * 2; buf = xrealloc(buf, buf_cap); }
        memcpy(buf, s, ln);
        memcpy(buf + ln, sp + 1, rn);
        uint32_t a = (uint32_t)intern(t, s, ln);
        uint32_t b = (uint32_t)intern(t, sp + 1, rn);
        int32_t res = (int32_t)intern(t, buf, ln + rn);
        merge_add(t, a, b, res, (int32_t)i);
    }
    free(buf);
    return 0;
}

bn_tokenizer *bn_tokenizer_from_gguf(const gguf_file *g, char *err, size_t errlen) {
    const char *model = gguf_get_str(g, "tokenizer.ggml.model");
    if (!model) { bn_err(err, errlen, "tokenizer: no tokenizer.ggml.model key"); return NULL; }
    enum tok_kind kind;
    if (strcmp(model, "gpt2") == 0) kind = KIND_BPE;
    else if (strcmp(model, "llama") == 0) kind = KIND_SPM;
    else { bn_err(err, errlen, "tokenizer: unsupported tokenizer model '%s' (gpt2, llama)", model); return NULL; }
    const gguf_kv *tk = gguf_get_arr(g, "tokenizer.ggml.tokens");
    if (!tk || tk->arr_type != GGUF_TYPE_STRING || tk->n == 0 || tk->n > INT32_MAX / 2) {
        bn_err(err, errlen, "tokenizer: missing or empty tokenizer.ggml.tokens");
        return NULL;
    }
    int n = (int)tk->n;
    const gguf_kv *ty = gguf_get_arr(g, "tokenizer.ggml.token_type");
    if (ty && (ty->n != (uint64_t)n || (ty->arr_type != GGUF_TYPE_INT32 && ty->arr_type != GGUF_TYPE_UINT32))) {
        bn_err(err, errlen, "tokenizer: token_type has %llu entries of type %s, want %d i32",
               (unsigned long long)ty->n, gguf_type_name(ty->arr_type), n);
        return NULL;
    }
    const gguf_kv *sc = gguf_get_arr(g, "tokenizer.ggml.scores");
    if (sc && (sc->n != (uint64_t)n || sc->arr_type != GGUF_TYPE_FLOAT32)) sc = NULL;
    const gguf_kv *mk = gguf_get_arr(g, "tokenizer.ggml.merges");
    if (mk && mk->arr_type != GGUF_TYPE_STRING) mk = NULL;
    if (kind == KIND_BPE && !mk) { bn_err(err, errlen, "tokenizer: gpt2 vocab without tokenizer.ggml.merges"); return NULL; }

    bn_tokenizer *t = xcalloc(1, sizeof *t);
    t->kind = kind;
    t->n_vocab = n;
    t->text_off = xmalloc((size_t)n * sizeof *t->text_off);
    t->text_len = xmalloc((size_t)n * sizeof *t->text_len);
    t->type = xmalloc((size_t)n);
    t->score = xcalloc((size_t)n, sizeof *t->score);
    t->piece_off = xmalloc((size_t)n * sizeof *t->piece_off);
    t->piece_len = xmalloc((size_t)n * sizeof *t->piece_len);
    t->is_eog = xcalloc((size_t)n, 1);
    // pre-size the intern table: vocab texts + merge parts/results (mostly vocab texts again)
    size_t expect = (size_t)n + (mk ? mk->n : 0) / 4 + 1024;
    t->ht_cap = 1024;
    while (t->ht_cap < 2 * expect) t->ht_cap *= 2;
    t->ht = xcalloc(t->ht_cap, sizeof *t->ht);
    t->syms_cap = expect;
    t->syms = xmalloc(t->syms_cap * sizeof *t->syms);
    for (int id = 0; id < n; id++) {
        int64_t y = intern(t, tk->strs[id], tk->str_lens[id]);
        t->syms[y].tok = id; // duplicates: the last id wins, as llama.cpp's token_to_id
        t->text_off[id] = t->syms[y].off;
        t->text_len[id] = t->syms[y].len;
        int32_t tv = ty ? ((const int32_t *)ty->data)[id] : BN_TOKEN_NORMAL;
        t->type[id] = (uint8_t)(tv >= 0 && tv <= 6 ? tv : BN_TOKEN_UNDEFINED);
        if (sc) t->score[id] = ((const float *)sc->data)[id];
    }
    if (kind == KIND_BPE) {
        if (load_merges(t, mk, err, errlen) < 0) goto fail;
        if (setup_pre(t, gguf_get_str(g, "tokenizer.ggml.pre"), err, errlen) < 0) goto fail;
    } else {
        snprintf(t->pre, sizeof t->pre, "spm");
        t->add_bos = true;
        t->add_space_prefix = true;
    }
    bool flag;
    if (gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &flag)) t->add_bos = flag;
    if (gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &flag)) t->add_eos = flag;
    if (kind == KIND_SPM && gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &flag)) t->add_space_prefix = flag;
    t->bos = get_id(g, "tokenizer.ggml.bos_token_id", n);
    t->eos = get_id(g, "tokenizer.ggml.eos_token_id", n);
    t->unk = get_id(g, "tokenizer.ggml.unknown_token_id", n);
    if (kind == KIND_SPM) { // llama.cpp's SPM defaults when the keys are absent: unk 0, bos 1, eos 2
        if (gguf_find_key(g, "tokenizer.ggml.bos_token_id") < 0 && n > 1) t->bos = 1;
        if (gguf_find_key(g, "tokenizer.ggml.eos_token_id") < 0 && n > 2) t->eos = 2;
        if (gguf_find_key(g, "tokenizer.ggml.unknown_token_id") < 0) t->unk = 0;
    }
    if (t->add_bos && t->bos < 0) t->add_bos = false;
    if (t->add_eos && t->eos < 0) t->add_eos = false;
    setup_eog(t, g);

    // byte fallback tokens: the mapped char (BPE) or "<0xXX>" (SPM and some BPE vocabs)
    for (int b = 0; b < 256; b++) {
        char hex[8], mapped[4];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        int ml = bn_utf8_encode(bn_byte_to_cp((uint8_t)b), mapped);
        memcpy(t->byte_utf8[b], mapped, (size_t)ml);
        t->byte_utf8_len[b] = (uint8_t)ml;
        int64_t ym = intern_find(t, mapped, (size_t)ml);
        t->byte_sym[b] = kind == KIND_BPE && ym >= 0 ? (uint32_t)ym + 1 : 0;
        int32_t id = kind == KIND_BPE && ym >= 0 ? t->syms[ym].tok : -1;
        if (id < 0) id = find_text(t, hex);
        t->byte_tok[b] = id;
    }

    for (int id = 0; id < n; id++) {
        int ty_id = t->type[id];
        if (ty_id == BN_TOKEN_CONTROL || ty_id == BN_TOKEN_USER_DEFINED || ty_id == BN_TOKEN_UNKNOWN) t->n_specials++;
    }
    t->specials = xmalloc((size_t)(t->n_specials + 1) * sizeof *t->specials);
    t->n_specials = 0;
    for (int id = 0; id < n; id++) {
        int ty_id = t->type[id];
        if ((ty_id == BN_TOKEN_CONTROL || ty_id == BN_TOKEN_USER_DEFINED || ty_id == BN_TOKEN_UNKNOWN) &&
            t->text_len[id] > 0)
            t->specials[t->n_specials++] = id;
    }
    qsort_r(t->specials, (size_t)t->n_specials, sizeof *t->specials, cmp_special_len, t);
    build_pieces(t);
    return t;
fail:
    bn_tokenizer_free(t);
    return NULL;
}

void bn_tokenizer_free(bn_tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n_re; i++) pcre2_code_free(t->re[i]);
    free(t->text_off); free(t->text_len); free(t->type); free(t->score);
    free(t->piece_off); free(t->piece_len); free(t->is_eog); free(t->pieces);
    free(t->arena); free(t->syms); free(t->ht);
    free(t->mkey); free(t->mrank); free(t->mres); free(t->specials);
    free(t);
}

// ---- output buffer ------------------------------------------------------------------------
typedef struct {
    int32_t *v;
    size_t n, cap;
} idvec;

static void idvec_push(idvec *o, int32_t id) {
    if (o->n == o->cap) {
        o->cap = o->cap ? o->cap * 2 : 256;
        o->v = xrealloc(o->v, o->cap * sizeof *o->v);
    }
    o->v[o->n++] = id;
}

// ---- BPE ----------------------------------------------------------------------------------
typedef struct {
    uint32_t off, len; // bytes of the mapped word
    int32_t prev, next;
    int32_t sym;       // intern sym or -1
} bpe_symbol;

typedef struct {
    int32_t rank, left;
    uint32_t llen, rlen;
} bigram;

// Scratch space for one bn_tokenize call.
typedef struct {
    char *word;         // byte-mapped fragment
    size_t word_cap;
    bpe_symbol *sym;
    size_t sym_cap;
    bigram *heap;
    size_t heap_n, heap_cap;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit;
} bpe_scratch;

static bool bigram_before(const bigram *a, const bigram *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(bpe_scratch *s, bigram g) {
    if (s->heap_n == s->heap_cap) {
        s->heap_cap = s->heap_cap ? s->heap_cap * 2 : 256;
        s->heap = xrealloc(s->heap, s->heap_cap * sizeof *s->heap);
    }
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_before(&g, &s->heap[p])) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = g;
}

static bigram heap_pop(bpe_scratch *s) {
    bigram top = s->heap[0], last = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bigram_before(&s->heap[c + 1], &s->heap[c])) c++;
        if (!bigram_before(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

static void try_bigram(const bn_tokenizer *t, bpe_scratch *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const bpe_symbol *a = &s->sym[left], *b = &s->sym[right];
    if (a->sym < 0 || b->sym < 0) return;
    int32_t res;
    int32_t rank = merge_find(t, (uint32_t)a->sym, (uint32_t)b->sym, &res);
    if (rank < 0) return;
    heap_push(s, (bigram){rank, left, a->len, b->len});
}

// emit_symbol: the token of the mapped bytes w[0..n) (sym y), or its byte tokens.
static void emit_symbol(const bn_tokenizer *t, const char *w, uint32_t n, int32_t y, idvec *out) {
    int32_t tok = y >= 0 ? t->syms[y].tok : -1;
    if (tok >= 0) { idvec_push(out, tok); return; }
    for (uint32_t i = 0; i < n;) {
        int cl;
        int32_t cp = bn_utf8_decode((const uint8_t *)w + i, n - i, &cl);
        int b = cp >= 0 ? bn_cp_to_byte((uint32_t)cp) : -1;
        if (b >= 0 && t->byte_tok[b] >= 0) idvec_push(out, t->byte_tok[b]);
        i += (uint32_t)cl;
    }
}

// bpe_word: merges one pre-tokenized fragment text[0..n) and appends its ids.
static void bpe_word(const bn_tokenizer *t, bpe_scratch *s, const char *text, size_t n, idvec *out) {
    if (n == 0) return;
    if (2 * n + 1 > s->word_cap) { s->word_cap = 2 * n + 64; s->word = xrealloc(s->word, s->word_cap); }
    if (n + 1 > s->sym_cap) { s->sym_cap = n + 64; s->sym = xrealloc(s->sym, s->sym_cap * sizeof *s->sym); }
    uint32_t wl = 0;
    int32_t ns = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)text[i];
        int ml = t->byte_utf8_len[b];
        memcpy(s->word + wl, t->byte_utf8[b], (size_t)ml);
        s->sym[ns] = (bpe_symbol){wl, (uint32_t)ml, ns - 1, (int32_t)(i + 1 < n ? ns + 1 : -1),
                                  t->byte_sym[b] ? (int32_t)t->byte_sym[b] - 1 : -1};
        wl += (uint32_t)ml;
        ns++;
    }
    if (t->ignore_merges) {
        int64_t y = intern_find(t, s->word, wl);
        if (y >= 0 && t->syms[y].tok >= 0) { idvec_push(out, t->syms[y].tok); return; }
    }
    s->heap_n = 0;
    for (int32_t i = 1; i < ns; i++) try_bigram(t, s, i - 1, i);
    while (s->heap_n) {
        bigram g = heap_pop(s);
        bpe_symbol *a = &s->sym[g.left];
        if (a->len != g.llen || a->next < 0) continue;
        bpe_symbol *b = &s->sym[a->next];
        if (b->len != g.rlen) continue; // stale: one side changed since the pair was queued
        int32_t res = -1;
        merge_find(t, (uint32_t)a->sym, (uint32_t)b->sym, &res);
        a->len += b->len;
        a->sym = res;
        b->len = 0;
        a->next = b->next;
        if (b->next >= 0) s->sym[b->next].prev = g.left;
        try_bigram(t, s, a->prev, g.left);
        try_bigram(t, s, g.left, a->next);
    }
    for (int32_t i = 0; i >= 0; i = s->sym[i].next) emit_symbol(t, s->word + s->sym[i].off, s->sym[i].len, s->sym[i].sym, out);
}

// split_regex: splits text[0..n) with regex level; matched and unmatched spans both go on to the
// next level (llama.cpp unicode_regex_split), the last level feeds BPE.
static int split_regex(const bn_tokenizer *t, bpe_scratch *s, int level, const char *text, size_t n, idvec *out) {
    if (level >= t->n_re || level >= MAX_REGEX) { bpe_word(t, s, text, n, out); return 0; }
    size_t pos = 0, start = 0;
    while (pos <= n) {
        int rc = pcre2_match(t->re[level], (PCRE2_SPTR)text, n, pos, 0, s->md, s->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) return -1;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { // empty match (none of our patterns can produce one, but be safe)
            pos = me + 1;
            continue;
        }
        if (ms > start && split_regex(t, s, level + 1, text + start, ms - start, out) < 0) return -1;
        if (split_regex(t, s, level + 1, text + ms, me - ms, out) < 0) return -1;
        start = pos = me;
    }
    if (start < n && split_regex(t, s, level + 1, text + start, n - start, out) < 0) return -1;
    return 0;
}

// ---- SPM ----------------------------------------------------------------------------------
typedef struct {
    float score;
    int32_t left;
    uint32_t size; // bytes of the merged text
} spm_bigram;

static bool spm_before(const spm_bigram *a, const spm_bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

// spm_resegment: the token of a final symbol, else its bytes as <0xXX> tokens (unk if missing).
// Merged symbols are always vocab tokens (a pair is only queued when its text is one), so
// llama.cpp's rev_merge path never applies to them.
static void spm_resegment(const bn_tokenizer *t, const char *text, size_t n, idvec *out) {
    int64_t y = intern_find(t, text, n);
    if (y >= 0 && t->syms[y].tok >= 0) { idvec_push(out, t->syms[y].tok); return; }
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_tok[(uint8_t)text[i]];
        idvec_push(out, id >= 0 ? id : (t->unk >= 0 ? t->unk : 0));
    }
}

// spm_text: SentencePiece BPE over escaped text (spaces already "▁"), llama.cpp llm_tokenizer_spm.
static void spm_text(const bn_tokenizer *t, const char *text, size_t n, idvec *out) {
    typedef struct { uint32_t off, len; int32_t prev, next; } sp_sym;
    sp_sym *sym = xmalloc((n + 1) * sizeof *sym);
    int32_t ns = 0;
    for (size_t off = 0; off < n;) {
        size_t cl = (size_t)bn_utf8_len((uint8_t)text[off]);
        if (cl > n - off) cl = n - off;
        sym[ns] = (sp_sym){(uint32_t)off, (uint32_t)cl, ns - 1, off + cl < n ? ns + 1 : -1};
        off += cl;
        ns++;
    }
    size_t hn = 0, hcap = (size_t)ns + 16;
    spm_bigram *heap = xmalloc(hcap * sizeof *heap);
#define SPM_PUSH(L, R) do { \
        int32_t l_ = (L), r_ = (R); \
        if (l_ >= 0 && r_ >= 0) { \
            uint32_t sz_ = sym[l_].len + sym[r_].len; \
            int64_t y_ = intern_find(t, text + sym[l_].off, sz_); \
            if (y_ >= 0 && t->syms[y_].tok >= 0) { \
                spm_bigram g_ = {t->score[t->syms[y_].tok], l_, sz_}; \
                if (hn == hcap) { hcap *= 2; heap = xrealloc(heap, hcap * sizeof *heap); } \
                size_t i_ = hn++; \
                while (i_ > 0 && spm_before(&g_, &heap[(i_ - 1) / 2])) { heap[i_] = heap[(i_ - 1) / 2]; i_ = (i_ - 1) / 2; } \
                heap[i_] = g_; \
            } \
        } \
    } while (0)
    for (int32_t i = 1; i < ns; i++) SPM_PUSH(i - 1, i);
    while (hn) {
        spm_bigram g = heap[0], last = heap[--hn];
        size_t i = 0;
        for (;;) {
            size_t c = 2 * i + 1;
            if (c >= hn) break;
            if (c + 1 < hn && spm_before(&heap[c + 1], &heap[c])) c++;
            if (!spm_before(&heap[c], &last)) break;
            heap[i] = heap[c];
            i = c;
        }
        if (hn) heap[i] = last;
        sp_sym *a = &sym[g.left];
        if (a->len == 0 || a->next < 0) continue;
        sp_sym *b = &sym[a->next];
        if (a->len + b->len != g.size) continue; // outdated
        a->len += b->len;
        b->len = 0;
        a->next = b->next;
        if (b->next >= 0) sym[b->next].prev = g.left;
        SPM_PUSH(a->prev, g.left);
        SPM_PUSH(g.left, a->next);
    }
#undef SPM_PUSH
    for (int32_t i = 0; ns > 0 && i >= 0; i = sym[i].next) spm_resegment(t, text + sym[i].off, sym[i].len, out);
    free(heap);
    free(sym);
}

// ---- special-token partition --------------------------------------------------------------
typedef struct {
    size_t off, len;
    int32_t tok; // -1 = raw text
} fragment;

typedef struct {
    fragment *v;
    size_t n, cap;
} fragvec;

static void frag_push(fragvec *f, size_t off, size_t len, int32_t tok) {
    if (f->n == f->cap) { f->cap = f->cap ? f->cap * 2 : 64; f->v = xrealloc(f->v, f->cap * sizeof *f->v); }
    f->v[f->n++] = (fragment){off, len, tok};
}

// partition: cuts special tokens out of text (llama.cpp tokenizer_st_partition order: for each
// special, longest first, every non-overlapping occurrence inside still-raw text, left to right).
static void partition(const bn_tokenizer *t, const char *text, size_t n, bool parse_special, fragvec *out) {
    fragvec cur = {0}, next = {0};
    frag_push(&cur, 0, n, -1);
    for (int k = 0; k < t->n_specials; k++) {
        int32_t id = t->specials[k];
        int ty = t->type[id];
        if (!parse_special && (ty == BN_TOKEN_CONTROL || ty == BN_TOKEN_UNKNOWN)) continue;
        const char *st = t->arena + t->text_off[id];
        size_t sl = t->text_len[id];
        bool any = false;
        next.n = 0;
        for (size_t f = 0; f < cur.n; f++) {
            fragment fr = cur.v[f];
            if (fr.tok >= 0 || fr.len < sl) { frag_push(&next, fr.off, fr.len, fr.tok); continue; }
            size_t pos = fr.off, end = fr.off + fr.len;
            for (;;) {
                const char *m = memmem(text + pos, end - pos, st, sl);
                if (!m) break;
                size_t mo = (size_t)(m - text);
                if (mo > pos) frag_push(&next, pos, mo - pos, -1);
                frag_push(&next, mo, sl, id);
                pos = mo + sl;
                any = true;
            }
            if (pos < end) frag_push(&next, pos, end - pos, -1);
        }
        if (any) { fragvec tmp = cur; cur = next; next = tmp; }
    }
    free(next.v);
    *out = cur;
}

// ---- public API ---------------------------------------------------------------------------
int bn_tokenize(const bn_tokenizer *t, const char *text, size_t len, bool add_special, bool parse_special,
                int32_t **out) {
    *out = NULL;
    idvec o = {0};
    fragvec frags = {0};
    if (len) partition(t, text, len, parse_special, &frags);
    if (add_special && t->add_bos) idvec_push(&o, t->bos);
    int rc = 0;
    if (t->kind == KIND_BPE) {
        bpe_scratch s = {0};
        s.md = pcre2_match_data_create(4, NULL);
        s.mctx = pcre2_match_context_create(NULL);
        s.jit = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, NULL);
        if (s.jit) pcre2_jit_stack_assign(s.mctx, NULL, s.jit);
        for (size_t f = 0; f < frags.n && rc == 0; f++) {
            const fragment *fr = &frags.v[f];
            if (fr->tok >= 0) idvec_push(&o, fr->tok);
            else rc = split_regex(t, &s, 0, text + fr->off, fr->len, &o);
        }
        pcre2_match_data_free(s.md);
        pcre2_match_context_free(s.mctx);
        if (s.jit) pcre2_jit_stack_free(s.jit);
        free(s.word); free(s.sym); free(s.heap);
    } else {
        bool prev_special = true;
        char *buf = NULL;
        size_t cap = 0;
        for (size_t f = 0; f < frags.n; f++) {
            const fragment *fr = &frags.v[f];
            if (fr->tok >= 0) { idvec_push(&o, fr->tok); prev_special = true; continue; }
            size_t need = 3 * (fr->len + 1), m = 0;
            if (need > cap) { cap = need; buf = xrealloc(buf, cap); }
            if (t->add_space_prefix && prev_special) { memcpy(buf, "\xE2\x96\x81", 3); m = 3; }
            for (size_t i = 0; i < fr->len; i++) {
                char c = text[fr->off + i];
                if (c == ' ') { memcpy(buf + m, "\xE2\x96\x81", 3); m += 3; }
                else buf[m++] = c;
            }
            spm_text(t, buf, m, &o);
            prev_special = false;
        }
        free(buf);
    }
    if (add_special && t->add_eos) idvec_push(&o, t->eos);
    free(frags.v);
    if (rc < 0) { free(o.v); return -1; }
    if (!o.v) o.v = xmalloc(sizeof *o.v);
    *out = o.v;
    return (int)o.n;
}

int bn_tokenizer_n_vocab(const bn_tokenizer *t) { return t->n_vocab; }

int bn_token_to_piece(const bn_tokenizer *t, int32_t id, char *buf, int cap, bool special) {
    if (id < 0 || id >= t->n_vocab) return 0;
    int ty = t->type[id];
    if (!special && (ty == BN_TOKEN_CONTROL || ty == BN_TOKEN_UNKNOWN)) return 0;
    int n = (int)t->piece_len[id];
    if (n > cap) return -n;
    memcpy(buf, t->pieces + t->piece_off[id], (size_t)n);
    return n;
}

const char *bn_token_text(const bn_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab ? t->arena + t->text_off[id] : NULL;
}

int bn_token_get_type(const bn_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab ? t->type[id] : BN_TOKEN_UNDEFINED;
}

char *bn_detokenize(const bn_tokenizer *t, const int32_t *ids, int n, bool special, size_t *len) {
    size_t total = 0;
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < t->n_vocab) total += t->piece_len[ids[i]];
    char *s = xmalloc(total + 1);
    size_t m = 0;
    for (int i = 0; i < n; i++) {
        int k = bn_token_to_piece(t, ids[i], s + m, (int)(total - m), special);
        if (k > 0) m += (size_t)k;
    }
    s[m] = 0;
    if (len) *len = m;
    return s;
}

int32_t bn_token_lookup(const bn_tokenizer *t, const char *text) {
    int64_t y = intern_find(t, text, strlen(text));
    return y < 0 ? -1 : t->syms[y].tok;
}

bool bn_token_is_eog(const bn_tokenizer *t, int32_t id) { return id >= 0 && id < t->n_vocab && t->is_eog[id]; }
int32_t bn_token_bos(const bn_tokenizer *t) { return t->bos; }
int32_t bn_token_eos(const bn_tokenizer *t) { return t->eos; }
bool bn_tokenizer_add_bos(const bn_tokenizer *t) { return t->add_bos; }
const char *bn_tokenizer_pre(const bn_tokenizer *t) { return t->pre; }
