// spec/spec_drafter.c — the DSpark drafter as the speculative loop's proposer (spec/spec_impl.h): on the CPU
// (bn_dstate; with a CPU target it borrows the target's workers, and the rounds that share it draft in one batched
// call) or on the target's device (the backend's registered bn_dev_drafter_ops; the taps stay in the target's device
// tap buffer when the backend hands it over, else go through page-locked host memory). The replay measurement aid
// runs the same drafter (its full cost) and proposes a recorded continuation instead of its drafts.
#include "spec/spec_impl.h"
#include "core/forward_impl.h" // the CPU target state's thread pool, shared with the drafter
#include "base/util.h"
#include <string.h>
#include <stdlib.h>

// ---- device drafters ------------------------------------------------------------------------
static struct {
    const bn_engine_ops *engine;
    const bn_dev_drafter_ops *ops;
} dev_drafters[4];

void bn_dev_drafter_register(const bn_engine_ops *engine_ops, const bn_dev_drafter_ops *ops) {
    int free_slot = -1;
    for (int i = 0; i < 4; i++) {
        if (dev_drafters[i].engine == engine_ops) {
            dev_drafters[i].ops = ops;
            return;
        }
        if (!dev_drafters[i].engine && free_slot < 0) free_slot = i;
    }
    if (free_slot >= 0 && ops) dev_drafters[free_slot].engine = engine_ops, dev_drafters[free_slot].ops = ops;
}

const bn_dev_drafter_ops *bn_dev_drafter_for(const bn_engine *e) {
    for (int i = 0; e && i < 4; i++)
        if (dev_drafters[i].engine == e->ops) return dev_drafters[i].ops;
    return NULL;
}

// group_done: a group's drafting call returned rc (err) with got[m] drafts for round r[at[m]]: their counts, the time
// each waited since t0, the failures; returns the number of rounds that failed.
static int group_done(bn_spec_round *r, const int *at, int g, const int *got, int rc, const char *err, int *nd,
                      double *ms, double t0) {
    int n_failed = 0;
    for (int m = 0; m < g; m++) {
        const int j = at[m];
        nd[j] = got[m], ms[j] = bn_time_ms() - t0; // each waited for its group and those drafted before it
        if (rc != 0) n_failed += spec_round_fail(&r[j]), snprintf(r[j].err, sizeof r[j].err, "%s", err);
    }
    return n_failed;
}

// ---- on the CPU -------------------------------------------------------------------------------------
// cpu_start: the drafter state (with a CPU target, on the target's pool) and the host tap rows; 0.
static int cpu_start(bn_spec *sp, int n_ctx, size_t tap_bytes, char *err, size_t errlen) {
    bn_state *cpu_ts = bn_engine_state_cpu(sp->target_state);
    sp->cpu.state = cpu_ts ? bn_dstate_new_pool(sp->drafter, n_ctx, cpu_ts->pool)
                           : bn_dstate_new(sp->drafter, n_ctx, sp->params.n_threads);
    if (sp->n_taps) sp->taps = xmalloc(tap_bytes);
    return 0;
}

static void cpu_stop(bn_spec *sp) {
    bn_dstate_free(sp->cpu.state);
    free(sp->taps);
}

static const char *cpu_where(const bn_spec *sp) { return "CPU"; }

static void cpu_restart(bn_spec *sp, int pos) { bn_dstate_truncate(sp->cpu.state, pos); }

static int cpu_process(bn_spec *sp, int n, int pos0, bool enqueue, char *err, size_t errlen) {
    bn_dstate_truncate(sp->cpu.state, pos0);
    return bn_drafter_process(sp->drafter, sp->cpu.state, sp->taps, n, pos0, err, errlen);
}

// cpu_flush_group: the pending rows of the group's rounds in one bn_drafter_process_multi.
static int cpu_flush_group(bn_spec_round *r, const int *at, int g) {
    int nq = 0, n_failed = 0;
    bn_process_seq q[BN_DRAFT_MULTI_MAX];
    for (int m = 0; m < g; m++) {
        bn_spec *o = r[at[m]].sp;
        if (o->n_pending == 0) continue;
        bn_dstate_truncate(o->cpu.state, o->pending_pos0);
        q[nq++] = (bn_process_seq){.s = o->cpu.state, .taps = o->taps, .n = o->n_pending, .pos0 = o->pending_pos0};
    }
    if (nq == 0) return 0;
    char err[256];
    const double t0 = bn_time_ms();
    const int rc = bn_drafter_process_multi(r[at[0]].sp->drafter, q, nq, err, sizeof err);
    const double t = bn_time_ms() - t0;
    for (int m = 0; m < g; m++) {
        bn_spec *o = r[at[m]].sp;
        if (o->n_pending == 0) continue;
        o->n_pending = 0;
        o->stats.ms_process += t;
        if (rc != 0) n_failed += spec_round_fail(&r[at[m]]), snprintf(r[at[m]].err, sizeof r[at[m]].err, "%s", err);
    }
    return n_failed;
}

// cpu_draft_group: the group's drafts in one bn_drafter_draft_multi.
static int cpu_draft_group(bn_spec_round *r, const int *at, int g, const int *k, int *nd, double *ms, double t0) {
    const bn_spec *sp = r[at[0]].sp;
    bn_draft_seq q[BN_DRAFT_MULTI_MAX];
    int got[BN_DRAFT_MULTI_MAX];
    for (int m = 0; m < g; m++) {
        bn_spec *o = r[at[m]].sp;
        q[m] = (bn_draft_seq){.s = o->cpu.state, .id_last = o->id_last, .n_past = o->n_past, .n_max = k[at[m]],
                              .drafts = o->verify_tokens + 1};
    }
    char err[256];
    const int rc = bn_drafter_draft_multi(sp->drafter, q, g, sp->params.p_min, err, sizeof err);
    for (int m = 0; m < g; m++) got[m] = q[m].n_drafts;
    return group_done(r, at, g, got, rc, err, nd, ms, t0);
}

// ---- on the target's device ---------------------------------------------------------------------
// dev_start: the device drafter's state and the tap rows: the target's device tap buffer unless params.host_taps, or
// without that hand-over (no ops, no device memory) page-locked host memory, else plain host memory. 0 or -1 (err).
static int dev_start(bn_spec *sp, int n_ctx, size_t tap_bytes, char *err, size_t errlen) {
    const bn_dev_drafter_ops *ops = sp->dev.ops;
    if (!(sp->dev.state = ops->state_new(sp->drafter, n_ctx, err, errlen))) return -1;
    if (sp->n_taps && !sp->params.host_taps && ops->target_taps && ops->process_dev) {
        char dev_err[256];
        sp->dev_taps = ops->target_taps(sp->target_state, sp->n_taps, sp->tap_rows, dev_err, sizeof dev_err);
    }
    if (sp->n_taps && !sp->dev_taps) sp->taps_pinned = (sp->taps = ops->host_alloc(tap_bytes)) != NULL;
    if (sp->n_taps && !sp->dev_taps && !sp->taps) sp->taps = xmalloc(tap_bytes);
    return 0;
}

static void dev_stop(bn_spec *sp) {
    if (sp->dev.state) sp->dev.ops->state_free(sp->dev.state);
    if (sp->taps_pinned) sp->dev.ops->host_free(sp->taps);
    else free(sp->taps);
}

static const char *dev_where(const bn_spec *sp) { return sp->dev.ops->name; }

static void dev_restart(bn_spec *sp, int pos) { sp->dev.ops->truncate(sp->dev.state, pos); }

// dev_process: with enqueue and process_start, returns once the work is enqueued (the draft after it reads the rows in
// stream order; draft_multi / draft_finish wait for it); the taps are read in place when they are on the device.
static int dev_process(bn_spec *sp, int n, int pos0, bool enqueue, char *err, size_t errlen) {
    const bn_dev_drafter_ops *ops = sp->dev.ops;
    ops->truncate(sp->dev.state, pos0);
    if (enqueue && ops->process_start) {
        const bool dev = sp->dev_taps != NULL;
        return ops->process_start(sp->dev.state, dev ? sp->dev_taps : sp->taps, dev, n, pos0, err, errlen);
    }
    if (sp->dev_taps) return ops->process_dev(sp->dev.state, sp->dev_taps, n, pos0, err, errlen);
    return ops->process(sp->dev.state, sp->taps, n, pos0, err, errlen);
}

// dev_draft_group: the group's drafts in one draft_multi of the device ops.
static int dev_draft_group(bn_spec_round *r, const int *at, int g, const int *k, int *nd, double *ms, double t0) {
    const bn_spec *sp = r[at[0]].sp;
    void *states[BN_DRAFT_MULTI_MAX] = {0}; // (g >= 1 entries filled)
    int32_t ids[BN_DRAFT_MULTI_MAX] = {0}, *outs[BN_DRAFT_MULTI_MAX] = {0};
    int past[BN_DRAFT_MULTI_MAX] = {0}, kk[BN_DRAFT_MULTI_MAX] = {0}, got[BN_DRAFT_MULTI_MAX];
    for (int m = 0; m < g; m++) {
        bn_spec *o = r[at[m]].sp;
        states[m] = o->dev.state;
        ids[m] = o->id_last, past[m] = o->n_past, kk[m] = k[at[m]], outs[m] = o->verify_tokens + 1;
    }
    char err[256];
    const int rc = sp->dev.ops->draft_multi(states, ids, past, kk, g, sp->params.p_min, outs, got, err, sizeof err);
    return group_done(r, at, g, got, rc, err, nd, ms, t0);
}

// dev_settle: waits for the work enqueued on the drafter's stream.
static void dev_settle(bn_spec *sp) {
    char ignored[64];
    sp->dev.ops->draft_finish(sp->dev.state, 0, 0.0f, NULL, ignored, sizeof ignored);
}

// ---- the replay measurement aid ---------------------------------------------------------------------
// replay_propose: the drafter did its work; the recorded continuation's tokens at this position are proposed instead
// (no more than the drafter drafted, none past the recording's end).
static int replay_propose(bn_spec *sp, int32_t *tok, int nd) {
    const int at = sp->n_past - sp->replay_pos0, left = sp->params.n_replay - at;
    if (nd > left) nd = left > 0 ? left : 0;
    for (int i = 0; i < nd; i++) tok[1 + i] = sp->params.replay[at + i];
    return nd;
}

#define CPU_DRAFTER .start = cpu_start, .stop = cpu_stop, .where = cpu_where, .restart = cpu_restart, \
    .process = cpu_process, .flush_group = cpu_flush_group, .draft_group = cpu_draft_group
#define DEV_DRAFTER .start = dev_start, .stop = dev_stop, .where = dev_where, .restart = dev_restart, \
    .process = dev_process, .draft_group = dev_draft_group, .settle = dev_settle, .on_device = true

const spec_proposer_ops spec_cpu_drafter = {CPU_DRAFTER};
const spec_proposer_ops spec_dev_drafter = {DEV_DRAFTER};
const spec_proposer_ops spec_cpu_replay = {CPU_DRAFTER, .propose = replay_propose};
const spec_proposer_ops spec_dev_replay = {DEV_DRAFTER, .propose = replay_propose};
