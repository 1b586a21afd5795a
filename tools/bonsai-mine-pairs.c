// tools/bonsai-mine-pairs.c — mine doom-loop preference pairs (docs/antidoom.md §2-8):
//   bonsai-mine-pairs -m MODEL.gguf -p PROMPTS.jsonl -o PAIRS.jsonl [--gen-log LOG.jsonl] [--resume]
//                     [--mode sample|prime] [--target-pairs N] [generation flags...]
//   bonsai-mine-pairs --regularise PAIRS.jsonl[.gz] -o TRAIN.jsonl[.gz] [regularisation flags...]
// Mining appends one pair line and one generation-log line per prompt (flushed), so an interrupted
// run continues with --resume. Regularisation (dedupe, chosen/rejected flattening, balancing,
// headroom) writes the selected rows atomically and prints the top rejected tokens before/after.
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <jansson.h>
#include "core/engine.h"
#include "spec/step_batch.h"
#include "core/model.h"
#include "core/tokenizer.h"
#include "base/util.h"
#include "base/args.h"
#include "base/lineout.h"
#include "mine/options.h"
#include "mine/regularise.h"
#include "mine/resume.h"
#include "mine/runner.h"

typedef struct {
    bn_mine_opts o;
    bn_reg_params rp;
    const char *out_path, *gen_log, *reg_in, *split, *sha, *heldout_out;
    double heldout_share;
    int target_pairs, top;
    bool resume;
} pairs_opts;

// balance_fn: --balance off|sqrt|equal.
static int balance_fn(void *base, const char *opt, const char *v, char *err, size_t errlen) {
    pairs_opts *po = base;
    return bn_balance_parse(v, &po->rp.balance) < 0 ? bn_err(err, errlen, "'%s' is not one of off|sqrt|equal", v) : 0;
}

#define O(f) offsetof(pairs_opts, f)
static const bn_arg mining_args[] = {
    BN_SECTION("mining"),
    BN_STR("-o, --out", O(out_path), "PATH",
           "pair rows (.jsonl, appended line by line); with --regularise the selected rows (.jsonl[.gz]) (required)"),
    BN_STR("--gen-log", O(gen_log), "PATH", "generation log (default <out without .jsonl>.generations.jsonl)"),
    BN_TRUE("--resume", O(resume), "continue an interrupted run (outputs must exist)"),
    BN_INT("--target-pairs", O(target_pairs), "N", "stop after N pairs", 1, INT32_MAX),
    BN_STR("--split", O(split), "train|heldout", "recorded in every row"),
    BN_STR("--model-sha256", O(sha), "HEX", "recorded in gen{} (not computed)"),
    {0}};

static const bn_arg reg_args[] = {
    BN_SECTION("regularisation (--regularise IN -o OUT)"),
    BN_STR("--regularise", O(reg_in), "IN", "regularise the pair rows of IN (.jsonl[.gz]) into -o instead of mining"),
    BN_INT("--max-rows", O(rp.max_rows), "N", "max_train_examples (0: no explicit limit)", 0, INT32_MAX),
    BN_DOUBLE("--headroom", O(rp.headroom), "F", "N <= floor(F * pool) (1: off)", 0, 1e6),
    BN_DOUBLE("--rejected-strength", O(rp.rejected_strength), "S", "rejected-token flattening", 0, 1),
    BN_DOUBLE("--chosen-strength", O(rp.chosen_strength), "S", "chosen-token flattening (0: off)", 0, 1),
    BN_FN("--balance", balance_fn, "off|sqrt|equal", "source balancing (default off)"),
    BN_DOUBLE("--max-rejected-share", O(rp.max_rejected_share), "F",
              "cap any rejected token's share (0: off; e.g. 0.25)", 0, 1),
    BN_FALSE("--no-dedupe", O(rp.dedupe_contexts), "keep identical contexts"),
    BN_INT("--top", O(top), "N", "rejected tokens shown", 0, 1 << 20),
    BN_STR("--heldout-out", O(heldout_out), "PATH", "hold out whole prime-phrase (or prompt) groups into PATH first"),
    BN_DOUBLE("--heldout-share", O(heldout_share), "F", "share of groups held out", 0, 1),
    {0}};
#undef O

static const bn_args_tool tool = {
    .name = "bonsai-mine-pairs",
    .usage = "usage: bonsai-mine-pairs -m MODEL.gguf -p PROMPTS.jsonl -o PAIRS.jsonl [options]\n"
             "       bonsai-mine-pairs --regularise PAIRS.jsonl -o TRAIN.jsonl [options]\n",
    .notes = "-s/--seed also seeds the regularisation's selection (default 3407). Repetition penalties and DRY are\n"
             "bonsai-eval-loops' (a penalty hides the loops mining looks for).\n"};

// parse_args: the options into po (exits on --help, --version or a bad or missing option).
static void parse_args(pairs_opts *po, int argc, char **argv) {
    *po = (pairs_opts){.o = bn_mine_opts_default(), .rp = bn_reg_params_default(), .heldout_share = 0.2,
                       .target_pairs = 20000, .top = 10};
    const bn_arg_table tables[] = {BN_TABLE(mining_args, po),
                                   BN_TABLE(bn_engine_args, &po->o.eng),
                                   BN_TABLE(bn_mine_args, &po->o),
                                   BN_TABLE(reg_args, po),
                                   BN_TABLE(bn_progress_args, NULL),
                                   BN_HIDDEN_TABLE(bn_mine_penalty_args, &po->o), // refused below, by name
                                   {0}};
    bn_args_parse(&tool, tables, argc, argv);
    if (bn_args_given("--seed")) po->rp.seed = po->o.mine.gen.seed; // one --seed for both modes
    if (!po->out_path) bn_args_fail(&tool, "-o/--out is required");
    if (po->reg_in) return;
    if (!po->o.eng.model || !po->o.prompts_path) bn_args_fail(&tool, "-m and -p are required");
    if (bn_gen_params_penalized(&po->o.mine.gen))
        bn_args_fail(&tool, "repetition penalties are for bonsai-eval-loops (a penalty hides the loops mining looks "
                            "for, and pair rows do not record it)");
}

static int fail(const char *msg) {
    fprintf(stderr, "bonsai-mine-pairs: %s\n", msg);
    return 1;
}

static int regularise_main(const char *in, const char *out, bn_reg_params *rp, int top, double heldout_share,
                           const char *heldout_out) {
    char err[1024];
    bn_pair_row *rows = NULL;
    int n = bn_pairs_read(in, &rows, err, sizeof err);
    if (n < 0) return fail(err);
    if (heldout_out) { // held-out groups go to their own file; the rest is regularised
        int n_held = bn_split_heldout(rows, n, heldout_share, rp->seed);
        bn_pair_row *held = xcalloc((size_t)n_held + 1, sizeof *held);
        int h = 0, t = 0;
        for (int i = 0; i < n; i++) {
            if (!strcmp(rows[i].split, "heldout")) held[h++] = rows[i];
            else rows[t++] = rows[i];
        }
        fprintf(stderr, "held out %d rows (%.0f%% of the phrase/prompt groups) -> %s\n", h, 100 * heldout_share, heldout_out);
        int wrc = bn_pairs_write(heldout_out, held, h, err, sizeof err);
        bn_pairs_free(held, h);
        n = t;
        if (wrc < 0) { bn_pairs_free(rows, n); return fail(err); }
    }
    bn_reg_print_top(stderr, rows, n, top, "input");
    bn_pair_row *sel = NULL;
    bn_reg_stats st;
    int k = bn_regularise(rows, n, rp, &sel, &st);
    fprintf(stderr, "rows %d, duplicates %d, chosen entries pruned %d, rows without chosen %d, pool %d, target %d, out %d\n",
            st.n_in, st.n_duplicates, st.n_chosen_pruned, st.n_rows_no_chosen, st.n_pool, st.n_target, st.n_out);
    bn_reg_print_stats(stderr, rp, &st);
    bn_reg_print_top(stderr, sel, k, top, "output");
    int rc = bn_pairs_write(out, sel, k, err, sizeof err) < 0 ? fail(err) : 0;
    bn_pairs_free(rows, n);
    bn_pairs_free(sel, k);
    return rc;
}

// Appends a line + newline and flushes; returns 0 or -1.
static int put_line(FILE *f, const char *line) {
    if (fputs(line, f) == EOF || fputc('\n', f) == EOF || fflush(f) != 0) return -1;
    return 0;
}

// Mining state shared with the in-order result callback.
typedef struct {
    FILE *fp, *fg;
    const char *fp_path, *fg_path;
    const bn_prompt *prompts;
    int n_pairs, n_loops, n_done, n_before, target, rc;
    int64_t n_tokens;
    double t0;
    bn_progress bar;
} miner;

// emit: appends line (NULL: it could not be made, why says so) to f, the file at path; returns false, with the error
// printed and mn->rc set, when it cannot.
static bool emit(miner *mn, FILE *f, const char *path, const char *line, const char *why) {
    char msg[1400];
    errno = 0;
    if (line && put_line(f, line) == 0) return true;
    if (line) snprintf(msg, sizeof msg, "cannot write %s: %s (--resume continues)", path, strerror(errno));
    else snprintf(msg, sizeof msg, "cannot write %s: %s", path, why);
    mn->rc = fail(msg);
    return false;
}

// Writes prompt i's pair (if any) and log line; returns false to stop (target reached or I/O error).
static bool on_result(void *vctx, int i, int rc, bn_mine_result *r, const char *why) {
    miner *mn = vctx;
    char err[1024];
    if (rc < 0) {
        fprintf(stderr, "\nbonsai-mine-pairs: prompt %d (line %d) skipped: %s\n", i, mn->prompts[i].line, why);
        // log the skip so --resume does not redo it
        bn_gen_row g = {.source = mn->prompts[i].source, .prompt = "", .completion = "", .status = "error"};
        g.extra = json_pack("{s:i,s:s}", "prompt_index", i, "error", why);
        char *line = bn_gen_row_to_line(&g, err, sizeof err);
        json_decref(g.extra);
        bool ok = emit(mn, mn->fg, mn->fg_path, line, err);
        free(line);
        return ok;
    }
    char *pline = r->has_pair ? bn_pair_row_to_line(&r->pair, err, sizeof err) : NULL;
    char *gline = bn_gen_row_to_line(&r->gen, err, sizeof err);
    bool ok = (!r->has_pair || emit(mn, mn->fp, mn->fp_path, pline, err)) &&
              emit(mn, mn->fg, mn->fg_path, gline, err);
    free(pline);
    free(gline);
    if (!ok) return false;
    mn->n_pairs += r->has_pair;
    mn->n_loops += r->looped;
    mn->n_done++;
    mn->n_tokens += r->n_generated;
    char extra[160];
    double s = (bn_time_ms() - mn->t0) / 1000.0;
    snprintf(extra, sizeof extra, "pairs %d, loops %d (%.1f%%), %.1f tok/s", mn->n_pairs, mn->n_loops,
             100.0 * mn->n_loops / (mn->n_before + mn->n_done), s > 0 ? mn->n_tokens / s : 0);
    bn_progress_update(&mn->bar, i + 1, extra);
    return mn->n_pairs < mn->target;
}

// check_outputs: the default generation log name, and the resume state (--resume) or a check that the outputs are
// new; returns 0 or the exit status.
static int check_outputs(pairs_opts *po, char *default_log, size_t n, bn_resume_state *rs) {
    char err[1024];
    if (bn_path_is_gz(po->out_path))
        return fail("mining output must be plain .jsonl (it is appended); use --regularise to write .gz");
    if (!po->gen_log) {
        size_t l = strlen(po->out_path);
        int stem = l > 6 && !strcmp(po->out_path + l - 6, ".jsonl") ? (int)(l - 6) : (int)l;
        snprintf(default_log, n, "%.*s.generations.jsonl", stem, po->out_path);
        po->gen_log = default_log;
    }
    if (po->resume) {
        if (bn_mine_resume(po->gen_log, po->out_path, rs, err, sizeof err) < 0) return fail(err);
        fprintf(stderr, "resuming: %d prompts done, %d pairs, %d loops\n", rs->n_done, rs->n_pairs, rs->n_loops);
    } else if (access(po->out_path, F_OK) == 0 || access(po->gen_log, F_OK) == 0) {
        fprintf(stderr, "bonsai-mine-pairs: %s or %s exists: use --resume to continue, or remove them\n", po->out_path,
                po->gen_log);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    char err[1024], default_log[4096];
    pairs_opts po;
    parse_args(&po, argc, argv);
    if (po.reg_in) return regularise_main(po.reg_in, po.out_path, &po.rp, po.top, po.heldout_share, po.heldout_out);
    bn_mine_opts *o = &po.o;
    bn_resume_state rs = {0};
    int orc = check_outputs(&po, default_log, sizeof default_log, &rs);
    if (orc) return orc;
    int n_skipped = 0;
    bn_prompt *prompts = NULL;
    int n_prompts = bn_prompts_read(o->prompts_path, &o->prompts, &prompts, &n_skipped, err, sizeof err);
    if (n_prompts < 0) return fail(err);
    if (n_skipped) fprintf(stderr, "skipped %d prompts from agentic sources\n", n_skipped);
    bn_model *m = bn_model_load(o->eng.model, err, sizeof err);
    if (!m) return fail(err);
    bn_mine_opts_for_model(o, m);
    bn_tokenizer *tok = bn_tokenizer_from_gguf(m->gguf, err, sizeof err);
    if (!tok) return fail(err);
    char desc[256];
    bn_model_describe(m, desc, sizeof desc);
    o->mine.model_file = o->eng.model;
    o->mine.model_sha256 = po.sha;
    o->mine.file_type = strrchr(desc, ' ') ? strrchr(desc, ' ') + 1 : desc;
    o->mine.split = po.split;
    bn_mine_gen gen; // -ngl: the in-process engine on the GPU, and the batcher of its --parallel sources
    if (bn_mine_gen_open(o, m, tok, &gen, err, sizeof err) != 0) return fail(err);
    FILE *fp = fopen(po.out_path, "a"), *fg = fopen(po.gen_log, "a");
    if (!fp || !fg) return fail("cannot open the outputs for appending");
    miner mn = {.fp = fp, .fg = fg, .fp_path = po.out_path, .fg_path = po.gen_log, .prompts = prompts,
                .n_pairs = rs.n_pairs, .n_loops = rs.n_loops, .n_before = rs.n_done, .target = po.target_pairs,
                .t0 = bn_time_ms()};
    bn_progress_start(&mn.bar, "prompts", n_prompts);
    if (rs.n_done < n_prompts && mn.n_pairs < po.target_pairs)
        bn_mine_run(gen.srcs, o->n_parallel, tok, prompts, rs.n_done, n_prompts, o, on_result, &mn);
    bn_progress_finish(&mn.bar, NULL);
    fclose(fp);
    fclose(fg);
    fprintf(stderr, "done: %d prompts this run, %d pairs, %d loops in total; pairs in %s, log in %s\n", mn.n_done,
            mn.n_pairs, mn.n_loops, po.out_path, po.gen_log);
    bn_mine_gen_close(o, &gen);
    bn_tokenizer_free(tok);
    bn_model_free(m);
    bn_mine_opts_free(o);
    bn_prompts_free(prompts, n_prompts);
    return mn.rc;
}
