// tests/compat/test_bench_format.c — bonsai-bench's markdown output is byte-identical to llama-bench's
// (docs/server.md §12 example header, alignment row and a row rebuilt from known samples), plus the
// t/s statistics (mean and sample stddev of 1e9·(n_prompt + n_gen)/t_ns; a batched tg counts n_seq · n_gen), and
// the parser of its comma-separated lists (bn_parse_int_list).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/test.h"
#include "eval/bench.h"
#include "base/util.h"

// print_to: runs one printer into a memory buffer; returns the malloc'd text.
static char *md_text(const bn_bench_result *r, int with_header) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (with_header) bn_bench_print_md_header(f);
    if (r) bn_bench_print_md_row(f, r);
    if (!with_header && !r) bn_bench_print_md_footer(f, "de3ff81", 1);
    fclose(f);
    return buf;
}

int main(void) {
    const char *header =
        "| model                          |       size |     params | backend    | threads |            test |                  t/s |\n"
        "| ------------------------------ | ---------: | ---------: | ---------- | ------: | --------------: | -------------------: |\n";
    char *h = md_text(NULL, 1);
    CHECK(strcmp(h, header) == 0, "header differs:\n%s", h);
    free(h);

    bn_bench_result r;
    memset(&r, 0, sizeof r);
    snprintf(r.model_type, sizeof r.model_type, "llama ?B (guessed) all F32");
    r.model_size = 1174405;    // 1.12 MiB
    r.model_n_params = 290000; // 0.29 M
    r.n_prompt = 64;
    r.n_threads = 2;
    r.reps = 2;
    r.samples_ns[0] = 4000000; // 16000 t/s
    r.samples_ns[1] = 5000000; // 12800 t/s -> mean 14400, sample sd 2262.74
    CHECK_NEAR(bn_bench_avg_ts(&r), 14400.0, 1e-9, "avg t/s");
    CHECK_NEAR(bn_bench_stdev_ts(&r), 2262.7417, 1e-4, "sample stddev t/s");
    char *row = md_text(&r, 0);
    const char *want = "| llama ?B (guessed) all F32     |   1.12 MiB |     0.29 M | CPU        |       2 |"
                       "            pp64 |   14400.00 \xc2\xb1 2262.74 |\n";
    CHECK(strcmp(row, want) == 0, "row differs:\n%s%s", row, want);
    free(row);

    r.n_prompt = 0;
    r.n_gen = 128;
    r.model_size = 3ull << 30; // GiB formatting
    r.model_n_params = 27000000000LL;
    snprintf(r.model_type, sizeof r.model_type, "qwen35 27B Q1_0");
    row = md_text(&r, 0);
    CHECK(strstr(row, "|   3.00 GiB |    27.00 B |") && strstr(row, "|           tg128 |"), "GiB/B/tg row: %s", row);
    free(row);

    r.n_seq = 4; // tg128 x4: the tokens of all 4 sequences count
    row = md_text(&r, 0);
    CHECK(strstr(row, "|        tg128 x4 |") != NULL, "batched tg row: %s", row);
    CHECK_NEAR(bn_bench_avg_ts(&r), 4 * 128 * 1e9 * (1.0 / 4000000 + 1.0 / 5000000) / 2, 1e-6, "batched avg t/s");
    free(row);

    char *foot = md_text(NULL, 0);
    CHECK(strcmp(foot, "\nbuild: de3ff81 (1)\n") == 0, "footer: %s", foot);
    free(foot);
    // the -p / -n / -t / -npl lists (bn_parse_int_list, also bench_verify's and bench_draft's -n / -s)
    int v[4];
    CHECK(bn_parse_int_list("1,2,4,8", 1, 64, v, 4) == 4 && v[0] == 1 && v[3] == 8, "list 1,2,4,8");
    CHECK(bn_parse_int_list("0,512", 0, 1 << 20, v, 4) == 2 && v[0] == 0 && v[1] == 512, "list 0,512");
    const char *bad[] = {"", ",", "1,x", "0", "65", "1.5", "1,2,3,4,5", "1,,2", ",1", "1,", " 1", "+1", "1, 2",
                         "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(bn_parse_int_list(bad[i], 1, 64, v, 4) == 0, "list '%s' must be refused", bad[i]);
    return test_done("bench-format");
}
