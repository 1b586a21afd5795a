// tests/eval/test_stats.c — Wilson 95% intervals against published values (tolerance 5e-5:
// the references are rounded to 4 decimals), loop statistics and their JSON.
#include "tests/test.h"
#include "eval/stats.h"
#include <string.h>
#include <jansson.h>

int main(void) {
    double lo, hi;
    bn_wilson(10, 100, BN_Z95, &lo, &hi); // 0.0552 .. 0.1744
    CHECK_NEAR(lo, 0.0552, 5e-5, "10/100 lo");
    CHECK_NEAR(hi, 0.1744, 5e-5, "10/100 hi");
    bn_wilson(0, 20, BN_Z95, &lo, &hi); // 0 .. 0.1611
    CHECK_NEAR(lo, 0.0, 1e-12, "0/20 lo");
    CHECK_NEAR(hi, 0.1611, 5e-5, "0/20 hi");
    bn_wilson(20, 20, BN_Z95, &lo, &hi); // 0.8389 .. 1
    CHECK_NEAR(lo, 0.8389, 5e-5, "20/20 lo");
    CHECK_NEAR(hi, 1.0, 1e-12, "20/20 hi");
    bn_wilson(229, 1000, BN_Z95, &lo, &hi); // 0.2040 .. 0.2561
    CHECK_NEAR(lo, 0.2040, 5e-5, "229/1000 lo");
    CHECK_NEAR(hi, 0.2561, 5e-5, "229/1000 hi");
    bn_wilson(0, 0, BN_Z95, &lo, &hi);
    CHECK(lo == 0 && hi == 1, "n = 0 -> [0, 1]");

    bool loop[5] = {true, false, false, true, false}, lim[5] = {true, false, false, false, false};
    double len[5] = {4000, 120, 300, 2500, 80};
    bn_loop_stats s;
    double rep[5] = {0.5, -1, 0.25, 0.0, 0.75}; // -1: too short, left out of the mean
    bn_loop_stats_compute(loop, lim, len, rep, 5, &s);
    CHECK(s.n_rep == 4 && fabs(s.mean_rep4 - 0.375) < 1e-12, "seq-rep-4 mean over the 4 with a value (%g)", s.mean_rep4);
    CHECK(s.n == 5 && s.n_loops == 2 && s.n_length_limit == 1, "counts");
    CHECK_NEAR(s.loop_rate, 0.4, 1e-12, "rate");
    CHECK_NEAR(s.length_limit_share, 0.2, 1e-12, "limit share");
    CHECK_NEAR(s.mean_len, 1400, 1e-9, "mean");
    CHECK_NEAR(s.median_len, 300, 0, "median");
    char *js = bn_loop_stats_json(&s, "base");
    json_error_t je;
    json_t *o = json_loads(js, 0, &je);
    CHECK(o && json_integer_value(json_object_get(o, "loops")) == 2 &&
          !strcmp(json_string_value(json_object_get(o, "label")), "base") &&
          json_array_size(json_object_get(o, "loop_rate_ci95")) == 2, "json: %s", js);
    CHECK(!json_object_get(o, "frame_loop_rate"), "no frame-loop fields unless given");
    json_decref(o);
    free(js);
    // the frame-loop rate: 3 of 5 (the two verbatim loops and one frame loop), Wilson 0.2307 .. 0.8824
    bool frame[5] = {true, true, false, true, false};
    bn_loop_stats_frame(&s, frame, 5);
    CHECK(s.n_frame == 3 && fabs(s.frame_rate - 0.6) < 1e-12, "frame loops %lld", (long long)s.n_frame);
    CHECK_NEAR(s.frame_ci_lo, 0.2307, 5e-5, "3/5 lo");
    CHECK_NEAR(s.frame_ci_hi, 0.8824, 5e-5, "3/5 hi");
    js = bn_loop_stats_json(&s, NULL);
    o = json_loads(js, 0, &je);
    json_t *ci = o ? json_object_get(o, "frame_loop_rate_ci95") : NULL;
    CHECK(o && json_integer_value(json_object_get(o, "frame_loops")) == 3 &&
          fabs(json_real_value(json_object_get(o, "frame_loop_rate")) - 0.6) < 1e-12 && json_array_size(ci) == 2 &&
          fabs(json_real_value(json_array_get(ci, 0)) - s.frame_ci_lo) < 1e-12, "frame json: %s", js);
    json_decref(o);
    free(js);
    // seq-rep-4 of words: "a b c d a b c d" has 5 4-grams, 4 distinct -> 0.2; any whitespace splits; under 5 words -1
    const char *t1 = "a b c d a b c d";
    CHECK_NEAR(bn_seq_rep_n(t1, strlen(t1), 4), 0.2, 1e-12, "a b c d a b c d");
    const char *t2 = "one  two\tthree\nfour five six";
    CHECK_NEAR(bn_seq_rep_n(t2, strlen(t2), 4), 0.0, 1e-12, "no repeated 4-gram");
    CHECK(bn_seq_rep_n("a b c d", 7, 4) == -1 && bn_seq_rep_n("", 0, 4) == -1, "fewer than 5 words: -1");
    char phrase[4096] = "";
    for (int i = 0; i < 100; i++) strcat(phrase, "You will be a light bulb? ");
    // 600 words, 597 4-grams, 6 distinct
    CHECK_NEAR(bn_seq_rep_n(phrase, strlen(phrase), 4), 1.0 - 6.0 / 597.0, 1e-12, "a 6-word phrase 100 times");
    // one word changed in every other copy: 4-grams still mostly repeat (what the verbatim detector can miss)
    char near[8192] = "";
    for (int i = 0; i < 50; i++) strcat(near, i % 2 ? "You will be a light bulb? A: None. " : "You will be a light bulb? A: Onight. ");
    CHECK(bn_seq_rep_n(near, strlen(near), 4) > 0.9, "a phrase with alternating answers: seq-rep-4 %g > 0.9",
          bn_seq_rep_n(near, strlen(near), 4));
    return test_done("test_stats");
}
