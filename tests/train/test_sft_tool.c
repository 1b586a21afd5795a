// tests/train/test_sft_tool.c — bonsai-train-lm as a program, on the tiny qwen35 (synth/mkmodel):
//  - --tokenize writes uint32 ids that detokenize back to the exact text;
//  - 8 steps in one run vs 4 steps (--max-steps 4, checkpoint) + --resume for the rest give a
//    byte-identical output GGUF (the resumed command passes other --ctx/--lr: the checkpoint's win);
//    per-step lines and the final held-out ppl are printed;
//  - the loss of step 8 is below the loss of step 1 (a 64-token sequence repeated, lr 3e-3);
//  - usage errors (missing -o, bad token file) exit 1 with a message.
#include <string.h>
#include <unistd.h>
#include "tests/test.h"
#include "synth/mkmodel.h"
#include "gguf/gguf.h"
#include "core/tokenizer.h"
#include "base/util.h"

static char DIR_[] = "/tmp/bonsai_test_sft_tool_XXXXXX";
static char EXE[600];

// run: runs the tool with args (stderr+stdout into log); returns the exit status.
static int run(const char *args, const char *log) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s > '%s' 2>&1", EXE, args, log);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *slurp(const char *path, size_t *n) {
    char err[256];
    size_t k = 0;
    char *s = bn_read_file(path, n ? n : &k, err, sizeof err);
    return s ? s : strdup("");
}

// step_loss: the loss printed on the "step N/" line of a log, or NAN.
static double step_loss(const char *log, int step) {
    char key[64];
    snprintf(key, sizeof key, "step %d/", step);
    const char *p = strstr(log, key);
    const char *l = p ? strstr(p, "loss ") : NULL;
    return l ? atof(l + 5) : NAN;
}

int main(void) {
    const char *br = getenv("BONSAI_BUILD_ROOT");
    if (!br) return test_skip("BONSAI_BUILD_ROOT not set (run through meson test)");
    snprintf(EXE, sizeof EXE, "%s/tools/bonsai-train-lm", br);
    if (access(EXE, X_OK) != 0) return test_skip("bonsai-train-lm not built");
    if (!mkdtemp(DIR_)) return test_skip("mkdtemp failed");
    char model[700], text[700], tok[700], log[700], args[4096], err[256];
    snprintf(model, sizeof model, "%s/tiny.gguf", DIR_);
    snprintf(text, sizeof text, "%s/text.txt", DIR_);
    snprintf(tok, sizeof tok, "%s/tok.bin", DIR_);
    snprintf(log, sizeof log, "%s/log.txt", DIR_);
    bn_mkmodel_params mp;
    bn_mkmodel_defaults(&mp, "tiny");
    if (bn_mkmodel_write(&mp, model, err, sizeof err)) { CHECK(0, "mkmodel: %s", err); return test_done("train_sft_tool"); }

    // --tokenize: text → ids → the same text
    char body[4096] = "";
    for (int i = 0; i < 40; i++)
        strcat(body, "The cat sat on the mat. A dog sat on the log. ");
    CHECK(bn_write_file_atomic(text, body, strlen(body), err, sizeof err) == 0, "write text");
    snprintf(args, sizeof args, "--tokenize '%s' -m '%s' -o '%s'", text, model, tok);
    CHECK(run(args, log) == 0, "--tokenize failed: %s", slurp(log, NULL));
    size_t nb = 0;
    char *ids_raw = slurp(tok, &nb);
    CHECK(nb > 0 && nb % 4 == 0, "token file has %zu bytes", nb);
    gguf_file *g = gguf_open(model, err, sizeof err);
    bn_tokenizer *tk = g ? bn_tokenizer_from_gguf(g, err, sizeof err) : NULL;
    CHECK(tk != NULL, "tokenizer: %s", err);
    if (tk && nb >= 4) {
        int n = (int)(nb / 4);
        int32_t *ids = xmalloc(sizeof(int32_t) * (size_t)n);
        memcpy(ids, ids_raw, nb); // little-endian host
        size_t len;
        char *back = bn_detokenize(tk, ids, n, false, &len);
        CHECK(len == strlen(body) && memcmp(back, body, len) == 0, "detokenized text differs");
        printf("tokenize: %zu bytes -> %d tokens, round trip exact\n", strlen(body), n);
        free(back);
        free(ids);
    }
    bn_tokenizer_free(tk);
    gguf_close(g);
    free(ids_raw);

    // one run of 8 steps vs 4 + resume 4
    char outA[700], outB[700], ck[700], logB[700];
    snprintf(outA, sizeof outA, "%s/a.gguf", DIR_);
    snprintf(outB, sizeof outB, "%s/b.gguf", DIR_);
    snprintf(ck, sizeof ck, "%s/ck.bin", DIR_);
    snprintf(logB, sizeof logB, "%s/logB.txt", DIR_);
    const char *common = "--steps 8 --ctx 24 --batch 2 --lr 3e-3 --seed 3 --val-frac 0.2 --eval-every 4";
    snprintf(args, sizeof args, "-m '%s' --data '%s' -o '%s' %s", model, tok, outA, common);
    CHECK(run(args, log) == 0, "8-step run failed: %s", slurp(log, NULL));
    char *la = slurp(log, NULL);
    double l1 = step_loss(la, 1), l8 = step_loss(la, 8);
    printf("8-step run: loss step 1 %.4f, step 8 %.4f\n", l1, l8);
    CHECK(l8 < l1, "loss did not decrease: %.4f -> %.4f", l1, l8);
    CHECK(strstr(la, "tok/s") && strstr(la, "final held-out ppl") && strstr(la, "eval step 4 held-out ppl"),
          "missing log lines:\n%s", la);
    snprintf(args, sizeof args, "-m '%s' --data '%s' -o '%s' %s --max-steps 4 --checkpoint '%s'", model, tok, outB,
             common, ck);
    CHECK(run(args, logB) == 0, "4-step run failed: %s", slurp(logB, NULL));
    // the checkpoint's ctx / batch / lr win over the command line's
    snprintf(args, sizeof args, "-m '%s' --data '%s' -o '%s' %s --ctx 99 --lr 1 --resume '%s' --checkpoint '%s'", model,
             tok, outB, common, ck, ck);
    CHECK(run(args, logB) == 0, "resumed run failed: %s", slurp(logB, NULL));
    char *lb = slurp(logB, NULL);
    CHECK(strstr(lb, "resumed from") && !strstr(lb, "step 4/8") && strstr(lb, "step 5/8"), "resume log:\n%s", lb);
    CHECK(step_loss(lb, 8) == l8, "resumed step 8 loss %.6f vs %.6f", step_loss(lb, 8), l8);
    size_t na, nbb;
    char *a = slurp(outA, &na), *b = slurp(outB, &nbb);
    CHECK(na > 0 && na == nbb && memcmp(a, b, na) == 0, "resumed output GGUF differs (%zu vs %zu bytes)", na, nbb);
    printf("resume: output GGUF byte-identical (%zu bytes)\n", na);
    free(a); free(b); free(la); free(lb);

    // errors
    snprintf(args, sizeof args, "-m '%s' --data '%s'", model, tok);
    CHECK(run(args, log) == 1, "missing -o accepted");
    snprintf(args, sizeof args, "-m '%s' --data '%s' -o '%s'", model, text, outA); // 1920 bytes of text: ids too big
    CHECK(run(args, log) == 1, "text as token file accepted");
    char *le = slurp(log, NULL);
    CHECK(strstr(le, "bonsai-train-lm: ") != NULL, "no error message: %s", le);
    printf("bad data: %s", le);
    free(le);

    const char *files[] = {model, text, tok, log, outA, outB, ck, logB};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) unlink(files[i]);
    rmdir(DIR_);
    return test_done("train_sft_tool");
}
