// tools/bonsai-eval-tasks.c — held-out task scores of a model under a sampler setting (docs/antidoom.md §17):
//   bonsai-eval-tasks -m MODEL.gguf --tasks TASKS.jsonl [-o OUT.json] [--n-tokens 32] [penalties, DRY] [-t -c -ngl]
// Completes every task's prompt greedily (the repetition penalties and DRY apply when given) and scores the
// completion against the reference: exact match of the first line, and token accuracy over the first N reference
// tokens; per family and overall with 95% Wilson intervals, as a table on stdout and (with -o) JSON.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/args.h"
#include "base/progress.h"
#include "base/util.h"
#include "core/chat.h"
#include "core/engine.h"
#include "core/model.h"
#include "core/tokenizer.h"
#include "eval/tasks.h"
#include "mine/options.h"
#include "records/tasks.h"
#include <jansson.h>
#include <pthread.h>

typedef struct {
    bn_mine_opts o; // the engine (-m -t -c -ngl), the generation settings and the penalty options
    const char *tasks_path, *json_path, *label;
    int n_tokens, n_predict, thinking;
} tasks_opts;

#define O(f) offsetof(tasks_opts, f)
static const bn_arg tasks_args[] = {
    BN_STR("--tasks", O(tasks_path), "PATH", "task file, JSONL {id, family, prompt, reference[, chat]} (required)"),
    BN_STR("-o, --output", O(json_path), "PATH", "also write the JSON result to PATH (atomically)"),
    BN_STR("--label", O(label), "NAME", "label in the JSON result (default: the model path)"),
    BN_INT("--n-tokens", O(n_tokens), "N", "reference tokens the token accuracy compares", 1, 1 << 20),
    BN_INT("-n, --n-predict", O(n_predict), "N",
           "tokens to generate per task (0, the default: the reference's first line plus --n-tokens)", 0, 1 << 30),
    BN_INT("--thinking", O(thinking), "1|0|-1",
           "chat tasks: <think> open (1), closed (0), plain ChatML (-1)", -1, 1),
    BN_INT("--parallel", O(o.n_parallel), "N",
           "tasks in flight at once, each with its own state and threads/N threads (with -ngl their decode steps run "
           "batched)", 1, 256),
    {0}};
#undef O

static const bn_args_tool tool = {
    .name = "bonsai-eval-tasks",
    .usage = "usage: bonsai-eval-tasks -m MODEL.gguf --tasks TASKS.jsonl [-o OUT.json] [options]\n"
             "Greedy completions of held-out task prompts scored against their references: exact match of the first\n"
             "line and token accuracy over the first N reference tokens, per family and overall (95% Wilson "
             "intervals).\n",
    .notes = "Decoding is greedy; the penalty and DRY options change it as in bonsai-run (docs/antidoom.md §17).\n"};

static void parse_args(tasks_opts *to, int argc, char **argv) {
    *to = (tasks_opts){.o = bn_mine_opts_default(), .n_tokens = 32, .thinking = 0};
    const bn_arg_table tables[] = {BN_TABLE(tasks_args, to),
                                   BN_TABLE(bn_engine_args, &to->o.eng),
                                   BN_TABLE(bn_mine_penalty_args, &to->o),
                                   BN_TABLE(bn_progress_args, NULL),
                                   {0}};
    bn_args_parse(&tool, tables, argc, argv);
    if (!to->o.eng.model || !to->tasks_path) bn_args_fail(&tool, "-m and --tasks are required");
    to->o.mine.gen.temperature = 0; // greedy
    to->o.mine.gen.n_probs = 0;
    to->o.mine.gen.seed = 0;
}

static int fail(const char *msg) {
    fprintf(stderr, "bonsai-eval-tasks: %s\n", msg);
    return 1;
}

// first_line_tokens: reference tokens up to and including the one that ends its first line (all when it has one line).
static int first_line_tokens(const bn_tokenizer *tok, const char *ref, const int32_t *ids, int n) {
    size_t need = bn_task_first_line(ref, strlen(ref)) + 1, have = 0;
    char buf[256];
    for (int i = 0; i < n; i++) {
        int k = bn_token_to_piece(tok, ids[i], buf, sizeof buf, true);
        have += (size_t)(k < 0 ? -k : k);
        if (have >= need) return i + 1;
    }
    return n;
}

// prompt_text: the task's prompt as given to the model (a malloc'd string), or NULL when the template refuses it.
static char *prompt_text(const bn_task *t, int thinking) {
    if (!t->chat) return xstrdup(t->prompt);
    bn_chat_msg msg = {.role = "user", .content = t->prompt};
    return bn_chat_render(&msg, 1, true, thinking);
}

// One task's outcome, kept for the JSON.
typedef struct {
    bn_task_score s;
    int n_generated;
    bool hit_limit;
} task_out;

// run_task: generates and scores task t on src; returns 0 or -1 with err.
static int run_task(bn_source *src, const bn_tokenizer *tok, const tasks_opts *to, const bn_task *t, task_out *out,
                    char *err, size_t errlen) {
    char *text = prompt_text(t, to->thinking);
    if (!text) return bn_err(err, errlen, "the chat template refuses the prompt");
    int32_t *pids, *rids;
    int n_ref, np = bn_task_tokens(tok, text, t->reference, &pids, &rids, &n_ref);
    free(text);
    if (np < 0) return bn_err(err, errlen, "the prompt tokenizes to nothing");
    bn_gen_params gp = to->o.mine.gen;
    gp.n_predict = to->n_predict > 0 ? to->n_predict : first_line_tokens(tok, t->reference, rids, n_ref) + to->n_tokens;
    bn_gen_result g;
    int rc = src->generate(src, pids, np, &gp, &g, err, errlen);
    free(pids);
    if (rc < 0) {
        free(rids);
        return -1;
    }
    size_t gl;
    char *gen = bn_detokenize(tok, g.ids, g.n, false, &gl);
    out->s = bn_task_score_one(gen, gl, g.ids, g.n, t->reference, strlen(t->reference), rids, n_ref, to->n_tokens);
    out->n_generated = g.n;
    out->hit_limit = g.hit_limit;
    free(gen);
    free(rids);
    bn_gen_result_free(&g);
    return 0;
}

// num: a float option as the number it was given as (7 significant digits: 1.1, not 1.100000023841858).
static double num(float x) {
    char b[32];
    snprintf(b, sizeof b, "%.7g", (double)x);
    return strtod(b, NULL);
}

// sampler_json: the generation settings that decide the completions.
static json_t *sampler_json(const bn_gen_params *p) {
    return json_pack("{s:f,s:i,s:f,s:f,s:f,s:f,s:i,s:f,s:i}", "temperature", 0.0, "repeat_last_n", p->repeat_last_n,
                     "repeat_penalty", num(p->repeat_penalty), "frequency_penalty", num(p->frequency_penalty),
                     "presence_penalty", num(p->presence_penalty), "dry_multiplier", num(p->dry_multiplier),
                     "dry_allowed_length", p->dry_allowed_length, "dry_base", num(p->dry_base), "dry_penalty_last_n",
                     p->dry_penalty_last_n);
}

// result_json: the whole result as a malloc'd one-line JSON string.
static char *result_json(const tasks_opts *to, const bn_task *tasks, const task_out *outs, int n,
                         const bn_task_stats *rows, int n_rows) {
    json_t *o = json_object();
    json_object_set_new(o, "label", json_string(to->label ? to->label : to->o.eng.model));
    json_object_set_new(o, "model", json_string(to->o.eng.model));
    json_object_set_new(o, "tasks_file", json_string(to->tasks_path));
    json_object_set_new(o, "sampler", sampler_json(&to->o.mine.gen));
    json_object_set_new(o, "n_tokens", json_integer(to->n_tokens));
    json_object_set_new(o, "n_predict", json_integer(to->n_predict));
    const bn_task_stats *all = &rows[n_rows - 1];
    json_t *overall = bn_task_stats_json(all, 1);
    json_object_set(o, "overall", json_array_get(overall, 0));
    json_decref(overall);
    json_object_set_new(o, "families", bn_task_stats_json(rows, n_rows - 1));
    json_t *per = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(per, json_pack("{s:s,s:s,s:b,s:i,s:i,s:i,s:b}", "id", tasks[i].id, "family",
                                             tasks[i].family, "exact", outs[i].s.exact, "tokens", outs[i].s.n_tokens,
                                             "token_correct", outs[i].s.n_correct, "n_generated", outs[i].n_generated,
                                             "hit_limit", outs[i].hit_limit));
    json_object_set_new(o, "tasks", per);
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    return s;
}

// report: prints the table, writes the JSON; returns the exit status.
static int report(const tasks_opts *to, const bn_task *tasks, const task_out *outs, int n) {
    const char **fam = xmalloc((size_t)n * sizeof *fam);
    bn_task_score *sc = xmalloc((size_t)n * sizeof *sc);
    for (int i = 0; i < n; i++) fam[i] = tasks[i].family, sc[i] = outs[i].s;
    bn_task_stats *rows;
    int n_rows = bn_task_stats_compute(fam, sc, n, &rows);
    bn_task_stats_print(stdout, rows, n_rows, to->n_tokens);
    int rc = 0;
    if (to->json_path) {
        char err[1024], *js = result_json(to, tasks, outs, n, rows, n_rows);
        if (bn_write_file_atomic(to->json_path, js, strlen(js), err, sizeof err) < 0) rc = fail(err);
        free(js);
    }
    free(rows);
    free(fam);
    free(sc);
    return rc;
}

// The tasks shared by the workers (one per source): the next task to take, the count done, the first error.
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const tasks_opts *to;
    const bn_task *tasks;
    const bn_tokenizer *tok;
    task_out *outs;
    int n, next, done, failed; // failed: 1 + the index of the first task that failed (0: none)
    char err[1024];
} work;

typedef struct {
    work *w;
    bn_source *src;
} worker_arg;

static void *worker(void *va) {
    worker_arg *wa = va;
    work *w = wa->w;
    char err[1024];
    for (;;) {
        pthread_mutex_lock(&w->mu);
        int i = w->failed || w->next >= w->n ? -1 : w->next++;
        pthread_mutex_unlock(&w->mu);
        if (i < 0) break;
        int rc = run_task(wa->src, w->tok, w->to, &w->tasks[i], &w->outs[i], err, sizeof err);
        pthread_mutex_lock(&w->mu);
        w->done++;
        if (rc < 0 && !w->failed) w->failed = i + 1, snprintf(w->err, sizeof w->err, "%s", err);
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
    return NULL;
}

// run_all: the tasks on n_src sources at once, progress on the calling thread; returns 0, or 1 with the first failure
// printed.
static int run_all(const tasks_opts *to, const bn_task *tasks, int n, const bn_tokenizer *tok, bn_source **srcs,
                   int n_src, task_out *outs) {
    work w = {.to = to, .tasks = tasks, .tok = tok, .outs = outs, .n = n};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    pthread_t *th = xmalloc((size_t)n_src * sizeof *th);
    worker_arg *wa = xmalloc((size_t)n_src * sizeof *wa);
    for (int k = 0; k < n_src; k++) {
        wa[k] = (worker_arg){&w, srcs[k]};
        pthread_create(&th[k], NULL, worker, &wa[k]);
    }
    bn_progress bar;
    bn_progress_start(&bar, "tasks", n);
    pthread_mutex_lock(&w.mu);
    for (int seen = 0; w.done < n && !w.failed;) {
        while (w.done == seen && !w.failed) pthread_cond_wait(&w.cv, &w.mu);
        seen = w.done;
        pthread_mutex_unlock(&w.mu);
        bn_progress_update(&bar, seen, NULL);
        pthread_mutex_lock(&w.mu);
    }
    pthread_mutex_unlock(&w.mu);
    for (int k = 0; k < n_src; k++) pthread_join(th[k], NULL);
    bn_progress_finish(&bar, NULL);
    if (w.failed) {
        const bn_task *t = &tasks[w.failed - 1];
        fprintf(stderr, "bonsai-eval-tasks: %s:%d (%s): %s\n", to->tasks_path, t->line, t->id, w.err);
    }
    free(th);
    free(wa);
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    return w.failed ? 1 : 0;
}

int main(int argc, char **argv) {
    char err[1024];
    tasks_opts to;
    parse_args(&to, argc, argv);
    bn_mine_opts *o = &to.o;
    bn_task *tasks;
    int n = bn_tasks_read(to.tasks_path, &tasks, err, sizeof err);
    if (n < 0) return fail(err);
    bn_model *m = bn_model_load(o->eng.model, err, sizeof err);
    if (!m) return fail(err);
    bn_tokenizer *tok = bn_tokenizer_from_gguf(m->gguf, err, sizeof err);
    if (!tok) return fail(err);
    bn_mine_gen gen; // -ngl: the engine on the device, and the batcher of its --parallel sources
    if (bn_mine_gen_open(o, m, tok, &gen, err, sizeof err) != 0) return fail(err);
    task_out *outs = xcalloc((size_t)n, sizeof *outs);
    int rc = run_all(&to, tasks, n, tok, gen.srcs, o->n_parallel > 0 ? o->n_parallel : 1, outs);
    if (rc == 0) rc = report(&to, tasks, outs, n);
    free(outs);
    bn_mine_gen_close(o, &gen);
    bn_tokenizer_free(tok);
    bn_model_free(m);
    bn_tasks_free(tasks, n);
    return rc;
}
