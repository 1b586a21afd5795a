// core/tokenizer_encode.c — the encoders behind bn_tokenize (docs/model.md §11.1):
//   BPE (`gpt2`): PCRE2 pre-tokenizer regex(es) → GPT-2 byte map → merges by rank (binary heap,
//   leftmost on ties; stale pairs skipped by length) → ids, symbols missing from the vocab → byte tokens;
//   SPM (`llama`): "▁" for spaces, best-score bigram merges into vocab tokens, byte fallback `<0xXX>`.
#include "core/tokenizer_encode.h"
#include "base/unicode.h"

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
    int32_t rank = bn_tok_merge(t, (uint32_t)a->sym, (uint32_t)b->sym, &res);
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
        int64_t y = bn_tok_find(t, s->word, wl);
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
        bn_tok_merge(t, (uint32_t)a->sym, (uint32_t)b->sym, &res);
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

int bn_tok_encode_bpe(const bn_tokenizer *t, const char *text, const fragment *frags, size_t n_frags, idvec *out) {
    bpe_scratch s = {0};
    s.md = pcre2_match_data_create(4, NULL);
    s.mctx = pcre2_match_context_create(NULL);
    s.jit = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, NULL);
    if (s.jit) pcre2_jit_stack_assign(s.mctx, NULL, s.jit);
    int rc = 0;
    for (size_t f = 0; f < n_frags && rc == 0; f++) {
        const fragment *fr = &frags[f];
        if (fr->tok >= 0) idvec_push(out, fr->tok);
        else rc = split_regex(t, &s, 0, text + fr->off, fr->len, out);
    }
    pcre2_match_data_free(s.md);
    pcre2_match_context_free(s.mctx);
    if (s.jit) pcre2_jit_stack_free(s.jit);
    free(s.word);
    free(s.sym);
    free(s.heap);
    return rc;
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
    int64_t y = bn_tok_find(t, text, n);
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
            int64_t y_ = bn_tok_find(t, text + sym[l_].off, sz_); \
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

void bn_tok_encode_spm(const bn_tokenizer *t, const char *text, const fragment *frags, size_t n_frags, idvec *out) {
    bool prev_special = true; // llama.cpp: a space prefix before the first text and after every special
    char *buf = NULL;
    size_t cap = 0;
    for (size_t f = 0; f < n_frags; f++) {
        const fragment *fr = &frags[f];
        if (fr->tok >= 0) { idvec_push(out, fr->tok); prev_special = true; continue; }
        size_t need = 3 * (fr->len + 1), m = 0;
        if (need > cap) { cap = need; buf = xrealloc(buf, cap); }
        if (t->add_space_prefix && prev_special) { memcpy(buf, "\xE2\x96\x81", 3); m = 3; }
        for (size_t i = 0; i < fr->len; i++) {
            char c = text[fr->off + i];
            if (c == ' ') { memcpy(buf + m, "\xE2\x96\x81", 3); m += 3; }
            else buf[m++] = c;
        }
        spm_text(t, buf, m, out);
        prev_special = false;
    }
    free(buf);
}
