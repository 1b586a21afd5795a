// tests/train/test_dp.c — data-parallel training (train/dp.h): the loopback all-reduce gives every rank the rank-order
// sum to the bit, mismatched counts and a failing rank end the run instead of hanging it, and FTPO training on two
// ranks × batch 2 equals one rank × batch 4, a checkpoint of the two-rank run resumes on one rank to the same adapter.
// Only the summation order of the gradients differs, and AdamW divides by √v: a component whose gradient nearly
// cancels carries the rounding into its update at full size. So the adapters agree within 3e-5 in relative L2 norm
// (measured 5.4e-6; a batch of 2 instead of 4 is 0.45 away), and no parameter differs by more than 1e-3 of the
// largest (measured: 3 of 6 656 over 2e-5, the most 1.5e-4).
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tests/test.h"
#include "tests/train/fixture.h"
#include "train/dp.h"
#include "train/trainer.h"
#include "train/lora.h"
#include "quant/quant.h"

static char dir[] = "/tmp/bonsai_test_dp_XXXXXX";

// value: rank r's element i of the sum test (distinct magnitudes, so the summation order shows in the bits).
static float value(int r, int64_t i) { return (float)((i % 977) * 1e-3 + 1.0 / (r + 3) + (i & 1 ? 1e4 * r : 0)); }

// rank_sum_check: the body of one rank of the sum test: n floats and 3 doubles; returns its exit status.
static int rank_sum_check(bn_dp *dp, int64_t n) {
    char err[256];
    int world = bn_dp_world(dp);
    float *buf = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++) buf[i] = value(bn_dp_rank(dp), i);
    double d[3] = {bn_dp_rank(dp), 0.5, 1e-17};
    int bad = bn_dp_sum_f32(dp, buf, n, err, sizeof err) != 0 || bn_dp_sum_f64(dp, d, 3, err, sizeof err) != 0;
    for (int64_t i = 0; i < n && !bad; i++) {
        float want = value(0, i);
        for (int r = 1; r < world; r++) want += value(r, i);
        bad = memcmp(&want, &buf[i], sizeof want) != 0;
    }
    bad |= d[0] != world * (world - 1) / 2.0 || d[1] != 0.5 * world || d[2] != 1e-17 * world;
    free(buf);
    return bad ? 10 + bn_dp_rank(dp) : 0;
}

// test_sum: three ranks sum 700 000 floats (three slots' worth) to the bit, in rank order.
static void test_sum(void) {
    char err[256];
    bn_dp *dp;
    int status;
    int rc = bn_dp_spawn(3, &dp, &status, err, sizeof err);
    if (rc == 0) exit(rank_sum_check(dp, 700000));
    CHECK(rc == 1 && status == 0, "three-rank sum: spawn %d, first failing rank status %d (10 + rank: wrong sum)", rc,
          status);
}

// test_count_mismatch: ranks asking for sums of different lengths all get an error naming the counts.
static void test_count_mismatch(void) {
    char err[256];
    bn_dp *dp;
    int status;
    int rc = bn_dp_spawn(2, &dp, &status, err, sizeof err);
    if (rc == 0) {
        float buf[8] = {0};
        int r = bn_dp_sum_f32(dp, buf, 4 + bn_dp_rank(dp), err, sizeof err);
        exit(r == -1 && strstr(err, "elements") ? 0 : 1);
    }
    CHECK(rc == 1 && status == 0, "mismatched counts: every rank reports an error (status %d)", status);
}

// test_failing_rank: rank 1 exits with 3 while the others wait in a sum; the supervisor ends them and returns 3.
static void test_failing_rank(void) {
    char err[256];
    bn_dp *dp;
    int status;
    int rc = bn_dp_spawn(3, &dp, &status, err, sizeof err);
    if (rc == 0) {
        if (bn_dp_rank(dp) == 1) exit(3);
        float x = 1;
        bn_dp_sum_f32(dp, &x, 1, err, sizeof err); // waits for rank 1 forever: the supervisor must kill it
        exit(0);
    }
    CHECK(rc == 1 && status == 3, "a failing rank's status comes back (%d, expected 3) and nobody hangs", status);
    CHECK(bn_dp_spawn(1, &dp, &status, err, sizeof err) == -1 && strstr(err, "2 to 256"), "one rank is refused: %s",
          err);
}

// train_opts: a short FTPO run of the tiny model (lm_head and attention adapters, 3 steps an epoch with 10 rows).
static bn_ftpo_train_opts train_opts(int batch, const char *out) {
    bn_ftpo_train_opts o = bn_ftpo_train_defaults();
    o.rank = 4;
    o.alpha = 8;
    o.targets = BN_LORA_ATTN | BN_LORA_HEAD;
    o.lr = 2e-2f;
    o.batch = batch;
    o.grad_accum = 2;
    o.epochs = 2;
    o.early_stop = 0;
    o.quiet = true;
    o.out_adapter = out;
    return o;
}

// train_ranks: trains with o on `world` processes (1: this one); returns 0 when the run succeeded.
static int train_ranks(const bn_model *m, const bn_train_rows *rows, bn_ftpo_train_opts o, int world) {
    char err[256];
    bn_ftpo_train_result res;
    if (world == 1) return bn_ftpo_train(m, rows, &o, &res, err, sizeof err) ? (printf("%s\n", err), 1) : 0;
    int status;
    int rc = bn_dp_spawn(world, &o.dp, &status, err, sizeof err);
    if (rc == 0) {
        int trc = bn_ftpo_train(m, rows, &o, &res, err, sizeof err);
        if (trc) printf("rank %d: %s\n", bn_dp_rank(o.dp), err);
        exit(trc ? 1 : 0);
    }
    return rc == 1 ? status : 1;
}

// same_adapter: whether two adapter files agree within this test's tolerances (printed under `what`).
static bool same_adapter(const char *pa, const char *pb, const char *what) {
    fx_param_diff d = fx_adapter_diff(pa, pb);
    printf("%s: relative L2 difference %.3g, largest %.3g\n", what, d.l2, d.max);
    return d.l2 < 3e-5 && d.max < 1e-3;
}

// test_train_equivalence: 2 ranks × batch 2 = 1 rank × batch 4; a 2-rank checkpoint resumes on 1 rank.
static void test_train_equivalence(void) {
    char path[512], one[512], two[512], resumed[512], ckpt[512];
    bn_model *m = fx_tiny_model(dir, BN_F32, path, sizeof path);
    if (!m) return;
    bn_train_rows *rows = fx_ftpo_rows(m);
    rows->rows[0].heldout = rows->rows[5].heldout = true; // 10 train rows: the last micro-batch has 2 of 4
    snprintf(one, sizeof one, "%s/one.gguf", dir);
    snprintf(two, sizeof two, "%s/two.gguf", dir);
    snprintf(resumed, sizeof resumed, "%s/resumed.gguf", dir);
    snprintf(ckpt, sizeof ckpt, "%s/two.ckpt", dir);
    CHECK(train_ranks(m, rows, train_opts(4, one), 1) == 0, "one rank, batch 4");
    CHECK(train_ranks(m, rows, train_opts(2, two), 2) == 0, "two ranks, batch 2");
    CHECK(same_adapter(one, two, "two ranks x batch 2 vs one rank x batch 4"), "two ranks x batch 2 equal one rank x "
          "batch 4");
    snprintf(path, sizeof path, "%s/half.gguf", dir);
    CHECK(train_ranks(m, rows, train_opts(2, path), 1) == 0, "one rank, batch 2");
    CHECK(!same_adapter(one, path, "one rank x batch 2 vs batch 4"), "the comparison sees a different run");
    bn_ftpo_train_opts first = train_opts(2, NULL);
    first.ckpt_path = ckpt;
    first.max_steps = 3;
    CHECK(train_ranks(m, rows, first, 2) == 0, "two ranks, 3 steps, checkpoint");
    bn_ftpo_train_opts rest = train_opts(4, resumed);
    rest.resume_path = ckpt;
    CHECK(train_ranks(m, rows, rest, 1) == 0, "resumed on one rank");
    CHECK(same_adapter(one, resumed, "two ranks for 3 steps, then one rank"), "a two-rank checkpoint resumes on one "
          "rank to the same adapter");
    bn_train_rows_free(rows);
    bn_model_free(m);
}

int main(void) {
    if (!mkdtemp(dir)) return test_skip("cannot create a temp dir");
    test_sum();
    test_count_mismatch();
    test_failing_rank();
    test_train_equivalence();
    if (getenv("BONSAI_TEST_KEEP")) return test_done("train_dp");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("could not remove %s\n", dir);
    return test_done("train_dp");
}
