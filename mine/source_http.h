// mine/source_http.h — the completion source over HTTP: POST {url}/completion of a llama-server
// compatible server (docs/server.md §3, §5) with the prompt as token ids, n_probs and
// post_sampling_probs false (raw logprobs), cache_prompt and return_tokens true. Plain http://
// only (use a local tunnel for TLS). Trailing end-of-generation ids are dropped when tok is given.
#ifndef BONSAI_DETECT_SOURCE_HTTP_H
#define BONSAI_DETECT_SOURCE_HTTP_H
#include "mine/source.h"

// bn_source_http: a source talking to url ("http://host:port[/prefix]"); returns NULL when the
// URL is not understood (err filled). timeout_s bounds each request (antidoom: 1800).
bn_source *bn_source_http(const char *url, const struct bn_tokenizer *tok, int timeout_s, char *err, size_t errlen);
// bn_http_completion_parse: fills out from a /completion response body; returns 0 or -1 (err).
// Exposed for tests.
int bn_http_completion_parse(const char *body, size_t len, int n_probs, bn_gen_result *out, char *err, size_t errlen);
#endif
