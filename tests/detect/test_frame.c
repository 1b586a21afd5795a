// tests/detect/test_frame.c — the frame-loop detector (detect/frame.h, docs/antidoom.md §16) on constructed cases,
// over word pieces (bn_frame_units) and over hand-made id sequences: a verbatim loop counts as both; a frame with
// changing slots as a frame loop only; prose, a code listing with five similar functions, a numbered list that
// counts up once as neither; the edges of every threshold (entries with and without changes, similarity, period,
// length); short inputs.
#include "tests/test.h"
#include "detect/frame.h"
#include "detect/repetition.h"
#include "base/util.h"
#include <stdlib.h>
#include <string.h>

// frame: 1 when the frame detector fires on text's word pieces (hit filled).
static int frame(const char *text, bn_frame_hit *hit) {
    int32_t *ids;
    size_t n = bn_frame_units(text, strlen(text), &ids);
    bn_frame_params p = bn_frame_params_default();
    int r = bn_find_frame_loop(ids, n, &p, hit);
    free(ids);
    return r;
}

static int verbatim(const char *text) {
    bn_rep_params p = bn_rep_params_default();
    bn_rep_hit h;
    return bn_find_repetition_utf8(text, strlen(text), &p, &h);
}

// cat: a malloc'd concatenation of n strings from parts (cycled).
static char *cat(const char *const *parts, int n_parts, int n) {
    size_t len = 1;
    for (int i = 0; i < n; i++) len += strlen(parts[i % n_parts]);
    char *s = xmalloc(len);
    s[0] = 0;
    for (int i = 0; i < n; i++) strcat(s, parts[i % n_parts]);
    return s;
}

static const char *PROSE =
    "The harbour was quiet that morning. A few boats rocked against the pier while gulls argued over scraps near "
    "the fish market. Maria walked past the shuttered cafe and wondered whether the ferry would run at all, since "
    "the wind had turned in the night and the sky over the headland looked heavy. Her brother had promised to meet "
    "her at the ticket office, but he was late as usual, and she had learned long ago not to wait for him. She "
    "bought a newspaper, read the shipping forecast twice, and decided that if the ferry did not leave by ten she "
    "would take the coast road instead. The road was longer and the bus smelled of diesel, yet it had never once "
    "left her stranded on the wrong side of the water. At half past nine the harbour master came out of his hut, "
    "looked at the sea for a long minute, and raised the blue flag.";

// code(k): a listing of k similar functions and a main (static buffer).
static const char *code(int k) {
    static const char *const fn[] = {
        "def area_square(side):\n    return side * side\n\n",
        "def area_rectangle(width, height):\n    return width * height\n\n",
        "def area_triangle(base, height):\n    return 0.5 * base * height\n\n",
        "def area_circle(radius):\n    return 3.14159 * radius * radius\n\n",
        "def area_ellipse(a, b):\n    return 3.14159 * a * b\n\n",
        "def area_rhombus(p, q):\n    return 0.5 * p * q\n\n",
    };
    static char buf[2048];
    buf[0] = 0;
    for (int i = 0; i < k; i++) strcat(buf, fn[i]);
    strcat(buf, "if __name__ == \"__main__\":\n    print(area_square(3))\n");
    return buf;
}

static const char *LIST =
    "Steps:\n1. Preheat the oven to 180 degrees.\n2. Mix the flour, sugar and butter in a large bowl.\n"
    "3. Beat two eggs and fold them in.\n4. Pour the batter into a greased tin.\n5. Bake for forty minutes.\n"
    "6. Let it cool on a rack before slicing.\n7. Dust with icing sugar.\n8. Serve with cream or fruit.\n"
    "9. Store leftovers in an airtight box.\n10. Eat within three days.\n";

// ids: an anchor of 4 fixed tokens (1..4) then k slot tokens unique to each period, reps periods, then a tail of
// unique tokens; returns the count.
static size_t slotted(int32_t *out, int k, int reps, int tail) {
    size_t n = 0;
    int32_t fresh = 1000;
    for (int r = 0; r < reps; r++) {
        for (int a = 1; a <= 4; a++) out[n++] = a;
        for (int j = 0; j < k; j++) out[n++] = fresh++;
    }
    for (int j = 0; j < tail; j++) out[n++] = fresh++;
    return n;
}

int main(void) {
    bn_frame_hit h;
    bn_frame_params p = bn_frame_params_default();
    { // a verbatim loop counts as both
        const char *u[] = {"The cat sat on the mat and looked at the door. "};
        char *s = cat(u, 1, 8);
        CHECK(verbatim(s) == 1, "verbatim detector on a verbatim loop");
        // the first copy's "The" has no space before it, the others' " The" do: the first entry is " cat" (piece 1)
        CHECK(frame(s, &h) == 1 && h.start == 1 && h.repeats == 8 && h.similarity == 1.0,
              "frame detector on a verbatim loop: start %lld repeats %lld sim %.3f", (long long)h.start,
              (long long)h.repeats, h.similarity);
        free(s);
    }
    { // a frame with changing slots: frame loop, not verbatim; the second entry is the re-entry
        const char *u[] = {"Why did the chicken cross the road? To get to the other side. ",
                           "Why did the chicken cross the road? To get to the barn. ",
                           "Why did the chicken cross the road? To get to a quiet place to think. ",
                           "Why did the chicken cross the road? To get to its friend. ",
                           "Why did the chicken cross the road? To get to the market before noon. ",
                           "Why did the chicken cross the road? To get to safety. "};
        char *s = cat(u, 6, 6);
        CHECK(verbatim(s) == 0, "verbatim detector on a frame with changing slots");
        int32_t *ids;
        size_t n = bn_frame_units(u[0], strlen(u[0]) - 1, &ids); // its pieces without the trailing space
        free(ids);
        // entries at " did" (piece 1: the first "Why" has no space before it), re-entry one piece after u[0]'s
        CHECK(frame(s, &h) == 1 && h.start == 1 && h.repeat_start == (int64_t)n + 1 && h.repeats == 6,
              "frame: start %lld re-entry %lld (expected %zu) repeats %lld", (long long)h.start,
              (long long)h.repeat_start, n, (long long)h.repeats);
        CHECK(h.similarity >= 0.5 && h.similarity < 1.0, "frame similarity %.3f", h.similarity);
        free(s);
        // after a lead-in ("Here", " is", " a", " joke", "."), the first entry is its "." (piece 4): every period
        // ends in "." before " Why" too
        char *t = xmalloc(strlen(u[4]) * 8);
        strcpy(t, "Here is a joke. ");
        char *s4 = cat(u, 6, 6);
        strcat(t, s4);
        CHECK(frame(t, &h) == 1 && h.start == 4 && h.repeats == 6, "lead-in: start %lld repeats %lld",
              (long long)h.start, (long long)h.repeats);
        free(s4);
        // five entries with changing slots are not enough (min_repeats 6); four verbatim ones are (4)
        char *s5 = cat(u, 6, 5);
        CHECK(frame(s5, &h) == 0, "five entries are no frame loop");
        free(s5);
        char *v4 = cat(u, 1, 4), *v3 = cat(u, 1, 3);
        CHECK(frame(v4, &h) == 1 && h.similarity == 1.0 && frame(v3, &h) == 0, "four verbatim copies, not three");
        free(v4);
        free(v3);
        free(t);
    }
    { // things that repeat but belong
        CHECK(frame(PROSE, &h) == 0 && verbatim(PROSE) == 0, "prose");
        CHECK(frame(code(5), &h) == 0 && verbatim(code(5)) == 0, "a code listing with five similar functions");
        CHECK(frame(LIST, &h) == 0 && verbatim(LIST) == 0, "a numbered list that counts up once");
        // the edge: the same structure a sixth time is a frame ("):\n    return" entered 6 times, similar bodies)
        CHECK(frame(code(6), &h) == 1 && h.repeats == 6, "six similar functions count (repeats %lld)",
              (long long)h.repeats);
    }
    int32_t ids[4096];
    { // similarity edge: periods of 4 anchor + k unique slot tokens: similarity 1 - k / (4 + k)
        size_t n = slotted(ids, 4, 6, 0); // 1 - 4/8 = 0.5: counts (>=)
        CHECK(bn_find_frame_loop(ids, n, &p, &h) == 1 && h.similarity == 0.5 && h.repeats == 6,
              "k=4: sim %.3f", h.similarity);
        n = slotted(ids, 5, 6, 0); // 1 - 5/9 < 0.5
        CHECK(bn_find_frame_loop(ids, n, &p, &h) == 0, "k=5 is below the similarity floor");
    }
    { // entries edge: 6 entries count, 5 do not (a tail of fresh tokens after them)
        size_t n = slotted(ids, 2, 6, 10);
        CHECK(bn_find_frame_loop(ids, n, &p, &h) == 1 && h.repeats == 6 && h.start == 0 && h.repeat_start == 6 &&
                  h.period == 6 && h.end == 36,
              "4 entries: repeats %lld start %lld re-entry %lld end %lld", (long long)h.repeats, (long long)h.start,
              (long long)h.repeat_start, (long long)h.end);
        n = slotted(ids, 2, 5, 10);
        CHECK(bn_find_frame_loop(ids, n, &p, &h) == 0, "5 entries");
    }
    { // period edge: max_period tokens between entries count, one more does not
        // a verbatim period of exactly 256 and of 257
        for (int len = 256; len <= 257; len++) {
            for (int r = 0; r < 4; r++)
                for (int j = 0; j < len; j++) ids[r * len + j] = 5000 + j;
            int got = bn_find_frame_loop(ids, (size_t)(4 * len), &p, &h);
            CHECK(got == (len <= p.max_period), "verbatim period %d: %d", len, got);
            if (got) CHECK(h.period == len && h.end == 4 * len, "period %lld end %lld", (long long)h.period,
                           (long long)h.end);
        }
    }
    { // length edge and short inputs: one token over and over, 15 vs 16 tokens
        for (int i = 0; i < 16; i++) ids[i] = 9;
        CHECK(bn_find_frame_loop(ids, 15, &p, &h) == 0, "15 tokens are under min_tokens");
        CHECK(bn_find_frame_loop(ids, 16, &p, &h) == 1 && h.period == 1 && h.end == 16, "16 tokens");
        CHECK(bn_find_frame_loop(ids, 0, &p, &h) == 0 && bn_find_frame_loop(ids, 3, &p, &h) == 0, "empty / 3 tokens");
        CHECK(frame("", &h) == 0 && frame("Hello.", &h) == 0, "empty / short text");
    }
    { // the loop at the very end: the last entry cut short still counts; end is clipped to the text
        size_t n = slotted(ids, 3, 6, 0);
        n -= 2; // the sixth period loses its last 2 slot tokens
        CHECK(bn_find_frame_loop(ids, n, &p, &h) == 1 && h.repeats == 6 && h.end == (int64_t)n, "cut last period: "
              "repeats %lld end %lld of %zu", (long long)h.repeats, (long long)h.end, n);
    }
    { // word pieces: spaces stay with the next piece, other characters stand alone
        int32_t *u, *v;
        CHECK(bn_frame_units("Hi  there, you!\n", 16, &u) == 6, "pieces of 'Hi  there, you!\\n'");
        bn_frame_units(" there  there", 13, &v);
        CHECK(u[1] != v[0] && u[1] == v[1], "'  there' is one piece, unlike ' there'");
        free(u);
        free(v);
    }
    return test_done("test_frame");
}
