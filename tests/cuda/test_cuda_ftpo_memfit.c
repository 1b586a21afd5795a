// tests/cuda/test_cuda_ftpo_memfit.c — bonsai-ftpo-train -ngl against the device's memory, as a program linked with the
// CPU emulator (bonsai-ftpo-train-emu), whose device memory BONSAI_EMU_DEVICE_MEM sets: on a 1 GiB device (less than
// the tiny model's device plan + the 1 GiB margin) a training run is refused before the first step, exit 1, with one
// error line naming the device, its free bytes, the plan's parts and the settings to lower, and writes no adapter,
// checkpoint or log; `--plan-only -ngl 99` is refused the same way. On a 2 GiB device the plan fits: --plan-only says
// so, and one step trains, printing the device plan and afterwards the measured peak, which stays within the plan
// (the emulator counts the bytes asked for, so nothing rounds them up). With --ste-type Q1_0 the device holds the
// Q1_0 policy and the reference's own context (the Q1_0 base again): the peak equals that plan to the byte (measured
// 1149888 B). With -dp 2 each of the two ranks on the device counts: refused on 2 GiB, trains on 3 GiB.
#include <string.h>
#include <stdlib.h>
#include <unistd.h>
#include "tests/test.h"
#include "tests/tool_out.h"
#include "tests/train/fixture.h"
#include "synth/mkmodel.h"
#include "base/util.h"

static char dir[] = "/tmp/bonsai_test_ftpo_memfit_XXXXXX";
static char exe[600];

// run: the tool with args on a device of mem bytes (BONSAI_EMU_DEVICE_MEM), stdout+stderr into dir/out.txt; returns
// the exit status.
static int run(const char *mem, const char *args) {
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "BONSAI_EMU_DEVICE_MEM=%s '%s' %s > '%s/out.txt' 2>&1", mem, exe, args, dir);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static bool out_has(const char *s) { return tool_out_has(dir, s); }

// out_bytes: the number before " B)" that follows key in the last run's output (-1 when absent).
static long long out_bytes(const char *key) {
    char *t = tool_out_text(dir);
    const char *p = t ? strstr(t, key) : NULL;
    const char *open = p ? strchr(p, '(') : NULL;
    long long v = open ? atoll(open + 1) : -1;
    free(t);
    return v;
}

// exists: whether dir/name exists.
static bool exists(const char *name) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

// check_refused: the run of args on a 1 GiB device is refused with the numbers and writes nothing.
static void check_refused(const char *args) {
    CHECK(run("1G", args) == 1, "refused: exit 1");
    CHECK(out_has("bonsai-ftpo-train: device 0: 1.00 GiB free of 1.00 GiB (1073741824 B), this run needs ") &&
              out_has("kept activations") && out_has("layer buffers") && out_has("+ 1.00 GiB margin") &&
              out_has("--batch") && out_has("--rank") && out_has("-ngl 0"),
          "the error names the device, its free bytes, the plan's parts, the margin and what to lower");
    char *t = tool_out_text(dir);
    const char *line = t ? strstr(t, "bonsai-ftpo-train: device 0: ") : NULL;
    if (line) printf("refusal: %.*s\n", (int)strcspn(line, "\n"), line);
    CHECK(t && !strstr(t, "step 1/"), "no step ran");
    free(t);
    CHECK(!exists("a.gguf") && !exists("ck.bin") && !exists("log.jsonl"), "no adapter, checkpoint or log written");
}

int main(void) {
    const char *br = getenv("BONSAI_BUILD_ROOT");
    if (!br) return test_skip("BONSAI_BUILD_ROOT not set (run through meson test)");
    snprintf(exe, sizeof exe, "%s/tests/cuda/bonsai-ftpo-train-emu", br);
    CHECK(access(exe, X_OK) == 0, "bonsai-ftpo-train-emu is built (%s)", exe);
    if (access(exe, X_OK) != 0 || !mkdtemp(dir)) return test_done("cuda_ftpo_memfit_emu");
    char model[600], pairs[600], err[256], args[2000];
    bn_mkmodel_params p;
    bn_mkmodel_defaults(&p, "tiny");
    snprintf(model, sizeof model, "%s/tiny.gguf", dir);
    CHECK(bn_mkmodel_write(&p, model, err, sizeof err) == 0, "mkmodel: %s", err);
    snprintf(pairs, sizeof pairs, "%s/pairs.jsonl", dir);
    FILE *f = fopen(pairs, "w");
    CHECK(f != NULL, "cannot write %s", pairs);
    if (!f) return test_done("cuda_ftpo_memfit_emu");
    for (int r = 0; r < 4; r++)
        fx_pair_line(f, "p", "train", (int32_t[]){r, 10 + r, 20, 30 + r}, 4, 100 + r, (int32_t[]){200 + r, 300 + r}, 2);
    fclose(f);
    snprintf(args, sizeof args, "-m '%s' -p '%s' -o '%s/a.gguf' --rank 4 --batch 2 --grad-accum 1 --max-steps 1 "
             "--no-eval --checkpoint '%s/ck.bin' --log '%s/log.jsonl' -ngl 99", model, pairs, dir, dir, dir);
    check_refused(args);
    char plan_args[1400];
    snprintf(plan_args, sizeof plan_args, "-m '%s' -p '%s' --rank 4 --batch 2 --plan-only -ngl 99", model, pairs);
    CHECK(run("1G", plan_args) == 1 && out_has("memory plan") && out_has("refused: device 0: "),
          "--plan-only -ngl 99 on 1 GiB: the plan, then the refusal");
    CHECK(run("2G", plan_args) == 0 && out_has("device 0: 2.00 GiB free of 2.00 GiB") && out_has("it fits"),
          "--plan-only -ngl 99 on 2 GiB: it fits");

    CHECK(run("2G", args) == 0, "on 2 GiB the run trains: exit 0");
    CHECK(out_has("ftpo-train: device plan ") && out_has("forward and backward on CUDA device 0") &&
              out_has("step 1/"), "the device plan noted, one step on the device");
    CHECK(exists("a.gguf") && exists("log.jsonl"), "adapter and log written");
    const long long peak = out_bytes("memory: peak"), plan = out_bytes("the plan's device total");
    printf("measured device peak %lld B, planned %lld B\n", peak, plan);
    CHECK(peak > 0 && plan > 0 && peak <= plan, "the measured peak (%lld B) within the plan (%lld B)", peak, plan);

    // through the Q1_0 quantizer: the policy's Q1_0 weights and the reference's own context (its Q1_0 base again)
    char ste_args[2100];
    snprintf(ste_args, sizeof ste_args, "%s --ste-type Q1_0", args);
    CHECK(run("2G", ste_args) == 0 && out_has("reference model ") && out_has("step 1/"),
          "--ste-type Q1_0 on 2 GiB: the reference's context planned, one step on the device");
    const long long ste_peak = out_bytes("memory: peak"), ste_plan = out_bytes("the plan's device total");
    printf("--ste-type Q1_0: measured device peak %lld B, planned %lld B\n", ste_peak, ste_plan);
    CHECK(ste_peak > 0 && ste_peak == ste_plan, "--ste-type: the measured peak (%lld B) is the plan (%lld B)",
          ste_peak, ste_plan);

    // -dp 2: both ranks on the one device, each needing the plan and the margin (each rank is its own emulated
    // device here, so 2 GiB refuses and 3 GiB trains only because the check multiplies by the ranks on it)
    char dp_args[1400];
    snprintf(dp_args, sizeof dp_args, "-m '%s' -p '%s' -o '%s/dp.gguf' --rank 4 --batch 1 --grad-accum 1 --max-steps 1 "
             "--no-eval -ngl 99 -dp 2", model, pairs, dir);
    CHECK(run("2G", dp_args) == 1 && out_has("rank 0's device 0: 2.00 GiB free of 2.00 GiB") &&
              out_has("2 ranks x (the plan's"), "-dp 2 on 2 GiB: refused, both ranks counted");
    CHECK(!exists("dp.gguf"), "-dp 2 refused: no adapter written");
    CHECK(run("3G", dp_args) == 0 && exists("dp.gguf"), "-dp 2 on 3 GiB: trains");

    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    return test_done("cuda_ftpo_memfit_emu");
}
