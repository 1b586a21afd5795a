// tools/bonsai-eval-loops.c — doom-loop rate of a model (docs/antidoom.md §13):
//   bonsai-eval-loops -m MODEL.gguf -p PROMPTS.jsonl [--mode sample|prime] [--label NAME]
//                     [--json OUT.json] [--gen-log LOG.jsonl] [generation flags...]
//   bonsai-eval-loops --from-log LOG.jsonl[.gz] [--label NAME] [--json OUT.json]
// --from-log re-runs the detector on the "completion" of every row of an existing generation log
// (ours or antidoom's iter_0_generations.jsonl); lengths are in characters there unless the rows
// carry n_tokens, and the length-limit share needs hit_limit in the rows. The frame-loop detector runs over the
// completion's tokens with -m (its tokenizer), else over word pieces (detect/frame.h).
// Generates one completion per prompt, runs the detector on the completion text and reports the
// loop rate and the frame-loop rate (docs/antidoom.md §16) with 95% Wilson intervals, the share that hit --n-predict, and mean/median length in
// tokens. In prime mode the rate is the primed loop-continuation rate (1 - escape rate).
// Defaults follow antidoom's generation settings; pass --temp 0 for greedy evaluation.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/engine.h"
#include "spec/step_batch.h"
#include "core/model.h"
#include "core/tokenizer.h"
#include "base/util.h"
#include "base/args.h"
#include "base/lineout.h"
#include "mine/options.h"
#include "mine/runner.h"
#include "eval/stats.h"
#include "detect/frame.h"
#include "gguf/gguf.h"
#include "base/unicode.h"
#include <jansson.h>

typedef struct {
    bn_mine_opts o;
    const char *label, *json_path, *log_path, *from;
} eval_opts;

#define O(f) offsetof(eval_opts, f)
static const bn_arg eval_args[] = {
    BN_STR("--label", O(label), "NAME", "label in the JSON result (default: the model path)"),
    BN_STR("--json", O(json_path), "PATH", "also write the JSON result to PATH (atomically)"),
    BN_STR("--gen-log", O(log_path), "PATH", "write the generation log (.jsonl or .jsonl.gz)"),
    BN_STR("--from-log", O(from), "PATH", "no generation: the detector over the completions of an existing log"),
    {0}};
#undef O

static const bn_args_tool tool = {
    .name = "bonsai-eval-loops",
    .usage = "usage: bonsai-eval-loops -m MODEL.gguf -p PROMPTS.jsonl [options]\n"
             "       bonsai-eval-loops --from-log LOG.jsonl[.gz] [--label NAME] [--json OUT.json]\n"
             "The doom-loop rate of a model (95% Wilson interval), the share that hit -n, mean/median length.\n",
    .notes = "Defaults follow antidoom's generation settings (but -n: the model's training context / 64, within\n"
             "256..4000, and --thinking: the model's own template); pass --temp 0 for a greedy evaluation.\n"};

// parse_args: the options into eo (exits on --help, --version or a bad or missing option).
static void parse_args(eval_opts *eo, int argc, char **argv) {
    *eo = (eval_opts){.o = bn_mine_opts_default()};
    const bn_arg_table tables[] = {BN_TABLE(eval_args, eo),
                                   BN_TABLE(bn_engine_args, &eo->o.eng),
                                   BN_TABLE(bn_mine_args, &eo->o),
                                   BN_TABLE(bn_mine_penalty_args, &eo->o),
                                   BN_TABLE(bn_progress_args, NULL),
                                   {0}};
    bn_args_parse(&tool, tables, argc, argv);
    if (!eo->from && (!eo->o.eng.model || !eo->o.prompts_path)) bn_args_fail(&tool, "-m and -p are required");
}

static int fail(const char *msg) {
    fprintf(stderr, "bonsai-eval-loops: %s\n", msg);
    return 1;
}

// Prints (and optionally writes) the statistics; returns the exit code.
static int report(const bn_loop_stats *st, const char *label, const char *json_path, const char *what) {
    char err[1024];
    char *js = bn_loop_stats_json(st, label);
    printf("%s\n", js);
    fprintf(stderr, "%s: loop rate %.2f%% (95%% CI %.2f-%.2f%%), frame-loop rate %.2f%% (95%% CI %.2f-%.2f%%) over "
                    "%lld completions, %.2f%% hit the length limit, length mean %.0f median %.0f, seq-rep-4 %.3f\n",
            what, 100 * st->loop_rate, 100 * st->ci_lo, 100 * st->ci_hi, 100 * st->frame_rate, 100 * st->frame_ci_lo,
            100 * st->frame_ci_hi, (long long)st->n, 100 * st->length_limit_share, st->mean_len, st->median_len,
            st->mean_rep4);
    int rc = 0;
    if (json_path && bn_write_file_atomic(json_path, js, strlen(js), err, sizeof err) < 0) rc = fail(err);
    free(js);
    return rc;
}

// Evaluation state shared with the in-order result callback.
typedef struct {
    const bn_prompt *prompts;
    bn_lineout *log;
    bool *looped, *limit, *frame;
    double *len, *rep4; // completion length; seq-rep-4 of its words (eval/stats.h)
    int n_ok, n_loops, rc;
    bn_progress bar;
} evaluator;

// Records prompt i's outcome (and log line); returns false on an I/O error.
static bool on_result(void *vctx, int i, int rc, bn_mine_result *r, const char *why) {
    evaluator *ev = vctx;
    char err[1024];
    if (rc < 0) {
        fprintf(stderr, "\nbonsai-eval-loops: prompt %d (line %d) skipped: %s\n", i, ev->prompts[i].line, why);
        return true;
    }
    ev->looped[ev->n_ok] = r->loop_verbatim;
    ev->limit[ev->n_ok] = r->hit_limit;
    ev->frame[ev->n_ok] = r->loop_frame;
    ev->len[ev->n_ok] = r->n_generated;
    ev->rep4[ev->n_ok] = r->gen.completion ? bn_seq_rep_n(r->gen.completion, strlen(r->gen.completion), 4) : -1;
    ev->n_ok++;
    ev->n_loops += r->loop_verbatim;
    if (ev->log) {
        char *line = bn_gen_row_to_line(&r->gen, err, sizeof err);
        if (!line || bn_lineout_write(ev->log, line, strlen(line), err, sizeof err) < 0) ev->rc = 1;
        free(line);
    }
    char extra[96];
    snprintf(extra, sizeof extra, "loops %d/%d", ev->n_loops, ev->n_ok);
    bn_progress_update(&ev->bar, i + 1, extra);
    return ev->rc == 0;
}

// frame_loop: the frame-loop detector over text's tokens (tok) or word pieces (tok NULL); returns true when it fires.
static bool frame_loop(const char *text, const bn_tokenizer *tok, const bn_frame_params *fp) {
    int32_t *ids = NULL;
    size_t len = strlen(text);
    int n = tok ? bn_tokenize(tok, text, len, false, false, &ids) : (int)bn_frame_units(text, len, &ids);
    bn_frame_hit h;
    bool r = n > 0 && bn_find_frame_loop(ids, (size_t)n, fp, &h) == 1;
    free(ids);
    return r;
}

static int from_log(const char *path, const bn_mine_opts *o, const char *label, const char *json_path) {
    char err[1024];
    const bn_rep_params *rp = &o->mine.rep;
    gguf_file *gf = o->eng.model ? gguf_open(o->eng.model, err, sizeof err) : NULL;
    if (o->eng.model && !gf) return fail(err);
    bn_tokenizer *tok = gf ? bn_tokenizer_from_gguf(gf, err, sizeof err) : NULL;
    if (gf && !tok) return fail(err);
    bn_lines *l = bn_lines_open(path, err, sizeof err);
    if (!l) return fail(err);
    int cap = 1024, n = 0, line_no = 0;
    bool *looped = xmalloc((size_t)cap), *limit = xmalloc((size_t)cap), *frame = xmalloc((size_t)cap);
    double *len = xmalloc((size_t)cap * sizeof *len), *rep4 = xmalloc((size_t)cap * sizeof *rep4);
    const char *line;
    size_t ll;
    while ((line = bn_lines_next(l, &ll))) {
        line_no++;
        if (ll == 0) continue;
        bn_gen_row g;
        if (bn_gen_row_parse(line, ll, &g, err, sizeof err) < 0) {
            fprintf(stderr, "bonsai-eval-loops: %s:%d: %s\n", path, line_no, err);
            bn_lines_close(l);
            free(looped), free(limit), free(frame), free(len), free(rep4);
            return 1;
        }
        if (n == cap) {
            cap *= 2;
            looped = xrealloc(looped, (size_t)cap);
            limit = xrealloc(limit, (size_t)cap);
            frame = xrealloc(frame, (size_t)cap);
            len = xrealloc(len, (size_t)cap * sizeof *len);
            rep4 = xrealloc(rep4, (size_t)cap * sizeof *rep4);
        }
        bn_rep_hit hit;
        uint32_t *cp = xmalloc((strlen(g.completion) + 1) * sizeof *cp);
        size_t ncp = bn_utf8_to_cps(g.completion, strlen(g.completion), cp, NULL);
        looped[n] = bn_find_repetition(cp, ncp, rp, &hit) == 1;
        rep4[n] = bn_seq_rep_n(g.completion, strlen(g.completion), 4);
        frame[n] = frame_loop(g.completion, tok, &o->mine.frame);
        free(cp);
        json_t *nt = g.extra ? json_object_get(g.extra, "n_tokens") : NULL;
        json_t *hl = g.extra ? json_object_get(g.extra, "hit_limit") : NULL;
        len[n] = json_is_integer(nt) ? (double)json_integer_value(nt) : (double)ncp;
        limit[n] = json_is_true(hl);
        n++;
        bn_gen_row_free(&g);
    }
    bn_tokenizer_free(tok);
    gguf_close(gf);
    if (bn_lines_failed(l, err, sizeof err)) {
        bn_lines_close(l);
        free(looped), free(limit), free(frame), free(len), free(rep4);
        return fail(err);
    }
    bn_lines_close(l);
    bn_loop_stats st;
    bn_loop_stats_compute(looped, limit, len, rep4, n, &st);
    bn_loop_stats_frame(&st, frame, n);
    free(looped); free(limit); free(frame); free(len); free(rep4);
    return report(&st, label ? label : path, json_path, "log");
}

int main(int argc, char **argv) {
    char err[1024];
    eval_opts eo;
    parse_args(&eo, argc, argv);
    bn_mine_opts *o = &eo.o;
    if (eo.from) return from_log(eo.from, o, eo.label, eo.json_path);
    bn_prompt *prompts = NULL;
    int n_skipped = 0;
    int n = bn_prompts_read(o->prompts_path, &o->prompts, &prompts, &n_skipped, err, sizeof err);
    if (n < 0) return fail(err);
    bn_model *m = bn_model_load(o->eng.model, err, sizeof err);
    if (!m) return fail(err);
    bn_mine_opts_for_model(o, m);
    if (!bn_args_given("-n")) o->mine.gen.n_predict = bn_eval_n_predict_default(m->cfg.n_ctx_train);
    fprintf(stderr, "bonsai-eval-loops: %d new tokens per prompt, %s\n", o->mine.gen.n_predict,
            o->mine.thinking == 1 ? "<think> open" : o->mine.thinking == 0 ? "<think> closed" : "plain ChatML");
    bn_tokenizer *tok = bn_tokenizer_from_gguf(m->gguf, err, sizeof err);
    if (!tok) return fail(err);
    o->mine.chosen.max_tokens = 0; // no pair rows needed
    bn_engine *eng; // -ngl: the in-process engine on the GPU, and the batcher of its --parallel sources
    bn_step_batcher *batch;
    if (bn_mine_opts_engine(o, m, &eng, &batch, err, sizeof err) != 0) return fail(err);
    bn_source **srcs = bn_mine_opts_sources(o, m, tok, eng, batch, err, sizeof err);
    if (!srcs) return fail(err);
    bn_lineout *log = eo.log_path ? bn_lineout_open(eo.log_path, err, sizeof err) : NULL;
    if (eo.log_path && !log) return fail(err);
    evaluator ev = {.prompts = prompts, .log = log};
    ev.looped = xcalloc((size_t)n + 1, sizeof *ev.looped);
    ev.limit = xcalloc((size_t)n + 1, sizeof *ev.limit);
    ev.frame = xcalloc((size_t)n + 1, sizeof *ev.frame);
    ev.len = xcalloc((size_t)n + 1, sizeof *ev.len);
    ev.rep4 = xcalloc((size_t)n + 1, sizeof *ev.rep4);
    bn_progress_start(&ev.bar, "prompts", n);
    bn_mine_run(srcs, o->n_parallel, tok, prompts, 0, n, o, on_result, &ev);
    int rc = ev.rc;
    bn_progress_finish(&ev.bar, NULL);
    if (log && (rc || bn_lineout_commit(log, err, sizeof err) < 0)) return fail(rc ? "writing the log failed" : err);
    bn_loop_stats st;
    bn_loop_stats_compute(ev.looped, ev.limit, ev.len, ev.rep4, ev.n_ok, &st);
    bn_loop_stats_frame(&st, ev.frame, ev.n_ok);
    // what the rate is of: primed continuations, or greedy / sampled completions
    const char *what = o->mine.mode == BN_MINE_PRIME ? "primed" : bn_mine_opts_greedy(o) ? "greedy" : "sampled";
    if (report(&st, eo.label ? eo.label : o->eng.model, eo.json_path, what)) rc = 1;
    free(ev.looped), free(ev.limit), free(ev.frame), free(ev.len), free(ev.rep4);
    bn_mine_opts_sources_free(o, srcs);
    bn_step_batcher_free(batch);
    bn_engine_free(eng);
    bn_tokenizer_free(tok);
    bn_model_free(m);
    bn_mine_opts_free(o);
    bn_prompts_free(prompts, n);
    return rc;
}
