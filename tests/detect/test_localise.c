// tests/detect/test_localise.c — token-space localisation (docs/antidoom.md §5) on hand-built token
// sequences: slide-left with ' let'/'let', fallback when rep <= seed, boundary-skip budgets, the
// newline quirk, the restart-word move and its negative cases, end of text, and partial UTF-8
// tokens in the token text. Expected indices are derived in the comments (exact).
#include "tests/test.h"
#include "detect/localise.h"
#include "base/util.h"
#include <string.h>

// Builds t from a NULL-terminated list of surfaces.
static void build(bn_toktext *t, const char *const *toks) {
    int m = 0;
    while (toks[m]) m++;
    size_t *lens = xmalloc((size_t)(m + 1) * sizeof *lens);
    for (int i = 0; i < m; i++) lens[i] = strlen(toks[i]);
    bn_toktext_build(t, toks, lens, m);
    free(lens);
}

// Localises a hit whose start is char `start_in` into token seed_tok and whose repeat_start is
// the first char of token rep_tok (+ rep_in); end = end of text unless given.
static int loc(const char *const *toks, int seed_tok, int start_in, int rep_tok, int rep_in, int64_t end,
               bn_loc_info *info) {
    bn_toktext t;
    build(&t, toks);
    bn_rep_hit h;
    memset(&h, 0, sizeof h);
    h.start = (int64_t)t.off[seed_tok] + start_in;
    h.repeat_start = (int64_t)t.off[rep_tok] + rep_in;
    h.period = h.repeat_start - h.start;
    h.end = end >= 0 ? end : (int64_t)t.n_cp;
    h.repeats = 4;
    int r = bn_localise(&t, &h, info);
    bn_toktext_free(&t);
    return r;
}

int main(void) {
    bn_loc_info info;
    { // slide left with ' let' vs 'let' (keys strip leading whitespace)
        // "Intro text\nlet me see. let me see. let me see."
        const char *toks[] = {"Intro", " text", "\n", "let", " me", " see", ".", " let", " me", " see", ".",
                              " let", " me", " see", ".", NULL};
        // hit starts inside " me" (token 4), repeats at " me" (token 8): P = 4; key(3)="let" ==
        // key(7)="let" -> seed 3; key(2)="" != key(6)="." -> stop; target = 7 (" let").
        int r = loc(toks, 4, 1, 8, 0, -1, &info);
        CHECK(r == 7, "slide-left target %d (expected 7)", r);
        CHECK(info.seed == 4 && info.rep == 8 && info.seed_slid == 3 && info.period_tokens == 4 && !info.fallback,
              "info seed %d rep %d slid %d P %d", info.seed, info.rep, info.seed_slid, info.period_tokens);
        // without the leading-space strip the slide would stop at 4 and the target would be " me" (8):
        const char *toks2[] = {"Intro", " text", "\n", "Let", " me", " see", ".", " let", " me", " see", ".",
                               " let", " me", " see", ".", NULL};
        r = loc(toks2, 4, 1, 8, 0, -1, &info);
        CHECK(r == 8, "case differs -> no slide, target %d (expected 8)", r);
    }
    { // fallback: start and repeat_start in the same token (rep <= seed)
        const char *toks[] = {"xx", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "  ", "b", NULL};
        int r = loc(toks, 1, 0, 1, 16, -1, &info);
        CHECK(r == 1 && info.fallback, "fallback same token: %d", r);
        // repeat_start on whitespace inside the seed token: first non-ws char before end is 'c' (token 3)
        const char *toks2[] = {"Q", "ab   ", "  ", "cd", "e", NULL}; // chars: Q=0, a=1 b=2 sp=3..5, 6..7, c=8
        r = loc(toks2, 1, 0, 1, 2, 10, &info);
        CHECK(r == 3 && info.fallback, "fallback over whitespace: %d (expected 3)", r);
        // ... but not when the hit ends before that char
        r = loc(toks2, 1, 0, 1, 2, 8, &info);
        CHECK(r == -1, "fallback with no non-ws char before end: %d", r);
    }
    { // boundary-only skipping budgets (step 5); seed 1, rep 3, key(0)="Z" != key(2)="#"
        const char *four[] = {"Z", "A", "#", ".", ")", "]", "!", " ok", NULL};
        int r = loc(four, 1, 0, 3, 0, -1, &info);
        CHECK(r == 7, "4 punctuation tokens skipped -> ' ok' (%d)", r);
        const char *five[] = {"Z", "A", "#", ".", ")", "]", "!", "?", " ok", NULL};
        r = loc(five, 1, 0, 3, 0, -1, &info);
        CHECK(r == 7, "5th punctuation token exceeds the budget -> lands on '?' (%d)", r);
        const char *chars[] = {"Z", "A", "#", "-----", "-----", "-----", " ok", NULL};
        r = loc(chars, 1, 0, 3, 0, -1, &info);
        CHECK(r == 5, "15 chars > 12 -> third dash run kept (%d)", r);
        const char *nl[] = {"Z", "A", "#", ".", "\n", "-", " item", NULL};
        r = loc(nl, 1, 0, 3, 0, -1, &info);
        CHECK(r == 5, "punctuation pass stops at the newline, whitespace pass lands on '-' (%d)", r);
    }
    { // end of text -> no row: target '.' skipped, then only whitespace remains
        const char *toks[] = {".", "\n", ".", "\n", NULL};
        int r = loc(toks, 1, 0, 3, 0, -1, &info);
        CHECK(r == -1 && info.seed_slid == 0, "trailing whitespace -> no row (%d, slid %d)", r, info.seed_slid);
    }
    { // restart-word move: loop unit [" 7", ".", " Wait", ",", " maybe"], first copy after "Answer:"
        const char *toks[] = {"Answer", ":", " 7", ".", " Wait", ",", " maybe", " 7", ".", " Wait", ",", " maybe",
                              " 7", ".", " Wait", NULL};
        // seed 2, rep 7 (P 5); key(1)=":" != key(6)="maybe" -> no slide; target 7 " 7" is a word,
        // then "." (sentence end), seam d[1] != d[6], next readable " Wait" -> moved to 9.
        int r = loc(toks, 2, 0, 7, 0, -1, &info);
        CHECK(r == 9 && info.restart_moved, "moved onto ' Wait' (%d)", r);
        const char *no_restart[] = {"Answer", ":", " 7", ".", " Yes", ",", " maybe", " 7", ".", " Yes", ",", " maybe",
                                    " 7", ".", " Yes", NULL};
        r = loc(no_restart, 2, 0, 7, 0, -1, &info);
        CHECK(r == 7 && !info.restart_moved, "' Yes' is not a restart word (%d)", r);
        const char *comma[] = {"Answer", ":", " 7", ",", " Wait", ",", " maybe", " 7", ",", " Wait", ",", " maybe",
                               " 7", ",", " Wait", NULL};
        r = loc(comma, 2, 0, 7, 0, -1, &info);
        CHECK(r == 7 && !info.restart_moved, "',' is not a sentence end (%d)", r);
        // seed 0: there is no token before the first copy -> no seam -> no move
        const char *at0[] = {" 7", ".", " Wait", ",", " maybe", " 7", ".", " Wait", ",", " maybe", " 7", NULL};
        r = loc(at0, 0, 0, 5, 0, -1, &info);
        CHECK(r == 5 && !info.restart_moved, "seed 0 -> no move (%d)", r);
        // "..." + newline before the restart word: run ". . ." (3 tokens) then "\n" is skipped as whitespace
        const char *dots[] = {"Answer", ":", " 7", ".", ".", ".", "\n", "So", " maybe", " 7", ".", ".", ".", "\n",
                              "So", " maybe", " 7", NULL};
        r = loc(dots, 2, 0, 9, 0, -1, &info);
        CHECK(r == 14 && info.restart_moved, "'...\\nSo' -> 'So' (%d)", r);
    }
    { // partial UTF-8 tokens: each code point belongs to the token holding its first byte
        const char *toks[] = {"a", "\xe4\xbd", "\xa0", "b", NULL}; // "a你b"
        bn_toktext t;
        build(&t, toks);
        CHECK(t.n_cp == 3 && t.cp[1] == 0x4F60, "decoded %zu cps", t.n_cp);
        CHECK(t.off[0] == 0 && t.off[1] == 1 && t.off[2] == 2 && t.off[3] == 2 && t.off[4] == 3, "offsets");
        CHECK(bn_toktext_token_at(&t, 1) == 1 && bn_toktext_token_at(&t, 2) == 3 && bn_toktext_token_at(&t, 3) == -1,
              "token_at");
        bn_toktext_free(&t);
        const char *split2[] = {"\xe4", "\xbd\xa0", "x", NULL};
        build(&t, split2);
        CHECK(t.n_cp == 2 && t.off[1] == 1 && t.off[2] == 1, "lead byte alone owns the char");
        bn_toktext_free(&t);
        const char *trunc[] = {"a", "\xe4\xbd", NULL}; // truncated at the end: one U+FFFD (maximal subpart)
        build(&t, trunc);
        CHECK(t.n_cp == 2 && t.cp[1] == 0xFFFD && t.off[1] == 1, "truncated sequence -> one U+FFFD");
        bn_toktext_free(&t);
        const char *stray[] = {"\xa0x", NULL};
        build(&t, stray);
        CHECK(t.n_cp == 2 && t.cp[0] == 0xFFFD && t.cp[1] == 'x', "stray continuation byte -> U+FFFD");
        bn_toktext_free(&t);
        // a continuation-only token counts as whitespace-only: the final whitespace skip passes it
        const char *loop[] = {"Z", "A", "#", "\xe4\xbd", "\xa0", "\xe4\xbd", "\xa0", NULL};
        // seed 1 ("A"), rep 3: target 3 owns "你" (a word char) -> stays 3
        int r = loc(loop, 1, 0, 3, 0, -1, &info);
        CHECK(r == 3, "CJK char split over two tokens: target %d", r);
    }
    { // restart words: exactly the 27
        const char *words[] = {"actually", "after", "also", "alternatively", "because", "but", "finally", "first",
                               "given", "hmm", "however", "in", "let", "looking", "maybe", "now", "okay", "perhaps",
                               "second", "since", "so", "the", "then", "therefore", "this", "thus", "wait"};
        int n_ok = 0;
        for (int i = 0; i < 27; i++) {
            uint32_t w[32];
            size_t n = strlen(words[i]);
            for (size_t k = 0; k < n; k++) w[k] = (unsigned char)words[i][k];
            n_ok += bn_is_restart_word(w, n);
        }
        CHECK(n_ok == 27, "restart words %d/27", n_ok);
        uint32_t yes[3] = {'y', 'e', 's'}, wai[3] = {'w', 'a', 'i'};
        CHECK(!bn_is_restart_word(yes, 3) && !bn_is_restart_word(wai, 3), "non-words");
    }
    return test_done("test_localise");
}
