// serve/reply.h — HTTP replies on a libmicrohttpd connection: JSON, llama-server's error objects, plain text and
// streamed bodies (docs/server.md §1). Used by the HTTP layer (serve/http.c) and the endpoints (serve/routes.c,
// serve/completion.c).
#ifndef BONSAI_SERVE_REPLY_H
#define BONSAI_SERVE_REPLY_H
#include <stddef.h>
#include <sys/types.h>
#include <jansson.h>

struct MHD_Connection;
struct MHD_Response;

// bn_reply_headers: the headers every reply carries (Content-Type ctype, CORS, Server); returns r.
struct MHD_Response *bn_reply_headers(struct MHD_Response *r, const char *ctype);
// bn_send_json: sends j as a JSON reply (takes the reference of j); returns the MHD result.
int bn_send_json(struct MHD_Connection *c, int status, json_t *j);
// bn_send_error: {"error":{"code","message","type"}} with the given status; returns the MHD result.
int bn_send_error(struct MHD_Connection *c, int status, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
// bn_send_error_with: bn_send_error with extra fields (an object, reference taken; NULL: none) in the error object.
int bn_send_error_with(struct MHD_Connection *c, int status, const char *type, json_t *extra, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
// bn_send_text: plain text reply with a content type; returns the MHD result.
int bn_send_text(struct MHD_Connection *c, int status, const char *ctype, const char *text);
// bn_send_buffer: a reply of len bytes of buf (malloc'd; taken and freed by the reply); returns the MHD result.
int bn_send_buffer(struct MHD_Connection *c, int status, const char *ctype, char *buf, size_t len);
// bn_send_stream: a 200 text/event-stream reply whose bytes come from next (as MHD's content reader: bytes written
// into buf, 0 = none yet (the caller parked the connection first), -1 = end); done(ctx) is called once when the reply
// is freed (finished, or the client went away). Returns the MHD result.
typedef ssize_t (*bn_stream_next)(void *ctx, char *buf, size_t cap);
typedef void (*bn_stream_done)(void *ctx);
int bn_send_stream(struct MHD_Connection *c, bn_stream_next next, bn_stream_done done, void *ctx);
// bn_json_dump_append: j's compact JSON text appended to the growing buffer *buf (*len bytes, *cap capacity; j's
// reference taken); returns 0, or -1 when jansson cannot write j.
int bn_json_dump_append(json_t *j, char **buf, size_t *len, size_t *cap);
// bn_text_append: n bytes of s appended to the growing buffer *buf (NUL-terminated).
void bn_text_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n);

#endif
