// train/dp_loopback.c — the loopback transport of train/dp.h: rank processes forked on one machine (bn_dp_spawn),
// joined through a shared memory mapping: a header (a process-shared barrier, each rank's element count) and one
// slot of DP_SLOT_BYTES per rank. A sum goes chunk by chunk: every rank copies its chunk into its slot, waits at the
// barrier, adds the slots in rank order into its buffer and waits again (so no slot is overwritten while another
// rank still reads it).
#include "train/dp.h"
#include "train/dp_transport.h"
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "base/util.h"

#define DP_SLOT_BYTES ((size_t)1 << 20)
#define DP_WORLD_MAX 256

typedef struct {
    pthread_barrier_t barrier;
    int64_t n_of[DP_WORLD_MAX]; // each rank's element count of the sum in progress (all must agree)
} dp_header;

typedef struct {
    dp_header *hdr; // the start of the shared mapping
    size_t map_bytes;
} loopback;

static dp_header *header(const bn_dp *dp) { return ((loopback *)dp->ctx)->hdr; }

// slot: rank r's slot in the mapping.
static char *slot(const bn_dp *dp, int r) { return (char *)(header(dp) + 1) + (size_t)r * DP_SLOT_BYTES; }

// dp_wait: waits for every rank at the barrier; 0 or -1 (err).
static int dp_wait(bn_dp *dp, char *err, size_t errlen) {
    int rc = pthread_barrier_wait(&header(dp)->barrier);
    if (rc != 0 && rc != PTHREAD_BARRIER_SERIAL_THREAD)
        return bn_err(err, errlen, "data-parallel barrier: %s", strerror(rc));
    return 0;
}

// call_name: the call a published count stands for (n >= 0: a sum of n elements; n = -bytes - 1: a broadcast).
static const char *call_name(int64_t n, char *buf, size_t len) {
    return n >= 0 ? bn_dp_call_name(false, (uint64_t)n, buf, len) : bn_dp_call_name(true, (uint64_t)(-n - 1), buf, len);
}

// dp_counts_agree: whether every rank asked for n (elements of a sum, bytes of a broadcast; each rank's count is
// published first); 0 or -1.
static int dp_counts_agree(bn_dp *dp, int64_t n, char *err, size_t errlen) {
    dp_header *h = header(dp);
    h->n_of[dp->rank] = n;
    if (dp_wait(dp, err, errlen)) return -1;
    for (int r = 0; r < dp->world; r++)
        if (h->n_of[r] != n) {
            char a[64], b[64];
            return bn_err(err, errlen, "data-parallel: rank %d asked for %s, rank %d for %s", r,
                          call_name(h->n_of[r], a, sizeof a), dp->rank, call_name(n, b, sizeof b));
        }
    return dp_wait(dp, err, errlen); // nobody publishes the next count before all have checked this one
}

// loopback_sum: the all-reduce of n elements of elem_size bytes in buf; 0 or -1 (err).
static int loopback_sum(bn_dp *dp, void *buf, int64_t n, size_t elem_size, char *err, size_t errlen) {
    if (dp_counts_agree(dp, n, err, errlen)) return -1;
    const size_t per = DP_SLOT_BYTES / elem_size;
    for (int64_t off = 0; off < n; off += (int64_t)per) {
        size_t k = (size_t)(n - off) < per ? (size_t)(n - off) : per;
        char *mine = (char *)buf + (size_t)off * elem_size;
        memcpy(slot(dp, dp->rank), mine, k * elem_size);
        if (dp_wait(dp, err, errlen)) return -1;
        memcpy(mine, slot(dp, 0), k * elem_size);
        for (int r = 1; r < dp->world; r++) bn_dp_add(mine, slot(dp, r), k, elem_size);
        if (dp_wait(dp, err, errlen)) return -1;
    }
    return 0;
}

// loopback_bcast: rank 0's buf[0..bytes) to every rank through its slot; 0 or -1 (err).
static int loopback_bcast(bn_dp *dp, void *buf, size_t bytes, char *err, size_t errlen) {
    if (dp_counts_agree(dp, -(int64_t)bytes - 1, err, errlen)) return -1; // negative: a broadcast, not a sum
    for (size_t off = 0; off < bytes; off += DP_SLOT_BYTES) {
        size_t k = bytes - off < DP_SLOT_BYTES ? bytes - off : DP_SLOT_BYTES;
        if (dp->rank == 0) memcpy(slot(dp, 0), (char *)buf + off, k);
        if (dp_wait(dp, err, errlen)) return -1;
        if (dp->rank != 0) memcpy((char *)buf + off, slot(dp, 0), k);
        if (dp_wait(dp, err, errlen)) return -1;
    }
    return 0;
}

static void loopback_free(void *ctx) {
    loopback *lb = ctx;
    munmap(lb->hdr, lb->map_bytes);
    free(lb);
}

static const bn_dp_ops loopback_ops = {"loopback", loopback_sum, loopback_bcast, loopback_free};

// ---- the supervisor ---------------------------------------------------------------------------------------------

static pid_t g_ranks[DP_WORLD_MAX]; // the supervisor's rank processes (0 = reaped or not started)
static int g_n_ranks;

// forward_term: the supervisor passes SIGTERM on to its ranks (each finishes its step and checkpoints).
static void forward_term(int sig) {
    for (int r = 0; r < g_n_ranks; r++)
        if (g_ranks[r] > 0) kill(g_ranks[r], sig);
}

// kill_ranks: SIGKILL to every rank not yet reaped.
static void kill_ranks(void) {
    for (int r = 0; r < g_n_ranks; r++)
        if (g_ranks[r] > 0) kill(g_ranks[r], SIGKILL);
}

// exit_code: a rank's wait status as an exit code (128 + signal when killed).
static int exit_code(int ws) { return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0); }

// supervise: reaps the ranks; at the first failure kills the rest. Returns the first failing exit code (0 = none).
static int supervise(void) {
    int first_fail = 0, left = g_n_ranks;
    while (left > 0) {
        int ws;
        pid_t pid = waitpid(-1, &ws, 0);
        if (pid < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (int r = 0; r < g_n_ranks; r++)
            if (g_ranks[r] == pid) { g_ranks[r] = 0; left--; }
        if (exit_code(ws) != 0 && first_fail == 0) {
            first_fail = exit_code(ws);
            kill_ranks();
        }
    }
    return first_fail;
}

// map_transport: the shared mapping for world ranks with its barrier; NULL (err) on failure.
static dp_header *map_transport(int world, size_t *bytes, char *err, size_t errlen) {
    *bytes = sizeof(dp_header) + (size_t)world * DP_SLOT_BYTES;
    void *map = mmap(NULL, *bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        bn_err(err, errlen, "data-parallel: cannot map %zu bytes: %s", *bytes, strerror(errno));
        return NULL;
    }
    dp_header *h = map;
    pthread_barrierattr_t at;
    pthread_barrierattr_init(&at);
    pthread_barrierattr_setpshared(&at, PTHREAD_PROCESS_SHARED);
    int rc = pthread_barrier_init(&h->barrier, &at, (unsigned)world);
    pthread_barrierattr_destroy(&at);
    if (rc != 0) {
        munmap(map, *bytes);
        bn_err(err, errlen, "data-parallel barrier: %s", strerror(rc));
        return NULL;
    }
    return h;
}

// become_rank: the child's side of bn_dp_spawn: dies with the supervisor, keeps the default SIGINT/SIGTERM.
static bn_dp *become_rank(dp_header *h, size_t bytes, int rank, int world, pid_t supervisor) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != supervisor) _exit(128 + SIGKILL); // the supervisor died before the line above
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    loopback *lb = xcalloc(1, sizeof *lb);
    *lb = (loopback){.hdr = h, .map_bytes = bytes};
    return bn_dp_new(rank, world, rank, world, &loopback_ops, lb);
}

int bn_dp_spawn(int world, bn_dp **dp, int *status, char *err, size_t errlen) {
    *dp = NULL;
    *status = 0;
    if (world < 2 || world > DP_WORLD_MAX)
        return bn_err(err, errlen, "data-parallel ranks: %d (expected 2 to %d)", world, DP_WORLD_MAX);
    size_t bytes;
    dp_header *h = map_transport(world, &bytes, err, errlen);
    if (!h) return -1;
    pid_t supervisor = getpid();
    fflush(NULL); // no buffered output printed twice
    for (g_n_ranks = 0; g_n_ranks < world; g_n_ranks++) {
        pid_t pid = fork();
        if (pid == 0) {
            *dp = become_rank(h, bytes, g_n_ranks, world, supervisor);
            return 0;
        }
        if (pid < 0) {
            int e = errno;
            kill_ranks();
            supervise();
            return bn_err(err, errlen, "data-parallel: cannot start rank %d: %s", g_n_ranks, strerror(e));
        }
        g_ranks[g_n_ranks] = pid;
    }
    struct sigaction fwd = {.sa_handler = forward_term}, ign = {.sa_handler = SIG_IGN};
    sigaction(SIGTERM, &fwd, NULL);
    sigaction(SIGINT, &ign, NULL); // the terminal's Ctrl-C reaches the ranks through the process group
    *status = supervise();
    return 1;
}
