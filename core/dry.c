// core/dry.c — the DRY repetition penalty (see core/dry.h), after llama.cpp's dry sampler (src/llama-sampler.cpp):
// breaker sequences from the vocabulary, the window's longest repeated suffixes by the Z-algorithm, one penalty per
// token that would extend one.
#include "core/dry.h"
#include "base/util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DRY_MAX_CHAR_LEN 40 // breaker strings are cut to this many bytes
#define DRY_MAX_SEQ_LEN 20  // and their tails to this many tokens

typedef struct {
    int32_t head;
    int n_tail;                     // 0: the head token is a breaker by itself
    int32_t tail[DRY_MAX_SEQ_LEN];  // the tokens that must follow the head
} breaker;

struct bn_dry_breakers {
    breaker *e; // [n] sorted by head
    int n, cap;
};

const char *const bn_dry_default_breakers[BN_DRY_N_DEFAULT] = {"\n", ":", "\"", "*"};

static void push(bn_dry_breakers *b, int32_t head, const int32_t *tail, int n_tail) {
    for (int i = 0; i < b->n; i++) // the same sequence once (llama.cpp checks its multimap the same way)
        if (n_tail > 0 && b->e[i].head == head && b->e[i].n_tail == n_tail &&
            !memcmp(b->e[i].tail, tail, sizeof(int32_t) * (size_t)n_tail))
            return;
    if (b->n == b->cap) b->e = xrealloc(b->e, sizeof *b->e * (size_t)(b->cap = b->cap ? 2 * b->cap : 64));
    breaker *e = &b->e[b->n++];
    e->head = head, e->n_tail = n_tail;
    if (n_tail) memcpy(e->tail, tail, sizeof(int32_t) * (size_t)n_tail);
}

static int cmp_head(const void *x, const void *y) {
    const breaker *a = x, *b = y;
    return a->head < b->head ? -1 : a->head > b->head;
}

// add_string: one breaker string over the whole vocabulary (llama.cpp's get_overlapping_token_sequences)
static void add_string(bn_dry_breakers *b, const bn_tokenizer *tok, const char *str, size_t sl) {
    const int nv = bn_tokenizer_n_vocab(tok);
    char word[512];
    for (int32_t id = 0; id < nv; id++) {
        int wl = bn_token_to_piece(tok, id, word, sizeof word, true);
        if (wl < 0) wl = 0; // (a piece longer than the buffer: not seen here; no vocabulary has one)
        if (memmem(word, (size_t)wl, str, sl)) {
            push(b, id, NULL, 0);
            continue;
        }
        for (int pos = 0; pos < wl; pos++) { // every place the word ends with the string's first characters
            if (word[pos] != str[0]) continue;
            size_t i = 1;
            while (i < sl && pos + (int)i < wl && word[pos + i] == str[i]) i++;
            if (i < sl && pos + (int)i < wl) continue; // a mismatch inside the word
            int32_t *t = NULL;
            int nt = bn_tokenize(tok, str + i, sl - i, false, false, &t);
            if (nt < 0) nt = 0;
            push(b, id, t, nt < DRY_MAX_SEQ_LEN ? nt : DRY_MAX_SEQ_LEN);
            free(t);
        }
    }
}

bn_dry_breakers *bn_dry_breakers_new(const bn_tokenizer *tok, const char *const *strs, int n) {
    bn_dry_breakers *b = xcalloc(1, sizeof *b);
    if (!strs) strs = bn_dry_default_breakers, n = BN_DRY_N_DEFAULT;
    for (int k = 0; k < n; k++) {
        size_t sl = strs[k] ? strlen(strs[k]) : 0;
        if (sl == 0) continue;
        add_string(b, tok, strs[k], sl < DRY_MAX_CHAR_LEN ? sl : DRY_MAX_CHAR_LEN);
    }
    if (b->n) qsort(b->e, (size_t)b->n, sizeof *b->e, cmp_head); // (the order among one head's entries is irrelevant)
    return b;
}

void bn_dry_breakers_free(bn_dry_breakers *b) {
    if (!b) return;
    free(b->e);
    free(b);
}

// first_of: index of the first entry with this head, or b->n
static int first_of(const bn_dry_breakers *b, int32_t head) {
    int lo = 0, hi = b ? b->n : 0;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (b->e[mid].head < head) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

typedef struct {
    int32_t id;
    int len;
} token_len;

static int cmp_token_len(const void *x, const void *y) {
    const token_len *a = x, *b = y;
    return a->id != b->id ? (a->id < b->id ? -1 : 1) : (a->len > b->len ? -1 : a->len < b->len);
}

void bn_dry_apply(const bn_dry_breakers *b, float multiplier, float base, int allowed_length, int last_n,
                  const int32_t *hist, int n_hist, float *logits, int n_vocab) {
    if (multiplier == 0.0f || base < 1.0f || last_n == 0 || n_hist <= 0) return;
    const int w = last_n < 0 || last_n > n_hist ? n_hist : last_n; // llama.cpp's last_n_repeat
    if (w <= allowed_length) return;
    const int32_t *win = hist + (n_hist - w);
#define RAT(i) win[w - 1 - (i)] // the i-th token from the end (llama.cpp's ring_buffer::rat)
    // 1. the last breaker in the window limits how far back a repeat may reach
    int rep_limit = w;
    for (int i = 0; i < w; i++) {
        int longest = -1;
        for (int k = first_of(b, RAT(i)); b && k < b->n && b->e[k].head == RAT(i); k++) {
            const int sl = b->e[k].n_tail;
            if (sl <= longest || sl > i) continue;
            bool match = true;
            for (int o = 0; o < sl && match; o++) match = b->e[k].tail[o] == RAT(i - o - 1);
            if (match) longest = sl;
        }
        if (longest >= 0) {
            rep_limit = i - longest;
            break;
        }
    }
    if (rep_limit < allowed_length) return;
    // 2. repeat[last - k]: how many of the newest tokens also stand k positions earlier (the Z-algorithm over the
    //    window read newest first), capped at rep_limit
    int *repeat = xcalloc((size_t)w, sizeof(int));
    const int last = w - 1;
    for (int k = 1, lt = 0, rt = 0; k < w; k++) {
        if (k > rt) {
            int n = 0;
            while (n + k < w && RAT(n) == RAT(n + k)) n++;
            repeat[last - k] = n < rep_limit ? n : rep_limit;
            if (n > 0) lt = k, rt = k + n - 1;
        } else {
            const int p = k - lt, right = rt - k + 1;
            if (repeat[last - p] < right) {
                repeat[last - k] = repeat[last - p] < rep_limit ? repeat[last - p] : rep_limit;
            } else {
                int i = rt + 1;
                while (i < w && RAT(i) == RAT(i - k)) i++;
                repeat[last - k] = i - k < rep_limit ? i - k : rep_limit;
                lt = k, rt = i - 1;
            }
        }
    }
    // 3. the token after each repeat long enough would extend it: its longest such repeat
    token_len *ext = xmalloc(sizeof *ext * (size_t)w);
    int n_ext = 0;
    for (int i = 0; i < w - 1; i++)
        if (repeat[i] >= allowed_length) ext[n_ext++] = (token_len){RAT(w - 2 - i), repeat[i]};
    qsort(ext, (size_t)n_ext, sizeof *ext, cmp_token_len); // by id, the longest first
    // 4. the penalty, once per token, not on a token that is a breaker by itself
    int max_exponent = 0;
    if (base > 1.000001f) max_exponent = (int)(88.7228391f / logf(base)); // ln FLT_MAX: the power stays finite
    for (int i = 0; i < n_ext; i++) {
        if (i > 0 && ext[i].id == ext[i - 1].id) continue;
        const int32_t id = ext[i].id;
        if (id < 0 || id >= n_vocab) continue;
        bool single = false;
        for (int k = first_of(b, id); b && k < b->n && b->e[k].head == id && !single; k++) single = b->e[k].n_tail == 0;
        if (single) continue;
        int e = ext[i].len - allowed_length;
        if (max_exponent > 0 && e > max_exponent) e = max_exponent;
        logits[id] -= (float)(multiplier * pow(base, e));
    }
#undef RAT
    free(ext);
    free(repeat);
}
