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
#include "base/args.h"
#include "base/lineout.h"
#include "base/util.h"
#include "core/model.h"
#include "core/tokenizer.h"
#include "eval/stats.h"
#include "gguf/gguf.h"
#include "mine/loop_eval.h"
#include "mine/options.h"

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

static int from_log(const char *path, const bn_mine_opts *o, const char *label, const char *json_path) {
    char err[1024];
    gguf_file *gf = o->eng.model ? gguf_open(o->eng.model, err, sizeof err) : NULL;
    if (o->eng.model && !gf) return fail(err);
    bn_tokenizer *tok = gf ? bn_tokenizer_from_gguf(gf, err, sizeof err) : NULL;
    if (gf && !tok) return fail(err);
    bn_loop_outcomes out;
    int rc = bn_loop_eval_log(path, tok, &o->mine.rep, &o->mine.frame, &out, err, sizeof err);
    bn_tokenizer_free(tok);
    gguf_close(gf);
    bn_loop_stats st;
    if (rc == 0) bn_loop_outcomes_stats(&out, true, &st);
    bn_loop_outcomes_free(&out);
    return rc ? fail(err) : report(&st, label ? label : path, json_path, "log");
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
    bn_lineout *log = eo.log_path ? bn_lineout_open(eo.log_path, err, sizeof err) : NULL;
    if (eo.log_path && !log) return fail(err);
    bn_loop_outcomes out;
    if (bn_loop_eval_run(o, m, tok, prompts, n, "prompts", "bonsai-eval-loops", log, &out, err, sizeof err)) {
        if (log) bn_lineout_abort(log);
        return fail(err);
    }
    if (log && bn_lineout_commit(log, err, sizeof err) < 0) return fail(err);
    bn_loop_stats st;
    bn_loop_outcomes_stats(&out, true, &st);
    bn_loop_outcomes_free(&out);
    // what the rate is of: primed continuations, or greedy / sampled completions
    const char *what = o->mine.mode == BN_MINE_PRIME ? "primed" : bn_mine_opts_greedy(o) ? "greedy" : "sampled";
    int rc = report(&st, eo.label ? eo.label : o->eng.model, eo.json_path, what);
    bn_tokenizer_free(tok);
    bn_model_free(m);
    bn_mine_opts_free(o);
    bn_prompts_free(prompts, n);
    return rc;
}
