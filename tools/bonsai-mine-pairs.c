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
#include "base/lineout.h"
#include "mine/options.h"
#include "mine/regularise.h"
#include "mine/resume.h"
#include "mine/runner.h"

static void usage(FILE *f) {
    fprintf(f, "usage: bonsai-mine-pairs -m MODEL.gguf -p PROMPTS.jsonl -o PAIRS.jsonl [options]\n"
               "       bonsai-mine-pairs --regularise PAIRS.jsonl -o TRAIN.jsonl [options]\n\n"
               "mining:\n"
               "  -o, --out PATH              pair rows (.jsonl, appended line by line)\n"
               "  --gen-log PATH              generation log (default <out without .jsonl>.generations.jsonl)\n"
               "  --resume                    continue an interrupted run (outputs must exist)\n"
               "  --target-pairs N            stop after N pairs (default 20000)\n"
               "  --split train|heldout       recorded in every row\n"
               "  --model-sha256 HEX          recorded in gen{} (not computed)\n");
    bn_mine_opts_help(f);
    fprintf(f, "\nregularisation (--regularise IN):\n"
               "  --max-rows N                max_train_examples (default: no explicit limit)\n"
               "  --headroom F                N <= floor(F * pool) (default 0.7; 1 = off)\n"
               "  --rejected-strength S       rejected-token flattening (default 0.3)\n"
               "  --chosen-strength S         chosen-token flattening (default 0.5; 0 = off)\n"
               "  --balance off|sqrt|equal    source balancing (default off)\n"
               "  --max-rejected-share F      cap any rejected token's share (default off; e.g. 0.25)\n"
               "  --no-dedupe                 keep identical contexts\n"
               "  --seed N                    selection seed (default 3407)\n"
               "  --top N                     rejected tokens shown (default 10)\n"
               "  --heldout-out PATH          hold out whole prime-phrase (or prompt) groups into PATH first\n"
               "  --heldout-share F           share of groups held out (default 0.2)\n");
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

int main(int argc, char **argv) {
    char err[1024];
    bn_mine_opts o = bn_mine_opts_default();
    bn_reg_params rp = bn_reg_params_default();
    const char *out_path = NULL, *gen_log = NULL, *reg_in = NULL, *split = NULL, *sha = NULL, *heldout_out = NULL;
    double heldout_share = 0.2;
    int target_pairs = 20000, top = 10;
    bool resume = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = bn_mine_opts_flag(&o, argc, argv, &i, err, sizeof err);
        if (r < 0) return fail(err);
        if (r == 1) {
            if (!strcmp(a, "--seed")) rp.seed = o.mine.gen.seed; // one --seed for both modes
            continue;
        }
        bool has = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if ((!strcmp(a, "-o") || !strcmp(a, "--out")) && has) out_path = argv[++i];
        else if (!strcmp(a, "--gen-log") && has) gen_log = argv[++i];
        else if (!strcmp(a, "--resume")) resume = true;
        else if (!strcmp(a, "--target-pairs") && has) target_pairs = (int)bn_arg_int("bonsai-mine-pairs", a, argv[++i], 1, INT32_MAX);
        else if (!strcmp(a, "--split") && has) split = argv[++i];
        else if (!strcmp(a, "--model-sha256") && has) sha = argv[++i];
        else if (!strcmp(a, "--regularise") && has) reg_in = argv[++i];
        else if (!strcmp(a, "--max-rows") && has) rp.max_rows = (int)bn_arg_int("bonsai-mine-pairs", a, argv[++i], 0, INT32_MAX);
        else if (!strcmp(a, "--headroom") && has) rp.headroom = bn_arg_float("bonsai-mine-pairs", a, argv[++i], 0, 1e6);
        else if (!strcmp(a, "--rejected-strength") && has) rp.rejected_strength = bn_arg_float("bonsai-mine-pairs", a, argv[++i], 0, 1);
        else if (!strcmp(a, "--chosen-strength") && has) rp.chosen_strength = bn_arg_float("bonsai-mine-pairs", a, argv[++i], 0, 1);
        else if (!strcmp(a, "--balance") && has) {
            if (bn_balance_parse(argv[++i], &rp.balance) < 0) return fail("--balance: expected off, sqrt or equal");
        } else if (!strcmp(a, "--max-rejected-share") && has) rp.max_rejected_share = bn_arg_float("bonsai-mine-pairs", a, argv[++i], 0, 1);
        else if (!strcmp(a, "--no-dedupe")) rp.dedupe_contexts = false;
        else if (!strcmp(a, "--top") && has) top = (int)bn_arg_int("bonsai-mine-pairs", a, argv[++i], 0, 1 << 20);
        else if (!strcmp(a, "--heldout-out") && has) heldout_out = argv[++i];
        else if (!strcmp(a, "--heldout-share") && has) heldout_share = bn_arg_float("bonsai-mine-pairs", a, argv[++i], 0, 1);
        else {
            bn_arg_unknown("bonsai-mine-pairs", a);
        }
    }
    if (!out_path) { usage(stderr); return fail("-o/--out is required"); }
    if (reg_in) return regularise_main(reg_in, out_path, &rp, top, heldout_share, heldout_out);
    if (!o.model_path || !o.prompts_path) { usage(stderr); return fail("-m and -p are required"); }
    if (bn_gen_params_penalized(&o.mine.gen))
        return fail("repetition penalties are for bonsai-eval-loops (a penalty hides the loops mining looks for, and "
                    "pair rows do not record it)");
    if (bn_path_is_gz(out_path)) return fail("mining output must be plain .jsonl (it is appended); use --regularise to write .gz");
    char default_log[4096];
    if (!gen_log) {
        size_t l = strlen(out_path);
        int stem = l > 6 && !strcmp(out_path + l - 6, ".jsonl") ? (int)(l - 6) : (int)l;
        snprintf(default_log, sizeof default_log, "%.*s.generations.jsonl", stem, out_path);
        gen_log = default_log;
    }
    bn_resume_state rs = {0};
    if (resume) {
        if (bn_mine_resume(gen_log, out_path, &rs, err, sizeof err) < 0) return fail(err);
        fprintf(stderr, "resuming: %d prompts done, %d pairs, %d loops\n", rs.n_done, rs.n_pairs, rs.n_loops);
    } else if (access(out_path, F_OK) == 0 || access(gen_log, F_OK) == 0) {
        fprintf(stderr, "bonsai-mine-pairs: %s or %s exists: use --resume to continue, or remove them\n", out_path, gen_log);
        return 1;
    }
    int n_skipped = 0;
    bn_prompt *prompts = NULL;
    int n_prompts = bn_prompts_read(o.prompts_path, &o.prompts, &prompts, &n_skipped, err, sizeof err);
    if (n_prompts < 0) return fail(err);
    if (n_skipped) fprintf(stderr, "skipped %d prompts from agentic sources\n", n_skipped);
    bn_model *m = bn_model_load(o.model_path, err, sizeof err);
    if (!m) return fail(err);
    bn_tokenizer *tok = bn_tokenizer_from_gguf(m->gguf, err, sizeof err);
    if (!tok) return fail(err);
    char desc[256];
    bn_model_describe(m, desc, sizeof desc);
    const char *ftype = strrchr(desc, ' ') ? strrchr(desc, ' ') + 1 : desc;
    o.mine.model_file = o.model_path;
    o.mine.model_sha256 = sha;
    o.mine.file_type = ftype;
    o.mine.split = split;
    bn_engine *eng; // -ngl: the in-process engine on the GPU, and the batcher of its --parallel sources
    bn_step_batcher *batch;
    if (bn_mine_opts_engine(&o, m, &eng, &batch, err, sizeof err) != 0) return fail(err);
    bn_source **srcs = bn_mine_opts_sources(&o, m, tok, eng, batch, err, sizeof err);
    if (!srcs) return fail(err);
    FILE *fp = fopen(out_path, "a"), *fg = fopen(gen_log, "a");
    if (!fp || !fg) return fail("cannot open the outputs for appending");
    miner mn = {.fp = fp, .fg = fg, .fp_path = out_path, .fg_path = gen_log, .prompts = prompts, .n_pairs = rs.n_pairs, .n_loops = rs.n_loops,
                .n_before = rs.n_done, .target = target_pairs, .t0 = bn_time_ms()};
    bn_progress_start(&mn.bar, "mining", n_prompts);
    if (rs.n_done < n_prompts && mn.n_pairs < target_pairs)
        bn_mine_run(srcs, o.n_parallel, tok, prompts, rs.n_done, n_prompts, &o, on_result, &mn);
    int rc = mn.rc, n_done = mn.n_done, n_pairs = mn.n_pairs, n_loops = mn.n_loops;
    bn_progress *bar = &mn.bar;
    bn_progress_finish(bar, NULL);
    fclose(fp);
    fclose(fg);
    fprintf(stderr, "done: %d prompts this run, %d pairs, %d loops in total; pairs in %s, log in %s\n", n_done, n_pairs,
            n_loops, out_path, gen_log);
    bn_mine_opts_sources_free(&o, srcs);
    bn_step_batcher_free(batch);
    bn_engine_free(eng);
    bn_tokenizer_free(tok);
    bn_model_free(m);
    bn_mine_opts_free(&o);
    bn_prompts_free(prompts, n_prompts);
    return rc;
}
