// recipe/output.c — each kind's output from its pick, and the held-out evaluation of outputs and bases: loop rate on
// the held-out prompts (never seen by a pick), on a prompt source no stage touched, perplexity on the held-out text,
// chosen_win on the validation pairs, size on disk and decode speed.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "base/util.h"
#include "recipe/run.h"

// copy_file: src to dst, atomically; 0 or -1 (err).
static int copy_file(const char *src, const char *dst, char *err, size_t errlen) {
    FILE *in = fopen(src, "rb");
    if (!in) return bn_err(err, errlen, "cannot open %s: %s", src, strerror(errno));
    bn_atomic_file af;
    if (bn_atomic_open(&af, dst, err, errlen)) {
        fclose(in);
        return -1;
    }
    char buf[1 << 16];
    size_t n;
    int ok = 1;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, af.f) == n;
    ok = ok && !ferror(in);
    fclose(in);
    if (!ok) {
        bn_atomic_abort(&af);
        return bn_err(err, errlen, "cannot copy %s to %s", src, dst);
    }
    return bn_atomic_commit(&af, err, errlen);
}

static double size_of(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (double)st.st_size : 0;
}

// untouched: the loop statistics of model on a prompt file no stage reads before the end (DIR/eval-NAME-WHICH.json);
// file NULL or "": none (st left zero). 0 or -1 (err).
static int untouched(bn_recipe_run *r, const char *model, const bn_measure_gen *g, const char *name,
                     const char *which, const char *file, bn_loop_stats *st, char *err, size_t errlen) {
    if (!file || !file[0]) return 0;
    char js[BN_PATH], label[160];
    bn_run_path(r, js, sizeof js, "eval-%s-%s.json", name, which);
    snprintf(label, sizeof label, "%s prompts (%s)", which, name);
    return bn_measure_loops(model, file, 0, g, label, js, NULL, st, NULL, err, errlen);
}

// put_untouched: st as res's fields WHICH_loops, WHICH_n, WHICH_loop_rate, WHICH_ci_lo, WHICH_ci_hi (recipe/report.c
// reads them by that prefix).
static void put_untouched(json_t *res, const char *which, const bn_loop_stats *st) {
    const char *key[5] = {"loops", "n", "loop_rate", "ci_lo", "ci_hi"};
    json_t *val[5] = {json_integer(st->n_loops), json_integer(st->n), json_real(st->loop_rate), json_real(st->ci_lo),
                      json_real(st->ci_hi)};
    char k[48];
    for (int i = 0; i < 5; i++) {
        snprintf(k, sizeof k, "%s_%s", which, key[i]);
        json_object_set_new(res, k, val[i]);
    }
}

json_t *bn_run_eval_model(bn_recipe_run *r, const char *name, const char *model, const char *adapter,
                          double size_bytes, char *err, size_t errlen) {
    const bn_recipe_cfg *c = r->c;
    bn_measure_gen g = r->g;
    g.adapter = adapter;
    char js[BN_PATH], log[BN_PATH], label[160];
    bn_run_path(r, js, sizeof js, "eval-%s.json", name);
    bn_run_path(r, log, sizeof log, "gen-%s.jsonl", name);
    bn_loop_stats st, su = {0}, so = {0};
    double tok_s = 0, ppl, cw = -1;
    snprintf(label, sizeof label, "held-out prompts (%s)", name);
    if (bn_measure_loops(model, c->heldout_prompts, 0, &g, label, js, log, &st, &tok_s, err, errlen)) return NULL;
    if ((ppl = bn_measure_ppl(model, c->heldout_text, 128, &g, err, errlen)) < 0) return NULL;
    if (untouched(r, model, &g, name, "unseen", c->unseen_prompts, &su, err, errlen) ||
        untouched(r, model, &g, name, "other", c->other_prompts, &so, err, errlen))
        return NULL;
    if (r->n_val_pairs > 0 && (cw = bn_measure_chosen_win(model, adapter, r->pairs_val, err, errlen)) < 0) return NULL;
    fprintf(stderr, "  %s: held-out loop rate %.1f %% (%lld/%lld), seq-rep-4 %.3f, perplexity %.4f\n", name,
            100 * st.loop_rate, (long long)st.n_loops, (long long)st.n, st.mean_rep4, ppl);
    json_t *res = json_pack("{s:s,s:f,s:f,s:f,s:I,s:I,s:f,s:f,s:f,s:f,s:f,s:f}", "model", model, "loop_rate",
                            st.loop_rate, "ci_lo", st.ci_lo, "ci_hi", st.ci_hi, "loops", (json_int_t)st.n_loops, "n",
                            (json_int_t)st.n, "seq_rep4", st.mean_rep4, "mean_len", st.mean_len, "ppl", ppl,
                            "chosen_win", cw, "size", size_bytes, "tok_s", tok_s);
    if (res) {
        put_untouched(res, "unseen", &su);
        put_untouched(res, "other", &so);
    }
    return res;
}

int bn_run_output(bn_recipe_run *r, bn_recipe_kind k, char *err, size_t errlen) {
    const char *kn = bn_recipe_kind_name(k);
    char name[64], what[256], src[BN_PATH], dst[BN_PATH], model[BN_PATH], adapter[BN_PATH];
    snprintf(name, sizeof name, "out-%s", kn);
    snprintf(what, sizeof what, "the %s output from %s, evaluated held-out", kn, r->pick[k]);
    uint64_t sig = bn_sig(bn_sig_file(bn_sig_file(bn_sig(r->sig_kind[k], "out lora"), r->c->heldout_prompts),
                                      r->c->heldout_text), r->c->unseen_prompts);
    sig = bn_sig_file(sig, r->c->other_prompts);
    if (bn_run_stage(r, name, sig, what)) return 0;
    bn_run_path(r, model, sizeof model, "%s.gguf", r->pick[k]);
    double size;
    if (k == BN_KIND_ADAPTER) {
        // the base file stays as it is; the output is the adapter, evaluated as the engine applies it (unmerged, on
        // the base file: --lora). (Its candidates were scored through their F16 merges, the same weights.)
        bn_run_path(r, src, sizeof src, "%s.adapter.gguf", r->pick[k]);
        bn_run_path(r, adapter, sizeof adapter, "antidoom-adapter.gguf");
        if (copy_file(src, adapter, err, errlen)) return -1;
        snprintf(model, sizeof model, "%s", r->c->model);
        size = size_of(r->c->model) + size_of(adapter);
    } else {
        bn_run_path(r, dst, sizeof dst, "antidoom-%s.gguf", kn);
        if (copy_file(model, dst, err, errlen)) return -1;
        snprintf(model, sizeof model, "%s", dst);
        size = size_of(dst);
    }
    snprintf(name, sizeof name, "antidoom-%s", kn);
    json_t *res = bn_run_eval_model(r, name, model, k == BN_KIND_ADAPTER ? adapter : NULL, size, err, errlen);
    if (!res) return -1;
    json_object_set_new(res, "pick", json_string(r->pick[k]));
    snprintf(name, sizeof name, "out-%s", kn);
    return bn_run_stage_done(r, name, sig, res, err, errlen) ? 0 : -1;
}
