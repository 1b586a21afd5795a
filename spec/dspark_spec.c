// spec/dspark_spec.c — the speculative decoding loop (docs/dspark.md §5.1, §6, §7) over any engine
// (core/engine.h: CPU or CUDA target), with an online cost model. What proposes the drafts is the mode's
// implementation behind spec_proposer_ops (spec/spec_impl.h): the DSpark drafter on the target's device when its
// backend registered a device drafter, else on the CPU (spec/spec_drafter.c, also the replay measurement aid), or
// the oracle measurement aid (spec/spec_oracle.c).
// Rollback: the verify pass keeps a snapshot after every token (bn_engine_forward_snaps) and a rejection
// restores the one after the last accepted token: no re-run (on CUDA a device snapshot, no host copies of the
// recurrent state). The CPU engine does so while n_max + 1 snapshots fit params.cpu_snap_bytes; beyond that
// (the 27B: ~151 MB a snapshot) it takes one snapshot before the verify, restores it and re-runs the
// accepted prefix.
#include "spec/spec_impl.h"
#include "core/forward_impl.h" // the CPU target state's recurrent size (the per-token snapshots' budget)
#include "base/util.h"
#include <math.h>
#include <string.h>
#include <stdlib.h>

#define PROBE_FIRST 32  // with drafting off, try n_max again after this many steps,
#define PROBE_MAX 1024  // doubling after every probe that does not switch drafting back on

int bn_spec_type_from_name(const char *name) {
    if (!name) return -1;
    if (strcmp(name, "draft-dspark") == 0 || strcmp(name, "dspark") == 0) return BN_SPEC_DSPARK;
    if (strcmp(name, "draft-oracle") == 0 || strcmp(name, "oracle") == 0) return BN_SPEC_ORACLE;
    if (strcmp(name, "draft-replay") == 0 || strcmp(name, "replay") == 0) return BN_SPEC_REPLAY;
    if (strcmp(name, "none") == 0) return BN_SPEC_NONE;
    return -1;
}

const char *bn_spec_drafter_device(const bn_spec *sp) { return sp->drafter ? sp->proposer->where(sp) : NULL; }

// proposer_for: the implementation that proposes sp's drafts under params p (the drafter on the target's device when
// its backend registered a device drafter, unless p->cpu_drafter), or NULL for plain decoding.
static const spec_proposer_ops *proposer_for(bn_spec *sp, const bn_spec_params *p) {
    if (p->type == BN_SPEC_ORACLE) return &spec_oracle;
    if (!sp->drafter) return NULL;
    sp->dev.ops = p->cpu_drafter ? NULL : bn_dev_drafter_for(sp->target_state->e);
    const bool replay = p->type == BN_SPEC_REPLAY;
    if (sp->dev.ops) return replay ? &spec_dev_replay : &spec_dev_drafter;
    return replay ? &spec_cpu_replay : &spec_cpu_drafter;
}

bn_spec *bn_spec_new_engine(bn_engine_state *ts, const bn_drafter *d, const bn_spec_params *p, char *err,
                            size_t errlen) {
    const bn_model *target = ts->e->m;
    const bool drafts = p->type == BN_SPEC_DSPARK || p->type == BN_SPEC_REPLAY; // runs the DSpark drafter
    if (drafts && !d) return bn_err(err, errlen, "spec: draft-dspark / draft-replay need a drafter"), NULL;
    if (p->type < BN_SPEC_NONE || p->type > BN_SPEC_REPLAY) return bn_err(err, errlen, "spec: unknown type"), NULL;
    if (p->type == BN_SPEC_REPLAY && (!p->replay || p->n_replay < 1))
        return bn_err(err, errlen, "spec: draft-replay needs the recorded continuation (params.replay)"), NULL;
    if (d && (d->cfg.n_embd != target->cfg.n_embd || d->cfg.n_vocab != target->cfg.n_vocab))
        return bn_err(err, errlen, "spec: drafter does not match the target (E or V)"), NULL;
    if (drafts && p->p_min > 0 && !d->cfg.has_conf)
        return bn_err(err, errlen, "spec: the drafter has no confidence head; please set --spec-draft-p-min 0"), NULL;
    bn_spec *sp = xcalloc(1, sizeof *sp);
    sp->target = target;
    sp->target_state = ts;
    sp->params = *p;
    int n_max = p->n_max < 0 ? 0 : p->n_max > SPEC_MAX_N ? SPEC_MAX_N : p->n_max;
    if (drafts && n_max > d->cfg.block_size) n_max = d->cfg.block_size;
    if (p->type == BN_SPEC_NONE) n_max = 0;
    sp->params.n_max = n_max;
    const int n_ctx = bn_engine_state_n_ctx(ts);
    bn_state *cpu_ts = bn_engine_state_cpu(ts);
    const size_t V = (size_t)target->cfg.n_vocab, E = (size_t)target->cfg.n_embd;
    if (drafts) {
        sp->drafter = d;
        sp->n_taps = d->cfg.n_taps;
        memcpy(sp->tap_layers, d->cfg.tap_layers, sizeof sp->tap_layers);
    }
    sp->tap_rows = n_max + 1 > 64 ? n_max + 1 : 64;
    sp->proposer = proposer_for(sp, p);
    bool ok = !sp->proposer ||
              sp->proposer->start(sp, n_ctx, sizeof(float) * E * (size_t)sp->n_taps * (size_t)sp->tap_rows, err,
                                  errlen) == 0;
    // per-token snapshots: always off the CPU; on the CPU when n_max + 1 of them fit the budget
    const bool per_token = n_max > 0 && (!cpu_ts || (size_t)(n_max + 1) * cpu_ts->n_recurrent * sizeof(float) <=
                                                        p->cpu_snap_bytes);
    if (ok && n_max > 0 && !per_token) ok = (sp->pre_verify = bn_engine_snapshot_new(ts, err, errlen)) != NULL;
    if (ok && per_token) {
        sp->verify_snaps = xcalloc((size_t)n_max + 1, sizeof *sp->verify_snaps);
        for (int i = 0; ok && i <= n_max; i++)
            ok = (sp->verify_snaps[i] = bn_engine_snapshot_new(ts, err, errlen)) != NULL;
    }
    if (!ok) {
        bn_spec_free(sp);
        return NULL;
    }
    sp->logits = xmalloc(sizeof(float) * V * (size_t)(n_max + 1));
    sp->argmax = xmalloc(sizeof(int32_t) * (size_t)(n_max + 1));
    sp->topk_ids = xmalloc(sizeof(int32_t) * BN_FORWARD_TOPK_MAX * (size_t)(n_max + 1));
    sp->topk_vals = xmalloc(sizeof(float) * BN_FORWARD_TOPK_MAX * (size_t)(n_max + 1));
    sp->hist = xmalloc(sizeof(int32_t) * (size_t)n_ctx);
    for (int i = 0; i < SPEC_MAX_N + 2; i++) sp->ms_fwd[i] = -1;
    for (int i = 0; i < SPEC_MAX_N + 1; i++) sp->ms_draft[i] = -1;
    for (int i = 0; i < SPEC_MAX_N; i++) sp->q_acc[i] = 0.8; // optimistic start: speculation gets tried
    sp->stats.n_max_now = n_max;
    sp->stats.per_token_snaps = sp->verify_snaps != NULL;
    sp->probe_every = PROBE_FIRST;
    return sp;
}

bn_spec *bn_spec_new(const bn_model *target, bn_state *ts, const bn_drafter *d, const bn_spec_params *p, char *err,
                     size_t errlen) {
    bn_engine *e = bn_engine_cpu_new(target, p->n_threads); // n_threads: the oracle state's
    bn_engine_state *es = xcalloc(1, sizeof *es);
    es->e = e;
    es->st = ts;
    bn_spec *sp = bn_spec_new_engine(es, d, p, err, errlen);
    if (!sp) {
        free(es);
        bn_engine_free(e);
        return NULL;
    }
    sp->own_engine = e;
    sp->own_target_state = es;
    return sp;
}

void bn_spec_free(bn_spec *sp) {
    if (!sp) return;
    if (sp->proposer) sp->proposer->stop(sp);
    bn_engine_snapshot_free(sp->pre_verify);
    for (int i = 0; sp->verify_snaps && i <= sp->params.n_max; i++) bn_engine_snapshot_free(sp->verify_snaps[i]);
    free(sp->verify_snaps);
    free(sp->own_target_state);
    bn_engine_free(sp->own_engine);
    free(sp->logits);
    free(sp->argmax);
    free(sp->topk_ids);
    free(sp->topk_vals);
    free(sp->hist);
    free(sp);
}

int bn_spec_n_past(const bn_spec *sp) { return sp->n_past; }

void bn_spec_set_no_step_logits(bn_spec *sp, bool on) { sp->params.no_step_logits = on; }

const float *bn_spec_step_logits(const bn_spec *sp, int i) {
    if (i < 0 || i >= sp->last_n || sp->last_no_rows) return NULL;
    return sp->logits + (size_t)i * (size_t)sp->target->cfg.n_vocab;
}
const bn_spec_stats *bn_spec_stats_get(const bn_spec *sp) { return &sp->stats; }

const int32_t *bn_spec_step_drafts(const bn_spec *sp, int *n) {
    *n = sp->last_nd;
    return sp->drafts;
}

static void ema(double *v, double x) { *v = *v < 0 ? x : 0.8 * *v + 0.2 * x; }

// flush_rows: the drafter gets the pending rows (tap rows 0..n_pending−1) as context rows at their target
// positions (with enqueue a device drafter may return once the work is enqueued). Returns 0 or -1 with err.
static int flush_rows(bn_spec *sp, bool enqueue, char *err, size_t errlen) {
    if (!sp->drafter || sp->n_pending == 0) return 0;
    double t1 = bn_time_ms();
    int rc = sp->proposer->process(sp, sp->n_pending, sp->pending_pos0, enqueue, err, errlen);
    sp->stats.ms_process += bn_time_ms() - t1;
    sp->n_pending = 0;
    return rc;
}

// commit_rows: target positions pos0..pos0+n−1 now hold tok for good: their taps (the last target pass's
// rows, behind the pending ones) join the drafter's pending context rows, given to it before it drafts next
// (a step drafting nothing costs no drafter work), and the tokens are recorded.
static void commit_rows(bn_spec *sp, const int32_t *tok, int n, int pos0) {
    if (sp->n_hist > pos0) sp->n_hist = pos0;
    if (sp->drafter) {
        if (sp->n_pending == 0) sp->pending_pos0 = pos0;
        sp->n_pending += n; // contiguous: target_forward made room at pos0 (pending_pos0 + n_pending == pos0)
    }
    if (sp->n_hist == pos0) { // contiguous from 0: the rows stay reusable
        memcpy(sp->hist + pos0, tok, sizeof(int32_t) * (size_t)n);
        sp->n_hist = pos0 + n;
    }
}

// make_room: before a target pass of n rows at pos0: pending rows from pos0 on are dropped (the target is
// back there), and the rest go to the drafter now when the pass's taps would not fit behind them. Returns
// the tap row where the pass writes, or -1 with err.
static int make_room(bn_spec *sp, int n, int pos0, char *err, size_t errlen) {
    if (!sp->drafter || sp->n_pending == 0) return 0;
    if (sp->pending_pos0 + sp->n_pending > pos0) sp->n_pending = pos0 > sp->pending_pos0 ? pos0 - sp->pending_pos0 : 0;
    if (sp->n_pending > 0 && sp->pending_pos0 + sp->n_pending < pos0)
        return bn_err(err, errlen, "spec: target at %d, pending drafter rows end at %d", pos0,
                      sp->pending_pos0 + sp->n_pending);
    if (sp->n_pending + n > sp->tap_rows && flush_rows(sp, false, err, errlen) != 0) return -1;
    return sp->n_pending;
}

// pass_prepare: a target pass of the n tokens tok at the target's position into *pass (taps when drafting with
// DSpark, behind the pending rows, into *out: a copy of head, NULL: no head outputs; snaps: NULL or the state after
// each token). Returns 0 or -1 with err.
static int pass_prepare(bn_spec *sp, const int32_t *tok, int n, const bn_forward_out *head, bn_forward_out *out,
                        bn_engine_snapshot *const *snaps, bn_engine_seq *pass, char *err, size_t errlen) {
    *out = head ? *head : (bn_forward_out){0};
    const int pos0 = bn_engine_state_pos(sp->target_state);
    const int row = make_room(sp, n, pos0, err, errlen);
    if (row < 0) return -1;
    if (sp->n_taps) {
        out->tap_layers = sp->tap_layers;
        out->n_taps = sp->n_taps;
        out->taps = (sp->dev_taps ? sp->dev_taps : sp->taps) + (size_t)row * sp->n_taps * sp->target->cfg.n_embd;
    }
    if (sp->n_hist > pos0) sp->n_hist = pos0; // rows from pos0 on are rewritten (uncommitted until fed)
    *pass = (bn_engine_seq){.state = sp->target_state, .tokens = tok, .n = n, .out = out, .snaps = snaps};
    return 0;
}

// pass_ran: a prepared pass of n tokens took ms (< 0: unmeasured) for the cost model.
static void pass_ran(bn_spec *sp, int n, double ms) {
    if (ms >= 0 && n <= SPEC_MAX_N + 1) ema(&sp->ms_fwd[n], ms);
}

// target_forward: runs tokens through the target alone (pass_prepare's pass) and, with feed_drafter, commits the
// rows. head, snaps: pass_prepare's. Returns 0 or -1 with err.
static int target_forward(bn_spec *sp, const int32_t *tok, int n, const bn_forward_out *head, bool feed_drafter,
                          bn_engine_snapshot *const *snaps, char *err, size_t errlen) {
    bn_forward_out out;
    bn_engine_seq pass;
    const int pos0 = bn_engine_state_pos(sp->target_state);
    if (pass_prepare(sp, tok, n, head, &out, snaps, &pass, err, errlen) != 0) return -1;
    double t0 = bn_time_ms();
    if (bn_engine_forward_multi(&pass, 1, err, errlen) != 0) return -1;
    pass_ran(sp, n, bn_time_ms() - t0);
    if (feed_drafter) commit_rows(sp, tok, n, pos0);
    return 0;
}

// prefill_from: decodes prompt[from..n−2] with taps onto a target (and drafter) that hold positions
// 0..from−1 of prompt; prompt[n−1] becomes id_last. Returns 0 or -1 with err.
static int prefill_from(bn_spec *sp, const int32_t *prompt, int n, int from, char *err, size_t errlen) {
    for (int i = from; i < n - 1; i += 64) { // prompt[from..n−2] in chunks (taps buffer holds 64 rows)
        int nb = n - 1 - i < 64 ? n - 1 - i : 64;
        if (target_forward(sp, prompt + i, nb, NULL, true, NULL, err, errlen) != 0) return -1;
        if (sp->proposer && sp->proposer->follow && sp->proposer->follow(sp, prompt + i, nb, err, errlen) != 0)
            return -1;
    }
    sp->id_last = prompt[n - 1];
    sp->n_past = n - 1;
    sp->replay_pos0 = n - 1;
    sp->ready = true;
    return 0;
}

int bn_spec_prefill(bn_spec *sp, const int32_t *prompt, int n, char *err, size_t errlen) {
    if (n < 1) return bn_err(err, errlen, "spec: empty prompt");
    sp->ready = false;
    bn_engine_state_reset(sp->target_state);
    sp->n_hist = 0;
    sp->n_pending = 0;
    if (sp->proposer) sp->proposer->restart(sp, 0);
    return prefill_from(sp, prompt, n, 0, err, errlen);
}

int bn_spec_prefill_cached(bn_spec *sp, const int32_t *prompt, int n, const bn_engine_snapshot *snap, char *err,
                           size_t errlen) {
    if (n < 1) return bn_err(err, errlen, "spec: empty prompt");
    // the oracle's second state has no snapshot of its own: it (a measurement aid) always re-prefills
    if (!snap || (sp->proposer && sp->proposer->reprefills))
        return bn_spec_prefill(sp, prompt, n, err, errlen) == 0 ? 0 : -1;
    // the last request's pending rows reach the drafter first: its context rows of the prefix may be reused
    if (flush_rows(sp, false, err, errlen) != 0) return -1;
    sp->ready = false;
    if (bn_engine_restore(sp->target_state, snap, err, errlen) != 0) return -1;
    const int n_reuse = bn_engine_state_pos(sp->target_state);
    // usable when it leaves id_last to decode and every reused position holds this prompt's token (target KV
    // and drafter rows alike: hist records what was committed there since the rows were last rewritten)
    bool usable = n_reuse >= 1 && n_reuse <= n - 1 && n_reuse <= sp->n_hist &&
                  memcmp(sp->hist, prompt, sizeof(int32_t) * (size_t)n_reuse) == 0;
    if (!usable) return bn_spec_prefill(sp, prompt, n, err, errlen) == 0 ? 0 : -1;
    sp->n_hist = n_reuse;
    // rows < n_reuse stay: truncation only lowers the count
    if (sp->proposer) sp->proposer->restart(sp, n_reuse);
    return prefill_from(sp, prompt, n, n_reuse, err, errlen) == 0 ? n_reuse : -1;
}

// ---- cost model ------------------------------------------------------------------------------
// With k drafts a round costs  T(k) = draft(k) + fwd(k+1) + P(reject)·fwd(E[j]+1)  (the re-run
// of the accepted prefix after a rollback on the CPU; 0 with per-token snapshots) and emits
// 1 + Σ_{i<k} Π_{m<=i} q_m  tokens on average (q_m = online acceptance rate of draft m given the
// ones before were accepted).
// Drafting k = 0 is plain decoding: 1 token per fwd(1). The loop picks the k with the most
// tokens per millisecond; unmeasured costs are extrapolated linearly from fwd(1).

static double fwd_ms(const bn_spec *sp, int n) {
    if (n <= SPEC_MAX_N + 1 && sp->ms_fwd[n] >= 0) return sp->ms_fwd[n];
    // nearest measured size, scaled linearly (pessimistic for batching: at worst n × fwd(1))
    for (int dlt = 1; dlt <= SPEC_MAX_N + 1; dlt++) {
        int lo = n - dlt, hi = n + dlt;
        if (lo >= 1 && sp->ms_fwd[lo] >= 0) return sp->ms_fwd[lo] * n / lo;
        if (hi <= SPEC_MAX_N + 1 && sp->ms_fwd[hi] >= 0) return sp->ms_fwd[hi];
    }
    return -1;
}

static int choose_k(bn_spec *sp) {
    const int n_max = sp->params.n_max;
    if (!sp->params.adaptive || n_max == 0) return n_max;
    double t1 = fwd_ms(sp, 1);
    if (t1 < 0) return n_max; // nothing measured yet: explore
    int best_k = 0;
    double best_rate = 1.0 / t1;
    double surv = 1.0, exp_acc = 0.0, exp_j = 0.0;
    for (int k = 1; k <= n_max; k++) {
        surv *= sp->q_acc[k - 1];         // P(drafts 0..k−1 all accepted)
        exp_acc += surv;                  // E[accepted] with k drafts
        double p_all = surv;              // no rollback when every draft is accepted
        exp_j = exp_acc;
        double tv = fwd_ms(sp, k + 1), td = sp->ms_draft[k] >= 0 ? sp->ms_draft[k] : 0.0;
        double trr = sp->verify_snaps ? 0.0 : fwd_ms(sp, (int)lround(exp_j) + 1); // a restore costs ~nothing
        if (tv < 0 || trr < 0) return n_max;
        if (tv < t1) tv = t1; // a pass of k + 1 tokens costs at least a one-token step (less is timing noise)
        double t_round = td + tv + (1.0 - p_all) * trr;
        double rate = (1.0 + exp_acc) / t_round;
        if (rate > best_rate) {
            best_rate = rate;
            best_k = k;
        }
    }
    if (best_k == 0 && ++sp->steps_off >= sp->probe_every) { // re-measure acceptance now and then
        sp->steps_off = 0;
        if (sp->probe_every < PROBE_MAX) sp->probe_every *= 2; // back off while probes keep failing
        return n_max;
    }
    if (best_k > 0) {
        sp->steps_off = 0;
        sp->probe_every = PROBE_FIRST;
    }
    return best_k;
}

// ---- one round -------------------------------------------------------------------------------

// round_plan: the first part of a round: what the verify pass returns per row and the draft length k (the cost model's,
// within the context and out_cap); the drafter's pending rows are to be flushed before it drafts (rounds_flush).
// Returns k or -1 with err.
static int round_plan(bn_spec *sp, bn_sampler *smp, int out_cap, char *err, size_t errlen) {
    if (!sp->ready) return bn_err(err, errlen, "spec: generate before prefill");
    sp->in_round = false;
    sp->last_n = 0;
    sp->last_nd = 0;
    const int V = sp->target->cfg.n_vocab, n_ctx = bn_engine_state_n_ctx(sp->target_state);
    // what the verify pass returns per row: without step logits wanted, the argmax (greedy) or the top_k best
    // logits (a sampler that reads only those); else the logits rows
    bn_forward_out *vo = &sp->verify_head;
    *vo = (bn_forward_out){.all_logits = true};
    if (!sp->params.no_step_logits || !bn_sampler_head_out(smp, V, vo, sp->argmax, sp->topk_ids, sp->topk_vals))
        vo->logits = sp->logits;
    sp->last_no_rows = !vo->logits;
    if (sp->n_past + 1 > n_ctx) return bn_err(err, errlen, "spec: context full (%d positions)", n_ctx);
    int k = choose_k(sp);
    if (k > n_ctx - sp->n_past - 1) k = n_ctx - sp->n_past - 1;
    if (k > out_cap - 1) k = out_cap - 1;
    if (k < 0) return bn_err(err, errlen, "spec: no room for output");
    sp->stats.n_max_now = k;
    sp->verify_tokens[0] = sp->id_last;
    return k;
}

// round_pass: the rest of a round after drafting: nd drafts (in verify_tokens[1..]) of the k asked for took ms; the
// proposer's last word (the replay aid's recorded tokens), the cost model's draft time, n_min, the rollback snapshot,
// and the verify pass [id_last, d0..d_{nd−1}] into *pass. Returns 0 or -1 with err.
static int round_pass(bn_spec *sp, int k, int nd, double ms, bn_engine_seq *pass, char *err, size_t errlen) {
    int32_t *tok = sp->verify_tokens;
    if (k > 0) {
        if (sp->proposer->propose) nd = sp->proposer->propose(sp, tok, nd); // the replay aid's recorded tokens
        sp->stats.ms_draft += ms;
        // the oracle stands in for a drafter of negligible cost: its (target-sized) drafting
        // time is reported but kept out of the cost model
        ema(&sp->ms_draft[k], sp->proposer->free_drafts ? 0.0 : ms);
        if (nd < sp->params.n_min) nd = 0; // too short: not verified, not counted (§7)
    }
    memcpy(sp->drafts, tok + 1, sizeof(int32_t) * (size_t)nd);
    sp->last_nd = nd;
    // the verify pass [id_last, d0..d_{nd−1}]; for the rollback a snapshot before it (CPU) or one after every token
    // (other engines)
    bn_engine_snapshot *const *verify_snaps = nd > 0 ? sp->verify_snaps : NULL;
    if (nd > 0 && !verify_snaps && bn_engine_snapshot_into(sp->target_state, sp->pre_verify, err, errlen) != 0)
        return -1;
    sp->verify_pos0 = bn_engine_state_pos(sp->target_state);
    if (pass_prepare(sp, tok, nd + 1, &sp->verify_head, &sp->verify_out, verify_snaps, pass, err, errlen) != 0)
        return -1;
    sp->in_round = true;
    return 0;
}

// proposer_group: the indices j >= i of the rounds r[j] that draft (rc 0, k[j] > 0, not done[j]) the way r[i] does:
// with the same drafting call of its proposer, the same drafter in the same place (the CPU, or one device's ops) and
// its p_min; into at, returns their count.
static int proposer_group(const bn_spec_round *r, const int *k, const bool *done, int i, int n, int *at) {
    const bn_spec *sp = r[i].sp;
    int g = 0;
    for (int j = i; j < n; j++) {
        const bn_spec *o = r[j].sp;
        if (r[j].rc == 0 && k[j] > 0 && !done[j] && o->proposer->draft_group == sp->proposer->draft_group &&
            o->drafter == sp->drafter && o->dev.ops == sp->dev.ops && o->params.p_min == sp->params.p_min)
            at[g++] = j;
    }
    return g;
}

// rounds_flush: the pending context rows of every round that drafts reach its drafter before it drafts: a proposer's
// group in one call when it has flush_group (the CPU drafter: one bn_drafter_process_multi per drafter), else each
// round's enqueued (a device drafter: on its stream). Returns the number of rounds that failed (r[i].rc, err).
static int rounds_flush(bn_spec_round *r, const int *k, int n) {
    int n_failed = 0;
    bool done[BN_DRAFT_MULTI_MAX] = {false};
    for (int i = 0; i < n; i++) {
        bn_spec *sp = r[i].sp;
        if (r[i].rc != 0 || k[i] <= 0 || done[i]) continue;
        if (!sp->proposer->flush_group) { // rounds_draft waits for enqueued work (or none: the oracle)
            done[i] = true;
            if (flush_rows(sp, true, r[i].err, sizeof r[i].err) != 0) n_failed += spec_round_fail(&r[i]);
            continue;
        }
        int at[BN_DRAFT_MULTI_MAX];
        const int g = proposer_group(r, k, done, i, n, at);
        for (int m = 0; m < g; m++) done[at[m]] = true;
        n_failed += sp->proposer->flush_group(r, at, g);
    }
    return n_failed;
}

// rounds_draft: the drafts of every round that drafts into its verify_tokens[1..], their count into nd and the time
// the round waited for them into ms: the rounds of a proposer_group in one draft_group call (one batched call per
// drafter: bn_drafter_draft_multi on the CPU, the device ops' draft_multi; the oracle's one after another). Returns
// the number of rounds that failed (r[i].rc, err).
static int rounds_draft(bn_spec_round *r, const int *k, int n, int *nd, double *ms) {
    int n_failed = 0;
    bool done[BN_DRAFT_MULTI_MAX] = {false};
    for (int i = 0; i < n; i++) nd[i] = 0, ms[i] = 0;
    const double t0 = bn_time_ms();
    for (int i = 0; i < n; i++) {
        bn_spec *sp = r[i].sp;
        if (r[i].rc != 0 || k[i] <= 0 || done[i]) continue;
        int at[BN_DRAFT_MULTI_MAX];
        const int g = proposer_group(r, k, done, i, n, at);
        for (int m = 0; m < g; m++) done[at[m]] = true;
        n_failed += sp->proposer->draft_group(r, at, g, k, nd, ms, t0);
    }
    for (int i = 0; i < n; i++) { // a round failed after its injection was enqueued (rounds_flush): wait for it
        bn_spec *sp = r[i].sp;
        if (r[i].rc != 0 && k[i] > 0 && sp->proposer->settle) sp->proposer->settle(sp);
    }
    return n_failed;
}

int bn_spec_rounds_begin(bn_spec_round *r, int n) {
    if (n > BN_DRAFT_MULTI_MAX) // more than one batch of drafters: in parts
        return bn_spec_rounds_begin(r, BN_DRAFT_MULTI_MAX) +
               bn_spec_rounds_begin(r + BN_DRAFT_MULTI_MAX, n - BN_DRAFT_MULTI_MAX);
    int n_failed = 0, k[BN_DRAFT_MULTI_MAX], nd[BN_DRAFT_MULTI_MAX];
    double ms[BN_DRAFT_MULTI_MAX];
    for (int i = 0; i < n; i++) { // the draft lengths
        r[i].rc = 0, r[i].err[0] = 0;
        r[i].pass = (bn_engine_seq){0};
        bool twice = false;
        for (int j = 0; j < i; j++) twice = twice || r[j].sp == r[i].sp;
        k[i] = twice ? bn_err(r[i].err, sizeof r[i].err, "spec: one decoder twice in a batch of rounds")
                     : round_plan(r[i].sp, r[i].smp, r[i].out_cap, r[i].err, sizeof r[i].err);
        if (k[i] < 0) n_failed += spec_round_fail(&r[i]);
    }
    n_failed += rounds_flush(r, k, n);
    n_failed += rounds_draft(r, k, n, nd, ms);
    for (int i = 0; i < n; i++) // the verify passes
        if (r[i].rc == 0 && round_pass(r[i].sp, k[i], nd[i], ms[i], &r[i].pass, r[i].err, sizeof r[i].err) != 0)
            n_failed += spec_round_fail(&r[i]);
    return n_failed;
}

int bn_spec_round_begin(bn_spec *sp, bn_sampler *smp, int out_cap, bn_engine_seq *pass, char *err, size_t errlen) {
    bn_spec_round r = {.sp = sp, .smp = smp, .out_cap = out_cap};
    if (bn_spec_rounds_begin(&r, 1) != 0) return bn_err(err, errlen, "%s", r.err);
    *pass = r.pass;
    return 0;
}

int bn_spec_round_end(bn_spec *sp, bn_sampler *smp, double ms, int32_t *out, char *err, size_t errlen) {
    if (!sp->in_round) return bn_err(err, errlen, "spec: round end without a round begun");
    sp->in_round = false;
    const int V = sp->target->cfg.n_vocab, nd = sp->last_nd;
    const int32_t *tok = sp->verify_tokens;
    const bn_forward_out *vo = &sp->verify_out;
    bn_engine_snapshot *const *verify_snaps = nd > 0 ? sp->verify_snaps : NULL;
    if (bn_engine_state_pos(sp->target_state) != sp->verify_pos0 + nd + 1)
        return bn_err(err, errlen, "spec: the verify pass did not run (target at %d, expected %d)",
                      bn_engine_state_pos(sp->target_state), sp->verify_pos0 + nd + 1);
    pass_ran(sp, nd + 1, ms);
    if (ms > 0) sp->stats.ms_verify += ms;
    // repetition penalties (bn_sampler_needs_history) count what precedes row j's pick: the committed tokens
    // hist[0..n_past), then tok[0..j] (written behind them; commit_rows writes the kept ones there again)
    const bool with_hist = bn_sampler_needs_history(smp);
    if (with_hist) {
        if (sp->n_hist != sp->n_past)
            return bn_err(err, errlen, "spec: the token history has %d of %d tokens (repetition penalties need all)",
                          sp->n_hist, sp->n_past);
        memcpy(sp->hist + sp->n_past, tok, sizeof(int32_t) * (size_t)(nd + 1));
        bn_sampler_set_history(smp, sp->hist, sp->n_past + 1);
    }
    // accept by sample-and-compare: t_j = sample(row j) (bn_sampler_pick); accept d_j while it equals t_j
    int j = 0;
    int32_t t = bn_sampler_pick(smp, vo, 0, V);
    while (j < nd && t == tok[1 + j]) {
        j++;
        if (with_hist) bn_sampler_set_history(smp, sp->hist, sp->n_past + j + 1);
        t = bn_sampler_pick(smp, vo, j, V);
    }
    // commit: keep positions n_past..n_past+j (id_last + j drafts)
    const int n_keep = j + 1;
    if (j < nd && !verify_snaps) { // rejected tail: restore the pre-verify state and re-run the accepted prefix
        double t1 = bn_time_ms();
        if (bn_engine_restore(sp->target_state, sp->pre_verify, err, errlen) != 0) return -1;
        if (target_forward(sp, tok, n_keep, NULL, true, NULL, err, errlen) != 0) return -1;
        sp->stats.ms_rerun += bn_time_ms() - t1;
        sp->stats.n_rerun++;
    } else {
        if (j < nd) { // rejected tail: back to the state after the last accepted token (no re-run)
            double t1 = bn_time_ms();
            if (bn_engine_restore(sp->target_state, verify_snaps[j], err, errlen) != 0) return -1;
            sp->stats.ms_rerun += bn_time_ms() - t1;
        }
        commit_rows(sp, tok, n_keep, sp->n_past); // the verify taps of the kept rows are the committed rows
    }
    if (sp->proposer && sp->proposer->follow && sp->proposer->follow(sp, tok, n_keep, err, errlen) != 0) return -1;
    for (int i = 0; i < j; i++) out[i] = tok[1 + i];
    out[j] = t;
    // statistics (§7) and the acceptance model
    sp->stats.n_steps++;
    sp->stats.n_emitted += n_keep;
    if (nd > 0) {
        sp->stats.n_rounds_spec++;
        sp->stats.n_drafted += nd;
        sp->stats.n_accept += j;
        for (int i = 0; i < j && i < 64; i++) sp->stats.acc_pos[i]++;
        for (int i = 0; i < nd && i < 64; i++) sp->stats.drafted_pos[i]++;
        for (int i = 0; i < nd && i <= j; i++) { // position i was reached: accepted iff i < j
            double obs = i < j ? 1.0 : 0.0;
            sp->q_acc[i] = 0.9 * sp->q_acc[i] + 0.1 * obs;
        }
    }
    sp->id_last = t;
    sp->n_past += n_keep;
    sp->last_n = n_keep;
    return n_keep;
}

int bn_spec_generate_step(bn_spec *sp, bn_sampler *smp, int32_t *out, int out_cap, char *err, size_t errlen) {
    bn_engine_seq pass;
    if (bn_spec_round_begin(sp, smp, out_cap, &pass, err, errlen) != 0) return -1;
    double t0 = bn_time_ms();
    if (bn_engine_forward_multi(&pass, 1, err, errlen) != 0) {
        sp->in_round = false;
        return -1;
    }
    return bn_spec_round_end(sp, smp, bn_time_ms() - t0, out, err, errlen);
}

void bn_spec_print_stats(const bn_spec *sp, FILE *f) {
    const bn_spec_stats *s = &sp->stats;
    double mean_acc = s->n_rounds_spec ? 1.0 + (double)s->n_accept / (double)s->n_rounds_spec : 1.0;
    fprintf(f, "spec: #steps = %lld, #gen drafts = %lld, #gen tokens = %lld, #acc tokens = %lld, #reruns = %lld\n",
            (long long)s->n_steps, (long long)s->n_rounds_spec, (long long)s->n_drafted, (long long)s->n_accept,
            (long long)s->n_rerun);
    fprintf(f, "spec: mean acc len = %.3f, tokens per target pass = %.3f\n", mean_acc,
            s->n_steps ? (double)s->n_emitted / (double)s->n_steps : 0.0);
    for (int i = 0; i < sp->params.n_max && i < 64; i++)
        fprintf(f, "spec: acc rate/pos[%d] = %.3f (drafted %lld)\n", i,
                s->n_rounds_spec ? (double)s->acc_pos[i] / (double)s->n_rounds_spec : 0.0,
                (long long)s->drafted_pos[i]);
    fprintf(f, "spec: ms draft %.1f, verify %.1f, rerun %.1f, drafter process %.1f; n_max now %d; rollback by %s\n",
            s->ms_draft, s->ms_verify, s->ms_rerun, s->ms_process, s->n_max_now,
            s->per_token_snaps ? "per-token snapshots" : "restore + re-run");
    if (sp->drafter)
        fprintf(f, "spec: drafter on %s, draft ms/round = %.3f, process ms/step = %.3f, verify ms/step = %.3f\n",
                bn_spec_drafter_device(sp), s->n_rounds_spec ? s->ms_draft / (double)s->n_rounds_spec : 0.0,
                s->n_steps ? s->ms_process / (double)s->n_steps : 0.0,
                s->n_steps ? s->ms_verify / (double)s->n_steps : 0.0);
    if (sp->drafter && sp->proposer->on_device)
        fprintf(f, "spec: taps %s\n", sp->dev_taps ? "stay on the device (the drafter reads the target's buffer)"
                                                   : "go through host memory");
    double ms_target = s->ms_verify + s->ms_rerun;
    if (ms_target > 0)
        fprintf(f, "spec: target-side speed (verify + rerun only, drafting excluded) = %.3f t/s\n",
                1e3 * (double)s->n_emitted / ms_target);
}
