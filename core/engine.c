// core/engine.c — the backend-neutral engine wrapper and the CPU backend (see core/engine.h).
#include "core/engine.h"
#include "core/forward_impl.h" // bn_state.m
#include <stdlib.h>

// ---- CPU backend: impl is the bn_engine itself (model + threads) -----------------------------
static void *cpu_state_new(void *impl, int n_ctx, char *err, size_t errlen) {
    (void)err, (void)errlen;
    const bn_engine *e = impl;
    return bn_state_new(e->m, n_ctx, e->n_threads);
}
static void cpu_state_free(void *st) { bn_state_free(st); }
static void cpu_state_reset(void *st) { bn_state_reset(st); }
static int cpu_state_pos(const void *st) { return bn_state_pos(st); }
static int cpu_forward(void *st, const int32_t *tokens, int n, bn_forward_out *out, char *err, size_t errlen) {
    bn_state *s = st;
    return bn_forward(s->m, s, tokens, n, out, err, errlen);
}

static int cpu_state_n_ctx(const void *st) { return bn_state_n_ctx(st); }
static void *cpu_snapshot_new(const void *st, char *err, size_t errlen) {
    (void)err, (void)errlen;
    return bn_snapshot_new(st);
}
static int cpu_snapshot_into(const void *st, void *snap, char *err, size_t errlen) {
    (void)err, (void)errlen;
    bn_state_snapshot_into(st, snap);
    return 0;
}
static int cpu_restore(void *st, const void *snap, char *err, size_t errlen) {
    (void)err, (void)errlen;
    bn_state_restore(st, snap);
    return 0;
}
static void cpu_snapshot_free(void *snap) { bn_snapshot_free(snap); }
static int cpu_forward_snaps(void *st, const int32_t *tokens, int n, bn_forward_out *out, void *const *snaps,
                             char *err, size_t errlen) {
    bn_state *s = st;
    bn_forward_out with_snaps = *out;
    with_snaps.snaps = (bn_snapshot **)snaps;
    return bn_forward(s->m, s, tokens, n, &with_snaps, err, errlen);
}

// cpu_forward_batch: bn_forward_batch in passes of what each pass's first state holds (its batch rows).
static int cpu_forward_batch(void *const *sts, const int32_t *tokens, int n, bn_forward_out *const *outs, char *err,
                             size_t errlen) {
    bn_state *const *seqs = (bn_state *const *)sts;
    for (int t0 = 0; t0 < n;) {
        const int nb = n - t0 < seqs[t0]->n_batch ? n - t0 : seqs[t0]->n_batch;
        if (bn_forward_batch(seqs[t0]->m, seqs + t0, tokens + t0, nb, outs ? outs + t0 : NULL, err, errlen) != 0)
            return -1;
        t0 += nb;
    }
    return 0;
}

static const bn_engine_ops cpu_ops = {
    .name = "CPU",
    .state_new = cpu_state_new,
    .state_free = cpu_state_free,
    .state_reset = cpu_state_reset,
    .state_pos = cpu_state_pos,
    .forward = cpu_forward,
    .impl_free = NULL,
    .state_n_ctx = cpu_state_n_ctx,
    .snapshot_new = cpu_snapshot_new,
    .snapshot_into = cpu_snapshot_into,
    .restore = cpu_restore,
    .snapshot_free = cpu_snapshot_free,
    .forward_snaps = cpu_forward_snaps,
    .forward_batch = cpu_forward_batch,
};

bn_engine *bn_engine_new(const bn_engine_ops *ops, void *impl, const bn_model *m) {
    bn_engine *e = xcalloc(1, sizeof *e);
    e->ops = ops;
    e->impl = impl;
    e->m = m;
    return e;
}

bn_engine *bn_engine_cpu_new(const bn_model *m, int n_threads) {
    bn_engine *e = bn_engine_new(&cpu_ops, NULL, m);
    e->impl = e;
    e->n_threads = n_threads;
    return e;
}

void bn_engine_free(bn_engine *e) {
    if (!e) return;
    if (e->ops->impl_free) e->ops->impl_free(e->impl);
    free(e);
}

const char *bn_engine_name(const bn_engine *e) { return e->ops->name; }

bn_engine_state *bn_engine_state_new(const bn_engine *e, int n_ctx, char *err, size_t errlen) {
    void *st = e->ops->state_new(e->impl, n_ctx, err, errlen);
    if (!st) return NULL;
    bn_engine_state *s = xcalloc(1, sizeof *s);
    s->e = e;
    s->st = st;
    return s;
}

void bn_engine_state_free(bn_engine_state *s) {
    if (!s) return;
    s->e->ops->state_free(s->st);
    free(s);
}

void bn_engine_state_reset(bn_engine_state *s) { s->e->ops->state_reset(s->st); }
int bn_engine_state_pos(const bn_engine_state *s) { return s->e->ops->state_pos(s->st); }

int bn_engine_forward(bn_engine_state *s, const int32_t *tokens, int n, bn_forward_out *out, char *err,
                      size_t errlen) {
    return s->e->ops->forward(s->st, tokens, n, out, err, errlen);
}

int bn_engine_forward_batch(bn_engine_state *const *states, const int32_t *tokens, int n, bn_forward_out *const *outs,
                            char *err, size_t errlen) {
    if (n <= 0) return n == 0 ? 0 : bn_err(err, errlen, "bn_engine_forward_batch: negative sequence count %d", n);
    const bn_engine *e = states[0]->e;
    for (int t = 1; t < n; t++)
        if (states[t]->e != e) return bn_err(err, errlen, "bn_engine_forward_batch: sequence %d on another engine", t);
    void **sts = xmalloc(sizeof(void *) * (size_t)n);
    for (int t = 0; t < n; t++) sts[t] = states[t]->st;
    const int rc = e->ops->forward_batch(sts, tokens, n, outs, err, errlen);
    free(sts);
    return rc;
}

int bn_engine_state_n_ctx(const bn_engine_state *s) { return s->e->ops->state_n_ctx(s->st); }

bn_state *bn_engine_state_cpu(bn_engine_state *s) { return s->e->ops == &cpu_ops ? s->st : NULL; }

int bn_engine_forward_snaps(bn_engine_state *s, const int32_t *tokens, int n, bn_forward_out *out,
                            bn_engine_snapshot *const *snaps, char *err, size_t errlen) {
    if (out->snaps) return bn_err(err, errlen, "bn_engine_forward_snaps: out->snaps must be NULL");
    if (n < 0 || n > BN_ENGINE_MAX_SNAPS)
        return bn_err(err, errlen, "bn_engine_forward_snaps: %d tokens (at most %d per call)", n, BN_ENGINE_MAX_SNAPS);
    void *backend_snaps[BN_ENGINE_MAX_SNAPS];
    for (int t = 0; t < n; t++) {
        if (!snaps[t] || snaps[t]->e != s->e)
            return bn_err(err, errlen, "snaps[%d] is missing or of another engine", t);
        backend_snaps[t] = snaps[t]->snap;
    }
    return s->e->ops->forward_snaps(s->st, tokens, n, out, backend_snaps, err, errlen);
}

bn_engine_snapshot *bn_engine_snapshot_new(const bn_engine_state *s, char *err, size_t errlen) {
    void *snap = s->e->ops->snapshot_new(s->st, err, errlen);
    if (!snap) return NULL;
    bn_engine_snapshot *es = xcalloc(1, sizeof *es);
    es->e = s->e;
    es->snap = snap;
    return es;
}

int bn_engine_snapshot_into(const bn_engine_state *s, bn_engine_snapshot *snap, char *err, size_t errlen) {
    if (snap->e != s->e) return bn_err(err, errlen, "snapshot belongs to another engine");
    return s->e->ops->snapshot_into(s->st, snap->snap, err, errlen);
}

int bn_engine_restore(bn_engine_state *s, const bn_engine_snapshot *snap, char *err, size_t errlen) {
    if (snap->e != s->e) return bn_err(err, errlen, "snapshot belongs to another engine");
    return s->e->ops->restore(s->st, snap->snap, err, errlen);
}

void bn_engine_snapshot_free(bn_engine_snapshot *snap) {
    if (!snap) return;
    snap->e->ops->snapshot_free(snap->snap);
    free(snap);
}
