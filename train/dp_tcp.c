// train/dp_tcp.c — the tcp transport of train/dp.h: ranks a launcher started (torchrun, mpirun, srun), joined
// through one socket from each rank to rank 0, which listens on MASTER_ADDR:MASTER_PORT.
// Every call begins with a header from each rank; rank 0 checks that all ask for the same thing and answers each.
// A sum then goes chunk by chunk: each rank sends its chunk, rank 0 adds the chunks in rank order into its own and
// sends the result back (the loopback transport's order, so the same bits). A broadcast streams rank 0's bytes.
// A rank that dies closes its socket, so the others fail at their next call instead of waiting; a rank that stops
// answering fails the others after the timeout. A connection that is not a rank (a port scanner, a stray client) is
// dropped: one that says nothing at once, or not the hello, does not hold up the others.
#include "train/dp.h"
#include "train/dp_transport.h"
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "base/util.h"

#define TCP_CHUNK ((size_t)4 << 20)
#define TCP_MAGIC 0x50444e42u // "BNDP"
#define TCP_WORLD_MAX 4096
// A rank says hello as soon as it connects: a connection silent this long (or a quarter of the timeout, if less) is
// not a rank, and rank 0 drops it and takes the next.
#define TCP_HELLO_MS 10000

enum { OP_HELLO = 1, OP_SUM, OP_BCAST, OP_OK, OP_REFUSED };

typedef struct {
    uint32_t magic, op;
    int32_t rank, world;
    uint64_t n, elem; // elements and their size (a sum), bytes (a broadcast)
} tcp_header;

typedef struct {
    int timeout_ms;
    int n_fd;   // entries of fd
    int *fd;    // rank 0: fd[r] is rank r's socket (r ≥ 1); other ranks: fd[0] is the socket to rank 0
    char *tmp;  // rank 0: one chunk received from a rank
} tcp_ctx;

// ---- sockets ----------------------------------------------------------------------------------------------------

// wait_fd: waits until fd is ready for events within timeout_ms; 0, or -1 (err) on a timeout.
static int wait_fd(int fd, short events, int timeout_ms, int peer, char *err, size_t errlen) {
    struct pollfd p = {.fd = fd, .events = events};
    int rc;
    while ((rc = poll(&p, 1, timeout_ms)) < 0 && errno == EINTR) {
    }
    if (rc == 0) return bn_err(err, errlen, "data-parallel: rank %d did not answer within %d s", peer, timeout_ms / 1000);
    return rc < 0 ? bn_err(err, errlen, "data-parallel: poll: %s", strerror(errno)) : 0;
}

// send_all: sends buf[0..n) to peer; 0 or -1 (err).
static int send_all(int fd, const void *buf, size_t n, int timeout_ms, int peer, char *err, size_t errlen) {
    for (const char *p = buf; n > 0;) {
        if (wait_fd(fd, POLLOUT, timeout_ms, peer, err, errlen)) return -1;
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return bn_err(err, errlen, "data-parallel: rank %d is gone (%s)", peer, strerror(errno));
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

// recv_all: receives buf[0..n) from peer; 0 or -1 (err: the peer closed, or said nothing within the timeout).
static int recv_all(int fd, void *buf, size_t n, int timeout_ms, int peer, char *err, size_t errlen) {
    for (char *p = buf; n > 0;) {
        if (wait_fd(fd, POLLIN, timeout_ms, peer, err, errlen)) return -1;
        ssize_t k = recv(fd, p, n, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k == 0) return bn_err(err, errlen, "data-parallel: rank %d closed its connection (it failed or stopped)", peer);
        if (k < 0) return bn_err(err, errlen, "data-parallel: rank %d: %s", peer, strerror(errno));
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

// no_delay: small headers go out at once.
static void no_delay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// lookup_addr: the addresses of host:port (freeaddrinfo them); NULL (err) when the name does not resolve.
static struct addrinfo *lookup_addr(const char *host, const char *port, bool passive, char *err, size_t errlen) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = passive ? AI_PASSIVE : 0};
    struct addrinfo *ai = NULL;
    int rc = getaddrinfo(host, port, &hints, &ai);
    if (rc != 0) bn_err(err, errlen, "data-parallel: MASTER_ADDR %s, MASTER_PORT %s: %s", host, port, gai_strerror(rc));
    return rc == 0 ? ai : NULL;
}

// listen_on: a listening socket on host:port; the fd or -1 (err).
static int listen_on(const char *host, const char *port, int backlog, char *err, size_t errlen) {
    struct addrinfo *ai = lookup_addr(host, port, true, err, errlen);
    if (!ai) return -1;
    int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol), one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, backlog) != 0) {
        bn_err(err, errlen, "data-parallel: rank 0 cannot listen on %s:%s (MASTER_ADDR:MASTER_PORT): %s", host, port,
               strerror(errno));
        if (fd >= 0) close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

// connect_to: a socket connected to host:port, retried until timeout_ms (rank 0 may start later); fd or -1 (err).
static int connect_to(const char *host, const char *port, int timeout_ms, char *err, size_t errlen) {
    const int64_t end = (int64_t)bn_time_ms() + timeout_ms;
    int last = 0;
    do {
        struct addrinfo *ai = lookup_addr(host, port, false, err, errlen);
        if (!ai) return -1;
        int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        int ok = fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0;
        last = errno;
        freeaddrinfo(ai);
        if (ok) return fd;
        if (fd >= 0) close(fd);
        usleep(100 * 1000);
    } while ((int64_t)bn_time_ms() < end);
    return bn_err(err, errlen, "data-parallel: cannot reach rank 0 at %s:%s within %d s (%s); MASTER_ADDR and "
                  "MASTER_PORT must name rank 0's machine and a free port", host, port, timeout_ms / 1000,
                  strerror(last));
}

// ---- calls ------------------------------------------------------------------------------------------------------

static tcp_ctx *ctx_of(const bn_dp *dp) { return dp->ctx; }

// call_name: what header h asks for, in buf.
static const char *call_name(const tcp_header *h, char *buf, size_t len) {
    return bn_dp_call_name(h->op == OP_BCAST, h->n, buf, len);
}

// begin_call: every rank agrees on the call h (a sum or a broadcast of h->n); 0 or -1 (err) when they differ.
static int begin_call(bn_dp *dp, tcp_header h, char *err, size_t errlen) {
    tcp_ctx *c = ctx_of(dp);
    h.magic = TCP_MAGIC;
    h.rank = dp->rank;
    h.world = dp->world;
    tcp_header got;
    if (dp->rank != 0) {
        if (send_all(c->fd[0], &h, sizeof h, c->timeout_ms, 0, err, errlen) ||
            recv_all(c->fd[0], &got, sizeof got, c->timeout_ms, 0, err, errlen))
            return -1;
        if (got.op == OP_OK) return 0;
        char a[64];
        return bn_err(err, errlen, "data-parallel: rank %d asked for %s, rank 0 for something else", dp->rank,
                      call_name(&h, a, sizeof a));
    }
    int bad = 0;
    char a[64], b[64];
    for (int r = 1; r < dp->world; r++) {
        if (recv_all(c->fd[r], &got, sizeof got, c->timeout_ms, r, err, errlen)) return -1;
        if (!bad && (got.magic != TCP_MAGIC || got.op != h.op || got.n != h.n || got.elem != h.elem)) {
            bad = r;
            bn_err(err, errlen, "data-parallel: rank %d asked for %s, rank 0 for %s", r, call_name(&got, a, sizeof a),
                   call_name(&h, b, sizeof b));
        }
    }
    tcp_header answer = {.magic = TCP_MAGIC, .op = bad ? OP_REFUSED : OP_OK};
    for (int r = 1; r < dp->world; r++)
        if (send_all(c->fd[r], &answer, sizeof answer, c->timeout_ms, r, err, errlen)) return -1;
    return bad ? -1 : 0;
}

// sum_chunk_root: rank 0's part of one chunk: adds every rank's chunk into mine in rank order, sends the result.
static int sum_chunk_root(bn_dp *dp, char *mine, size_t k, size_t elem_size, char *err, size_t errlen) {
    tcp_ctx *c = ctx_of(dp);
    for (int r = 1; r < dp->world; r++) {
        if (recv_all(c->fd[r], c->tmp, k * elem_size, c->timeout_ms, r, err, errlen)) return -1;
        bn_dp_add(mine, c->tmp, k, elem_size);
    }
    for (int r = 1; r < dp->world; r++)
        if (send_all(c->fd[r], mine, k * elem_size, c->timeout_ms, r, err, errlen)) return -1;
    return 0;
}

// tcp_sum: the all-reduce of n elements of elem_size bytes in buf; 0 or -1 (err).
static int tcp_sum(bn_dp *dp, void *buf, int64_t n, size_t elem_size, char *err, size_t errlen) {
    tcp_ctx *c = ctx_of(dp);
    if (begin_call(dp, (tcp_header){.op = OP_SUM, .n = (uint64_t)n, .elem = elem_size}, err, errlen)) return -1;
    const size_t per = TCP_CHUNK / elem_size;
    for (int64_t off = 0; off < n; off += (int64_t)per) {
        size_t k = (size_t)(n - off) < per ? (size_t)(n - off) : per;
        char *mine = (char *)buf + (size_t)off * elem_size;
        int rc = dp->rank == 0 ? sum_chunk_root(dp, mine, k, elem_size, err, errlen)
                               : send_all(c->fd[0], mine, k * elem_size, c->timeout_ms, 0, err, errlen) ||
                                     recv_all(c->fd[0], mine, k * elem_size, c->timeout_ms, 0, err, errlen);
        if (rc) return -1;
    }
    return 0;
}

// tcp_bcast: rank 0's buf[0..bytes) to every rank; 0 or -1 (err).
static int tcp_bcast(bn_dp *dp, void *buf, size_t bytes, char *err, size_t errlen) {
    tcp_ctx *c = ctx_of(dp);
    if (begin_call(dp, (tcp_header){.op = OP_BCAST, .n = bytes}, err, errlen)) return -1;
    if (dp->rank != 0) return recv_all(c->fd[0], buf, bytes, c->timeout_ms, 0, err, errlen);
    for (int r = 1; r < dp->world; r++)
        if (send_all(c->fd[r], buf, bytes, c->timeout_ms, r, err, errlen)) return -1;
    return 0;
}

// tcp_free: closes the sockets and frees the context (the sockets' array is in the same allocation).
static void tcp_free(void *ctx) {
    tcp_ctx *c = ctx;
    if (!c) return;
    for (int i = 0; i < c->n_fd; i++)
        if (c->fd[i] >= 0) close(c->fd[i]);
    free(c->tmp);
    free(c);
}

static const bn_dp_ops tcp_ops = {"tcp", tcp_sum, tcp_bcast, tcp_free};

// ---- joining ----------------------------------------------------------------------------------------------------

// tcp_ctx_new: a context with room for n sockets (all -1).
static tcp_ctx *tcp_ctx_new(int n, int timeout_ms) {
    tcp_ctx *c = xcalloc(1, sizeof *c + (size_t)n * sizeof(int));
    c->fd = (int *)(c + 1);
    c->n_fd = n;
    for (int i = 0; i < n; i++) c->fd[i] = -1;
    c->timeout_ms = timeout_ms;
    return c;
}

// accept_hello: rank 0 takes one connection and its hello (a rank of this world not seen yet); 0 or -1 (err).
static int accept_hello(int lfd, tcp_ctx *c, int world, int64_t end, char *err, size_t errlen) {
    int left = (int)(end - (int64_t)bn_time_ms());
    if (left <= 0 || wait_fd(lfd, POLLIN, left, -1, err, errlen))
        return bn_err(err, errlen, "data-parallel: rank 0 waited %d s for the other ranks on MASTER_PORT",
                      c->timeout_ms / 1000);
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0) return errno == EINTR ? 0 : bn_err(err, errlen, "data-parallel: accept: %s", strerror(errno));
    tcp_header h;
    const int hello_ms = c->timeout_ms / 4 < TCP_HELLO_MS ? c->timeout_ms / 4 : TCP_HELLO_MS;
    if (recv_all(fd, &h, sizeof h, hello_ms > 0 ? hello_ms : 1, -1, err, errlen)) { // not a rank: ignored
        close(fd);
        return 0;
    }
    if (h.magic != TCP_MAGIC || h.op != OP_HELLO) { close(fd); return 0; }
    if (h.world != world || h.rank < 1 || h.rank >= world || c->fd[h.rank] >= 0) {
        close(fd);
        return bn_err(err, errlen, "data-parallel: a rank says it is rank %d of %d; rank 0 is of %d%s", h.rank, h.world,
                      world, h.rank >= 1 && h.rank < world && c->fd[h.rank] >= 0 ? " and has that rank already" : "");
    }
    no_delay(fd);
    c->fd[h.rank] = fd;
    return 0;
}

// join_root: rank 0 listens until every other rank has said hello, then answers all; the context or NULL (err).
static tcp_ctx *join_root(const char *host, const char *port, int world, int timeout_ms, char *err, size_t errlen) {
    int lfd = listen_on(host, port, world, err, errlen);
    if (lfd < 0) return NULL;
    tcp_ctx *c = tcp_ctx_new(world, timeout_ms);
    const int64_t end = (int64_t)bn_time_ms() + timeout_ms;
    int joined = 0, rc = 0;
    while (rc == 0 && joined < world - 1) {
        rc = accept_hello(lfd, c, world, end, err, errlen);
        joined = 0;
        for (int r = 1; r < world; r++) joined += c->fd[r] >= 0;
    }
    close(lfd);
    tcp_header ok = {.magic = TCP_MAGIC, .op = OP_OK, .world = world};
    for (int r = 1; rc == 0 && r < world; r++) rc = send_all(c->fd[r], &ok, sizeof ok, timeout_ms, r, err, errlen);
    if (rc) { tcp_free(c); return NULL; }
    c->tmp = xmalloc(TCP_CHUNK);
    return c;
}

// join_rank: a rank other than 0 connects, says hello and waits for rank 0's answer; the context or NULL (err).
static tcp_ctx *join_rank(const char *host, const char *port, int rank, int world, int timeout_ms, char *err,
                          size_t errlen) {
    int fd = connect_to(host, port, timeout_ms, err, errlen);
    if (fd < 0) return NULL;
    no_delay(fd);
    tcp_ctx *c = tcp_ctx_new(1, timeout_ms);
    c->fd[0] = fd;
    tcp_header hello = {.magic = TCP_MAGIC, .op = OP_HELLO, .rank = rank, .world = world}, ok = {0};
    if (send_all(fd, &hello, sizeof hello, timeout_ms, 0, err, errlen) ||
        recv_all(fd, &ok, sizeof ok, timeout_ms, 0, err, errlen) || ok.magic != TCP_MAGIC || ok.op != OP_OK) {
        if (ok.magic == TCP_MAGIC && ok.op != OP_OK) bn_err(err, errlen, "data-parallel: rank 0 refused rank %d", rank);
        tcp_free(c);
        return NULL;
    }
    return c;
}

// ---- the launcher's environment ---------------------------------------------------------------------------------

// env_int: the first of names[0..n) set in the environment as an integer in [lo, hi] into *v; 1 when found, 0 when
// none is set, -1 (err) when the first set one is not such an integer.
static int env_int(const char *const *names, int n, int lo, int hi, int *v, char *err, size_t errlen) {
    for (int i = 0; i < n; i++) {
        const char *s = getenv(names[i]);
        if (!s || !*s) continue;
        char *end;
        errno = 0;
        long x = strtol(s, &end, 10);
        if (errno || *end || x < lo || x > hi)
            return bn_err(err, errlen, "data-parallel: %s=%s is not an integer from %d to %d", names[i], s, lo, hi);
        *v = (int)x;
        return 1;
    }
    return 0;
}

// Launchers' variables, in the order they are looked for: torchrun, Open MPI's mpirun, Slurm's srun.
static const char *const RANK_VARS[] = {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"};
static const char *const WORLD_VARS[] = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"};
static const char *const LOCAL_RANK_VARS[] = {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"};
static const char *const LOCAL_WORLD_VARS[] = {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"}; // else the world

// env_ranks: rank, world, local rank and local world from the launcher's variables; 1 when launched as one of
// several ranks, 0 when not, -1 (err).
static int env_ranks(int *rank, int *world, int *local_rank, int *local_world, char *err, size_t errlen) {
    *world = 1;
    int w = env_int(WORLD_VARS, 3, 1, TCP_WORLD_MAX, world, err, errlen);
    if (w <= 0 || *world == 1) return w < 0 ? -1 : 0;
    int r = env_int(RANK_VARS, 3, 0, *world - 1, rank, err, errlen);
    if (r <= 0) return r < 0 ? -1 : bn_err(err, errlen, "data-parallel: WORLD_SIZE=%d but no RANK", *world);
    *local_rank = *rank;
    *local_world = *world;
    if (env_int(LOCAL_RANK_VARS, 3, 0, *world - 1, local_rank, err, errlen) < 0 ||
        env_int(LOCAL_WORLD_VARS, 2, 1, *world, local_world, err, errlen) < 0)
        return -1;
    return 1;
}

int bn_dp_join_env(bn_dp **dp, int timeout_s, char *err, size_t errlen) {
    *dp = NULL;
    int rank = 0, world = 1, local_rank = 0, local_world = 1;
    int rc = env_ranks(&rank, &world, &local_rank, &local_world, err, errlen);
    if (rc <= 0) return rc;
    if (timeout_s < 1) return bn_err(err, errlen, "data-parallel: a timeout of %d s", timeout_s);
    const char *host = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
    if (!host || !*host) host = "127.0.0.1";
    if (!port || !*port) port = "29500";
    const int timeout_ms = timeout_s > INT32_MAX / 1000 ? INT32_MAX : timeout_s * 1000;
    tcp_ctx *c = rank == 0 ? join_root(host, port, world, timeout_ms, err, errlen)
                           : join_rank(host, port, rank, world, timeout_ms, err, errlen);
    if (!c) return -1;
    *dp = bn_dp_new(rank, world, local_rank, local_world, &tcp_ops, c);
    return 1;
}
