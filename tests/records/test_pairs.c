// tests/records/test_pairs.c — pair rows and generation-log rows <-> JSONL: full round trip (plain
// and .gz, all §7.2 fields, doubles bit-exact), antidoom-only rows, unknown keys preserved,
// invalid UTF-8 replaced by U+FFFD, and strict errors naming line and field for malformed rows.
#include "tests/test.h"
#include "records/pairs.h"
#include "base/util.h"
#include <string.h>
#include <unistd.h>

static void fill_row(bn_pair_row *r, int k) {
    memset(r, 0, sizeof *r);
    r->context_before = xstrdup("<|im_start|>user\nHi — “quotes” \\ \"esc\" 😀<|im_end|>\n<|im_start|>assistant\nok");
    r->rejected_token = xstrdup("\xc4\xa0Wait");
    r->rejected_decoded = xstrdup(" Wait");
    r->n_chosen = 2;
    r->chosen_tokens = xcalloc(2, sizeof(char *));
    r->chosen_decoded = xcalloc(2, sizeof(char *));
    r->chosen_tokens[0] = xstrdup("\xc4\xa0So");
    r->chosen_tokens[1] = xstrdup("Let");
    r->chosen_decoded[0] = xstrdup(" So");
    r->chosen_decoded[1] = xstrdup("Let");
    r->source = xstrdup(k ? "math" : "code");
    r->source_prompt = xstrdup("What is 2+2?\n");
    r->rep = (bn_pair_rep){.start_char = 10 + k, .repeat_start_char = 47 + k, .rejected_token_index = 12,
                           .period = 37, .repeats = 6, .snippet = xstrdup("Wait, let me rethink. ")};
    if (k == 0) return; // antidoom-only row
    r->has_ids = true;
    r->n_context = 5;
    r->context_ids = xmalloc(5 * sizeof(int32_t));
    for (int i = 0; i < 5; i++) r->context_ids[i] = 151643 + i;
    r->rejected_id = 14190;
    r->chosen_ids = xmalloc(2 * sizeof(int32_t));
    r->chosen_ids[0] = 2055;
    r->chosen_ids[1] = 10061;
    r->has_rejected_logprob = true;
    r->rejected_logprob = -0.1234567890123456789;
    r->has_topk = true;
    r->n_topk = 3;
    r->topk = xmalloc(3 * sizeof *r->topk);
    r->topk[0] = (bn_topk){14190, -0.1234567890123456789};
    r->topk[1] = (bn_topk){2055, -2.718281828459045};
    r->topk[2] = (bn_topk){10061, -1e-300};
    r->has_gen = true;
    r->gen = (bn_pair_gen){.temperature = 0.1, .top_p = 1.0, .min_p = 0.01, .top_k = 50, .n_probs = 20,
                           .seed = -1, .endpoint = xstrdup("in-process"), .model_file = xstrdup("m.gguf"),
                           .model_sha256 = xstrdup("ab12"), .file_type = xstrdup("Q1_0")};
    r->prime_state = 2;
    r->prime = (bn_pair_prime){.phrase = xstrdup("Wait, let me re-check. "), .repeats = 3, .prefix_chars = 120,
                               .scan_mode = xstrdup("completion")};
    r->split = xstrdup("heldout");
}

static int same_str(const char *a, const char *b) { return (!a && !b) || (a && b && strcmp(a, b) == 0); }

static int rows_equal(const bn_pair_row *a, const bn_pair_row *b) {
    int ok = same_str(a->context_before, b->context_before) && same_str(a->rejected_token, b->rejected_token) &&
             same_str(a->rejected_decoded, b->rejected_decoded) && a->n_chosen == b->n_chosen &&
             same_str(a->source, b->source) && same_str(a->source_prompt, b->source_prompt) &&
             a->rep.start_char == b->rep.start_char && a->rep.repeat_start_char == b->rep.repeat_start_char &&
             a->rep.rejected_token_index == b->rep.rejected_token_index && a->rep.period == b->rep.period &&
             a->rep.repeats == b->rep.repeats && same_str(a->rep.snippet, b->rep.snippet) &&
             a->has_ids == b->has_ids && a->has_rejected_logprob == b->has_rejected_logprob &&
             a->has_topk == b->has_topk && a->n_topk == b->n_topk && a->has_gen == b->has_gen &&
             a->prime_state == b->prime_state && same_str(a->split, b->split);
    for (int i = 0; ok && i < a->n_chosen; i++)
        ok = same_str(a->chosen_tokens[i], b->chosen_tokens[i]) && same_str(a->chosen_decoded[i], b->chosen_decoded[i]);
    if (ok && a->has_ids) {
        ok = a->n_context == b->n_context && a->rejected_id == b->rejected_id &&
             memcmp(a->context_ids, b->context_ids, (size_t)a->n_context * 4) == 0 &&
             memcmp(a->chosen_ids, b->chosen_ids, (size_t)a->n_chosen * 4) == 0;
    }
    if (ok && a->has_rejected_logprob) ok = a->rejected_logprob == b->rejected_logprob;
    for (int i = 0; ok && i < a->n_topk; i++)
        ok = a->topk[i].id == b->topk[i].id && a->topk[i].logprob == b->topk[i].logprob; // bit-exact (%.17g)
    if (ok && a->has_gen)
        ok = a->gen.temperature == b->gen.temperature && a->gen.top_p == b->gen.top_p && a->gen.min_p == b->gen.min_p &&
             a->gen.top_k == b->gen.top_k && a->gen.n_probs == b->gen.n_probs && a->gen.seed == b->gen.seed &&
             same_str(a->gen.endpoint, b->gen.endpoint) && same_str(a->gen.model_file, b->gen.model_file) &&
             same_str(a->gen.model_sha256, b->gen.model_sha256) && same_str(a->gen.file_type, b->gen.file_type);
    if (ok && a->prime_state == 2)
        ok = same_str(a->prime.phrase, b->prime.phrase) && a->prime.repeats == b->prime.repeats &&
             a->prime.prefix_chars == b->prime.prefix_chars && same_str(a->prime.scan_mode, b->prime.scan_mode);
    return ok;
}

// Parses a line expected to fail; checks the error mentions `needle`.
static void expect_error(const char *line, const char *needle) {
    bn_pair_row r;
    char err[512] = "";
    int rc = bn_pair_row_parse(line, strlen(line), &r, err, sizeof err);
    CHECK(rc == -1 && strstr(err, needle) != NULL, "expected error with '%s', got rc %d: %s", needle, rc, err);
}

int main(void) {
    char err[512];
    bn_pair_row rows[3];
    fill_row(&rows[0], 0);
    fill_row(&rows[1], 1);
    fill_row(&rows[2], 1);
    rows[2].prime_state = 1; // explicit null
    char dir[] = "/tmp/bonsai-test-pairs-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    const char *names[] = {"pairs.jsonl", "pairs.jsonl.gz"};
    for (int f = 0; f < 2; f++) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s", dir, names[f]);
        CHECK(bn_pairs_write(path, rows, 3, err, sizeof err) == 0, "write %s: %s", path, err);
        bn_pair_row *back = NULL;
        int n = bn_pairs_read(path, &back, err, sizeof err);
        CHECK(n == 3, "read %s: %d rows (%s)", path, n, n < 0 ? err : "");
        for (int i = 0; i < n && i < 3; i++) CHECK(rows_equal(&rows[i], &back[i]), "%s row %d round trip", names[f], i);
        // gzip magic for .gz, plain '{' otherwise
        FILE *fp = fopen(path, "rb");
        int c0 = fp ? fgetc(fp) : -1;
        if (fp) fclose(fp);
        CHECK(f == 0 ? c0 == '{' : c0 == 0x1f, "%s first byte 0x%x", names[f], c0);
        bn_pairs_free(back, n);
        unlink(path);
    }
    { // a damaged .gz never reads as fewer rows: cut anywhere (inside the data, at a line boundary of the
      // compressed stream, without the 8-byte trailer) or with a flipped byte, the read fails and says so
        enum { N = 300 };
        bn_pair_row *many = xcalloc(N, sizeof *many);
        for (int i = 0; i < N; i++) fill_row(&many[i], i % 2);
        char path[256], cut_path[256];
        snprintf(path, sizeof path, "%s/many.jsonl.gz", dir);
        snprintf(cut_path, sizeof cut_path, "%s/cut.jsonl.gz", dir);
        CHECK(bn_pairs_write(path, many, N, err, sizeof err) == 0, "write: %s", err);
        size_t size = 0;
        char *gz = bn_read_file(path, &size, err, sizeof err);
        CHECK(gz && size > 200, "read back %zu bytes", size);
        const size_t cuts[] = {size - 1, size - 4, size - 8, size - 9, size * 3 / 4, size / 2, 100, 11};
        int silent = 0;
        for (size_t c = 0; gz && c < sizeof cuts / sizeof cuts[0] + 2; c++) {
            size_t n_bytes = c < 8 ? cuts[c] : size;
            char *copy = xmalloc(size);
            memcpy(copy, gz, size);
            if (c >= 8) copy[c == 8 ? size / 2 : size - 6] ^= 0x55; // a data byte; the CRC in the trailer
            CHECK(bn_write_file_atomic(cut_path, copy, n_bytes, err, sizeof err) == 0, "write cut: %s", err);
            free(copy);
            bn_pair_row *back = NULL;
            int n = bn_pairs_read(cut_path, &back, err, sizeof err);
            if (n >= 0) {
                silent++;
                printf("damaged copy %zu (%zu of %zu bytes) read as %d rows\n", c, n_bytes, size, n);
                bn_pairs_free(back, n);
            } else {
                CHECK(strstr(err, "cut.jsonl.gz") != NULL, "the error names the file: %s", err);
            }
        }
        CHECK(silent == 0, "%d damaged .gz files read without an error", silent);
        free(gz);
        bn_pairs_free(many, N);
        unlink(path), unlink(cut_path);
    }
    { // line-level: unknown keys kept; invalid UTF-8 written as U+FFFD; copy is deep
        bn_pair_row r;
        const char *line = "{\"context_before\":\"c\",\"rejected_token\":\"r\",\"rejected_decoded\":\"r\","
                           "\"multi_chosen_tokens\":[],\"multi_chosen_decoded\":[],\"source\":\"s\",\"source_prompt\":\"p\","
                           "\"repetition\":{\"start_char\":0,\"repeat_start_char\":16,\"rejected_token_index\":3,"
                           "\"period\":16,\"repeats\":4,\"snippet\":\"x\"},\"source_task\":\"gsm8k\"}";
        CHECK(bn_pair_row_parse(line, strlen(line), &r, err, sizeof err) == 0, "parse: %s", err);
        free(r.rejected_decoded);
        r.rejected_decoded = xstrdup("\xe4\xbd"); // partial UTF-8 surface
        bn_pair_row c;
        bn_pair_row_copy(&c, &r);
        bn_pair_row_free(&r);
        char *out = bn_pair_row_to_line(&c, err, sizeof err);
        CHECK(out && strstr(out, "\"source_task\":\"gsm8k\"") != NULL, "extra key preserved: %s", out ? out : err);
        CHECK(out && strstr(out, "\"rejected_decoded\":\"\xef\xbf\xbd\"") != NULL, "U+FFFD replacement: %s", out ? out : err);
        CHECK(out && !strstr(out, "context_ids") && !strstr(out, "prime"), "absent extension fields not written");
        free(out);
        bn_pair_row_free(&c);
    }
    { // malformed rows: clear errors with the field name
        expect_error("not json", "invalid JSON");
        expect_error("[1,2]", "expected a JSON object");
        expect_error("{\"rejected_token\":\"r\"}", "'context_before': missing");
        expect_error("{\"context_before\":5}", "'context_before': expected a string");
        const char *base = "{\"context_before\":\"c\",\"rejected_token\":\"r\",\"rejected_decoded\":\"r\","
                           "\"multi_chosen_tokens\":[\"a\"],\"multi_chosen_decoded\":[\"a\"],\"source\":\"s\","
                           "\"source_prompt\":\"p\",\"repetition\":{\"start_char\":0,\"repeat_start_char\":16,"
                           "\"rejected_token_index\":3,\"period\":16,\"repeats\":4,\"snippet\":\"x\"}";
        char line[2048];
        snprintf(line, sizeof line, "%s}", base);
        bn_pair_row r;
        CHECK(bn_pair_row_parse(line, strlen(line), &r, err, sizeof err) == 0, "base row parses: %s", err);
        bn_pair_row_free(&r);
        snprintf(line, sizeof line, "%s,\"context_ids\":[1,2],\"rejected_id\":3}", base);
        expect_error(line, "'chosen_ids': missing");
        snprintf(line, sizeof line, "%s,\"context_ids\":[1,2],\"rejected_id\":3,\"chosen_ids\":[4,5]}", base);
        expect_error(line, "'chosen_ids': length differs");
        snprintf(line, sizeof line, "%s,\"context_ids\":[1,-2],\"rejected_id\":3,\"chosen_ids\":[4]}", base);
        expect_error(line, "'context_ids': expected an array of token ids");
        snprintf(line, sizeof line, "%s,\"topk\":[[1,-0.5],[2]]}", base);
        expect_error(line, "'topk'");
        snprintf(line, sizeof line, "%s,\"gen\":{\"top_k\":50}}", base);
        expect_error(line, "'gen.temperature': missing");
        snprintf(line, sizeof line, "%s,\"prime\":{\"phrase\":\"p\",\"repeats\":2,\"scan_mode\":\"both\"}}", base);
        expect_error(line, "'prime.scan_mode'");
        snprintf(line, sizeof line, "%s,\"split\":1}", base);
        expect_error(line, "'split': expected a string");
        snprintf(line, sizeof line, "%s,\"source\":\"dup\"}", base);
        expect_error(line, "invalid JSON"); // duplicate keys rejected
        const char *bad_rep = "{\"context_before\":\"c\",\"rejected_token\":\"r\",\"rejected_decoded\":\"r\","
                              "\"multi_chosen_tokens\":[\"a\"],\"multi_chosen_decoded\":[\"a\",\"b\"],\"source\":\"s\"}";
        expect_error(bad_rep, "'multi_chosen_decoded': length differs");
        const char *bad_rep2 = "{\"context_before\":\"c\",\"rejected_token\":\"r\",\"rejected_decoded\":\"r\","
                               "\"multi_chosen_tokens\":[],\"multi_chosen_decoded\":[],\"source\":\"s\",\"source_prompt\":\"p\","
                               "\"repetition\":{\"start_char\":0,\"repeat_start_char\":16,\"period\":16,\"repeats\":4,\"snippet\":\"x\"}}";
        expect_error(bad_rep2, "'repetition.rejected_token_index': missing");
        // file reader reports path and line number
        char path[256];
        snprintf(path, sizeof path, "%s/bad.jsonl", dir);
        FILE *fp = fopen(path, "w");
        fprintf(fp, "%s}\n\n%s,\"split\":[]}\n", base, base);
        fclose(fp);
        bn_pair_row *back = NULL;
        CHECK(bn_pairs_read(path, &back, err, sizeof err) == -1 && strstr(err, "bad.jsonl:3: field 'split'"),
              "file error: %s", err);
        unlink(path);
    }
    { // generation-log rows: repetition object and null
        bn_gen_row g = {.source = "s", .prompt = "p", .completion = "c\u00e9", .status = "loop_detected", .has_rep = true,
                        .rep = {.start_char = 1, .repeat_start_char = 17, .rejected_token_index = -1, .period = 16,
                                .repeats = 4, .snippet = "u"}};
        char *line = bn_gen_row_to_line(&g, err, sizeof err);
        CHECK(line && !strstr(line, "rejected_token_index"), "gen row: %s", line ? line : err);
        bn_gen_row back;
        CHECK(bn_gen_row_parse(line, strlen(line), &back, err, sizeof err) == 0 && back.has_rep &&
              back.rep.repeat_start_char == 17 && strcmp(back.completion, "c\u00e9") == 0 &&
              strcmp(back.status, "loop_detected") == 0, "gen row parse: %s", err);
        bn_gen_row_free(&back);
        free(line);
        bn_gen_row clean = {.source = "s", .prompt = "p", .completion = "c", .status = "clean"};
        line = bn_gen_row_to_line(&clean, err, sizeof err);
        CHECK(line && strstr(line, "\"repetition\":null"), "null repetition: %s", line ? line : err);
        CHECK(bn_gen_row_parse(line, strlen(line), &back, err, sizeof err) == 0 && !back.has_rep, "parse null rep");
        bn_gen_row_free(&back);
        free(line);
        const char *no_rep = "{\"source\":\"s\",\"prompt\":\"p\",\"completion\":\"c\",\"status\":\"clean\"}";
        CHECK(bn_gen_row_parse(no_rep, strlen(no_rep), &back, err, sizeof err) == -1 && strstr(err, "'repetition'"),
              "missing repetition: %s", err);
    }
    for (int i = 0; i < 3; i++) bn_pair_row_free(&rows[i]);
    rmdir(dir);
    return test_done("test_pairs");
}
