// serve/http.h — the HTTP layer on libmicrohttpd (docs/server.md §1.2): poll threads over epoll that never wait for
// a slot (a request waiting for its task is set aside with MHD_suspend_connection and taken up again by the slot),
// the API-key check on the headers before any body byte is buffered, body limits, per-client and total connection
// limits, a short timeout for connections that have not sent a complete header, and clients that go away cancelling
// their task. The endpoints come in as a route callback; this file knows none of them.
#ifndef BONSAI_SERVE_HTTP_H
#define BONSAI_SERVE_HTTP_H
#include <stdbool.h>
#include <stddef.h>
#include "serve/slots.h"

typedef struct bn_http bn_http;
typedef struct bn_http_req bn_http_req; // one request being answered

// bn_http_route: answers one complete request (HEAD comes as GET; body NUL-terminated): queues a reply on
// bn_http_conn(rq) (serve/reply.h), or submits a task with bn_http_hooks(rq) and hands it to bn_http_await. Returns
// the MHD result.
typedef int (*bn_http_route)(void *ctx, bn_http_req *rq, const char *method, const char *url, const char *body,
                             size_t len);

typedef struct {
    const char *host;            // IPv4 address
    int port;                    // 0 = any free port
    int threads;                 // poll threads (--threads-http)
    unsigned timeout_s;          // inactivity limit once a request's header arrived (--timeout)
    unsigned header_timeout_s;   // ... before it: idle and slow connections that send no complete header
    unsigned conn_per_ip;        // connections one client address may hold (0 = no limit)
    size_t max_body;             // bytes; larger bodies get 413
    const char *const *api_keys; // when n_api_keys > 0, every path but /health needs one
    int n_api_keys;
    bn_http_route route;
    void *route_ctx;
} bn_http_params;

// bn_http_start: raises the open-file limit to its maximum and starts listening; NULL with err on failure.
bn_http *bn_http_start(const bn_http_params *p, char *err, size_t errlen);
// bn_http_port: the port it listens on.
int bn_http_port(const bn_http *h);
// bn_http_conn_max: the most connections it holds at once.
unsigned bn_http_conn_max(const bn_http *h);
// bn_http_quiesce: stops accepting connections (the listening socket is closed); open ones are still served.
void bn_http_quiesce(bn_http *h);
// bn_http_active: requests being answered now (header received, reply not yet finished).
int bn_http_active(bn_http *h);
// bn_http_trim_due: true (once) when enough memory was let go since the last call (closed connections, a request that
// allocated much) for malloc_trim to be worth it.
bool bn_http_trim_due(bn_http *h);
// bn_http_stop: closes every connection and frees h (no connection may be waiting for a task: all tasks done).
void bn_http_stop(bn_http *h);

struct MHD_Connection;
// bn_http_conn: the request's connection (to queue a reply on).
struct MHD_Connection *bn_http_conn(bn_http_req *rq);
// bn_http_hooks: the task hooks of the request (bn_slots_submit): its connection parks and wakes with the task, and
// the task learns when the client went away.
bn_task_hooks bn_http_hooks(bn_http_req *rq);
// bn_http_heavy: the request allocated much: free memory goes back to the system when it ends (bn_http_trim_due).
void bn_http_heavy(bn_http_req *rq);

// What a request waiting for a task does once the task reached the point awaited.
typedef struct {
    int (*ready)(void *ctx, bn_http_req *rq, bn_task *t); // queue the reply; returns the MHD result
    void (*free)(void *ctx);                              // the request ended (after ready, or without it)
    void *ctx;
} bn_http_waiter;
// bn_http_await: rq waits (its connection set aside, no thread blocked) until t, submitted with bn_http_hooks(rq),
// has event ev or is done (ev = INT_MAX: done), then w.ready answers. Takes the caller's reference of t; when the
// request ends first (client gone), t is cancelled. Returns the MHD result.
int bn_http_await(bn_http_req *rq, bn_task *t, int ev, const bn_http_waiter *w);

#endif
