// tests/eval/test_tasks.c — task scores (eval/tasks.h) on constructed values: the first-line rule (leading newlines
// belong to it), exact match, token accuracy over the first N reference tokens (a short completion's missing
// positions count as wrong), per-family and overall rows with Wilson intervals (references rounded to 4 decimals,
// tolerance 5e-5) and their JSON.
#include "tests/test.h"
#include "eval/tasks.h"
#include <string.h>

static bn_task_score score(const char *gen, const int32_t *ids, int n, const char *ref, const int32_t *rids, int nr,
                           int N) {
    return bn_task_score_one(gen, strlen(gen), ids, n, ref, strlen(ref), rids, nr, N);
}

int main(void) {
    CHECK(bn_task_first_line("abc\ndef", 7) == 3 && bn_task_first_line("\n\nabc\nd", 7) == 5 &&
          bn_task_first_line("abc", 3) == 3 && bn_task_first_line("", 0) == 0 && bn_task_first_line("\n\n", 2) == 2,
          "first lines");
    int32_t r[6] = {1, 2, 3, 4, 5, 6}, g[6] = {1, 2, 9, 4, 5, 6};
    bn_task_score s = score("x = 1\ny", g, 6, "x = 1\nz", r, 6, 32);
    CHECK(s.exact && s.n_tokens == 6 && s.n_correct == 5, "exact %d tokens %d correct %d", s.exact, s.n_tokens,
          s.n_correct);
    s = score("x = 1", g, 6, "x = 1\nz", r, 6, 4); // no newline generated: the whole text is its first line
    CHECK(s.exact && s.n_tokens == 4 && s.n_correct == 3, "N = 4: %d %d", s.n_tokens, s.n_correct);
    s = score("x = 1 \n", g, 2, "x = 1\n", r, 6, 32); // a trailing space differs; 2 of 6 positions reached
    CHECK(!s.exact && s.n_tokens == 6 && s.n_correct == 2, "short completion: %d %d", s.n_tokens, s.n_correct);
    s = score("\nfoo\n", g, 0, "foo\n", r, 0, 32);
    CHECK(!s.exact && s.n_tokens == 0, "a leading newline is part of the line");

    // 3 code tasks (2 exact; 20 of 32 + 32 of 32 + 0 of 10 tokens), 2 list tasks (0 exact; 5 of 5 + 1 of 5)
    const char *fam[5] = {"code", "list", "code", "code", "list"};
    bn_task_score sc[5] = {{true, 32, 20}, {false, 5, 5}, {true, 32, 32}, {false, 10, 0}, {false, 5, 1}};
    bn_task_stats *rows;
    int n_rows = bn_task_stats_compute(fam, sc, 5, &rows);
    CHECK(n_rows == 3 && !strcmp(rows[0].family, "code") && !strcmp(rows[1].family, "list") &&
          !strcmp(rows[2].family, "all"), "rows %d", n_rows);
    if (n_rows == 3) {
        CHECK(rows[0].n == 3 && rows[0].n_exact == 2 && rows[0].n_tokens == 74 && rows[0].n_correct == 52, "code");
        CHECK_NEAR(rows[0].exact_lo, 0.2077, 5e-5, "2/3 lo"); // Wilson 2/3: 0.2077 .. 0.9385
        CHECK_NEAR(rows[0].exact_hi, 0.9385, 5e-5, "2/3 hi");
        CHECK(rows[1].n == 2 && rows[1].n_exact == 0 && rows[1].n_correct == 6 && rows[1].token_acc == 0.6, "list");
        CHECK(rows[2].n == 5 && rows[2].n_exact == 2 && rows[2].n_tokens == 84 && rows[2].n_correct == 58, "all");
        CHECK_NEAR(rows[2].exact_rate, 0.4, 1e-12, "all exact");
        CHECK_NEAR(rows[2].token_acc, 58.0 / 84.0, 1e-12, "all token accuracy");
        CHECK_NEAR(rows[1].token_lo, 0.3127, 5e-5, "6/10 lo"); // Wilson 6/10: 0.3127 .. 0.8318
        CHECK_NEAR(rows[1].token_hi, 0.8318, 5e-5, "6/10 hi");
        json_t *a = bn_task_stats_json(rows, n_rows);
        json_t *all = json_array_get(a, 2);
        CHECK(json_array_size(a) == 3 && !strcmp(json_string_value(json_object_get(all, "family")), "all") &&
              json_integer_value(json_object_get(all, "exact")) == 2 &&
              json_array_size(json_object_get(all, "token_accuracy_ci95")) == 2 &&
              json_real_value(json_object_get(all, "exact_rate")) == 0.4, "json");
        json_decref(a);
    }
    free(rows);
    return test_done("test_tasks");
}
