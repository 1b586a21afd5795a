// tests/base/test_args.c — base/args.h: every entry type lands its value where its table says, long and short
// spellings are one option, a bad value / a missing value / an unknown option / a surplus argument is refused with a
// message naming it, --help prints each listed option with the default it had before parsing (hidden tables and
// entries stay out), bn_args_given; base/progress.h's duration and ETA texts.
#include "tests/test.h"
#include "base/args.h"
#include "base/progress.h"
#include "base/util.h"
#include <string.h>
#include <unistd.h>

typedef struct {
    int n, k, pick, n_words, n_list, list[4];
    int64_t big;
    uint64_t seed;
    float temp;
    double share;
    const char *path, *in, *out, *words[3];
    bool on, off;
    int fn_calls;
} opts;

// twice_fn: a callback option; refuses "bad" with a message that does not name the option.
static int twice_fn(void *base, const char *opt, const char *v, char *err, size_t errlen) {
    if (!strcmp(v, "bad")) return bn_err(err, errlen, "'bad' is refused");
    ((opts *)base)->fn_calls += 2;
    return 0;
}

#define O(f) offsetof(opts, f)
static const bn_arg args[] = {
    BN_INT("-n, --n-predict", O(n), "N", "tokens", -1, 100),
    BN_I64("--big", O(big), "N", "an int64", 0, 0x1p63),
    BN_SEED("-s, --seed", O(seed), "a seed"),
    BN_FLOAT("--temp", O(temp), "T", "temperature", 0, 2),
    BN_DOUBLE("--share", O(share), "F", "a share (default 1/2)", 0, 1),
    BN_STR("-f, --file", O(path), "FILE", "a path"),
    BN_STRS("--word", O(words), O(n_words), 3, "W", "repeatable"),
    BN_INTS("--list", O(list), O(n_list), 4, "A,B", "a list", 0, 1000),
    BN_CHOICE("--mode", O(pick), "sample|prime", "a choice"),
    BN_TRUE("--on", O(on), "a flag"),
    BN_FALSE("--no-off", O(off), "a negative flag"),
    BN_FN("--twice", twice_fn, "V", "a callback"),
    BN_POS(O(in), "IN", "the input"),
    BN_POS(O(out), "OUT", "the output"),
    {0}};
static const bn_arg hidden_args[] = {BN_INT("--secret", O(k), "N", "not listed", 0, 9), {0}};
#undef O

// parse: parses a NULL-terminated list into *o (after resetting it to the defaults); returns bn_args_read's result.
static int parse(opts *o, const char **list, char *err, size_t errlen) {
    *o = (opts){.n = 5, .temp = 0.8f, .share = 0.5, .off = true};
    const bn_arg_table tables[] = {BN_TABLE(args, o), BN_HIDDEN_TABLE(hidden_args, o), {0}};
    int n = 0;
    while (list[n]) n++;
    err[0] = 0;
    return bn_args_read(tables, n, (char *const *)list, err, errlen);
}

int main(void) {
    char err[512];
    opts o;
    const char *good[] = {"in.gguf", "-n", "-1", "--big", "9000000000", "-s", "42", "--temp", "1.5", "--share", "0.25",
                          "--file", "p.txt", "--word", "a", "--word", "b", "--list", "1,2,3", "--mode", "prime", "--on",
                          "--no-off", "--twice", "x", "--secret", "7", "--", "-out-", NULL};
    CHECK(parse(&o, good, err, sizeof err) == 0, "good: %s", err);
    CHECK(o.n == -1 && o.big == 9000000000LL && o.seed == 42 && o.temp == 1.5f && o.share == 0.25, "numbers");
    CHECK(!strcmp(o.path, "p.txt") && o.n_words == 2 && !strcmp(o.words[1], "b") && o.n_list == 3 && o.list[2] == 3,
          "strings and lists");
    CHECK(o.pick == 1 && o.on && !o.off && o.fn_calls == 2 && o.k == 7, "choice, flags, callback, hidden option");
    CHECK(!strcmp(o.in, "in.gguf") && !strcmp(o.out, "-out-"), "positional arguments (after --, one may start with -)");
    CHECK(bn_args_given("--n-predict") && bn_args_given("-f") && !bn_args_given("--no-such") && bn_args_given("--secret"),
          "bn_args_given knows every spelling of a given option");
    const char *none[] = {NULL};
    CHECK(parse(&o, none, err, sizeof err) == 0 && !bn_args_given("-n") && o.n == 5, "nothing given");

    // refusals: each message names the option and the value
    const char *bad[][4] = {
        {"-n", "abc", NULL, "-n: 'abc' is not an integer (expected -1..100)"},
        {"-n", "101", NULL, "-n: '101' is out of range (expected -1..100)"},
        {"-n", "", NULL, "-n: '' is not an integer"},
        {"-n", "1e400", NULL, "-n: '1e400' is not an integer"},
        {"--big", "99999999999999999999", NULL, "--big: '99999999999999999999' is not an integer"},
        {"-s", "nan", NULL, "-s: 'nan' is not an integer"},
        {"--temp", "", NULL, "--temp: '' is not a number"},
        {"--temp", "inf", NULL, "--temp: 'inf' is not a number"},
        {"--share", "0.5x", NULL, "--share: '0.5x' is not a number"},
        {"--n-predict", " 5", NULL, "--n-predict: ' 5' is not an integer"},
        {"--temp", "nan", NULL, "--temp: 'nan' is not a number (expected 0..2)"},
        {"--temp", "1e400", NULL, "--temp: '1e400' is not a number"},
        {"--big", "-1", NULL, "--big: '-1' is out of range (expected 0..)"},
        {"--list", "1,,2", NULL, "--list: '1,,2' is not a list of integers in 0..1000"},
        {"--mode", "greedy", NULL, "--mode: 'greedy' is not one of sample|prime"},
        {"--twice", "bad", NULL, "--twice: 'bad' is refused"},
        {"--temp", NULL, NULL, "option '--temp' needs a value T"},
        {"--bogus", NULL, NULL, "unknown option '--bogus'"},
        {"a", "b", "c", "unexpected argument 'c'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *list[4] = {bad[i][0], bad[i][1], bad[i][1] ? bad[i][2] : NULL, NULL};
        CHECK(parse(&o, list, err, sizeof err) == -1 && strstr(err, bad[i][3]), "%s: got '%s', expected '%s'",
              bad[i][0], err, bad[i][3]);
    }
    const char *full[] = {"--word", "1", "--word", "2", "--word", "3", "--word", "4", NULL};
    CHECK(parse(&o, full, err, sizeof err) == -1 && strstr(err, "--word: at most 3"), "a full list: %s", err);
    const char *help[] = {"-n", "7", "--help", NULL}, *version[] = {"--version", "--bogus", NULL};
    CHECK(parse(&o, help, err, sizeof err) == 1 && parse(&o, version, err, sizeof err) == 2, "--help and --version");

    // --help: every listed option with its default; hidden tables and the help's own "default" words respected
    char path[] = "/tmp/bonsai-test-args-XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w+") : NULL;
    CHECK(f != NULL, "mkstemp");
    if (f) {
        o = (opts){.n = 5, .temp = 0.8f, .share = 0.5, .off = true};
        const bn_arg_table tables[] = {BN_TABLE(args, &o), BN_HIDDEN_TABLE(hidden_args, &o), {0}};
        const bn_args_tool tool = {.name = "bonsai-test", .usage = "usage: bonsai-test IN OUT [options]\n",
                                   .notes = "the notes\n"};
        bn_args_help(f, &tool, tables);
        char text[8192];
        rewind(f);
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = 0;
        fclose(f);
        CHECK(strstr(text, "usage: bonsai-test IN OUT") && strstr(text, "the notes"), "usage and notes");
        CHECK(strstr(text, "  -n, --n-predict N") && strstr(text, "tokens (default: 5)"), "a number with its default");
        CHECK(strstr(text, "temperature (default: 0.8)") && strstr(text, "a choice (default: sample)"), "defaults");
        CHECK(strstr(text, "a share (default 1/2)") && !strstr(text, "(default 1/2) (default"), "the help's own default");
        CHECK(!strstr(text, "--secret") && strstr(text, "--version") && strstr(text, "  IN "), "hidden, built-in, IN");
    }
    unlink(path);

    char *peek[] = {"tool", "--preset", "a", "-n", "1", "--preset", "b", "--preset", NULL};
    CHECK(!strcmp(bn_args_peek(8, peek, "--preset", "x"), "b") && !strcmp(bn_args_peek(8, peek, "--mode", "x"), "x"),
          "bn_args_peek: the last pair's value, or the default");

    char d[32], e[48];
    CHECK(!strcmp(bn_format_duration(d, sizeof d, 45), "45s") && !strcmp(bn_format_duration(d, sizeof d, 72), "1m12s") &&
          !strcmp(bn_format_duration(d, sizeof d, 7500), "2h05m"), "durations: %s", d);
    CHECK(!strcmp(bn_eta_text(e, sizeof e, 72, 40, 88), "ETA 1m26s") && !bn_eta_text(e, sizeof e, 10, 0, 88)[0] &&
          !bn_eta_text(e, sizeof e, 10, 88, 88)[0], "ETA: '%s'", e);
    return test_done("test_base_args");
}
