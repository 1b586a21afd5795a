// mine/source_http.c — a minimal HTTP/1.1 client for llama-server's /completion.
#include "mine/source_http.h"
#include "core/tokenizer.h"
#include "base/util.h"
#include <jansson.h>
#include <netdb.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define MAX_RESPONSE (256 << 20) // bytes of one /completion response (n_predict × n_probs entries fit many times)

typedef struct {
    bn_source base;
    char *host, *port, *prefix, *endpoint;
    const bn_tokenizer *tok;
    int timeout_s;
} http_source;

// Splits "http://host[:port][/prefix]"; returns 0 or -1.
static int parse_url(const char *url, http_source *s) {
    if (strncmp(url, "http://", 7) != 0) return -1;
    const char *h = url + 7, *slash = strchr(h, '/');
    size_t hl = slash ? (size_t)(slash - h) : strlen(h);
    char *hostport = strndup(h, hl);
    char *colon = strrchr(hostport, ':');
    s->port = xstrdup(colon ? colon + 1 : "80");
    if (colon) *colon = 0;
    s->host = hostport;
    s->prefix = xstrdup(slash ? slash : "");
    size_t pl = strlen(s->prefix);
    if (pl && s->prefix[pl - 1] == '/') s->prefix[pl - 1] = 0;
    return s->host[0] ? 0 : -1;
}

// Sends one POST and returns the malloc'd response body (status in *status), or NULL (err).
static char *http_post(http_source *s, const char *path, const char *body, int *status, size_t *body_len, char *err,
                       size_t errlen) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int gai = getaddrinfo(s->host, s->port, &hints, &ai);
    if (gai) { bn_err(err, errlen, "%s:%s: %s", s->host, s->port, gai_strerror(gai)); return NULL; }
    int fd = -1;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) { close(fd); fd = -1; }
    }
    freeaddrinfo(ai);
    if (fd < 0) { bn_err(err, errlen, "cannot connect to %s:%s", s->host, s->port); return NULL; }
    struct timeval tv = {.tv_sec = s->timeout_s};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    size_t blen = strlen(body);
    char head[1024];
    int hn = snprintf(head, sizeof head,
                      "POST %s%s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n\r\n", s->prefix, path, s->host, s->port, blen);
    bool sent = write(fd, head, (size_t)hn) == hn;
    for (size_t off = 0; sent && off < blen;) {
        ssize_t w = write(fd, body + off, blen - off);
        if (w <= 0) sent = false;
        else off += (size_t)w;
    }
    if (!sent) { close(fd); bn_err(err, errlen, "sending the request to %s:%s failed", s->host, s->port); return NULL; }
    size_t cap = 1 << 16, n = 0;
    char *resp = xmalloc(cap + 1);
    for (;;) {
        if (n == cap && cap >= MAX_RESPONSE) {
            close(fd);
            free(resp);
            bn_err(err, errlen, "the response from %s:%s exceeds %d MiB", s->host, s->port, MAX_RESPONSE >> 20);
            return NULL;
        }
        if (n == cap) { cap *= 2; resp = xrealloc(resp, cap + 1); }
        ssize_t r = read(fd, resp + n, cap - n);
        if (r < 0) { close(fd); free(resp); bn_err(err, errlen, "reading the response failed (timeout?)"); return NULL; }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    resp[n] = 0;
    char *hdr_end = strstr(resp, "\r\n\r\n");
    if (strncmp(resp, "HTTP/1.", 7) != 0 || !hdr_end) {
        free(resp);
        bn_err(err, errlen, "malformed HTTP response from %s:%s", s->host, s->port);
        return NULL;
    }
    *status = atoi(resp + 9);
    *hdr_end = 0;
    bool chunked = false;
    for (char *line = strstr(resp, "\r\n"); line && line < hdr_end; line = strstr(line + 2, "\r\n"))
        if (!strncasecmp(line + 2, "transfer-encoding:", 18) && strcasestr(line + 20, "chunked")) chunked = true;
    char *b = hdr_end + 4, *end = resp + n;
    char *out = xmalloc((size_t)(end - b) + 1);
    size_t on = 0;
    if (!chunked) {
        on = (size_t)(end - b);
        memcpy(out, b, on);
    } else {
        while (b < end) {
            char *stop;
            unsigned long sz = strtoul(b, &stop, 16);
            char *data = strstr(stop, "\r\n");
            if (!data || sz == 0) break;
            data += 2;
            if (sz > (unsigned long)(end - data)) sz = (unsigned long)(end - data);
            memcpy(out + on, data, sz);
            on += sz;
            b = data + sz + 2;
        }
    }
    out[on] = 0;
    free(resp);
    *body_len = on;
    return out;
}

int bn_http_completion_parse(const char *body, size_t len, int n_probs, bn_gen_result *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_ALLOW_NUL, &je);
    if (!json_is_object(o)) { json_decref(o); return bn_err(err, errlen, "response is not a JSON object: %s", je.text); }
    json_t *probs = json_object_get(o, "completion_probabilities"), *toks = json_object_get(o, "tokens");
    const char *stop_type = json_string_value(json_object_get(o, "stop_type"));
    size_t n = json_is_array(probs) ? json_array_size(probs) : json_is_array(toks) ? json_array_size(toks) : 0;
    if (n_probs > 0 && !json_is_array(probs)) {
        json_decref(o);
        return bn_err(err, errlen, "response has no completion_probabilities (server too old, or n_probs ignored)");
    }
    out->k = n_probs;
    out->ids = xmalloc((n + 1) * sizeof *out->ids);
    out->logprob = xmalloc((n + 1) * sizeof *out->logprob);
    out->topk = xmalloc((n * (size_t)(n_probs > 0 ? n_probs : 0) + 1) * sizeof *out->topk);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_is_array(probs) ? json_array_get(probs, i) : NULL;
        json_t *id = e ? json_object_get(e, "id") : json_array_get(toks, i);
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) > INT32_MAX) {
            json_decref(o);
            bn_gen_result_free(out);
            return bn_err(err, errlen, "token %zu: no id, or not a token id", i);
        }
        out->ids[i] = (int32_t)json_integer_value(id);
        out->logprob[i] = e ? (float)json_number_value(json_object_get(e, "logprob")) : 0.0f;
        json_t *top = e ? json_object_get(e, "top_logprobs") : NULL;
        for (int j = 0; j < n_probs; j++) {
            json_t *t = json_array_get(top, (size_t)j), *tid = json_object_get(t, "id");
            const json_int_t v = json_integer_value(tid); // (0 when missing or not an integer)
            out->topk[i * n_probs + j] = t && v >= 0 && v <= INT32_MAX
                                             ? (bn_topk){(int32_t)v, json_number_value(json_object_get(t, "logprob"))}
                                             : (bn_topk){-1, -1e30};
        }
    }
    out->n = (int)n;
    out->hit_limit = stop_type && !strcmp(stop_type, "limit");
    json_decref(o);
    return 0;
}

// check_ids: every generated id of g in 0..n_vocab−1 and every top-K id too (the parser made a missing one −1); 0, or
// -1 with err naming the server (ids from a server index our tokenizer's tables later)
static int check_ids(const bn_gen_result *g, int n_vocab, const char *endpoint, char *err, size_t errlen) {
    for (int i = 0; i < g->n; i++) {
        int32_t bad = g->ids[i] >= n_vocab ? g->ids[i] : -1;
        for (int j = 0; j < g->k && bad < 0; j++)
            if (g->topk[(size_t)i * g->k + j].id >= n_vocab) bad = g->topk[(size_t)i * g->k + j].id;
        if (bad >= 0)
            return bn_err(err, errlen, "token %d: id %d outside the vocabulary (%d) (from %s: is it serving another "
                          "model?)", i, (int)bad, n_vocab, endpoint);
    }
    return 0;
}

static int http_generate(bn_source *base, const int32_t *prompt, int n_prompt, const bn_gen_params *p, bn_gen_result *out,
                         char *err, size_t errlen) {
    http_source *s = (http_source *)base;
    json_t *ids = json_array();
    for (int i = 0; i < n_prompt; i++) json_array_append_new(ids, json_integer(prompt[i]));
    json_t *req = json_pack("{s:o,s:i,s:f,s:i,s:f,s:f,s:I,s:i,s:b,s:b,s:b,s:b}", "prompt", ids, "n_predict", p->n_predict,
                            "temperature", (double)p->temperature, "top_k", p->top_k, "top_p", (double)p->top_p, "min_p",
                            (double)p->min_p, "seed", (json_int_t)(p->seed & 0x7fffffff), "n_probs", p->n_probs,
                            "post_sampling_probs", 0, "cache_prompt", 1, "return_tokens", 1, "stream", 0);
    if (req && bn_gen_params_penalized(p)) { // (llama-server's names)
        json_t *pen = json_pack("{s:i,s:f,s:f,s:f}", "repeat_last_n", p->repeat_last_n, "repeat_penalty",
                                (double)p->repeat_penalty, "frequency_penalty", (double)p->frequency_penalty,
                                "presence_penalty", (double)p->presence_penalty);
        json_object_update(req, pen);
        json_decref(pen);
        json_t *dry = json_pack("{s:f,s:f,s:i,s:i}", "dry_multiplier", (double)p->dry_multiplier, "dry_base",
                                (double)p->dry_base, "dry_allowed_length", p->dry_allowed_length, "dry_penalty_last_n",
                                p->dry_penalty_last_n);
        if (dry && p->dry_breakers && p->n_dry_breakers == 0) { // (llama-server refuses an empty list)
            json_decref(dry);
            json_decref(req);
            return bn_err(err, errlen, "DRY without sequence breakers cannot be asked of a server");
        }
        if (dry && p->dry_breakers) {
            json_t *b = json_array();
            for (int i = 0; i < p->n_dry_breakers; i++) json_array_append_new(b, json_string(p->dry_breakers[i]));
            json_object_set_new(dry, "dry_sequence_breakers", b);
        }
        json_object_update(req, dry);
        json_decref(dry);
    }
    char *body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    int status = 0;
    size_t len = 0;
    char *resp = http_post(s, "/completion", body, &status, &len, err, errlen);
    free(body);
    if (!resp) return -1;
    if (status != 200) {
        bn_err(err, errlen, "%s/completion: HTTP %d: %.300s", s->endpoint, status, resp);
        free(resp);
        return -1;
    }
    int rc = bn_http_completion_parse(resp, len, p->n_probs, out, err, errlen);
    free(resp);
    if (rc == 0 && s->tok && check_ids(out, bn_tokenizer_n_vocab(s->tok), s->endpoint, err, errlen) != 0) {
        bn_gen_result_free(out);
        return -1;
    }
    while (rc == 0 && s->tok && out->n > 0 && bn_token_is_eog(s->tok, out->ids[out->n - 1])) out->n--;
    return rc;
}

static void http_destroy(bn_source *base) {
    http_source *s = (http_source *)base;
    free(s->host); free(s->port); free(s->prefix); free(s->endpoint);
    free(s);
}

bn_source *bn_source_http(const char *url, const bn_tokenizer *tok, int timeout_s, char *err, size_t errlen) {
    http_source *s = xcalloc(1, sizeof *s);
    if (parse_url(url, s) < 0) {
        bn_err(err, errlen, "unsupported server URL '%s' (expected http://host:port)", url);
        http_destroy(&s->base);
        return NULL;
    }
    s->endpoint = xstrdup(url);
    s->base.endpoint = s->endpoint;
    s->base.generate = http_generate;
    s->base.destroy = http_destroy;
    s->tok = tok;
    s->timeout_s = timeout_s > 0 ? timeout_s : 1800;
    return &s->base;
}
