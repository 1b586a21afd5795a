// serve/completion.h — the completion endpoints (docs/server.md §3–7), called by the dispatch in serve/routes.c.
#ifndef BONSAI_SERVE_COMPLETION_H
#define BONSAI_SERVE_COMPLETION_H
#include <stdbool.h>
#include <jansson.h>
#include "serve/server.h"
#include "serve/http.h"

// A request's log-prob entries (n_probs + 1 per generated token, up to the tokens it may generate) are at most this
// many; more is refused with 400 before its task is queued (docs/server.md §5).
#define BN_SERVE_PROB_ENTRIES_MAX (1 << 19)

// bn_route_completion: POST /completion (oai false) or /v1/completions (oai true) with body; returns the MHD result.
int bn_route_completion(bn_server *srv, bn_http_req *rq, json_t *body, bool oai);
// bn_route_chat: POST /v1/chat/completions with body; returns the MHD result.
int bn_route_chat(bn_server *srv, bn_http_req *rq, json_t *body);
// bn_server_chat_prompt: the request's messages in the server's chat format (malloc'd), or NULL with err (400).
char *bn_server_chat_prompt(bn_server *srv, json_t *body, char *err, size_t errlen);

#endif
