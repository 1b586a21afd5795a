// eval/bench.c — llama-bench method and output for our engine (see bench.h, docs/server.md §12).
#include "eval/bench.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/forward.h"
#include "base/util.h"

// bench_bos: the BOS id if the vocabulary asks for one on prompts, else -1.
static int32_t bench_bos(const bn_model *m) {
    bool add_bos = false;
    int64_t bos = -1;
    if (!gguf_get_bool(m->gguf, "tokenizer.ggml.add_bos_token", &add_bos) || !add_bos) return -1;
    return gguf_get_int(m->gguf, "tokenizer.ggml.bos_token_id", &bos) ? (int32_t)bos : -1;
}

// bench_prompt: one batched forward of n random tokens (BOS first if any) appended to s.
static int bench_prompt(const bn_model *m, bn_engine_state *s, int n, char *err, size_t errlen) {
    int32_t *tokens = xmalloc(sizeof(int32_t) * (size_t)n);
    int32_t bos = bench_bos(m);
    for (int i = 0; i < n; i++) tokens[i] = i == 0 && bos >= 0 ? bos : rand() % m->cfg.n_vocab;
    float *logits = xmalloc(sizeof(float) * (size_t)m->cfg.n_vocab);
    bn_forward_out out = {.logits = logits};
    int rc = bn_engine_forward(s, tokens, n, &out, err, errlen);
    free(logits);
    free(tokens);
    return rc;
}

// bench_gen: n one-token forwards (first token BOS if any, then random ids) appended to s.
static int bench_gen(const bn_model *m, bn_engine_state *s, int n, char *err, size_t errlen) {
    int32_t bos = bench_bos(m);
    int32_t token = bos >= 0 ? bos : rand() % m->cfg.n_vocab;
    float *logits = xmalloc(sizeof(float) * (size_t)m->cfg.n_vocab);
    bn_forward_out out = {.logits = logits};
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        rc = bn_engine_forward(s, &token, 1, &out, err, errlen);
        token = rand() % m->cfg.n_vocab;
    }
    free(logits);
    return rc;
}

// bench_gen_verify: n tokens of each of the n_seq states in ragged passes of up to n_verify tokens each (random ids,
// BOS first if any), the argmax of every row and a snapshot after every token wanted (snaps: [n_seq][n_verify]).
static int bench_gen_verify(const bn_model *m, bn_engine_state **s, bn_engine_snapshot **snaps, int n_seq,
                            int n_verify, int n, char *err, size_t errlen) {
    const int32_t bos = bench_bos(m);
    int32_t *tokens = xmalloc(sizeof(int32_t) * (size_t)n_seq * n_verify);
    int32_t *argmax = xmalloc(sizeof(int32_t) * (size_t)n_seq * n_verify);
    bn_forward_out *o = xcalloc((size_t)n_seq, sizeof *o);
    bn_engine_seq *seqs = xcalloc((size_t)n_seq, sizeof *seqs);
    int rc = 0;
    for (int done = 0; done < n && rc == 0;) {
        const int k = n - done < n_verify ? n - done : n_verify;
        for (int t = 0; t < n_seq; t++) {
            int32_t *tok = tokens + (size_t)t * n_verify;
            for (int j = 0; j < k; j++) tok[j] = done + j == 0 && bos >= 0 ? bos : rand() % m->cfg.n_vocab;
            o[t] = (bn_forward_out){.argmax = argmax + (size_t)t * n_verify, .all_logits = true};
            seqs[t] = (bn_engine_seq){s[t], tok, k, &o[t], snaps + (size_t)t * n_verify};
        }
        rc = bn_engine_forward_multi(seqs, n_seq, err, errlen);
        done += k;
    }
    free(tokens), free(argmax), free(o), free(seqs);
    return rc;
}

static int bench_gen_batch(const bn_model *m, bn_engine_state **s, int n_seq, int n, char *err, size_t errlen);

// bench_gen_seqs: n tokens of each of the n_seq states: ragged passes of n_verify tokens (bench_gen_verify) or, with
// n_verify <= 1, one-token steps (bench_gen_batch). Returns 0 or -1.
static int bench_gen_seqs(const bn_model *m, bn_engine_state **s, bn_engine_snapshot **snaps, int n_seq, int n_verify,
                          int n, char *err, size_t errlen) {
    return n_verify > 1 ? bench_gen_verify(m, s, snaps, n_seq, n_verify, n, err, errlen)
                        : bench_gen_batch(m, s, n_seq, n, err, errlen);
}

// bench_gen_batch: n steps of the n_seq states at once (first token BOS if any, then random ids).
static int bench_gen_batch(const bn_model *m, bn_engine_state **s, int n_seq, int n, char *err, size_t errlen) {
    const int32_t bos = bench_bos(m);
    int32_t *tokens = xmalloc(sizeof(int32_t) * (size_t)n_seq);
    float *logits = xmalloc(sizeof(float) * (size_t)m->cfg.n_vocab * (size_t)n_seq);
    bn_forward_out *o = xcalloc((size_t)n_seq, sizeof *o), **outs = xmalloc(sizeof *outs * (size_t)n_seq);
    for (int t = 0; t < n_seq; t++) {
        tokens[t] = bos >= 0 ? bos : rand() % m->cfg.n_vocab;
        o[t].logits = logits + (size_t)t * m->cfg.n_vocab, outs[t] = &o[t];
    }
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        rc = bn_engine_forward_batch(s, tokens, n_seq, outs, err, errlen);
        for (int t = 0; t < n_seq; t++) tokens[t] = rand() % m->cfg.n_vocab;
    }
    free(tokens), free(logits), free(o), free(outs);
    return rc;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int bn_bench_run(const bn_model *m, int n_prompt, int n_gen, int n_threads, int reps, bool warmup,
                 bn_bench_result *r, char *err, size_t errlen) {
    bn_engine *e = bn_engine_cpu_new(m, n_threads);
    int rc = bn_bench_run_engine(e, n_prompt, n_gen, reps, warmup, r, err, errlen);
    bn_engine_free(e);
    return rc;
}

// result_init: r zeroed with the model, engine, test and start-time fields of a run on e.
static void result_init(bn_bench_result *r, const bn_engine *e, int n_prompt, int n_gen, int reps) {
    const bn_model *m = e->m;
    memset(r, 0, sizeof *r);
    snprintf(r->model_filename, sizeof r->model_filename, "%s", m->path ? m->path : "");
    bn_model_describe(m, r->model_type, sizeof r->model_type);
    for (size_t i = 0; i < m->gguf->n_tensors; i++) r->model_size += m->gguf->tensors[i].nbytes;
    r->model_n_params = bn_model_n_params(m);
    r->n_prompt = n_prompt;
    r->n_gen = n_gen;
    r->n_threads = e->n_threads;
    snprintf(r->backend, sizeof r->backend, "%s", bn_engine_name(e));
    r->n_gpu_layers = e->n_gpu_layers;
    r->reps = reps;
    time_t t0 = time(NULL);
    strftime(r->test_time, sizeof r->test_time, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t0));
}

int bn_bench_run_engine(const bn_engine *e, int n_prompt, int n_gen, int reps, bool warmup, bn_bench_result *r,
                        char *err, size_t errlen) {
    const bn_model *m = e->m;
    if (reps < 1 || reps > BN_BENCH_MAX_REPS) return bn_err(err, errlen, "repetitions must be 1..%d", BN_BENCH_MAX_REPS);
    if (n_prompt < 0 || n_gen < 0 || n_prompt + n_gen == 0) return bn_err(err, errlen, "empty test");
    result_init(r, e, n_prompt, n_gen, reps);
    bn_engine_state *s = bn_engine_state_new(e, n_prompt + n_gen, err, errlen);
    if (!s) return -1;
    int rc = 0;
    if (warmup) {
        if (n_prompt > 0) rc = bench_prompt(m, s, n_prompt, err, errlen);
        bn_engine_state_reset(s);
        if (rc == 0 && n_gen > 0) rc = bench_gen(m, s, 1, err, errlen);
    }
    for (int i = 0; i < reps && rc == 0; i++) {
        bn_engine_state_reset(s);
        uint64_t t_start = now_ns();
        if (n_prompt > 0) rc = bench_prompt(m, s, n_prompt, err, errlen);
        if (rc == 0 && n_gen > 0) rc = bench_gen(m, s, n_gen, err, errlen);
        r->samples_ns[i] = now_ns() - t_start;
    }
    bn_engine_state_free(s);
    return rc;
}

// tokens: the tokens one repetition of r processes.
static double tokens(const bn_bench_result *r) { return r->n_prompt + (double)r->n_gen * (r->n_seq > 1 ? r->n_seq : 1); }

int bn_bench_run_batched(const bn_engine *e, int n_gen, int n_seq, int n_verify, int reps, bool warmup,
                         bn_bench_result *r, char *err, size_t errlen) {
    if (n_seq < 1 || n_seq > 64) return bn_err(err, errlen, "sequences must be 1..64 (got %d)", n_seq);
    if (n_verify > BN_ENGINE_MAX_SNAPS) return bn_err(err, errlen, "tokens per pass must be 1..%d (got %d)",
                                                      BN_ENGINE_MAX_SNAPS, n_verify);
    if (n_verify < 1) n_verify = 1;
    if (reps < 1 || reps > BN_BENCH_MAX_REPS) return bn_err(err, errlen, "repetitions must be 1..%d", BN_BENCH_MAX_REPS);
    if (n_gen < 1) return bn_err(err, errlen, "empty test");
    result_init(r, e, 0, n_gen, reps);
    r->n_seq = n_seq;
    r->n_verify = n_verify;
    bn_engine_state **s = xcalloc((size_t)n_seq, sizeof *s);
    bn_engine_snapshot **snaps = xcalloc((size_t)n_seq * n_verify, sizeof *snaps); // [n_seq][n_verify]
    int rc = 0;
    for (int t = 0; t < n_seq && rc == 0; t++)
        if (!(s[t] = bn_engine_state_new(e, n_gen, err, errlen))) rc = -1;
    for (size_t j = 0; n_verify > 1 && j < (size_t)n_seq * n_verify && rc == 0; j++)
        if (!(snaps[j] = bn_engine_snapshot_new(s[j / n_verify], err, errlen))) rc = -1;
    if (rc == 0 && warmup)
        rc = bench_gen_seqs(e->m, s, snaps, n_seq, n_verify, n_verify < n_gen ? n_verify : n_gen, err, errlen);
    for (int i = 0; i < reps && rc == 0; i++) {
        for (int t = 0; t < n_seq; t++) bn_engine_state_reset(s[t]);
        const uint64_t t_start = now_ns();
        rc = bench_gen_seqs(e->m, s, snaps, n_seq, n_verify, n_gen, err, errlen);
        r->samples_ns[i] = now_ns() - t_start;
    }
    for (size_t j = 0; j < (size_t)n_seq * n_verify; j++) bn_engine_snapshot_free(snaps[j]);
    for (int t = 0; t < n_seq; t++) bn_engine_state_free(s[t]);
    free(snaps), free(s);
    return rc;
}

double bn_bench_avg_ts(const bn_bench_result *r) {
    double sum = 0;
    for (int i = 0; i < r->reps; i++) sum += 1e9 * tokens(r) / (double)r->samples_ns[i];
    return r->reps ? sum / r->reps : 0;
}

double bn_bench_stdev_ts(const bn_bench_result *r) {
    if (r->reps < 2) return 0;
    double mean = bn_bench_avg_ts(r), sq = 0;
    for (int i = 0; i < r->reps; i++) {
        double ts = 1e9 * tokens(r) / (double)r->samples_ns[i];
        sq += (ts - mean) * (ts - mean);
    }
    return sqrt(sq / (r->reps - 1));
}

const char *bn_bench_test_name(const bn_bench_result *r, char *buf, size_t n) {
    if (r->n_prompt > 0 && r->n_gen == 0) snprintf(buf, n, "pp%d", r->n_prompt);
    else if (r->n_gen > 0 && r->n_prompt == 0) snprintf(buf, n, "tg%d", r->n_gen);
    else snprintf(buf, n, "pp%d+tg%d", r->n_prompt, r->n_gen);
    if (r->n_depth > 0) {
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, " @ d%d", r->n_depth);
    }
    if (r->n_seq > 1) {
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, " x%d", r->n_seq);
    }
    if (r->n_verify > 1) {
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, " v%d", r->n_verify);
    }
    return buf;
}

// Column widths of llama-bench's markdown printer (negative = left-aligned).
static const char *const md_names[] = {"model", "size", "params", "backend", "threads", "test", "t/s"};
static const int md_widths[] = {-30, 10, 10, -10, 7, 15, 20};
enum { MD_COLS = 7 };

void bn_bench_print_md_header(FILE *f) {
    fputc('|', f);
    for (int c = 0; c < MD_COLS; c++) fprintf(f, " %*s |", md_widths[c], md_names[c]);
    fputs("\n|", f);
    for (int c = 0; c < MD_COLS; c++) {
        int w = abs(md_widths[c]);
        fputc(' ', f);
        for (int i = 0; i < w - 1; i++) fputc('-', f);
        fprintf(f, "%s |", md_widths[c] > 0 ? ":" : "-");
    }
    fputc('\n', f);
}

void bn_bench_print_md_row(FILE *f, const bn_bench_result *r) {
    char size[64], params[64], threads[16], test[64], ts[96];
    if (r->model_size < 1024ull * 1024 * 1024) snprintf(size, sizeof size, "%.2f MiB", r->model_size / 1024.0 / 1024.0);
    else snprintf(size, sizeof size, "%.2f GiB", r->model_size / 1024.0 / 1024.0 / 1024.0);
    if (r->model_n_params < 1000 * 1000 * 1000) snprintf(params, sizeof params, "%.2f M", r->model_n_params / 1e6);
    else snprintf(params, sizeof params, "%.2f B", r->model_n_params / 1e9);
    snprintf(threads, sizeof threads, "%d", r->n_threads);
    bn_bench_test_name(r, test, sizeof test);
    snprintf(ts, sizeof ts, "%.2f \xc2\xb1 %.2f", bn_bench_avg_ts(r), bn_bench_stdev_ts(r));
    const char *cells[MD_COLS] = {r->model_type, size, params, r->backend[0] ? r->backend : "CPU", threads, test, ts};
    fputc('|', f);
    for (int c = 0; c < MD_COLS; c++) {
        int w = md_widths[c] + (c == MD_COLS - 1 ? 1 : 0); // "±" is 2 bytes (llama-bench's same hack)
        fprintf(f, " %*s |", w, cells[c]);
    }
    fputc('\n', f);
}

void bn_bench_print_md_footer(FILE *f, const char *commit, int number) {
    fprintf(f, "\nbuild: %s (%d)\n", commit, number);
}

// json_str: s as a JSON string literal (escapes quotes, backslashes and control bytes).
static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

void bn_bench_print_json(FILE *f, const bn_bench_result *r, int n, const char *commit, int number) {
    fputs("[\n", f);
    for (int k = 0; k < n; k++) {
        const bn_bench_result *t = &r[k];
        double avg_ns = 0, sd_ns = 0;
        for (int i = 0; i < t->reps; i++) avg_ns += (double)t->samples_ns[i] / t->reps;
        for (int i = 0; t->reps > 1 && i < t->reps; i++)
            sd_ns += ((double)t->samples_ns[i] - avg_ns) * ((double)t->samples_ns[i] - avg_ns) / (t->reps - 1);
        sd_ns = sqrt(sd_ns);
        fputs("  {\n    \"build_commit\": ", f);
        json_str(f, commit);
        fprintf(f, ",\n    \"build_number\": %d,\n    \"cpu_info\": \"\",\n    \"gpu_info\": \"\",\n"
                   "    \"backends\": \"%s\",\n    \"model_filename\": ", number, t->backend[0] ? t->backend : "CPU");
        json_str(f, t->model_filename);
        fputs(",\n    \"model_type\": ", f);
        json_str(f, t->model_type);
        fprintf(f, ",\n    \"model_size\": %llu,\n    \"model_n_params\": %lld,\n", (unsigned long long)t->model_size,
                (long long)t->model_n_params);
        fprintf(f, "    \"n_batch\": 2048,\n    \"n_ubatch\": 512,\n    \"n_threads\": %d,\n"
                   "    \"type_k\": \"%s\",\n    \"type_v\": \"%s\",\n    \"n_gpu_layers\": %d,\n"
                   "    \"flash_attn\": false,\n    \"use_mmap\": true,\n    \"embeddings\": false,\n",
                t->n_threads, t->n_gpu_layers > 0 ? "f16" : "f32", t->n_gpu_layers > 0 ? "f16" : "f32", t->n_gpu_layers);
        fprintf(f, "    \"n_prompt\": %d,\n    \"n_gen\": %d,\n    \"n_depth\": %d,\n    \"test_time\": \"%s\",\n",
                t->n_prompt, t->n_gen, t->n_depth, t->test_time);
        if (t->n_seq > 1) fprintf(f, "    \"n_seq\": %d,\n", t->n_seq); // ours: sequences decoded at once
        if (t->n_verify > 1) fprintf(f, "    \"n_verify\": %d,\n", t->n_verify); // ours: tokens per pass
        fprintf(f, "    \"avg_ns\": %llu,\n    \"stddev_ns\": %llu,\n    \"avg_ts\": %.6f,\n    \"stddev_ts\": %.6f,\n",
                (unsigned long long)avg_ns, (unsigned long long)sd_ns, bn_bench_avg_ts(t), bn_bench_stdev_ts(t));
        fputs("    \"samples_ns\": [ ", f);
        for (int i = 0; i < t->reps; i++) fprintf(f, "%s%llu", i ? ", " : "", (unsigned long long)t->samples_ns[i]);
        fputs(" ],\n    \"samples_ts\": [ ", f);
        for (int i = 0; i < t->reps; i++)
            fprintf(f, "%s%.6f", i ? ", " : "", 1e9 * tokens(t) / (double)t->samples_ns[i]);
        fprintf(f, " ]\n  }%s\n", k + 1 < n ? "," : "");
    }
    fputs("]\n", f);
}
