// tests/spec/test_dspark_tool.c — bonsai-mkdrafter and bonsai-speculative as programs: the
// llama-speculative-simple output lines (docs/server.md §13) with consistent numbers
// (accept = 100·n_accept/n_drafted, oracle accept 100%, greedy text of dspark / oracle runs equal to
// the plain run's up to the shorter length), and
// exit 1 with a clear message on bad usage.
#include "tests/test.h"
#include "tests/spec/fixture.h"

static char build[512];

// same_prefix: the shorter text is a prefix of the longer one (a speculative run may overshoot -n
// by up to n_max tokens, as llama-speculative-simple does).
static int same_prefix(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    return strncmp(a, b, la < lb ? la : lb) == 0;
}

static long long field(const char *out, const char *key) {
    const char *p = strstr(out, key);
    return p ? strtoll(p + strlen(key), NULL, 10) : -1;
}

// text_of: the generated text (everything before the "encoded" line).
static void text_of(const char *out, char *buf, size_t cap) {
    if (strncmp(out, "bonsai-speculative: ", 20) == 0 && strchr(out, '\n')) out = strchr(out, '\n') + 1; // stderr note
    const char *e = strstr(out, "\n\nencoded");
    size_t n = e ? (size_t)(e - out) : 0;
    if (n >= cap) n = cap - 1;
    memcpy(buf, out, n);
    buf[n] = 0;
}

int main(void) {
    const char *br = getenv("BONSAI_BUILD_ROOT");
    if (!br) return test_skip("BONSAI_BUILD_ROOT not set (run through meson test)");
    snprintf(build, sizeof build, "%s/tools", br);
    char tpath[512], dpath[512], cmd[2048];
    static char out[1 << 16], t1[1 << 15], t2[1 << 15];
    fx_target(fx_path(tpath, sizeof tpath, "tool-target.gguf"));
    fx_path(dpath, sizeof dpath, "tool-drafter.gguf");
    snprintf(cmd, sizeof cmd, "%s/bonsai-mkdrafter %s --convention dflash --n-layer 2 --seed 3", build, dpath);
    CHECK(fx_run(cmd, out, sizeof out) == 0, "mkdrafter: %s", out);

    const char *common = "-p 'the cat sat' -n 48 --temp 0 -t 2 --spec-draft-n-max 4";
    snprintf(cmd, sizeof cmd, "%s/bonsai-speculative -m %s --spec-type none %s", build, tpath, common);
    CHECK(fx_run(cmd, out, sizeof out) == 0, "none: %s", out);
    text_of(out, t1, sizeof t1);
    snprintf(cmd, sizeof cmd, "%s/bonsai-speculative -m %s -md %s --spec-type draft-dspark --no-adaptive %s", build,
             tpath, dpath, common);
    CHECK(fx_run(cmd, out, sizeof out) == 0, "dspark: %s", out);
    text_of(out, t2, sizeof t2);
    CHECK(same_prefix(t1, t2) && strlen(t2) >= strlen("the cat sat") + 1, "greedy text differs:\n%s\nvs\n%s", t1, t2);
    const char *lines[] = {"encoded ", "decoded ", "n_draft   = ", "n_predict = ", "n_drafted = ", "n_accept  = ",
                           "accept    = "};
    for (int i = 0; i < 7; i++) CHECK(strstr(out, lines[i]) != NULL, "output line '%s' missing", lines[i]);
    long long nd = field(out, "n_drafted = "), na = field(out, "n_accept  = ");
    CHECK(nd > 0 && na >= 0 && na <= nd, "n_drafted %lld n_accept %lld", nd, na);
    const char *ap = strstr(out, "accept    = ");
    double acc = ap ? atof(ap + 12) : -1;
    CHECK_NEAR(acc, nd > 0 ? 100.0 * (double)na / (double)nd : 0, 1e-3, "accept % = 100·n_accept/n_drafted");
    CHECK(field(out, "n_draft   = ") == 4, "n_draft");

    snprintf(cmd, sizeof cmd, "%s/bonsai-speculative -m %s --spec-type draft-oracle --no-adaptive %s", build, tpath,
             common);
    CHECK(fx_run(cmd, out, sizeof out) == 0, "oracle: %s", out);
    text_of(out, t2, sizeof t2);
    CHECK(same_prefix(t1, t2), "oracle greedy text differs from plain decoding:\n%s\nvs\n%s", t1, t2);
    CHECK(strstr(out, "accept    = 100.000%") != NULL, "oracle acceptance 100%%:\n%s", out);
    CHECK(strstr(out, "MEASUREMENT AID") != NULL, "oracle is labelled as a measurement aid");

    // repetition penalties: the verify passes pick with the history, so greedy dspark text == plain text again
    const char *pen = "-p 'the cat sat' -n 48 --temp 0 -t 2 --spec-draft-n-max 4 --repeat-penalty 1.5 --presence-penalty 3 "
                      "--repeat-last-n -1";
    snprintf(cmd, sizeof cmd, "%s/bonsai-speculative -m %s --spec-type none %s", build, tpath, pen);
    CHECK(fx_run(cmd, out, sizeof out) == 0, "none, penalized: %s", out);
    char t3[1 << 15];
    text_of(out, t3, sizeof t3);
    CHECK(!same_prefix(t1, t3), "the penalties change the greedy text");
    snprintf(cmd, sizeof cmd, "%s/bonsai-speculative -m %s -md %s --spec-type draft-dspark --no-adaptive %s", build,
             tpath, dpath, pen);
    CHECK(fx_run(cmd, out, sizeof out) == 0, "dspark, penalized: %s", out);
    text_of(out, t2, sizeof t2);
    CHECK(same_prefix(t3, t2) && field(out, "n_drafted = ") > 0, "penalized greedy text differs:\n%s\nvs\n%s", t3, t2);

    snprintf(cmd, sizeof cmd, "%s/bonsai-speculative -m %s --spec-type draft-dspark -p x", build, tpath);
    CHECK(fx_run(cmd, out, sizeof out) == 1 && strstr(out, "needs -md"), "missing -md: %s", out);
    snprintf(cmd, sizeof cmd, "%s/bonsai-speculative -m %s -p x", build, tpath);
    CHECK(fx_run(cmd, out, sizeof out) == 1 && strstr(out, "--spec-type is required"), "missing --spec-type: %s", out);
    snprintf(cmd, sizeof cmd, "%s/bonsai-speculative -m %s -md %s --spec-type draft-dspark -p x", build, dpath, dpath);
    CHECK(fx_run(cmd, out, sizeof out) == 1 && strstr(out, "bonsai-speculative: "), "drafter as target: %s", out);
    unlink(tpath);
    unlink(dpath);
    return test_done("dspark_tool");
}
