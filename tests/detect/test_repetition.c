// tests/detect/test_repetition.c — hand-built cases for every branch of find_inner_repetition
// (docs/antidoom.md §4), including the quirks of §4.3. Expected values are derived by hand in the
// comments next to each case (exact integers; no tolerance needed).
#include "tests/test.h"
#include "detect/repetition.h"
#include "base/unicode.h"
#include "base/util.h"
#include <string.h>

// Code-point text builder.
typedef struct { uint32_t *p; size_t n, cap; } txt;
static void put(txt *t, uint32_t c) {
    if (t->n == t->cap) { t->cap = t->cap ? 2 * t->cap : 256; t->p = xrealloc(t->p, t->cap * sizeof *t->p); }
    t->p[t->n++] = c;
}
static void put_ascii(txt *t, const char *s) { while (*s) put(t, (unsigned char)*s++); }
static uint32_t uniq_next = 0x4E00; // CJK ideographs: each used once, never part of a loop
static void put_unique(txt *t, int n) { for (int i = 0; i < n; i++) put(t, uniq_next++); }
static void put_unit(txt *t, const char *unit, int times) { for (int i = 0; i < times; i++) put_ascii(t, unit); }

static int find(txt *t, const bn_rep_params *p, bn_rep_hit *h) {
    memset(h, 0, sizeof *h);
    return bn_find_repetition(t->p, t->n, p, h);
}

// 37-char unit; ASCII only.
static const char *U37 = "Wait, let me rethink this carefully. ";

int main(void) {
    bn_rep_params d = bn_rep_params_default();
    bn_rep_hit h;
    CHECK(d.min_repeats == 4 && d.min_total_repeated == 60 && d.min_period == 1 && d.max_period == 1024 &&
          d.sample_len == 16 && d.sample_interval == 128, "defaults");

    { // empty and short texts: n == 0 or n < min_total_repeated -> no loop
        txt t = {0};
        CHECK(find(&t, &d, &h) == 0, "empty");
        for (int i = 0; i < 29; i++) put_ascii(&t, "ab"); // 58 chars, periodic, but < 60
        CHECK(find(&t, &d, &h) == 0, "58 chars < 60");
        put_ascii(&t, "ab"); // 60 chars: "ab"*30 -> probe s=0..43: F=T[0:16], first o>=16 is 16 -> p=16, 3 reps (48) < 4
        CHECK(find(&t, &d, &h) == 0, "60 chars: only 3 full 16-char units");
        free(t.p);
    }
    { // short true period "ab" reported as 16; repeats counted in that unit
        txt t = {0};
        for (int i = 0; i < 100; i++) put_ascii(&t, "ab"); // n = 200
        CHECK(find(&t, &d, &h) == 1, "ab*100 hit");
        CHECK(h.period == 16 && h.repeats == 12 && h.start == 0 && h.end == 192 && h.repeat_start == 16,
              "ab: period %lld repeats %lld start %lld end %lld", (long long)h.period, (long long)h.repeats,
              (long long)h.start, (long long)h.end);
        CHECK(strcmp(h.snippet, "abababababababab") == 0, "snippet '%s'", h.snippet);
        free(t.p);
    }
    { // "abc" (period 3) -> smallest multiple >= 16 is 18; 150 chars -> 8 copies of 18 (144)
        txt t = {0};
        for (int i = 0; i < 50; i++) put_ascii(&t, "abc");
        CHECK(find(&t, &d, &h) == 1 && h.period == 18 && h.repeats == 8 && h.end == 144, "abc: period %lld repeats %lld",
              (long long)h.period, (long long)h.repeats);
        free(t.p);
    }
    { // period 1 ("a"*100) -> 16, 6 copies
        txt t = {0};
        for (int i = 0; i < 100; i++) put(&t, 'a');
        CHECK(find(&t, &d, &h) == 1 && h.period == 16 && h.repeats == 6 && h.start == 0 && h.end == 96, "a*100");
        free(t.p);
    }
    { // forward candidate, verified both ways; start is the probe's phase, not the loop's true start.
      // 50 unique chars, U37 x 8 (chars 50..346), 10 unique chars. Probe 0 sees unique text.
      // Probe 128: next F at 165 -> p = 37; forward copies at 128,165,202,239,276 (313+37 > 346);
      // backward 91, 54 (17 would include unique chars) -> 7 copies, start 54, end 313.
        txt t = {0};
        put_unique(&t, 50);
        put_unit(&t, U37, 8);
        put_unique(&t, 10);
        CHECK(find(&t, &d, &h) == 1, "U37 hit");
        CHECK(h.start == 54 && h.end == 313 && h.period == 37 && h.repeats == 7 && h.repeat_start == 91,
              "U37: start %lld end %lld period %lld repeats %lld", (long long)h.start, (long long)h.end,
              (long long)h.period, (long long)h.repeats);
        // the snippet is the rotated unit T[128:165] = U37 rotated by (128-50) % 37 = 4
        char rot[64];
        snprintf(rot, sizeof rot, "%s%.*s", U37 + 4, 4, U37);
        CHECK(strcmp(h.snippet, rot) == 0, "snippet '%s' vs '%s'", h.snippet, rot);
        free(t.p);
    }
    { // backward candidate: 4 unique, then 169 loop chars ([4,173): U40 x 4 + 9 chars), unique tail.
      // Probe 0: F has unique chars. Probe 128: F = T[128:144]; the next copy would need T[168:184]
      // but the loop ends at 173 -> no forward candidate. Backward: last F inside T[0:128] at 88,
      // p = 40; copies of T[88:128]: forward 88,128 (168+40 > 173); backward 48, 8 -> 4 copies.
        const char *U40 = "The answer is 42, so the total is fine. "; // 40 chars
        CHECK(strlen(U40) == 40, "U40 length");
        txt t = {0};
        put_unique(&t, 4);
        put_unit(&t, U40, 4);
        for (int i = 0; i < 9; i++) put(&t, (unsigned char)U40[i]);
        put_unique(&t, 100);
        CHECK(find(&t, &d, &h) == 1, "backward hit");
        CHECK(h.start == 8 && h.end == 168 && h.period == 40 && h.repeats == 4 && h.repeat_start == 48,
              "backward: start %lld end %lld period %lld repeats %lld", (long long)h.start, (long long)h.end,
              (long long)h.period, (long long)h.repeats);
        free(t.p);
    }
    { // min_total_repeated and min_repeats boundaries: 4 copies of a 16-char unit = 64 chars
        const char *U16 = "0123456789abcdef";
        txt t = {0};
        put_unit(&t, U16, 4);
        put_unique(&t, 30); // n = 94; probe 0 finds p = 16
        bn_rep_params p = d;
        p.min_total_repeated = 64;
        CHECK(find(&t, &p, &h) == 1 && h.repeats == 4 && h.period == 16, "64 >= 64 -> hit");
        p.min_total_repeated = 65;
        CHECK(find(&t, &p, &h) == 0, "64 < 65 -> no hit");
        p = d;
        p.min_repeats = 5;
        CHECK(find(&t, &p, &h) == 0, "4 copies < min_repeats 5");
        free(t.p);
        // 3 copies of a 30-char unit = 90 chars >= 60 but 3 < 4
        txt u = {0};
        put_unit(&u, "abcdefghijklmnopqrstuvwxyz0123", 3);
        put_unique(&u, 30);
        CHECK(find(&u, &d, &h) == 0, "3 copies -> no hit");
        p = d;
        p.min_repeats = 3;
        CHECK(find(&u, &p, &h) == 1 && h.repeats == 3 && h.period == 30, "3 copies with min_repeats 3");
        free(u.p);
    }
    { // loop between probes: 130 unique, U16 x 5 (chars 130..210), unique tail to 400. Probe 128's
      // fingerprint starts with 2 unique chars, probe 256 is in the tail -> missed.
        txt t = {0};
        put_unique(&t, 130);
        put_unit(&t, "0123456789abcdef", 5);
        put_unique(&t, 190);
        CHECK(t.n == 400, "n");
        CHECK(find(&t, &d, &h) == 0, "loop between probes is missed");
        // the same loop starting at 128 is seen by probe 128
        txt u = {0};
        put_unique(&u, 128);
        put_unit(&u, "0123456789abcdef", 5);
        put_unique(&u, 192);
        CHECK(find(&u, &d, &h) == 1 && h.start == 128 && h.period == 16 && h.repeats == 5, "loop on a probe");
        free(t.p);
        free(u.p);
    }
    { // first verified hit in scan order, not the earliest loop: loop A (U16 x 5 at 20..100) lies
      // between probes 0 and 128; loop B (U37 x 6 at 120..342) is found by probe 128.
        txt t = {0};
        put_unique(&t, 20);
        put_unit(&t, "0123456789abcdef", 5);
        put_unique(&t, 20);
        put_unit(&t, U37, 6);
        put_unique(&t, 40);
        CHECK(find(&t, &d, &h) == 1 && h.period == 37, "later loop B returned (period %lld)", (long long)h.period);
        CHECK(h.start >= 120, "B start %lld", (long long)h.start);
        free(t.p);
    }
    { // the forward candidate wins over the backward one at the same probe: probe 128 is inside a
      // U37 loop (forward p=37 verifies) -> period 37 even though the fingerprint also occurs earlier.
        txt t = {0};
        put_unit(&t, U37, 10);
        CHECK(find(&t, &d, &h) == 1 && h.period == 37 && h.start == 0 && h.repeats == 10, "U37 x 10 from 0");
        free(t.p);
    }
    { // max_period: a 1100-char unit x 4 is not a loop at the default 1024, but is at 2048
        txt t = {0};
        txt unit = {0};
        for (int i = 0; i < 1100; i++) put(&unit, 0x3400 + (uint32_t)i); // distinct chars inside the unit
        for (int r = 0; r < 4; r++)
            for (size_t i = 0; i < unit.n; i++) put(&t, unit.p[i]);
        CHECK(find(&t, &d, &h) == 0, "period 1100 > max_period 1024");
        bn_rep_params p = d;
        p.max_period = 2048;
        CHECK(find(&t, &p, &h) == 1 && h.period == 1100 && h.repeats == 4, "period 1100 with max 2048");
        // snippet: first 100 code points (3 UTF-8 bytes each) + "..."
        CHECK(strlen(h.snippet) == 303 && strcmp(h.snippet + 300, "...") == 0, "long snippet %zu", strlen(h.snippet));
        p.min_period = 1200;
        CHECK(find(&t, &p, &h) == 0, "min_period 1200 rejects the 1100 candidate");
        free(t.p);
        free(unit.p);
    }
    { // Unicode: indices are code points, not bytes: a 20-code-point unit with 2-, 3- and 4-byte chars.
        const char *unit = "é中😀 wait, so é中😀 no "; // count code points below
        uint32_t cp[64];
        size_t ucp = bn_utf8_to_cps(unit, strlen(unit), cp, NULL);
        CHECK(ucp == 20, "unit code points %zu", ucp);
        char text[4096];
        size_t k = 0;
        const char *pre = "Ünïcödé prefix—ok: ";  // 19 code points
        k += (size_t)sprintf(text + k, "%s", pre);
        for (int r = 0; r < 10; r++) k += (size_t)sprintf(text + k, "%s", unit);
        uint32_t pre_cp[64];
        size_t npre = bn_utf8_to_cps(pre, strlen(pre), pre_cp, NULL);
        CHECK(npre == 19, "prefix code points %zu", npre);
        CHECK(bn_find_repetition_utf8(text, k, &d, &h) == 1, "unicode hit");
        // n = 19 + 10*20 = 219. Probe 0 holds prefix chars; probe 128 = 19 + 5*20 + 9 (copy 6, offset 9):
        // forward p = 20; copies of T[128:148] forward 128,148,168,188 (208+20 > 219), backward
        // 108,88,68,48,28 (8 would include prefix chars) -> 9 copies, start 28, end 208.
        CHECK(h.period == 20 && h.start == 28 && h.end == 208 && h.repeats == 9 && h.repeat_start == 48,
              "unicode: start %lld end %lld period %lld repeats %lld", (long long)h.start, (long long)h.end,
              (long long)h.period, (long long)h.repeats);
    }
    { // efficiency: 100k chars without a loop, then with one at the very end
        txt t = {0};
        uint64_t x = 88172645463325252ull;
        for (int i = 0; i < 100000; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            put(&t, 'a' + (uint32_t)(x % 26));
        }
        double t0 = bn_time_ms();
        CHECK(find(&t, &d, &h) == 0, "random 100k: no loop");
        for (int i = 0; i < 20; i++) put_ascii(&t, U37);
        CHECK(find(&t, &d, &h) == 1 && h.period == 37, "loop at the end of 100k chars");
        double ms = bn_time_ms() - t0;
        printf("100k-char scans: %.1f ms\n", ms);
        CHECK(ms < 5000, "two 100k scans took %.0f ms (limit 5 s)", ms);
        free(t.p);
    }
    return test_done("test_repetition");
}
