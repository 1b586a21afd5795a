// core/engine.c — the backend-neutral engine wrapper and the CPU backend (see core/engine.h).
#include "core/engine.h"
#include "core/forward_impl.h" // bn_state.m
#include "core/matmul.h"         // --f32-activations
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- CPU backend: impl is the bn_engine itself (model + threads) -----------------------------
static void *cpu_state_new(void *impl, int n_ctx, char *err, size_t errlen) {
    (void)err, (void)errlen;
    const bn_engine *e = impl;
    bn_state *s = bn_state_new(e->m, n_ctx, e->n_threads);
    bn_state_set_lora(s, e->lora);
    return s;
}
static int cpu_set_lora_scales(void *st, const float *scales, int n, char *err, size_t errlen) {
    if (bn_state_set_lora_scales(st, scales, n) != 0)
        return bn_err(err, errlen, "%d LoRA scales for the engine's %d adapters", n,
                      bn_lora_set_count(((bn_state *)st)->lora));
    return 0;
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

// cpu_forward_multi: bn_forward_multi in passes of as many whole sequences as each pass's first state holds (its
// batch rows); a sequence longer than that runs alone (bn_forward's chunks). The snapshots go in through copies of
// the outs.
static int cpu_forward_multi(void *const *sts, const int32_t *const *tokens, const int *n_tok, int n,
                             bn_forward_out *const *outs, void *const *const *snaps, char *err, size_t errlen) {
    bn_state *const *seqs = (bn_state *const *)sts;
    bn_forward_out *o = xcalloc((size_t)n, sizeof *o);
    bn_forward_out **op = xcalloc((size_t)n, sizeof *op);
    for (int i = 0; i < n; i++) {
        if (!outs[i] && !snaps[i]) continue;
        if (outs[i]) o[i] = *outs[i];
        o[i].snaps = (bn_snapshot **)snaps[i];
        op[i] = &o[i];
    }
    int rc = 0;
    for (int i0 = 0; i0 < n && rc == 0;) {
        int i1 = bn_engine_pass_end(n_tok, n, i0, seqs[i0]->n_batch);
        if (i1 == i0) // one sequence longer than a pass
            rc = bn_forward(seqs[i0]->m, seqs[i0], tokens[i0], n_tok[i0], op[i0], err, errlen), i1 = i0 + 1;
        else
            rc = bn_forward_multi(seqs[i0]->m, seqs + i0, tokens + i0, n_tok + i0, i1 - i0, op + i0, err, errlen);
        i0 = i1;
    }
    free(o), free(op);
    return rc;
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
    .forward_multi = cpu_forward_multi,
    .set_lora_scales = cpu_set_lora_scales,
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
    bn_lora_set_free(e->lora);
    free(e);
}

const char *bn_engine_name(const bn_engine *e) { return e->ops->name; }

static const bn_engine_device *registered_device;

void bn_engine_device_register(const bn_engine_device *d) { registered_device = d; }

const bn_engine_device *bn_engine_device_get(void) { return registered_device; }


// lora_add: appends adapter path at scale to o (--lora / --lora-scaled); 0 or -1 with err.
static int lora_add(bn_engine_opts *o, const char *path, size_t len, float scale, char *err, size_t errlen) {
    if (len == 0) return bn_err(err, errlen, "empty adapter file name");
    if (o->n_lora >= BN_LORA_MAX) return bn_err(err, errlen, "at most %d LoRA adapters", BN_LORA_MAX);
    if (path[len] == '\0') { // the whole argument: argv outlives the options
        o->lora[o->n_lora] = path;
    } else { // a part of a list: a copy that lives as long as the tool's run
        char *p = xmalloc(len + 1);
        memcpy(p, path, len);
        p[len] = 0;
        o->lora[o->n_lora] = p;
    }
    o->lora_scale[o->n_lora++] = scale;
    return 0;
}

// lora_arg: --lora FNAME[,FNAME...]: each at scale 1.
static int lora_arg(void *base, const char *opt, const char *val, char *err, size_t errlen) {
    (void)opt;
    for (const char *p = val;; p++) {
        size_t len = strcspn(p, ",");
        if (lora_add(base, p, len, 1.0f, err, errlen) != 0) return -1;
        p += len;
        if (!*p) return 0;
    }
}

// lora_scaled_arg: --lora-scaled FNAME SCALE, or llama.cpp's FNAME:SCALE[,FNAME:SCALE...]; the values used or -1.
static int lora_scaled_arg(void *base, const char *opt, const char *val, const char *next, char *err, size_t errlen) {
    double v;
    if (!strchr(val, ':')) { // FNAME SCALE
        if (!next) return bn_err(err, errlen, "%s: needs FNAME SCALE (or FNAME:SCALE)", opt);
        if (bn_args_real(opt, next, -1e6, 1e6, &v, err, errlen) != 0) return -1;
        return lora_add(base, val, strlen(val), (float)v, err, errlen) == 0 ? 2 : -1;
    }
    for (const char *p = val;; p++) {
        const size_t len = strcspn(p, ",");
        const char *colon = memrchr(p, ':', len);
        if (!colon) return bn_err(err, errlen, "%s: '%.*s' is not FNAME:SCALE", opt, (int)len, p);
        char num[64];
        snprintf(num, sizeof num, "%.*s", (int)(len - (size_t)(colon + 1 - p)), colon + 1);
        if (bn_args_real(opt, num, -1e6, 1e6, &v, err, errlen) != 0) return -1;
        if (lora_add(base, p, (size_t)(colon - p), (float)v, err, errlen) != 0) return -1;
        p += len;
        if (!*p) return 1;
    }
}

#define LORA_ARGS                                                                                                  \
    BN_FN("--lora", lora_arg, "FNAME",                                                                             \
          "LoRA adapter GGUF applied at run time, unmerged, at scale 1 (repeatable; comma-separated values too; "  \
          "-ngl 0 or every layer on the GPU)"),                                                                    \
    BN_FN2("--lora-scaled", lora_scaled_arg, "FNAME SCALE",                                                        \
           "LoRA adapter applied with a user scale (repeatable; llama.cpp's FNAME:SCALE,... form too)")

const bn_arg bn_engine_args[] = {
    BN_SECTION("model and engine"),
    BN_STR("-m, --model", offsetof(bn_engine_opts, model), "FILE", "model GGUF (required)"),
    BN_INT("-t, --threads", offsetof(bn_engine_opts, n_threads), "N", "CPU threads (0: all CPUs)", 0, 4096),
    BN_INT("-c, --ctx-size, --ctx", offsetof(bn_engine_opts, n_ctx), "N", "context size in tokens", 0, INT32_MAX),
    BN_INT("-ngl, --gpu-layers, --n-gpu-layers", offsetof(bn_engine_opts, n_gpu_layers), "N",
           "layers on the GPU (CUDA builds): 0 all on the CPU, >= the model's layer count all on the GPU, in between "
           "the last N layers and the output head on the GPU and the first layers on the CPU; without a GPU the model "
           "runs on the CPU (with a warning)",
           0, INT32_MAX),
    BN_TRUE("--f32-activations", offsetof(bn_engine_opts, f32_act),
            "quantized weights multiply the activations in f32 (dequantized weight panels) instead of rounding them "
            "to Q8 as llama.cpp does: a slower reference path (CPU engine, -ngl 0), with which a quantized base + "
            "adapter gives the log-probs of the merge into the base's F16 unpack"),
    LORA_ARGS,
    {0}};

const bn_arg bn_lora_args[] = {BN_SECTION("LoRA adapters"), LORA_ARGS, {0}};

// engine_open: the backend for -ngl (the CPU engine, or a device engine when there is a device).
static bn_engine *engine_open(const bn_model *m, int n_gpu_layers, int n_threads, char *err, size_t errlen) {
    if (n_gpu_layers < 0) {
        bn_err(err, errlen, "-ngl must be >= 0 (got %d)", n_gpu_layers);
        return NULL;
    }
    if (n_threads <= 0) n_threads = bn_n_threads_default();
    const bn_engine_device *d = registered_device;
    if (n_gpu_layers > 0 && (!d || d->device_count() < 1)) {
        static bool warned = false;
        if (!warned)
            fprintf(stderr, "warning: -ngl %d: %s; running on the CPU\n", n_gpu_layers,
                    d ? "no CUDA device found" : "this program was built without GPU support");
        warned = true;
        n_gpu_layers = 0;
    }
    if (n_gpu_layers == 0) return bn_engine_cpu_new(m, n_threads);
    bn_engine *e = n_gpu_layers >= m->cfg.n_layer ? d->full_new(m, err, errlen)
                                                  : d->split_new(m, n_gpu_layers, n_threads, err, errlen);
    if (e) e->n_gpu_layers = n_gpu_layers;
    return e;
}

bn_engine *bn_engine_open_lora(const bn_model *m, int n_gpu_layers, int n_threads, bn_lora_set *lora, char *err,
                               size_t errlen) {
    if (bn_lora_set_count(lora) > 0 && n_gpu_layers > 0 && n_gpu_layers < m->cfg.n_layer) {
        bn_lora_set_free(lora); // checked before the device: the same answer everywhere
        bn_err(err, errlen, "LoRA adapters run on the CPU engine (-ngl 0) or with every layer on the GPU, not split");
        return NULL;
    }
    bn_engine *e = engine_open(m, n_gpu_layers, n_threads, err, errlen);
    if (!e) {
        bn_lora_set_free(lora);
        return NULL;
    }
    e->lora = bn_lora_set_count(lora) > 0 ? lora : NULL;
    if (!e->lora) bn_lora_set_free(lora);
    if (e->lora && e->ops->attach_lora && e->ops->attach_lora(e->impl, e->lora, err, errlen) != 0) {
        bn_engine_free(e);
        return NULL;
    }
    return e;
}

bn_engine *bn_engine_open(const bn_model *m, int n_gpu_layers, int n_threads, char *err, size_t errlen) {
    return bn_engine_open_lora(m, n_gpu_layers, n_threads, NULL, err, errlen);
}

int bn_engine_opts_f32_activations(const bn_engine_opts *o, char *err, size_t errlen) {
    if (!o->f32_act) return 0;
    if (o->n_gpu_layers > 0)
        return bn_err(err, errlen, "--f32-activations runs on the CPU engine only (got -ngl %d)", o->n_gpu_layers);
    bn_matmul_set_f32_activations(true);
    return 0;
}

bn_engine *bn_engine_open_opts(const bn_model *m, const bn_engine_opts *o, char *err, size_t errlen) {
    bn_lora_set *lora = NULL;
    if (bn_engine_opts_f32_activations(o, err, errlen)) return NULL;
    if (o->n_lora > 0 && !(lora = bn_lora_set_open(m, o->lora, o->lora_scale, o->n_lora, err, errlen))) return NULL;
    return bn_engine_open_lora(m, o->n_gpu_layers, o->n_threads, lora, err, errlen);
}

bn_lora_set *bn_engine_lora(const bn_engine *e) { return e->lora; }

int bn_engine_state_set_lora(bn_engine_state *s, const float *scales, int n, char *err, size_t errlen) {
    const int have = bn_lora_set_count(s->e->lora);
    if (n != have) return bn_err(err, errlen, "%d LoRA scales for the engine's %d adapters", n, have);
    if (n == 0) return 0;
    return s->e->ops->set_lora_scales(s->st, scales, n, err, errlen);
}

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
    bn_engine_seq *seqs = xcalloc((size_t)n, sizeof *seqs);
    for (int t = 0; t < n; t++) seqs[t] = (bn_engine_seq){states[t], &tokens[t], 1, outs ? outs[t] : NULL, NULL};
    const int rc = bn_engine_forward_multi(seqs, n, err, errlen);
    free(seqs);
    return rc;
}

int bn_engine_forward_multi(const bn_engine_seq *seqs, int n, char *err, size_t errlen) {
    const char *fn = "bn_engine_forward_multi";
    if (n <= 0) return n == 0 ? 0 : bn_err(err, errlen, "%s: negative sequence count %d", fn, n);
    const bn_engine *e = seqs[0].state->e;
    void **sts = xcalloc((size_t)n, sizeof *sts);
    const int32_t **tokens = xcalloc((size_t)n, sizeof *tokens);
    int *n_tok = xcalloc((size_t)n, sizeof *n_tok);
    bn_forward_out **outs = xcalloc((size_t)n, sizeof *outs);
    void **snap_store = xcalloc((size_t)n * BN_ENGINE_MAX_SNAPS, sizeof *snap_store); // sequence i's from i × MAX
    void *const **snaps = xcalloc((size_t)n, sizeof *snaps);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const bn_engine_seq *q = &seqs[i];
        if (q->state->e != e) rc = bn_err(err, errlen, "%s: sequence %d on another engine", fn, i);
        else if (q->n < 1 || !q->tokens) rc = bn_err(err, errlen, "%s: sequence %d has no tokens", fn, i);
        else if (q->out && q->out->snaps) rc = bn_err(err, errlen, "%s: sequence %d: out->snaps must be NULL", fn, i);
        else if (q->snaps && q->n > BN_ENGINE_MAX_SNAPS)
            rc = bn_err(err, errlen, "%s: sequence %d: %d tokens with snapshots (at most %d)", fn, i, q->n,
                        BN_ENGINE_MAX_SNAPS);
        for (int u = 0; u < i && rc == 0; u++)
            if (seqs[u].state == q->state) rc = bn_err(err, errlen, "%s: sequences %d and %d share a state", fn, u, i);
        if (rc) break;
        sts[i] = q->state->st, tokens[i] = q->tokens, n_tok[i] = q->n, outs[i] = q->out;
        if (!q->snaps) continue;
        void **mine = snap_store + (size_t)i * BN_ENGINE_MAX_SNAPS;
        for (int t = 0; t < q->n && rc == 0; t++) {
            if (!q->snaps[t] || q->snaps[t]->e != e)
                rc = bn_err(err, errlen, "%s: sequence %d: snaps[%d] is missing or of another engine", fn, i, t);
            else
                mine[t] = q->snaps[t]->snap;
        }
        snaps[i] = mine;
    }
    // one sequence alone takes the backend's own single-sequence path (CUDA: the captured step and verify graphs)
    bn_forward_out none = {0};
    if (rc == 0 && n == 1)
        rc = snaps[0] ? e->ops->forward_snaps(sts[0], tokens[0], n_tok[0], outs[0] ? outs[0] : &none, snaps[0], err,
                                              errlen)
                      : e->ops->forward(sts[0], tokens[0], n_tok[0], outs[0] ? outs[0] : &none, err, errlen);
    else if (rc == 0)
        rc = e->ops->forward_multi(sts, tokens, n_tok, n, outs, snaps, err, errlen);
    free(sts), free(tokens), free(n_tok), free(outs), free(snaps), free(snap_store);
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
