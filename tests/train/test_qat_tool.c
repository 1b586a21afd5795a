// tests/train/test_qat_tool.c — bonsai-train-lm --qat-type as a program, on the tiny qwen35:
//  - 6 QAT steps in one run vs 3 (--max-steps, checkpoint) + --resume give a byte-identical output,
//    which is Q1_0 where bonsai-quantize Q1_0 quantizes (general.file_type 40) and logs "quantized model";
//  - resuming that checkpoint without --qat-type, or --qat-skip without --qat-type, exits 1 with a message.
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include "tests/test.h"
#include "synth/mkmodel.h"
#include "gguf/gguf.h"
#include "base/util.h"
#include "base/rng.h"
#include "quant/quant.h"

static char DIR_[] = "/tmp/bonsai_test_qat_tool_XXXXXX";

// tool: runs bonsai-train-lm (exe) with args, output into log; returns the exit status.
static int tool(const char *exe, const char *args, const char *log) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s > '%s' 2>&1", exe, args, log);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// file_has: true if the file at path contains needle.
static bool file_has(const char *path, const char *needle) {
    char err[256];
    size_t n;
    char *s = bn_read_file(path, &n, err, sizeof err);
    bool has = s && memmem(s, n, needle, strlen(needle)) != NULL;
    free(s);
    return has;
}

int main(void) {
    const char *br = getenv("BONSAI_BUILD_ROOT");
    if (!br) return test_skip("BONSAI_BUILD_ROOT not set (run through meson test)");
    char exe[600];
    snprintf(exe, sizeof exe, "%s/tools/bonsai-train-lm", br);
    if (access(exe, X_OK) != 0) return test_skip("bonsai-train-lm not built");
    if (!mkdtemp(DIR_)) return test_skip("mkdtemp failed");
    char model[700], tok[700], log[700], outA[700], outB[700], ck[700], args[4096], err[256];
    snprintf(model, sizeof model, "%s/tiny.gguf", DIR_);
    snprintf(tok, sizeof tok, "%s/tok.bin", DIR_);
    snprintf(log, sizeof log, "%s/log.txt", DIR_);
    snprintf(outA, sizeof outA, "%s/a.gguf", DIR_);
    snprintf(outB, sizeof outB, "%s/b.gguf", DIR_);
    snprintf(ck, sizeof ck, "%s/ck.bin", DIR_);
    bn_mkmodel_params mp;
    bn_mkmodel_defaults(&mp, "tiny");
    if (bn_mkmodel_write(&mp, model, err, sizeof err)) { CHECK(0, "mkmodel: %s", err); return test_done("train_qat_tool"); }
    uint32_t ids[400];
    bn_rng rng;
    bn_rng_seed(&rng, 9);
    for (int i = 0; i < 400; i++) ids[i] = (uint32_t)bn_rng_below(&rng, 256);
    CHECK(bn_write_file_atomic(tok, ids, sizeof ids, err, sizeof err) == 0, "tokens: %s", err);

    const char *common = "--qat-type Q1_0 --steps 6 --ctx 24 --batch 2 --lr 3e-3 --seed 3 --val-frac 0.2 --eval-every 0";
    snprintf(args, sizeof args, "-m '%s' --data '%s' -o '%s' %s", model, tok, outA, common);
    CHECK(tool(exe, args, log) == 0, "6-step QAT run failed");
    CHECK(file_has(log, "QAT Q1_0: 33 of 56 tensors") && file_has(log, "quantized model"), "QAT log lines missing");
    snprintf(args, sizeof args, "-m '%s' --data '%s' -o '%s' %s --max-steps 3 --checkpoint '%s'", model, tok, outB,
             common, ck);
    CHECK(tool(exe, args, log) == 0, "3-step QAT run failed");
    snprintf(args, sizeof args, "-m '%s' --data '%s' -o '%s' %s --resume '%s'", model, tok, outB, common, ck);
    CHECK(tool(exe, args, log) == 0 && file_has(log, "resumed from"), "QAT resume failed");
    size_t na = 0, nb = 0;
    char *a = bn_read_file(outA, &na, err, sizeof err), *b = bn_read_file(outB, &nb, err, sizeof err);
    CHECK(a && b && na == nb && memcmp(a, b, na) == 0, "resumed QAT output differs (%zu vs %zu bytes)", na, nb);
    free(a);
    free(b);
    gguf_file *g = gguf_open(outA, err, sizeof err);
    int n_q1 = 0;
    int64_t ft = -1;
    for (size_t i = 0; g && i < g->n_tensors; i++) n_q1 += g->tensors[i].type == BN_Q1_0;
    if (g) gguf_get_int(g, "general.file_type", &ft);
    printf("tool: 6 steps = 3 + resume 3, byte-identical (%zu bytes); %d Q1_0 tensors, file_type %lld\n", na, n_q1,
           (long long)ft);
    CHECK(n_q1 == 33 && ft == 40, "output: %d Q1_0 tensors, file_type %lld", n_q1, (long long)ft);
    gguf_close(g);

    // refusals
    snprintf(args, sizeof args, "-m '%s' --data '%s' -o '%s' --steps 6 --resume '%s'", model, tok, outB, ck);
    CHECK(tool(exe, args, log) == 1 && file_has(log, "trained with QAT"), "QAT checkpoint resumed without QAT");
    snprintf(args, sizeof args, "-m '%s' --data '%s' -o '%s' --qat-skip output", model, tok, outB);
    CHECK(tool(exe, args, log) == 1 && file_has(log, "--qat-skip needs --qat-type"), "--qat-skip alone accepted");
    const char *files[] = {model, tok, log, outA, outB, ck};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) unlink(files[i]);
    rmdir(DIR_);
    return test_done("train_qat_tool");
}
