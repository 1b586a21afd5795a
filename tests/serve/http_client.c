// tests/serve/http_client.c — see http_client.h.
#include "tests/serve/http_client.h"
#include <jansson.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

int http_timeout_s = 120;

int http_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct timeval tv = {.tv_sec = http_timeout_s};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int send_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int send_head(int fd, const char *method, const char *path, size_t body_len, const char *extra) {
    char head[1024];
    int k = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n%s\r\n",
                     method, path, body_len, extra ? extra : "");
    return send_all(fd, head, (size_t)k);
}

// dechunk: decodes a chunked body in place; returns the new length; *complete: the last (empty) chunk was there.
static size_t dechunk(char *b, size_t n, bool *complete) {
    size_t in = 0, out = 0;
    *complete = false;
    while (in < n) {
        char *end;
        unsigned long sz = strtoul(b + in, &end, 16);
        char *crlf = strstr(b + in, "\r\n");
        if (end == b + in || !crlf) break; // no chunk size there
        in = (size_t)(crlf - b) + 2;
        if (sz == 0) {
            *complete = true;
            break;
        }
        if (in + sz > n) break;
        memmove(b + out, b + in, sz);
        out += sz;
        in += sz + 2;
    }
    b[out] = 0;
    return out;
}

int http_request(int port, const char *method, const char *path, const char *body, size_t body_len,
                 const char *extra_headers, http_resp *r) {
    memset(r, 0, sizeof *r);
    int fd = http_connect(port);
    if (fd < 0) return -1;
    if (send_head(fd, method, path, body_len, extra_headers) != 0) {
        close(fd);
        return -1;
    }
    send_all(fd, body ? body : "", body_len); // the server may close early (413): keep reading
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (n + 4096 > cap) buf = realloc(buf, cap *= 2);
        ssize_t k = recv(fd, buf + n, cap - n - 1, 0);
        if (k <= 0) break;
        n += (size_t)k;
    }
    close(fd);
    buf[n] = 0;
    char *sep = strstr(buf, "\r\n\r\n");
    if (!sep || sscanf(buf, "HTTP/1.%*d %d", &r->status) != 1) {
        free(buf);
        return -1;
    }
    *sep = 0;
    r->headers = strdup(buf);
    size_t blen = n - (size_t)(sep + 4 - buf);
    r->body = malloc(blen + 1);
    memcpy(r->body, sep + 4, blen);
    r->body[blen] = 0;
    r->body_len = blen;
    char te[64], cl[32];
    if (http_header(r, "Transfer-Encoding", te, sizeof te) && strcasecmp(te, "chunked") == 0)
        r->body_len = dechunk(r->body, blen, &r->complete);
    else r->complete = http_header(r, "Content-Length", cl, sizeof cl) && strtoull(cl, NULL, 10) == blen;
    free(buf);
    return 0;
}

int http_stream_first_then_close(int port, const char *path, const char *body, const char *extra_headers) {
    int fd = http_connect(port);
    if (fd < 0) return -1;
    size_t len = strlen(body);
    if (send_head(fd, "POST", path, len, extra_headers) != 0 || send_all(fd, body, len) != 0) {
        close(fd);
        return -1;
    }
    char buf[4096];
    size_t n = 0;
    while (n < sizeof buf - 1) { // read past the header block into the first body bytes
        ssize_t k = recv(fd, buf + n, sizeof buf - 1 - n, 0);
        if (k <= 0) break;
        n += (size_t)k;
        buf[n] = 0;
        char *sep = strstr(buf, "\r\n\r\n");
        if (sep && (size_t)(sep + 4 - buf) < n) break;
    }
    close(fd);
    return 0;
}

void http_resp_free(http_resp *r) {
    free(r->headers);
    free(r->body);
    memset(r, 0, sizeof *r);
}

const char *http_header(const http_resp *r, const char *name, char *buf, size_t n) {
    size_t nl = strlen(name);
    for (const char *p = r->headers; p && *p; p = strstr(p, "\r\n") ? strstr(p, "\r\n") + 2 : NULL) {
        if (strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
            const char *v = p + nl + 1;
            while (*v == ' ') v++;
            size_t k = strcspn(v, "\r\n");
            if (k >= n) k = n - 1;
            memcpy(buf, v, k);
            buf[k] = 0;
            return buf;
        }
    }
    return NULL;
}

json_t *http_json(int port, const char *method, const char *path, const char *body, int *status) {
    http_resp r;
    *status = 0;
    if (http_request(port, method, path, body, body ? strlen(body) : 0, NULL, &r) != 0) return NULL;
    *status = r.status;
    json_t *j = json_loadb(r.body, r.body_len, JSON_ALLOW_NUL, NULL);
    http_resp_free(&r);
    return j;
}
