// mine/loop_eval.c — the shared loop evaluation (see loop_eval.h).
#include "mine/loop_eval.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/progress.h"
#include "base/unicode.h"
#include "base/util.h"
#include "core/tokenizer.h"
#include "mine/runner.h"

// push: room for one more outcome in out; returns its index.
static int push(bn_loop_outcomes *out) {
    if (out->n == out->cap) {
        out->cap = out->cap ? 2 * out->cap : 1024;
        size_t c = (size_t)out->cap;
        out->looped = xrealloc(out->looped, c * sizeof *out->looped);
        out->frame = xrealloc(out->frame, c * sizeof *out->frame);
        out->limit = xrealloc(out->limit, c * sizeof *out->limit);
        out->len = xrealloc(out->len, c * sizeof *out->len);
        out->rep4 = xrealloc(out->rep4, c * sizeof *out->rep4);
    }
    return out->n++;
}

void bn_loop_outcomes_free(bn_loop_outcomes *out) {
    free(out->looped), free(out->frame), free(out->limit), free(out->len), free(out->rep4);
    *out = (bn_loop_outcomes){0};
}

void bn_loop_outcomes_stats(const bn_loop_outcomes *out, bool with_frame, bn_loop_stats *st) {
    bn_loop_stats_compute(out->looped, out->limit, out->len, out->rep4, out->n, st);
    if (with_frame) bn_loop_stats_frame(st, out->frame, out->n);
}

// State of one generating evaluation, filled in prompt order by on_result.
typedef struct {
    const bn_prompt *prompts;
    const char *who;
    bn_lineout *log;
    bn_loop_outcomes *out;
    int n_loops;
    bool log_failed;
    bn_progress bar;
} run_state;

// on_result: records prompt i's outcome (and log row); returns false when the log could not be written.
static bool on_result(void *vctx, int i, int rc, bn_mine_result *r, const char *why) {
    run_state *s = vctx;
    char err[512];
    if (rc < 0) {
        fprintf(stderr, "\n%s: prompt %d (line %d) skipped: %s\n", s->who, i, s->prompts[i].line, why);
        return true;
    }
    bn_loop_outcomes *out = s->out;
    int k = push(out);
    out->looped[k] = r->loop_verbatim;
    out->frame[k] = r->loop_frame;
    out->limit[k] = r->hit_limit;
    out->len[k] = r->n_generated;
    out->rep4[k] = r->gen.completion ? bn_seq_rep_n(r->gen.completion, strlen(r->gen.completion), 4) : -1;
    out->n_tokens += r->n_generated;
    s->n_loops += r->loop_verbatim;
    if (s->log) {
        char *line = bn_gen_row_to_line(&r->gen, err, sizeof err);
        if (!line || bn_lineout_write(s->log, line, strlen(line), err, sizeof err) < 0) s->log_failed = true;
        free(line);
    }
    char extra[64];
    snprintf(extra, sizeof extra, "loops %d/%d", s->n_loops, out->n);
    bn_progress_update(&s->bar, i + 1, extra);
    return !s->log_failed;
}

int bn_loop_eval_run(bn_mine_opts *o, const struct bn_model *m, const struct bn_tokenizer *tok,
                     const bn_prompt *prompts, int n, const char *label, const char *who, bn_lineout *log,
                     bn_loop_outcomes *out, char *err, size_t errlen) {
    *out = (bn_loop_outcomes){0};
    o->mine.chosen.max_tokens = 0; // no pair rows needed
    bn_mine_gen gen;
    if (bn_mine_gen_open(o, m, tok, &gen, err, errlen)) return -1;
    run_state s = {.prompts = prompts, .who = who, .log = log, .out = out};
    double t0 = bn_time_ms();
    bn_progress_start(&s.bar, label, n);
    bn_mine_run(gen.srcs, o->n_parallel, tok, prompts, 0, n, o, on_result, &s);
    bn_progress_finish(&s.bar, NULL);
    out->seconds = (bn_time_ms() - t0) / 1000;
    bn_mine_gen_close(o, &gen);
    return s.log_failed ? bn_err(err, errlen, "writing the generation log failed") : 0;
}

// frame_loop: the frame-loop detector over text's tokens (tok) or word pieces (tok NULL); returns true when it fires.
static bool frame_loop(const char *text, const struct bn_tokenizer *tok, const bn_frame_params *fp) {
    int32_t *ids = NULL;
    size_t len = strlen(text);
    int n = tok ? bn_tokenize(tok, text, len, false, false, &ids) : (int)bn_frame_units(text, len, &ids);
    bn_frame_hit h;
    bool r = n > 0 && bn_find_frame_loop(ids, (size_t)n, fp, &h) == 1;
    free(ids);
    return r;
}

// log_row: the outcome of one generation-log row g into out.
static void log_row(const bn_gen_row *g, const struct bn_tokenizer *tok, const bn_rep_params *rep,
                    const bn_frame_params *frame, bn_loop_outcomes *out) {
    int k = push(out);
    size_t len = strlen(g->completion);
    uint32_t *cp = xmalloc((len + 1) * sizeof *cp);
    size_t ncp = bn_utf8_to_cps(g->completion, len, cp, NULL);
    bn_rep_hit hit;
    out->looped[k] = bn_find_repetition(cp, ncp, rep, &hit) == 1;
    out->rep4[k] = bn_seq_rep_n(g->completion, len, 4);
    out->frame[k] = frame_loop(g->completion, tok, frame);
    free(cp);
    json_t *nt = g->extra ? json_object_get(g->extra, "n_tokens") : NULL;
    json_t *hl = g->extra ? json_object_get(g->extra, "hit_limit") : NULL;
    out->len[k] = json_is_integer(nt) ? (double)json_integer_value(nt) : (double)ncp;
    out->limit[k] = json_is_true(hl);
}

int bn_loop_eval_log(const char *path, const struct bn_tokenizer *tok, const bn_rep_params *rep,
                     const bn_frame_params *frame, bn_loop_outcomes *out, char *err, size_t errlen) {
    *out = (bn_loop_outcomes){0};
    bn_lines *l = bn_lines_open(path, err, errlen);
    if (!l) return -1;
    int line_no = 0, rc = 0;
    const char *line;
    size_t ll;
    while (rc == 0 && (line = bn_lines_next(l, &ll))) {
        line_no++;
        if (ll == 0) continue;
        bn_gen_row g;
        char why[512];
        if (bn_gen_row_parse(line, ll, &g, why, sizeof why) < 0) {
            rc = bn_err(err, errlen, "%s:%d: %s", path, line_no, why);
            break;
        }
        log_row(&g, tok, rep, frame, out);
        bn_gen_row_free(&g);
    }
    if (rc == 0 && bn_lines_failed(l, err, errlen)) rc = -1;
    bn_lines_close(l);
    return rc;
}
