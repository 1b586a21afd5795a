// serve/http.c — see http.h.
#include "serve/http.h"
#include "serve/reply.h"
#include "base/util.h"
#include <microhttpd.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>

// Request bodies buffered by all connections together stay under max(BODY_TOTAL_MIN, BODY_TOTAL_BODIES x max_body);
// past it a request gets 503 (when its Content-Length says so) or its connection is closed.
#define BODY_TOTAL_MIN (64u << 20)
#define BODY_TOTAL_BODIES 16
// Open files kept for the model, logs and the slots beyond the connections.
#define FD_RESERVE 64
// libmicrohttpd's messages (a refused connection each, under a flood) are cut to this many a second.
#define LOG_PER_SECOND 5
// Free memory goes back to the system after this many closed connections (their buffers), or one heavy request.
#define TRIM_AFTER 32

struct bn_http {
    bn_http_params p;
    struct MHD_Daemon *d;
    int port;
    unsigned conn_max;
    size_t body_total;        // the bound on buffered body bytes
    atomic_size_t body_bytes; // buffered now
    atomic_int active;        // requests being answered
    atomic_int freed;         // connections closed and heavy requests ended since the last bn_http_trim_due
};

struct bn_http_req {
    bn_http *h;
    struct MHD_Connection *c;
    int fd;
    char *body;
    size_t len, cap;          // (cap: counted in bn_http.body_bytes)
    bn_task *task;            // the task it waits for (bn_http_await), one reference
    int await_ev;
    bool waiting;             // between bn_http_await and the waiter's ready
    bn_http_waiter w;
    bool heavy;
};

// ---- tasks and connections ------------------------------------------------------------------------

static void hook_park(void *ctx) { MHD_suspend_connection(((bn_http_req *)ctx)->c); }
static void hook_wake(void *ctx) { MHD_resume_connection(((bn_http_req *)ctx)->c); }

// hook_gone: the peer closed its side (or the socket failed); pipelined bytes waiting to be read do not count.
static bool hook_gone(void *ctx) {
    bn_http_req *rq = ctx;
    struct pollfd pf = {.fd = rq->fd, .events = POLLRDHUP};
    return rq->fd >= 0 && poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

struct MHD_Connection *bn_http_conn(bn_http_req *rq) { return rq->c; }

bn_task_hooks bn_http_hooks(bn_http_req *rq) {
    return (bn_task_hooks){.park = hook_park, .wake = hook_wake, .gone = hook_gone, .ctx = rq};
}

void bn_http_heavy(bn_http_req *rq) { rq->heavy = true; }

// await_continue: the waiter's ready once the task is there, else the connection stays parked (MHD_YES).
static int await_continue(bn_http_req *rq) {
    if (!bn_task_ready_or_park(rq->task, rq->await_ev)) return MHD_YES;
    rq->waiting = false;
    return rq->w.ready(rq->w.ctx, rq, rq->task);
}

int bn_http_await(bn_http_req *rq, bn_task *t, int ev, const bn_http_waiter *w) {
    rq->task = t;
    rq->await_ev = ev;
    rq->w = *w;
    rq->waiting = true;
    return await_continue(rq);
}

// ---- requests ---------------------------------------------------------------------------------------

static bool key_ok(const bn_http *h, struct MHD_Connection *c) {
    if (h->p.n_api_keys == 0) return true;
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *xkey = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key");
    for (int i = 0; i < h->p.n_api_keys; i++) {
        if (auth && strncasecmp(auth, "Bearer ", 7) == 0 && strcmp(auth + 7, h->p.api_keys[i]) == 0) return true;
        if (xkey && strcmp(xkey, h->p.api_keys[i]) == 0) return true;
    }
    return false;
}

static int send_preflight(struct MHD_Connection *c) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, HEAD, OPTIONS");
    MHD_add_response_header(r, "Access-Control-Allow-Headers", "*");
    MHD_add_response_header(r, "Access-Control-Max-Age", "86400");
    int ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

// body_room: rq's body buffer grown to cap bytes within the bound on all buffered bodies; false when it does not fit.
static bool body_room(bn_http *h, bn_http_req *rq, size_t cap) {
    size_t more = cap - rq->cap;
    if (atomic_fetch_add(&h->body_bytes, more) + more > h->body_total) {
        atomic_fetch_sub(&h->body_bytes, more);
        return false;
    }
    rq->body = xrealloc(rq->body, cap);
    rq->cap = cap;
    return true;
}

// on_headers: the request's header is complete. Refusals that need no body (pre-flight, API key, size) are answered
// here, before a body byte is read (libmicrohttpd then drops the body and closes the connection).
static int on_headers(bn_http *h, struct MHD_Connection *c, const char *url, const char *method, void **con_cls) {
    bn_http_req *rq = xcalloc(1, sizeof *rq);
    rq->h = h;
    rq->c = c;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    rq->fd = ci ? ci->connect_fd : -1;
    *con_cls = rq;
    atomic_fetch_add(&h->active, 1);
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, h->p.timeout_s);
    if (strcmp(method, "OPTIONS") == 0) return send_preflight(c); // CORS pre-flight: browsers send no key
    bool open_path = strcmp(url, "/health") == 0 || strcmp(url, "/v1/health") == 0;
    if (!open_path && !key_ok(h, c)) return bn_send_error(c, 401, "authentication_error", "Invalid API Key");
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    unsigned long long n = cl ? strtoull(cl, NULL, 10) : 0;
    if (n > h->p.max_body)
        return bn_send_error(c, 413, "invalid_request_error", "request body exceeds the limit of %zu bytes",
                             h->p.max_body);
    if (n > 0 && !body_room(h, rq, (size_t)n + 1))
        return bn_send_error(c, 503, "unavailable_error", "server busy: too many request bytes in flight");
    return MHD_YES;
}

// on_body: a part of the body; the connection is closed (MHD_NO) past the limits.
static int on_body(bn_http *h, bn_http_req *rq, const char *data, size_t n) {
    if (rq->len + n > h->p.max_body) return MHD_NO; // (a chunked body or a wrong Content-Length)
    if (rq->len + n + 1 > rq->cap) {
        size_t cap = 2 * (rq->len + n) + 1;
        if (!body_room(h, rq, cap > h->p.max_body + 1 ? h->p.max_body + 1 : cap)) return MHD_NO;
    }
    memcpy(rq->body + rq->len, data, n);
    rq->len += n;
    rq->body[rq->len] = 0;
    if (rq->len >= (64u << 10)) rq->heavy = true;
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size, void **con_cls) {
    bn_http *h = cls;
    (void)version;
    bn_http_req *rq = *con_cls;
    if (!rq) return (enum MHD_Result)on_headers(h, c, url, method, con_cls);
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        return (enum MHD_Result)on_body(h, rq, upload_data, n);
    }
    if (rq->waiting) return (enum MHD_Result)await_continue(rq); // taken up again by its task
    if (strcmp(method, "HEAD") == 0) method = "GET"; // (libmicrohttpd sends the headers only)
    return (enum MHD_Result)h->p.route(h->p.route_ctx, rq, method, url, rq->body ? rq->body : "", rq->len);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    bn_http *h = cls;
    bn_http_req *rq = *con_cls;
    if (!rq) return;
    if (rq->task) {
        bn_task_unhook(rq->task);
        bn_task_cancel(rq->task, BN_CANCEL_CLIENT); // (nothing when it is done)
        bn_task_release(rq->task);
    }
    if (rq->w.free) rq->w.free(rq->w.ctx);
    if (rq->body) atomic_fetch_sub(&h->body_bytes, rq->cap);
    free(rq->body);
    // the connection waits for its next header now: the short timeout again
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, h->p.header_timeout_s);
    if (rq->heavy) atomic_fetch_add(&h->freed, TRIM_AFTER); // big parse trees and replies
    free(rq);
    *con_cls = NULL;
    atomic_fetch_sub(&h->active, 1);
}

// ---- the daemon -------------------------------------------------------------------------------------

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_ctx,
                          enum MHD_ConnectionNotificationCode code) {
    (void)c, (void)socket_ctx;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) atomic_fetch_add(&((bn_http *)cls)->freed, 1);
}

bool bn_http_trim_due(bn_http *h) {
    if (atomic_load(&h->freed) < TRIM_AFTER) return false;
    atomic_store(&h->freed, 0);
    return true;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    static atomic_long sec;
    static atomic_int n;
    long now = (long)time(NULL);
    if (atomic_exchange(&sec, now) != now) atomic_store(&n, 0);
    if (atomic_fetch_add(&n, 1) >= LOG_PER_SECOND) return;
    fprintf(stderr, "bonsai-serve: http: ");
    vfprintf(stderr, fmt, ap);
}

// raise_nofile: the soft open-file limit raised to the hard one; returns the soft limit.
static rlim_t raise_nofile(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024;
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t want = rl.rlim_max == RLIM_INFINITY ? (rlim_t)1 << 20 : rl.rlim_max;
        struct rlimit nl = {want, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &nl) == 0) rl.rlim_cur = want;
    }
    return rl.rlim_cur;
}

bn_http *bn_http_start(const bn_http_params *p, char *err, size_t errlen) {
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p->port)};
    if (inet_pton(AF_INET, p->host, &addr.sin_addr) != 1) {
        bn_err(err, errlen, "--host %s is not an IPv4 address", p->host);
        return NULL;
    }
    bn_http *h = xcalloc(1, sizeof *h);
    h->p = *p;
    rlim_t nofile = raise_nofile();
    h->conn_max = nofile > FD_RESERVE + 64 ? (unsigned)(nofile - FD_RESERVE < 65536 ? nofile - FD_RESERVE : 65536) : 64;
    h->body_total = BODY_TOTAL_BODIES * p->max_body > BODY_TOTAL_MIN ? BODY_TOTAL_BODIES * p->max_body : BODY_TOTAL_MIN;
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    h->d = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_NOTIFY_CONNECTION,
        on_connection, h, MHD_OPTION_CONNECTION_TIMEOUT, p->header_timeout_s, MHD_OPTION_CONNECTION_LIMIT, h->conn_max,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, p->conn_per_ip, MHD_OPTION_THREAD_POOL_SIZE,
        (unsigned)(p->threads > 1 ? p->threads : 0), MHD_OPTION_END);
    if (!h->d) {
        bn_err(err, errlen, "cannot listen on %s:%d (port in use?)", p->host, p->port);
        free(h);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : p->port;
    return h;
}

int bn_http_port(const bn_http *h) { return h->port; }

unsigned bn_http_conn_max(const bn_http *h) { return h->conn_max; }

void bn_http_quiesce(bn_http *h) {
    MHD_socket fd = MHD_quiesce_daemon(h->d);
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

int bn_http_active(bn_http *h) { return atomic_load(&h->active); }

void bn_http_stop(bn_http *h) {
    if (!h) return;
    MHD_stop_daemon(h->d);
    free(h);
}
