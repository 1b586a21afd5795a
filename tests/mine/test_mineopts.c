// tests/mine/test_mineopts.c — shared mining flags: values land in the right fields, per-prompt
// seed/phrase/temperature cycling, and clear errors for bad values.
#include "tests/test.h"
#include "mine/options.h"
#include <string.h>
#include <unistd.h>

// Parses a NULL-terminated argument list with the mining tables as bonsai-eval-loops reads them; returns 0, or -1 with
// err (a bad value, an unknown option).
static int parse(bn_mine_opts *o, const char **args, char *err, size_t errlen) {
    int argc = 0;
    while (args[argc]) argc++;
    const bn_arg_table tables[] = {BN_TABLE(bn_mine_args, o), BN_TABLE(bn_engine_args, &o->eng),
                                   BN_TABLE(bn_mine_penalty_args, o), {0}};
    return bn_args_read(tables, argc, (char *const *)args, err, errlen);
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
                          "--server", "http://127.0.0.1:8080", "--max-prompt-tokens", "100", "--scan", "assistant",
                          "-c", "512", "--repeat-penalty", "1.1", "--dry-sequence-breaker", "none", NULL};
    CHECK(parse(&o, args, err, sizeof err) == 0, "parse: %s", err);
    CHECK(!strcmp(o.eng.model, "model.gguf") && !strcmp(o.prompts_path, "p.jsonl"), "paths");
    CHECK(o.eng.n_ctx == 512 && o.mine.scan_assistant && o.mine.gen.repeat_penalty > 1.09f && o.n_dry_breakers == 0 &&
          o.mine.gen.dry_breakers, "-c, --scan, --repeat-penalty, --dry-sequence-breaker none");
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
    CHECK(parse(&u, unknown, err, sizeof err) == -1 && strstr(err, "unknown option '--frobnicate'"), "unknown: %s",
          err);
    const char *greedy[] = {"--temps", "0,-1", NULL}, *sampled[] = {"--temp", "0", "--temps", "0,0.5", NULL};
    CHECK(parse(&u, greedy, err, sizeof err) == 0 && bn_mine_opts_greedy(&u), "--temps 0,-1 is greedy");
    CHECK(parse(&u, sampled, err, sizeof err) == 0 && !bn_mine_opts_greedy(&u), "--temps 0,0.5 samples");
    unlink(path);
    return test_done("test_mineopts");
}
