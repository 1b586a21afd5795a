// tests/mine/test_mineopts.c — shared mining flags: values land in the right fields, per-prompt
// seed/phrase/temperature cycling, and clear errors for bad values.
#include "tests/test.h"
#include "mine/options.h"
#include <string.h>
#include <unistd.h>

// Parses a NULL-terminated argument list; returns 0, or -1 (err) / 1 (an unknown flag).
static int parse(bn_mine_opts *o, const char **args, char *err, size_t errlen) {
    int argc = 0;
    while (args[argc]) argc++;
    for (int i = 0; i < argc; i++) {
        int r = bn_mine_opts_flag(o, argc, (char **)args, &i, err, errlen);
        if (r < 0) return -1;
        if (r == 0) return 1;
    }
    return 0;
}

int main(void) {
    char err[512];
    char path[] = "/tmp/bonsai-test-phrases-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    const char *text = "Wait, let me see. \n\nHmm.\\nOk. \n";
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text), "write");
    close(fd);
    bn_mine_opts o = bn_mine_opts_default();
    const char *args[] = {"-m", "model.gguf", "-p", "p.jsonl", "--mode", "prime", "--temps", "0.1,0.5,1", "--seed", "100",
                          "--n-predict", "256", "--n-probs", "20", "--top-k", "0", "--min-p", "0", "--thinking", "-1",
                          "--template", "antidoom", "--no-skip-agentic", "--prime-phrases", path, "--prime-repeats", "2",
                          "--chosen-min-p", "0.01", "--chosen-skip-raw-substring", "<|", "--max-period", "512",
                          "--server", "http://127.0.0.1:8080", "--max-prompt-tokens", "100", NULL};
    CHECK(parse(&o, args, err, sizeof err) == 0, "parse: %s", err);
    CHECK(!strcmp(o.model_path, "model.gguf") && !strcmp(o.prompts_path, "p.jsonl"), "paths");
    CHECK(o.mine.mode == BN_MINE_PRIME && o.mine.gen.n_predict == 256 && o.mine.gen.top_k == 0 && o.mine.gen.min_p == 0 &&
          o.mine.thinking == -1 && o.mine.prime_repeats == 2 && o.mine.rep.max_period == 512 &&
          o.mine.max_prompt_tokens == 100, "generation fields");
    CHECK(o.prompts.template_ == BN_ANTIDOOM_TEMPLATE && !o.prompts.skip_agentic, "prompt options");
    CHECK(o.mine.chosen.min_p > 0.0099 && o.mine.chosen.min_p < 0.0101 && o.mine.chosen.n_skip_raw == 1 &&
          !strcmp(o.mine.chosen.skip_raw_substrings[0], "<|"), "chosen options");
    CHECK(o.server_url && !strcmp(o.server_url, "http://127.0.0.1:8080"), "server");
    CHECK(o.n_phrases == 2 && !strcmp(o.phrases[0], "Wait, let me see. ") && !strcmp(o.phrases[1], "Hmm.\nOk. "),
          "phrases (%d)", o.n_phrases);
    bn_mine_params p4 = bn_mine_opts_for_prompt(&o, 4);
    CHECK(p4.gen.seed == 104 && !strcmp(p4.prime_phrase, "Wait, let me see. ") && p4.gen.temperature == 0.5f,
          "prompt 4: seed %llu temp %g", (unsigned long long)p4.gen.seed, p4.gen.temperature);
    bn_mine_params p5 = bn_mine_opts_for_prompt(&o, 5);
    CHECK(!strcmp(p5.prime_phrase, "Hmm.\nOk. ") && p5.gen.temperature == 1.0f, "prompt 5 cycles");
    bn_mine_opts_free(&o);
    const char *bad[][3] = {{"--temps", "0.1,x", NULL}, {"--n-predict", "12a", NULL}, {"--mode", "greedy", NULL},
                            {"--thinking", "2", NULL}, {"--template", "foo", NULL}, {"--prime-phrases", "/nonexistent/x", NULL},
                            {"--seed", NULL, NULL}};
    for (int i = 0; i < 7; i++) {
        bn_mine_opts b = bn_mine_opts_default();
        err[0] = 0;
        CHECK(parse(&b, bad[i], err, sizeof err) == -1 && err[0], "bad %s: %s", bad[i][0], err);
        bn_mine_opts_free(&b);
    }
    bn_mine_opts u = bn_mine_opts_default();
    const char *unknown[] = {"--frobnicate", NULL};
    CHECK(parse(&u, unknown, err, sizeof err) == 1, "unknown flags are left to the tool");
    unlink(path);
    return test_done("test_mineopts");
}
