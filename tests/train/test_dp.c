// tests/train/test_dp.c — data-parallel training (train/dp.h): the loopback all-reduce gives every rank the rank-order
// sum to the bit, mismatched counts and a failing rank end the run instead of hanging it, and FTPO training on two
// ranks × batch 2 equals one rank × batch 4, a checkpoint of the two-rank run resumes on one rank to the same adapter.
// Ranks a launcher starts (torchrun's variables; the tcp transport) sum and broadcast to the loopback's bits, fail
// together on mismatched calls or a vanished rank, and train the loopback ranks' adapter to the bit; bad variables
// are named; a silent connection to rank 0 does not hold up the join. A registered device transport (a stand-in for
// NCCL) carries every sum once the ranks take it.
// Only the summation order of the gradients differs, and AdamW divides by √v: a component whose gradient nearly
// cancels carries the rounding into its update at full size. So the adapters agree within 3e-5 in relative L2 norm
// (measured 5.4e-6; a batch of 2 instead of 4 is 0.45 away), and no parameter differs by more than 1e-3 of the
// largest (measured: 3 of 6 656 over 2e-5, the most 1.5e-4).
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include "tests/test.h"
#include "tests/train/fixture.h"
#include "train/dp.h"
#include "train/trainer.h"
#include "train/lora.h"
#include "quant/quant.h"

static char dir[] = "/tmp/bonsai_test_dp_XXXXXX";

// value: rank r's element i of the sum test (distinct magnitudes, so the summation order shows in the bits).
static float value(int r, int64_t i) { return (float)((i % 977) * 1e-3 + 1.0 / (r + 3) + (i & 1 ? 1e4 * r : 0)); }

// rank_sum_check: the body of one rank of the sum test: n floats, 3 doubles and a broadcast of rank 0's 13 bytes;
// returns its exit status.
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
    char word[13] = "not rank 0's";
    if (bn_dp_rank(dp) == 0) memcpy(word, "from rank 0!", sizeof word);
    bad |= bn_dp_bcast(dp, word, sizeof word, err, sizeof err) != 0 || memcmp(word, "from rank 0!", sizeof word) != 0;
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

// ---- the tcp transport: ranks a launcher started -------------------------------------------------------------

// free_port: a TCP port nobody listens on now (the kernel's pick), as text in buf.
static const char *free_port(char *buf, size_t len) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(fd, (struct sockaddr *)&a, &al) != 0)
        snprintf(buf, len, "29517");
    else
        snprintf(buf, len, "%d", ntohs(a.sin_port));
    if (fd >= 0) close(fd);
    return buf;
}

// launch_env: the variables torchrun gives rank `rank` of `world` on this machine.
static void launch_env(int rank, int world, const char *port) {
    char r[16], w[16];
    snprintf(r, sizeof r, "%d", rank);
    snprintf(w, sizeof w, "%d", world);
    setenv("RANK", r, 1);
    setenv("LOCAL_RANK", r, 1);
    setenv("WORLD_SIZE", w, 1);
    setenv("LOCAL_WORLD_SIZE", w, 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", port, 1);
}

// clear_env: no launcher's variables (this process is one rank of one).
static void clear_env(void) {
    const char *v[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) unsetenv(v[i]);
}

typedef int (*rank_body)(bn_dp *dp, void *arg);

// stranger: connects to rank 0's port as soon as it listens and says nothing for hold_s seconds (a port scanner, a
// stray client); exits.
static void stranger(const char *port, int hold_s) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port)),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    for (int i = 0; i < 500; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
            sleep((unsigned)hold_s);
            exit(0);
        }
        if (fd >= 0) close(fd);
        usleep(10000);
    }
    exit(1);
}

// tcp_world: forks `world` processes that join as a launcher's ranks within timeout_s and run body (each exits with
// its status); with_stranger: a silent connection reaches rank 0 first (the other ranks start 0.5 s later). Returns
// the first nonzero status (a rank that cannot join: 90; killed after 120 s: 137).
static int tcp_world(int world, rank_body body, void *arg, int timeout_s, bool with_stranger) {
    char port[16];
    free_port(port, sizeof port);
    pid_t pid[8], spid = -1;
    fflush(NULL);
    if (with_stranger && (spid = fork()) == 0) stranger(port, 2 * timeout_s);
    for (int r = 0; r < world; r++)
        if ((pid[r] = fork()) == 0) {
            char err[256];
            bn_dp *dp;
            alarm(120);
            if (with_stranger && r > 0) usleep(500000);
            launch_env(r, world, port);
            if (bn_dp_join_env(&dp, timeout_s, err, sizeof err) != 1) {
                printf("rank %d: %s\n", r, err);
                exit(90);
            }
            int rc = body(dp, arg);
            bn_dp_free(dp);
            exit(rc);
        }
    int first = 0;
    for (int r = 0; r < world; r++) {
        int ws;
        waitpid(pid[r], &ws, 0);
        int code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
        if (code && !first) first = code;
    }
    if (spid > 0) {
        kill(spid, SIGKILL);
        waitpid(spid, NULL, 0);
    }
    return first;
}

// tcp_ranks: tcp_world with a 20 s timeout and no stranger.
static int tcp_ranks(int world, rank_body body, void *arg) { return tcp_world(world, body, arg, 20, false); }

static int sum_body(bn_dp *dp, void *arg) {
    (void)arg;
    int bad = strcmp(bn_dp_transport(dp), "tcp") != 0 || bn_dp_local_rank(dp) != bn_dp_rank(dp);
    return bad ? 20 : rank_sum_check(dp, 2500000);
}

// test_tcp_sum: three launched ranks sum 2.5 M floats (three chunks) to the loopback transport's bits.
static void test_tcp_sum(void) {
    int rc = tcp_ranks(3, sum_body, NULL);
    CHECK(rc == 0, "three launched ranks: the rank-order sum to the bit and the broadcast (status %d: 10 + rank a "
          "wrong sum, 20 wrong ranks, 90 no join)", rc);
}

static int mismatch_body(bn_dp *dp, void *arg) {
    char err[256];
    float buf[8] = {0};
    int rc = arg ? (bn_dp_rank(dp) == 0 ? bn_dp_bcast(dp, buf, 4, err, sizeof err)
                                        : bn_dp_sum_f32(dp, buf, 1, err, sizeof err))
                 : bn_dp_sum_f32(dp, buf, 4 + bn_dp_rank(dp), err, sizeof err);
    printf("rank %d: %s\n", bn_dp_rank(dp), rc ? err : "no error");
    return rc == -1 && strstr(err, "asked for") ? 0 : 1;
}

static int dying_body(bn_dp *dp, void *arg) {
    (void)arg;
    char err[256];
    if (bn_dp_rank(dp) == 1) exit(0); // gone without a word
    float x = 1;
    int rc = bn_dp_sum_f32(dp, &x, 1, err, sizeof err);
    printf("rank %d: %s\n", bn_dp_rank(dp), rc ? err : "no error");
    return rc == -1 && strstr(err, "rank 1") ? 0 : 1;
}

// test_tcp_stranger: a connection that never says hello, there before the ranks, is dropped after a quarter of the
// 8 s timeout and the ranks join and sum (rank 0 waiting the whole timeout on it would fail the join).
static void test_tcp_stranger(void) {
    const double t0 = bn_time_ms();
    const int rc = tcp_world(2, sum_body, NULL, 8, true);
    const double s = (bn_time_ms() - t0) / 1000;
    printf("a silent connection before the ranks: joined and summed in %.1f s (status %d)\n", s, rc);
    CHECK(rc == 0 && s < 8, "a silent connection holds up the join: status %d after %.1f s", rc, s);
}

// test_tcp_failures: calls that differ fail on every rank; a rank that dies fails the others' next call at once.
static void test_tcp_failures(void) {
    CHECK(tcp_ranks(2, mismatch_body, NULL) == 0, "sums of different lengths: an error on every rank");
    CHECK(tcp_ranks(3, mismatch_body, "bcast") == 0, "a broadcast against sums: an error on every rank");
    CHECK(tcp_ranks(2, dying_body, NULL) == 0, "a rank that is gone: the other's sum fails naming it");
}

// test_env: what the launcher's variables say, and bad values named.
static void test_env(void) {
    char err[256] = "";
    bn_dp *dp = NULL;
    clear_env();
    CHECK(bn_dp_join_env(&dp, 5, err, sizeof err) == 0 && !dp, "no launcher: one process");
    setenv("WORLD_SIZE", "1", 1);
    CHECK(bn_dp_join_env(&dp, 5, err, sizeof err) == 0 && !dp, "a world of one: one process");
    setenv("WORLD_SIZE", "2", 1);
    setenv("RANK", "x", 1);
    CHECK(bn_dp_join_env(&dp, 5, err, sizeof err) == -1 && strstr(err, "RANK=x"), "a bad RANK is named: %s", err);
    setenv("RANK", "2", 1);
    CHECK(bn_dp_join_env(&dp, 5, err, sizeof err) == -1 && strstr(err, "RANK=2"), "RANK beyond the world: %s", err);
    unsetenv("RANK");
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    setenv("MASTER_PORT", "1", 1); // nobody listens on port 1: rank 1 gives up after the timeout
    CHECK(bn_dp_join_env(&dp, 1, err, sizeof err) == -1 && strstr(err, "cannot reach rank 0 at 127.0.0.1:1"),
          "mpirun's rank variable is read; an unreachable rank 0 fails after the timeout: %s", err);
    unsetenv("OMPI_COMM_WORLD_RANK");
    clear_env();
}

typedef struct {
    const bn_model *m;
    const bn_train_rows *rows;
    bn_ftpo_train_opts o;
} train_job;

static int train_body(bn_dp *dp, void *arg) {
    train_job *j = arg;
    bn_ftpo_train_opts o = j->o;
    o.dp = dp;
    char err[256];
    bn_ftpo_train_result res;
    int rc = bn_ftpo_train(j->m, j->rows, &o, &res, err, sizeof err);
    if (rc) printf("rank %d: %s\n", bn_dp_rank(dp), err);
    return rc ? 1 : 0;
}

// ---- a device transport: a stand-in registered as NCCL is -------------------------------------------------------

typedef struct {
    bn_dp *dp;
    int device;
} standin_dp;
static int g_standin_sums;   // this process's sums through the stand-in
static char g_standin_id[8]; // what rank 0 broadcast when the transport opened

static void *standin_open(bn_dp *dp, int device, char *err, size_t errlen) {
    standin_dp *c = calloc(1, sizeof *c);
    *c = (standin_dp){.dp = dp, .device = device};
    if (bn_dp_rank(dp) == 0) memcpy(g_standin_id, "id-1234", 8);
    if (bn_dp_bcast(dp, g_standin_id, sizeof g_standin_id, err, errlen)) { free(c); return NULL; }
    return c;
}
static int standin_sum(void *ctx, void *buf, int64_t n, size_t elem_size, char *err, size_t errlen) {
    g_standin_sums++;
    return bn_dp_sum_host(((standin_dp *)ctx)->dp, buf, n, elem_size, err, errlen);
}
static void standin_close(void *ctx) { free(ctx); }
static const bn_dp_device standin_device = {"stand-in", standin_open, standin_sum, standin_close};

// test_device_transport: once registered and taken, the device transport carries every sum (the rank-order values)
// and its set-up broadcast; a program without one keeps the host transport.
static void test_device_transport(void) {
    char err[256];
    bn_dp *dp;
    int status;
    int rc = bn_dp_spawn(3, &dp, &status, err, sizeof err);
    if (rc == 0) {
        int none = bn_dp_use_device(dp, 0, err, sizeof err); // nothing registered yet
        bn_dp_device_register(&standin_device);
        int took = bn_dp_use_device(dp, bn_dp_local_rank(dp), err, sizeof err);
        int bad = none != 0 || took != 1 || strcmp(bn_dp_transport(dp), "stand-in") != 0 ||
                  strcmp(g_standin_id, "id-1234") != 0;
        bad = bad ? 1 : rank_sum_check(dp, 300000);
        exit(bad ? bad : g_standin_sums == 2 ? 0 : 30);
    }
    CHECK(rc == 1 && status == 0, "a device transport carries the sums (status %d: 1 not taken or no id, 10 + rank "
          "a wrong sum, 30 sums not through it)", status);
}

// train_opts: a short FTPO run of the tiny model (lm_head and attention adapters, 3 steps an epoch with 10 rows).
static bn_ftpo_train_opts train_opts(int batch, const char *out) {
    bn_ftpo_train_opts o = fx_ftpo_opts(BN_LORA_ATTN | BN_LORA_HEAD, 8, 2e-2f, batch, 2, 2);
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
    snprintf(path, sizeof path, "%s/tcp.gguf", dir);
    train_job job = {m, rows, train_opts(2, path)};
    CHECK(tcp_ranks(2, train_body, &job) == 0, "two launched ranks (tcp), batch 2");
    fx_param_diff d = fx_adapter_diff(two, path);
    CHECK(d.l2 == 0 && d.max == 0, "launched ranks train the loopback ranks' adapter to the bit (relative L2 %.3g)",
          d.l2);
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
    test_env();
    test_tcp_sum();
    test_tcp_failures();
    test_tcp_stranger();
    test_device_transport();
    test_train_equivalence();
    if (getenv("BONSAI_TEST_KEEP")) return test_done("train_dp");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("could not remove %s\n", dir);
    return test_done("train_dp");
}
