// tests/train/test_tool.c — bonsai-ftpo-train end to end as a program on the tiny qwen35: train
// (adapter, checkpoint, JSONL log written; exit 0), --eval (table with base and adapter rows),
// --merge (merged GGUF loads), --ste-type + --merge-type q1_0, the memory plan (--plan-only, --mem-limit), -dp 2 and
// two processes under torchrun's variables (the same adapter), and clear exit-1 errors (missing pairs file, bad flag,
// bad line).
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "tests/test.h"
#include "tests/tool_out.h"
#include "tests/train/fixture.h"
#include "synth/mkmodel.h"
#include "core/model.h"
#include "base/util.h"
#include "quant/quant.h"

static char dir[] = "/tmp/bonsai_test_ftpo_tool_XXXXXX";
static char exe[600];

// run: runs the tool with args (stdout+stderr into dir/out.txt); returns the exit status.
static int run(const char *args) {
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "'%s' %s > '%s/out.txt' 2>&1", exe, args, dir);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// run_launched: runs the tool as `world` processes with the variables torchrun gives its ranks (outputs together into
// dir/out.txt); returns the first nonzero exit status among them.
static int run_launched(const char *args, int world) {
    char cmd[4000];
    int n = snprintf(cmd, sizeof cmd, "export MASTER_ADDR=127.0.0.1 MASTER_PORT=%d WORLD_SIZE=%d LOCAL_WORLD_SIZE=%d; ",
                     20000 + (int)(getpid() % 20000), world, world);
    for (int r = 0; r < world; r++)
        n += snprintf(cmd + n, sizeof cmd - n, "RANK=%d LOCAL_RANK=%d '%s' %s > '%s/out%d.txt' 2>&1 & p%d=$!; ", r, r,
                      exe, args, dir, r, r);
    n += snprintf(cmd + n, sizeof cmd - n, "st=0; for p in");
    for (int r = 0; r < world; r++) n += snprintf(cmd + n, sizeof cmd - n, " $p%d", r);
    n += snprintf(cmd + n, sizeof cmd - n, "; do wait $p; s=$?; [ $st = 0 ] && st=$s; done; cat '%s'/out?.txt > "
                  "'%s/out.txt'; exit $st", dir, dir);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static bool out_has(const char *s) { return tool_out_has(dir, s); }
static int out_count(const char *s) { return tool_out_count(dir, s); }

int main(void) {
    const char *br = getenv("BONSAI_BUILD_ROOT");
    if (!br) return test_skip("BONSAI_BUILD_ROOT not set (run through meson test)");
    snprintf(exe, sizeof exe, "%s/tools/bonsai-ftpo-train", br);
    if (access(exe, X_OK) != 0) return test_skip("bonsai-ftpo-train not built");
    if (!mkdtemp(dir)) return test_skip("cannot create a temp dir");
    char model[600], pairs[600], err[256], args[2000];
    bn_mkmodel_params p;
    bn_mkmodel_defaults(&p, "tiny");
    snprintf(model, sizeof model, "%s/tiny.gguf", dir);
    if (bn_mkmodel_write(&p, model, err, sizeof err)) { CHECK(0, "mkmodel: %s", err); return test_done("train_tool"); }
    snprintf(pairs, sizeof pairs, "%s/pairs.jsonl", dir);
    FILE *f = fopen(pairs, "w");
    for (int r = 0; r < 6; r++)
        fx_pair_line(f, "p", r == 5 ? "heldout" : "train", (int32_t[]){r, 10 + r, 20, 30 + r}, 4, 100 + r,
                     (int32_t[]){200 + r, 300 + r}, 2);
    fclose(f);

    snprintf(args, sizeof args, "-m '%s' -p '%s' -o '%s/a.gguf' --rank 4 --epochs 2 --batch 2 --grad-accum 1 --lr 1e-2 --early-stop 0 "
             "--checkpoint '%s/ck.bin' --log '%s/log.jsonl' -t 2 --mem-limit 1G", model, pairs, dir, dir, dir);
    CHECK(run(args) == 0, "training exits 0");
    CHECK(out_has("within --mem-limit 1073741824 B"), "the memory plan checked against --mem-limit");
    CHECK(out_has("step 6/6") && out_has("epoch 2 eval"), "per-step lines and epoch evals");
    char path[700];
    snprintf(path, sizeof path, "%s/a.gguf", dir);
    CHECK(access(path, R_OK) == 0, "adapter written");
    snprintf(path, sizeof path, "%s/ck.bin", dir);
    CHECK(access(path, R_OK) == 0, "checkpoint written");
    snprintf(path, sizeof path, "%s/log.jsonl", dir);
    CHECK(access(path, R_OK) == 0, "log written");

    // -dp 2 --batch 1: the same steps on two processes; rank 0 alone prints and writes; a failing rank fails the run
    snprintf(args, sizeof args, "-m '%s' -p '%s' -o '%s/dp.gguf' --rank 4 --epochs 2 --batch 1 --grad-accum 1 --lr 1e-2 "
             "--early-stop 0 --checkpoint '%s/dp.bin' -dp 2", model, pairs, dir, dir);
    CHECK(run(args) == 0 && out_has("batch 1 x 1 x 2 ranks") && out_has("step 6/6") && out_count("step 6/6") == 1 &&
              out_count("epoch 2 eval") == 1, "-dp 2: one set of step lines for 6 steps");
    snprintf(path, sizeof path, "%s/dp.gguf", dir);
    CHECK(access(path, R_OK) == 0, "-dp 2: adapter written");
    snprintf(args, sizeof args, "-m '%s' -p '%s' -o '%s/dp2.gguf' --rank 8 --epochs 2 --batch 1 --grad-accum 1 "
             "--resume '%s/ck.bin' -dp 2", model, pairs, dir, dir);
    CHECK(run(args) == 1 && out_has("checkpoint does not match this run"), "-dp 2: a rank's error fails the run");

    // the same run as two processes a launcher started (torchrun's variables): the -dp 2 adapter to the bit
    snprintf(args, sizeof args, "-m '%s' -p '%s' -o '%s/launched.gguf' --rank 4 --epochs 2 --batch 1 --grad-accum 1 "
             "--lr 1e-2 --early-stop 0 --dp-timeout 30", model, pairs, dir);
    CHECK(run_launched(args, 2) == 0 && out_has("2 ranks started by a launcher") && out_count("step 6/6") == 1,
          "two launched ranks: one set of step lines");
    snprintf(path, sizeof path, "%s/dp.gguf", dir);
    snprintf(args, sizeof args, "%s/launched.gguf", dir);
    fx_param_diff d = fx_adapter_diff(path, args);
    CHECK(d.l2 == 0 && d.max == 0, "two launched ranks train -dp 2's adapter (relative L2 %.3g)", d.l2);
    snprintf(args, sizeof args, "-m '%s' -p '%s' -o '%s/l2.gguf' --rank 8 --epochs 2 --batch 1 --grad-accum 1 "
             "--resume '%s/ck.bin' --dp-timeout 30", model, pairs, dir, dir);
    CHECK(run_launched(args, 2) == 1 && out_has("checkpoint does not match this run"),
          "launched ranks: a rank's error fails every rank, with no wait for the timeout");

    // -ngl without a GPU (this machine, CI): a warning, and the CPU
    snprintf(args, sizeof args, "-m '%s' -p '%s' -o '%s/g.gguf' --rank 4 --epochs 1 --batch 2 -ngl 3", model, pairs,
             dir);
    CHECK(run(args) == 0 && out_has("-ngl 3: ") && out_has("training runs on the CPU"), "-ngl without a GPU");

    snprintf(args, sizeof args, "-m '%s' -p '%s' --eval '%s/a.gguf'", model, pairs, dir);
    CHECK(run(args) == 0 && out_has("adapter  train") && out_has("base     heldout"), "--eval table");

    snprintf(args, sizeof args, "-m '%s' --merge '%s/a.gguf' -o '%s/merged.gguf'", model, dir, dir);
    CHECK(run(args) == 0 && out_has("blk.3.attn_q.weight"), "--merge with diagnostics");
    snprintf(path, sizeof path, "%s/merged.gguf", dir);
    bn_model *mm = bn_model_load(path, err, sizeof err);
    CHECK(mm != NULL, "merged model loads: %s", err);
    bn_model_free(mm);

    // STE: --ste-type Q1_0 training, then --merge-type q1_0 gives a Q1_0 model; a bad STE type is an error
    snprintf(args, sizeof args, "-m '%s' -p '%s' -o '%s/s.gguf' --rank 4 --epochs 1 --batch 2 --grad-accum 1 --lr 1e-2 "
             "--early-stop 0 --ste-type Q1_0 -t 2", model, pairs, dir);
    CHECK(run(args) == 0 && out_has("STE through Q1_0"), "--ste-type Q1_0 training");
    snprintf(args, sizeof args, "-m '%s' --merge '%s/s.gguf' -o '%s/merged_q1.gguf' --merge-type q1_0", model, dir, dir);
    CHECK(run(args) == 0 && out_has("q1_0"), "--merge-type q1_0");
    snprintf(path, sizeof path, "%s/merged_q1.gguf", dir);
    mm = bn_model_load(path, err, sizeof err);
    CHECK(mm && mm->w.layers[0].ffn_up.type == BN_Q1_0 && mm->w.token_embd.type == BN_Q1_0, "merged Q1_0 model: %s", err);
    bn_model_free(mm);
    snprintf(args, sizeof args, "-m '%s' -p '%s' -o '%s/s.gguf' --ste-type Q9_9 --epochs 1", model, pairs, dir);
    CHECK(run(args) == 1 && out_has("Q9_9"), "unknown --ste-type: exit 1 naming it");
    snprintf(args, sizeof args, "-m '%s' --merge '%s/s.gguf' -o '%s/m2.gguf' --merge-type q9", model, dir, dir);
    CHECK(run(args) == 1 && out_has("--merge-type"), "unknown --merge-type: exit 1");

    snprintf(args, sizeof args, "-m '%s' -p '%s/missing.jsonl' -o '%s/b.gguf'", model, dir, dir);
    CHECK(run(args) == 1 && out_has("bonsai-ftpo-train: ") && out_has("missing.jsonl"), "missing pairs file: exit 1 with the path");
    snprintf(args, sizeof args, "-m '%s' -p '%s' -o '%s/b.gguf' --bogus", model, pairs, dir);
    CHECK(run(args) == 1 && out_has("--bogus"), "unknown flag: exit 1");
    // the memory plan (docs/antidoom.md §19): without pairs, with pairs (the longest row, 6 rows' reference logits of
    // 512 floats = 12288 B), and a run over --mem-limit refused with the numbers
    snprintf(args, sizeof args, "-m '%s' --plan-only -c 64 --rank 4", model);
    CHECK(run(args) == 0 && out_has("memory plan: qwen35, 4 layers (3 Gated DeltaNet, 1 attention)") &&
              out_has("64 tokens per row") && out_has("rows unknown"), "--plan-only without pairs");
    snprintf(args, sizeof args, "-m '%s' -p '%s' --plan-only --rank 4", model, pairs);
    CHECK(run(args) == 0 && out_has("4 tokens per row") && out_has("12288"), "--plan-only with pairs");
    snprintf(args, sizeof args, "-m '%s' -p '%s' -o '%s/c.gguf' --rank 4 --mem-limit 64K -ngl 3", model, pairs, dir);
    CHECK(run(args) == 1 && out_has("refused: the plan needs") && out_has("over --mem-limit 64K = 65536 B"),
          "over --mem-limit: refused with the numbers");
    snprintf(path, sizeof path, "%s/c.gguf", dir);
    CHECK(access(path, R_OK) != 0, "a refused run writes no adapter");
    snprintf(args, sizeof args, "-m '%s' --plan-only --mem-limit 12Q", model);
    CHECK(run(args) == 1 && out_has("--mem-limit"), "a malformed --mem-limit: exit 1");

    f = fopen(pairs, "a");
    fprintf(f, "{\"context_before\":\"\",\"rejected_token\":\"r\",\"rejected_decoded\":\"r\",\"multi_chosen_tokens\":[\"c\"],"
               "\"multi_chosen_decoded\":[\"c\"],\"source\":\"test\",\"source_prompt\":\"p\",\"repetition\":{\"start_char\":0,"
               "\"repeat_start_char\":0,\"rejected_token_index\":0,\"period\":1,\"repeats\":1,\"snippet\":\"r\"},"
               "\"context_ids\":[1],\"rejected_id\":\"x\",\"chosen_ids\":[2]}\n");
    fclose(f);
    snprintf(args, sizeof args, "-m '%s' -p '%s' -o '%s/b.gguf'", model, pairs, dir);
    CHECK(run(args) == 1 && out_has("pairs.jsonl:7: field 'rejected_id'"), "bad row: file:line and field");

    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    return test_done("train_tool");
}
