// recipe/run.c — a bonsai-antidoom run's stage bookkeeping: paths in its folder, the stage lines with elapsed time and
// ETA, and the manifest records that make a run resumable (recipe/run.h).
#include <stdarg.h>
#include <stdio.h>
#include "base/progress.h"
#include "base/util.h"
#include "recipe/run.h"

const char *bn_run_path(const bn_recipe_run *r, char *buf, size_t n, const char *fmt, ...) {
    int k = snprintf(buf, n, "%s/", r->c->out_dir);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + k, n - (size_t)k, fmt, ap);
    va_end(ap);
    return buf;
}

json_t *bn_run_stage(bn_recipe_run *r, const char *name, uint64_t sig, const char *what) {
    r->stage_no++;
    if (r->stage_no > r->stage_plan) r->stage_plan = r->stage_no;
    json_t *done = bn_manifest_done(r->man, name, sig);
    char el[32], eta[48] = "";
    double elapsed = (bn_time_ms() - r->t0) / 1000;
    if (r->stages_run > 0) // the pace of the stages that ran, over the stages still planned
        snprintf(eta, sizeof eta, ", ETA ~%s", bn_format_duration(el, sizeof el, r->stage_ms / 1000 / r->stages_run *
                                                                                    (r->stage_plan - r->stage_no + 1)));
    fprintf(stderr, "bonsai-antidoom: [%d/%d] %s: %s (%s elapsed%s)\n", r->stage_no, r->stage_plan, name, what,
            bn_format_duration(el, sizeof el, elapsed), eta);
    r->stage_start = bn_time_ms();
    return done;
}

json_t *bn_run_stage_done(bn_recipe_run *r, const char *name, uint64_t sig, json_t *result, char *err, size_t errlen) {
    double ms = bn_time_ms() - r->stage_start;
    r->stage_ms += ms;
    r->stages_run++;
    return bn_manifest_finish(r->man, name, sig, ms / 1000, result, err, errlen);
}
