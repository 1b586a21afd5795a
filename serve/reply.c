// serve/reply.c — see reply.h.
#include "serve/reply.h"
#include "base/util.h"
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Replies of at least BIG_REPLY bytes are handed to libmicrohttpd BIG_BLOCK bytes at a time.
#define BIG_REPLY (256u << 10)
#define BIG_BLOCK (64u << 10)

struct MHD_Response *bn_reply_headers(struct MHD_Response *r, const char *ctype) {
    MHD_add_response_header(r, "Content-Type", ctype);
    MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
    MHD_add_response_header(r, "Server", "bonsai-serve");
    return r;
}

static int queue(struct MHD_Connection *c, int status, struct MHD_Response *r) {
    if (!r) return MHD_NO;
    int ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

int bn_send_text(struct MHD_Connection *c, int status, const char *ctype, const char *text) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    return queue(c, status, r ? bn_reply_headers(r, ctype) : NULL);
}

// A large reply handed out piece by piece and freed with its last piece: libmicrohttpd frees a finished reply only
// at its poll thread's next wake-up, which may be long after.
typedef struct {
    char *buf;
    size_t len;
} big_reply;

static ssize_t big_read(void *cls, uint64_t pos, char *out, size_t max) {
    big_reply *b = cls;
    if (!b->buf || pos >= b->len) return MHD_CONTENT_READER_END_WITH_ERROR;
    size_t k = b->len - (size_t)pos < max ? b->len - (size_t)pos : max;
    memcpy(out, b->buf + pos, k);
    if (pos + k == b->len) {
        free(b->buf);
        b->buf = NULL;
    }
    return (ssize_t)k;
}

static void big_free(void *cls) {
    big_reply *b = cls;
    free(b->buf);
    free(b);
}

int bn_send_buffer(struct MHD_Connection *c, int status, const char *ctype, char *buf, size_t len) {
    struct MHD_Response *r;
    if (len >= BIG_REPLY) {
        big_reply *b = xmalloc(sizeof *b);
        *b = (big_reply){buf, len};
        r = MHD_create_response_from_callback(len, BIG_BLOCK, big_read, b, big_free);
        if (!r) big_free(b);
    } else {
        r = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
        if (!r) free(buf);
    }
    return queue(c, status, r ? bn_reply_headers(r, ctype) : NULL);
}

int bn_send_json(struct MHD_Connection *c, int status, json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s)
        return bn_send_text(c, 500, "application/json; charset=utf-8",
                            "{\"error\":{\"code\":500,\"message\":\"cannot encode response\","
                            "\"type\":\"server_error\"}}");
    return bn_send_buffer(c, status, "application/json; charset=utf-8", s, strlen(s));
}

static int send_error_v(struct MHD_Connection *c, int status, const char *type, json_t *extra, const char *fmt,
                        va_list ap) {
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    // messages may quote client bytes: keep only valid UTF-8 for the JSON encoder
    for (char *p = msg; *p; p++)
        if ((unsigned char)*p >= 0x80) *p = '?';
    json_t *e = json_pack("{s:i,s:s,s:s}", "code", status, "message", msg, "type", type);
    if (extra) json_object_update(e, extra);
    json_decref(extra);
    return bn_send_json(c, status, json_pack("{s:o}", "error", e));
}

int bn_send_error(struct MHD_Connection *c, int status, const char *type, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int ret = send_error_v(c, status, type, NULL, fmt, ap);
    va_end(ap);
    return ret;
}

int bn_send_error_with(struct MHD_Connection *c, int status, const char *type, json_t *extra, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int ret = send_error_v(c, status, type, extra, fmt, ap);
    va_end(ap);
    return ret;
}

// ---- streams ------------------------------------------------------------------------------------

typedef struct {
    bn_stream_next next;
    bn_stream_done done;
    void *ctx;
} stream_ctx;

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    stream_ctx *s = cls;
    (void)pos;
    ssize_t n = s->next(s->ctx, buf, max);
    return n < 0 ? MHD_CONTENT_READER_END_OF_STREAM : n;
}

static void stream_free(void *cls) {
    stream_ctx *s = cls;
    s->done(s->ctx);
    free(s);
}

int bn_send_stream(struct MHD_Connection *c, bn_stream_next next, bn_stream_done done, void *ctx) {
    stream_ctx *s = xmalloc(sizeof *s);
    *s = (stream_ctx){next, done, ctx};
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, s, stream_free);
    if (!r) {
        stream_free(s);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    return queue(c, 200, bn_reply_headers(r, "text/event-stream"));
}

// ---- text buffers -------------------------------------------------------------------------------

void bn_text_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) *buf = xrealloc(*buf, *cap = 2 * (*len + n + 1));
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
}

int bn_json_dump_append(json_t *j, char **buf, size_t *len, size_t *cap) {
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(j);
    if (!s) return -1;
    bn_text_append(buf, len, cap, s, strlen(s));
    free(s);
    return 0;
}
