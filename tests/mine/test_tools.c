// tests/mine/test_tools.c — resume repair (bn_mine_resume) on hand-made damaged outputs, and
// smoke runs of bonsai-mine-pairs (refusal without --resume, resume continues where it stopped,
// --regularise to .gz) and bonsai-eval-loops (JSON result) on the tiny random model (few tokens).
#include "tests/test.h"
#include "records/pairs.h"
#include "mine/resume.h"
#include "synth/mkmodel.h"
#include "base/util.h"
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

static int count_lines(const char *path) {
    bn_lines *l = bn_lines_open(path, NULL, 0);
    if (!l) return -1;
    int n = 0;
    size_t len;
    while (bn_lines_next(l, &len)) n++;
    bn_lines_close(l);
    return n;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

// from_log_frames: bonsai-eval-loops --from-log without -m (the frame-loop detector over word pieces): a verbatim loop
// counts as both, a frame loop with changing slots as a frame loop only, a clean answer as neither.
static void from_log_frames(const char *eval, const char *dir, const char *js) {
    char err[512], cmd[4096];
    size_t len;
    char flog[256];
    snprintf(flog, sizeof flog, "%s/frame-log.jsonl", dir);
    char body[4096] = "";
    const char *slot[6] = {"the barn", "a farm", "its nest", "the shop", "the other side", "bed"};
    for (int i = 0; i < 6; i++)
        sprintf(body + strlen(body), "Why did the chicken cross the road? To get to %s. ", slot[i]);
    char rows[8192];
    snprintf(rows, sizeof rows,
             "{\"source\":\"a\",\"prompt\":\"p\",\"completion\":\"%s\",\"status\":\"clean\",\"repetition\":null}\n"
             "{\"source\":\"a\",\"prompt\":\"p\",\"completion\":\"%s\",\"status\":\"clean\",\"repetition\":null}\n"
             "{\"source\":\"a\",\"prompt\":\"p\",\"completion\":\"The answer is 4.\",\"status\":\"clean\","
             "\"repetition\":null}\n",
             body, "Wait, let me check the sum. Wait, let me check the sum. Wait, let me check the sum. "
                   "Wait, let me check the sum. Wait, let me check the sum.");
    write_file(flog, rows);
    snprintf(cmd, sizeof cmd, "%s --from-log %s --json %s >/dev/null 2>&1", eval, flog, js);
    CHECK(system(cmd) == 0, "eval --from-log run");
    char *t = bn_read_file(js, &len, err, sizeof err);
    CHECK(t && strstr(t, "\"n\":3,\"loops\":1,") && strstr(t, "\"frame_loops\":2,"), "from-log JSON: %s",
          t ? t : err);
    free(t);
}

int main(void) {
    char err[1024], dir[] = "/tmp/bonsai-test-tools-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char log[256], pairs[256];
    snprintf(log, sizeof log, "%s/log.jsonl", dir);
    snprintf(pairs, sizeof pairs, "%s/pairs.jsonl", dir);
    { // damaged outputs: log has prompts 0-2 complete and a partial 4th line; pairs has 0, 2 and 3
        write_file(log, "{\"prompt_index\":0,\"status\":\"clean\"}\n{\"prompt_index\":1,\"status\":\"loop_detected\"}\n"
                        "{\"prompt_index\":2,\"status\":\"loop_detected\"}\n{\"prompt_index\":3,\"sta");
        write_file(pairs, "{\"prompt_index\":0}\n{\"prompt_index\":2}\n{\"prompt_index\":3}\n{\"prompt_in");
        bn_resume_state st;
        CHECK(bn_mine_resume(log, pairs, &st, err, sizeof err) == 0, "resume: %s", err);
        CHECK(st.n_done == 3 && st.n_pairs == 2 && st.n_loops == 2, "done %d pairs %d loops %d", st.n_done, st.n_pairs,
              st.n_loops);
        CHECK(count_lines(log) == 3 && count_lines(pairs) == 2, "files repaired: %d / %d lines", count_lines(log),
              count_lines(pairs));
        size_t n;
        char *t = bn_read_file(log, &n, err, sizeof err);
        CHECK(t && n > 0 && t[n - 1] == '\n', "log ends with a complete line");
        free(t);
        unlink(log);
        unlink(pairs);
        CHECK(bn_mine_resume(log, pairs, &st, err, sizeof err) == 0 && st.n_done == 0, "missing files: fresh start");
    }
    const char *build = getenv("BONSAI_BUILD_ROOT");
    char mine[512], eval[512];
    snprintf(mine, sizeof mine, "%s/tools/bonsai-mine-pairs", build ? build : "build");
    snprintf(eval, sizeof eval, "%s/tools/bonsai-eval-loops", build ? build : "build");
    if (access(mine, X_OK) != 0 || access(eval, X_OK) != 0) {
        printf("tools not built (%s): skipping the smoke runs\n", mine);
        return test_done("test_tools");
    }
    char model[256], prompts[256], cmd[4096];
    snprintf(model, sizeof model, "%s/tiny.gguf", dir);
    snprintf(prompts, sizeof prompts, "%s/prompts.jsonl", dir);
    bn_mkmodel_params mk;
    bn_mkmodel_defaults(&mk, "tiny");
    CHECK(bn_mkmodel_write(&mk, model, err, sizeof err) == 0, "mkmodel: %s", err);
    write_file(prompts, "\"What is 2+2?\"\n{\"prompt\":\"Count.\",\"source\":\"math\"}\n{\"prompt\":\"Go\",\"source\":\"tau-bench\"}\n"
                        "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}\n");
    const char *common = "--temp 0 --n-predict 12 --ctx 256 -t 1";
    snprintf(cmd, sizeof cmd, "%s -m %s -p %s -o %s --gen-log %s --max-prompts 1 %s 2>/dev/null", mine, model, prompts,
             pairs, log, common);
    CHECK(system(cmd) == 0, "mine run 1");
    CHECK(count_lines(log) == 1, "1 prompt logged (%d)", count_lines(log));
    CHECK(system(cmd) != 0, "second run without --resume refuses to overwrite");
    snprintf(cmd, sizeof cmd, "%s -m %s -p %s -o %s --gen-log %s --resume %s 2>/dev/null", mine, model, prompts, pairs, log,
             common);
    CHECK(system(cmd) == 0, "mine run 2 (--resume)");
    CHECK(count_lines(log) == 3, "3 prompts logged after resume (agentic source skipped): %d", count_lines(log));
    char gz[256], js[256];
    snprintf(gz, sizeof gz, "%s/train.jsonl.gz", dir);
    snprintf(cmd, sizeof cmd, "%s --regularise %s -o %s 2>/dev/null", mine, pairs, gz);
    CHECK(system(cmd) == 0, "regularise run");
    bn_pair_row *rows;
    int n = bn_pairs_read(gz, &rows, err, sizeof err);
    CHECK(n >= 0 && n <= count_lines(pairs), "regularised rows %d (%s)", n, n < 0 ? err : "");
    if (n >= 0) bn_pairs_free(rows, n);
    snprintf(js, sizeof js, "%s/eval.json", dir);
    snprintf(cmd, sizeof cmd, "%s -m %s -p %s --json %s %s >/dev/null 2>&1", eval, model, prompts, js, common);
    CHECK(system(cmd) == 0, "eval run");
    size_t len;
    char *text = bn_read_file(js, &len, err, sizeof err);
    CHECK(text && strstr(text, "\"n\":3") && strstr(text, "\"loop_rate_ci95\"") && strstr(text, "\"frame_loop_rate_ci95\""),
          "eval JSON: %s", text ? text : err);
    free(text);
    from_log_frames(eval, dir, js);
    { // prime mode with a phrase list: prompt i uses phrase i mod 2 (recorded in the log)
        char phrases[256], plog[256], ppairs[256];
        snprintf(phrases, sizeof phrases, "%s/phrases.txt", dir);
        snprintf(plog, sizeof plog, "%s/plog.jsonl", dir);
        snprintf(ppairs, sizeof ppairs, "%s/ppairs.jsonl", dir);
        write_file(phrases, "Alpha one. \nBeta two.\\n\n");
        snprintf(cmd, sizeof cmd, "%s -m %s -p %s -o %s --gen-log %s --mode prime --prime-phrases %s "
                                  "--prime-prefix-tokens 4 %s 2>/dev/null", mine, model, prompts, ppairs, plog, phrases, common);
        CHECK(system(cmd) == 0, "prime run");
        size_t ln;
        char *t = bn_read_file(plog, &ln, err, sizeof err);
        CHECK(t && strstr(t, "\"prime_phrase\":\"Alpha one. \"") && strstr(t, "\"prime_phrase\":\"Beta two.\\n\"") &&
              (strstr(t, "\"status\":\"escaped\"") || strstr(t, "\"status\":\"loop_detected\"")),
              "phrases in the log: %.300s", t ? t : err);
        free(t);
    }
    { // --parallel 2: the log is still in prompt order
        char plog[256], ppairs[256];
        snprintf(plog, sizeof plog, "%s/par.jsonl", dir);
        snprintf(ppairs, sizeof ppairs, "%s/parpairs.jsonl", dir);
        snprintf(cmd, sizeof cmd, "%s -m %s -p %s -o %s --gen-log %s --parallel 2 %s 2>/dev/null", mine, model, prompts,
                 ppairs, plog, common);
        CHECK(system(cmd) == 0, "parallel run");
        size_t ln;
        char *t = bn_read_file(plog, &ln, err, sizeof err);
        char *a = t ? strstr(t, "\"prompt_index\":0") : NULL, *b = t ? strstr(t, "\"prompt_index\":1") : NULL,
             *c = t ? strstr(t, "\"prompt_index\":2") : NULL;
        CHECK(a && b && c && a < b && b < c && count_lines(plog) == 3, "ordered log");
        free(t);
    }
    { // --from-log: detector over an existing (antidoom-style) log: one looping completion of two
        char alog[256], loopy[512], line[1024];
        snprintf(alog, sizeof alog, "%s/antidoom.jsonl", dir);
        size_t k = 0;
        for (int i = 0; i < 100; i++) k += (size_t)sprintf(loopy + k, "ab");
        snprintf(line, sizeof line, "{\"source\":\"s\",\"prompt\":\"p\",\"completion\":\"%s\",\"status\":\"x\",\"repetition\":null}\n"
                                    "{\"source\":\"s\",\"prompt\":\"p\",\"completion\":\"fine.\",\"status\":\"clean\",\"repetition\":null}\n",
                 loopy);
        write_file(alog, line);
        snprintf(cmd, sizeof cmd, "%s --from-log %s --json %s 2>/dev/null >/dev/null", eval, alog, js);
        CHECK(system(cmd) == 0, "eval --from-log");
        char *t = bn_read_file(js, &len, err, sizeof err);
        CHECK(t && strstr(t, "\"n\":2") && strstr(t, "\"loops\":1") && strstr(t, "\"mean_length\":102.5"),
              "from-log JSON: %s", t ? t : err);
        free(t);
    }
    snprintf(cmd, sizeof cmd, "%s -m %s 2>/dev/null", eval, model);
    CHECK(system(cmd) != 0, "missing -p is an error");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cleanup");
    return test_done("test_tools");
}
