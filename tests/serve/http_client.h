// tests/serve/http_client.h — a minimal HTTP/1.1 client over loopback sockets for the server tests
// (raw bytes in, so tests can send truncated JSON, invalid UTF-8 and oversized bodies).
#ifndef BONSAI_TEST_HTTP_CLIENT_H
#define BONSAI_TEST_HTTP_CLIENT_H
#include <stddef.h>
#include <stdbool.h>

typedef struct {
    int status;        // HTTP status, 0 on connection failure
    char *headers;     // raw header block (NUL-terminated)
    char *body;        // de-chunked body (NUL-terminated)
    size_t body_len;
    bool complete;     // the body arrived whole: its chunked terminator, or its Content-Length bytes
} http_resp;

// http_timeout_s: how long a client waits for bytes of an answer before giving up (default 120).
extern int http_timeout_s;

// http_connect: a socket connected to 127.0.0.1:port (receive timeout http_timeout_s), or -1.
int http_connect(int port);
// http_request: sends METHOD path with body to 127.0.0.1:port (Connection: close) and reads the
// whole response. extra_headers: "Name: value\r\n" lines or NULL. Returns 0 or -1 (no connection).
int http_request(int port, const char *method, const char *path, const char *body, size_t body_len,
                 const char *extra_headers, http_resp *r);
// http_stream_first_then_close: sends a POST (extra_headers as http_request's), reads until the first byte of the
// body arrives, then closes the socket (a client that disconnects mid-stream). Returns 0 or -1.
int http_stream_first_then_close(int port, const char *path, const char *body, const char *extra_headers);
// http_resp_free: frees the response buffers.
void http_resp_free(http_resp *r);
// http_json: http_request without extra headers, the body parsed as JSON (NULL when it is not JSON or there was no
// answer); *status = the HTTP status (0: no connection). Returns the JSON (the caller json_decrefs it).
struct json_t;
struct json_t *http_json(int port, const char *method, const char *path, const char *body, int *status);
// http_header: value of a response header (case-insensitive name) into buf; returns buf or NULL.
const char *http_header(const http_resp *r, const char *name, char *buf, size_t n);

#endif
