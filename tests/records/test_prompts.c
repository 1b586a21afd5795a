// tests/records/test_prompts.c — prompt JSONL formats (plain string, prompt, ShareGPT, OpenAI),
// optional source, agentic-source skipping, the antidoom template, trailing assistant turns,
// max_prompts, and errors with line numbers.
#include "tests/test.h"
#include "records/prompts.h"
#include "base/util.h"
#include <string.h>
#include <unistd.h>

int main(void) {
    char dir[] = "/tmp/bonsai-test-prompts-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char path[256];
    snprintf(path, sizeof path, "%s/p.jsonl", dir);
    FILE *f = fopen(path, "w");
    fputs("\"What is 2+2?\"\n", f);                                                                   // 1 plain
    fputs("{\"prompt\": \"Sort {a}\", \"source\": \"math\"}\n", f);                                   // 2
    fputs("\n", f);                                                                                   // 3 blank
    fputs("{\"conversations\":[{\"from\":\"system\",\"value\":\"Be brief.\"},{\"from\":\"human\",\"value\":\"Hi\"},"
          "{\"from\":\"gpt\",\"value\":\"Hello\"},{\"from\":\"human\",\"value\":\"Prove it\"},{\"from\":\"gpt\",\"value\":\"ans\"}],"
          "\"source\":\"sharegpt\"}\n", f);                                                           // 4
    fputs("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}],"
          "\"source\":\"openai\"}\n", f);                                                             // 5
    fputs("{\"prompt\": \"call a tool\", \"source\": \"BFCL_v3\"}\n", f);                             // 6 skipped
    fputs("{\"prompt\": \"book a table\", \"source\": \"restaurant\"}\n", f);                        // 7 'tau' -> skipped
    fputs("{\"prompt\": \"x\", \"source\": \"web_Search\"}\n", f);                                    // 8 skipped
    fclose(f);
    char err[512];
    bn_prompt_opts o = bn_prompt_opts_default();
    bn_prompt *p = NULL;
    int skipped = -1;
    int n = bn_prompts_read(path, &o, &p, &skipped, err, sizeof err);
    CHECK(n == 4 && skipped == 3, "read %d prompts, %d skipped (%s)", n, skipped, n < 0 ? err : "");
    if (n == 4) {
        CHECK(p[0].n_msgs == 1 && !strcmp(p[0].msgs[0].role, "user") && !strcmp(p[0].msgs[0].content, "What is 2+2?") &&
              !strcmp(p[0].source, "") && p[0].line == 1, "plain string");
        CHECK(!strcmp(bn_prompt_user_text(&p[1]), "Sort {a}") && !strcmp(p[1].source, "math") && p[1].line == 2, "prompt");
        CHECK(p[2].n_msgs == 4 && !strcmp(p[2].msgs[0].role, "system") && !strcmp(p[2].msgs[2].role, "assistant") &&
              !strcmp(bn_prompt_user_text(&p[2]), "Prove it") && p[2].line == 4, "ShareGPT (trailing gpt turn dropped): %d msgs",
              p[2].n_msgs);
        CHECK(!strcmp(bn_prompt_user_text(&p[3]), "ab") && !strcmp(p[3].source, "openai"), "OpenAI content parts");
    }
    bn_prompts_free(p, n);
    // no skipping; template; max_prompts
    o.skip_agentic = false;
    o.template_ = BN_ANTIDOOM_TEMPLATE;
    n = bn_prompts_read(path, &o, &p, &skipped, err, sizeof err);
    CHECK(n == 7 && skipped == 0, "no skipping: %d", n);
    if (n == 7) {
        CHECK(!strcmp(bn_prompt_user_text(&p[1]), "Sort {a}\n\nThink through the problem step by step, then respond with "
                                                    "your final answer as \"Answer: <your answer>\"."), "template: %s",
              bn_prompt_user_text(&p[1]));
        CHECK(!strcmp(p[2].msgs[1].content, "Hi"), "template only on the last user turn");
    }
    bn_prompts_free(p, n);
    o.max_prompts = 2;
    n = bn_prompts_read(path, &o, &p, NULL, err, sizeof err);
    CHECK(n == 2, "max_prompts 2: %d", n);
    bn_prompts_free(p, n);
    char *t = bn_prompt_apply_template("{{x}} {prompt}/{prompt}", "P");
    CHECK(!strcmp(t, "{x} P/P"), "format escapes: %s", t);
    free(t);
    // errors
    const char *bad[][2] = {
        {"{\"prompt\": 5}", "'prompt'"},
        {"{\"conversations\":[{\"from\":\"alien\",\"value\":\"x\"}]}", "unknown role 'alien'"},
        {"{\"messages\":[{\"role\":\"assistant\",\"content\":\"x\"}]}", "no user turn"},
        {"{\"foo\": 1}", "no 'prompt'"},
        {"[1]", "expected a string or an object"},
        {"{\"prompt\":\"x\",\"source\":3}", "'source'"},
        {"{oops", "invalid JSON"},
    };
    for (int i = 0; i < 7; i++) {
        bn_prompt q;
        int rc = bn_prompt_parse_line(bad[i][0], strlen(bad[i][0]), &o, &q, err, sizeof err);
        CHECK(rc == -1 && strstr(err, bad[i][1]), "bad line %d: rc %d err '%s'", i, rc, err);
    }
    f = fopen(path, "w");
    fputs("\"ok\"\n{\"prompt\": 5}\n", f);
    fclose(f);
    n = bn_prompts_read(path, &o, &p, NULL, err, sizeof err);
    CHECK(n == -1 && strstr(err, "p.jsonl:2: field 'prompt'"), "file error: %s", err);
    unlink(path);
    rmdir(dir);
    return test_done("test_prompts");
}
