// core/tokenizer.c — GGUF vocabularies as llama.cpp runs them (docs/model.md §11): loading (tokens, types,
// merges, pre-tokenizer regexes, flags, EOG set), the special-token partition (longest text first;
// control/unknown only with parse_special), decoding and the public API. The encoders live in
// core/tokenizer_encode.c; the intern and merge tables that loading fills and the encoders read, in
// core/tokenizer_vocab.c. Pieces for decoding are precomputed per token.
#include "core/tokenizer_encode.h"
#include "base/unicode.h"

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
    int64_t y = bn_tok_find(t, s, strlen(s));
    return y < 0 ? -1 : t->syms[y].tok;
}

// setup_eog: docs/model.md §11.1 step 7, llama.cpp's text lists: these EOG texts and the FIM texts are
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
        uint32_t a = (uint32_t)bn_tok_intern(t, s, ln);
        uint32_t b = (uint32_t)bn_tok_intern(t, sp + 1, rn);
        int32_t res = (int32_t)bn_tok_intern(t, buf, ln + rn);
        bn_tok_merge_add(t, a, b, res, (int32_t)i);
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
        int64_t y = bn_tok_intern(t, tk->strs[id], tk->str_lens[id]);
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
        int64_t ym = bn_tok_find(t, mapped, (size_t)ml);
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

// ---- special-token partition --------------------------------------------------------------
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
    if (t->kind == KIND_BPE) rc = bn_tok_encode_bpe(t, text, frags.v, frags.n, &o);
    else bn_tok_encode_spm(t, text, frags.v, frags.n, &o);
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
    int64_t y = bn_tok_find(t, text, strlen(text));
    return y < 0 ? -1 : t->syms[y].tok;
}

bool bn_token_is_eog(const bn_tokenizer *t, int32_t id) { return id >= 0 && id < t->n_vocab && t->is_eog[id]; }
int32_t bn_token_bos(const bn_tokenizer *t) { return t->bos; }
int32_t bn_token_eos(const bn_tokenizer *t) { return t->eos; }
bool bn_tokenizer_add_bos(const bn_tokenizer *t) { return t->add_bos; }
const char *bn_tokenizer_pre(const bn_tokenizer *t) { return t->pre; }
