// serve/routes.h — the endpoints' dispatch (docs/server.md §1.1), the route callback of the HTTP layer.
#ifndef BONSAI_SERVE_ROUTES_H
#define BONSAI_SERVE_ROUTES_H
#include <stddef.h>
#include "serve/http.h"

// bn_route: answers one request (bn_http_route; ctx: the bn_server); returns the MHD result.
int bn_route(void *ctx, bn_http_req *rq, const char *method, const char *url, const char *body, size_t body_len);

#endif
