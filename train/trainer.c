// train/trainer.c — the FTPO training loop. See trainer.h.
#include "train/trainer.h"
#include <math.h>
#include <string.h>
#include <strings.h>
#include <stdlib.h>
#include <stdio.h>
#include <signal.h>
#include "base/util.h"
#include "base/progress.h"
#include "train/graph.h"
#include "train/lora.h"
#include "train/checkpoint.h"
#include "train/fakequant.h"
#include "train/tether.h"
#include "train/dp.h"
#include "train/device.h"
#include "train/memplan.h"
#include "quant/quant.h"

static volatile sig_atomic_t g_stop_requested;

void bn_ftpo_train_request_stop(void) { g_stop_requested = 1; }

bn_ftpo_train_opts bn_ftpo_train_defaults(void) {
    bn_ftpo_train_opts o = {
        .targets = BN_LORA_ATTN | BN_LORA_FFN, .rank = 32, .alpha = 0, .dropout = 0, .seed = 3407,
        .epochs = 12, .lr = 3e-5f, .batch = 4, .grad_accum = 4, .warmup_ratio = 0.1f,
        .adam = bn_adamw_cfg_default(), .max_grad_norm = 2.5f, .loss = bn_ftpo_cfg_antidoom(),
        .early_stop = 0.4f, .log_window = 5, .eval_each_epoch = true,
        .lambda_tether = 0, .tether_ctx = 64, .tether_batch = 2, .tether_cache_mb = 512,
        .train_gemm = BN_TRAIN_GEMM_BF16,
    };
    return o;
}

typedef struct {
    const bn_model *m;      // reference model (adapter disabled)
    const bn_model *m_pol;  // policy model: m, or with --ste-type the STE weights (train/fakequant.h)
    const bn_train_rows *rows;
    bn_ftpo_refcache *ref;
    int V;
    const bn_train_device *dev; // the device backend the forwards and backwards run on (NULL: the CPU)
    void *dev_ctx;              // its context of m_pol with the adapter
    void *dev_ref_ctx;          // with --ste-type, its context of m without an adapter (NULL: dev_ctx runs m)
} data_t;

// A forward's graph on either backend.
typedef struct {
    bn_train_graph *cpu;
    void *dev;
} row_graph;

// graph_free: frees g's graph on its backend and clears it.
static void graph_free(const data_t *d, row_graph *g) {
    bn_train_graph_free(g->cpu);
    if (g->dev) d->dev->graph_free(g->dev);
    *g = (row_graph){0};
}

// forward_row: the last position's logits of tokens[0..n) into z with adapter l (the policy; NULL: the reference
// model) on the run's backend; the graph into *g for backward_row (g NULL: freed). 0 or -1 (err).
static int forward_row(const data_t *d, bn_lora *l, const int32_t *tokens, int n, bn_rng *rng, float *z, row_graph *g,
                       char *err, size_t errlen) {
    row_graph made = {0};
    void *ctx = !l && d->dev_ref_ctx ? d->dev_ref_ctx : d->dev_ctx;
    if (d->dev) made.dev = d->dev->forward(ctx, l != NULL, tokens, n, z, err, errlen);
    else made.cpu = bn_train_forward(l ? d->m_pol : d->m, l, tokens, n, rng, z, err, errlen);
    if (!made.cpu && !made.dev) return -1;
    if (g) *g = made;
    else graph_free(d, &made);
    return 0;
}

// backward_row: adds the adapter's gradients for dz (the host's l->grads on the CPU, the device's own otherwise; see
// run_step) and frees g; 0 or -1 (err).
static int backward_row(const data_t *d, row_graph *g, const float *dz, char *err, size_t errlen) {
    int rc = g->dev ? d->dev->backward(g->dev, dz, err, errlen) : bn_train_backward(g->cpu, dz, err, errlen);
    graph_free(d, g);
    return rc;
}

// ref_logits: cached reference (adapter disabled) logits of row i; NULL on error.
static const float *ref_logits(data_t *d, int i, char *err, size_t errlen) {
    const float *z = bn_ftpo_refcache_get(d->ref, i);
    if (z) return z;
    float *buf = xmalloc(sizeof(float) * d->V);
    const bn_train_row *r = &d->rows->rows[i];
    if (forward_row(d, NULL, r->ctx, r->n_ctx, NULL, buf, NULL, err, errlen)) { free(buf); return NULL; }
    z = bn_ftpo_refcache_put(d->ref, i, buf);
    free(buf);
    return z;
}

// epoch_order: the training row indices of epoch e in a seeded shuffled order (same on resume).
static void epoch_order(const int *train_idx, int n, uint64_t seed, int64_t epoch, int *order) {
    bn_rng rng;
    bn_rng_seed(&rng, seed ^ (0x5851f42d4c957f2dULL * (uint64_t)(epoch + 1)));
    memcpy(order, train_idx, sizeof(int) * n);
    for (int i = n - 1; i > 0; i--) {
        int j = (int)bn_rng_below(&rng, (uint64_t)i + 1);
        int t = order[i]; order[i] = order[j]; order[j] = t;
    }
}

// eval_set: no-grad metrics of adapter l over the rows with heldout == which (-1 = all rows); with several ranks
// (dp) each rank runs every world-th of those rows and the sums are shared. Returns 0 or -1 (err).
static int eval_set(data_t *d, const bn_ftpo_cfg *cfg, bn_lora *l, int which, bn_dp *dp, bn_ftpo_eval_result *res,
                    char *err, size_t errlen) {
    memset(res, 0, sizeof *res);
    double s[6] = {0}; // chosen_win, loss, margin_win and mean_delta (weighted by valid chosen), valid chosen, rows
    float *z = xmalloc(sizeof(float) * d->V);
    for (int i = 0, k = 0; i < d->rows->n_rows; i++) {
        const bn_train_row *r = &d->rows->rows[i];
        if (which >= 0 && (int)r->heldout != which) continue;
        if (k++ % bn_dp_world(dp) != bn_dp_rank(dp)) continue;
        const float *zr = ref_logits(d, i, err, errlen);
        if (!zr) { free(z); return -1; }
        if (forward_row(d, l, r->ctx, r->n_ctx, NULL, z, NULL, err, errlen)) { free(z); return -1; }
        bn_ftpo_row row = {z, zr, r->rejected, r->chosen, r->n_chosen};
        bn_ftpo_metrics mt;
        s[1] += bn_ftpo_loss(cfg, &row, 1, d->V, NULL, &mt);
        s[0] += mt.chosen_win;
        s[2] += mt.margin_win * mt.n_valid;
        s[3] += mt.mean_delta * mt.n_valid;
        s[4] += mt.n_valid;
        s[5]++;
    }
    free(z);
    if (bn_dp_sum_f64(dp, s, 6, err, errlen)) return -1;
    res->n_rows = (int)s[5];
    if (s[5] > 0) { res->chosen_win = s[0] / s[5]; res->loss = s[1] / s[5]; }
    if (s[4] > 0) { res->margin_win = s[2] / s[4]; res->mean_delta = s[3] / s[4]; }
    return 0;
}

int bn_ftpo_eval(const bn_model *m, const bn_train_rows *rows, bn_lora *l, const bn_ftpo_cfg *cfg, int which,
                 bn_ftpo_eval_result *res, char *err, size_t errlen) {
    data_t d = {.m = m, .m_pol = m, .rows = rows, .ref = bn_ftpo_refcache_new(rows->n_rows, m->cfg.n_vocab),
                .V = m->cfg.n_vocab};
    int rc = eval_set(&d, cfg, l, which, NULL, res, err, errlen);
    bn_ftpo_refcache_free(d.ref);
    return rc;
}

// One training run (bn_ftpo_train): its rows, the adapter and optimizer, the models, the per-batch buffers.
typedef struct {
    const bn_ftpo_train_opts *o;
    const bn_model *m;
    const bn_train_rows *rows;
    int V, n_train;
    int *train_idx;         // [n_train] the rows that are not held out
    int64_t S, W;           // schedule: total and warmup steps
    bn_lora *l;
    bn_adamw *opt;
    bn_train_pos pos;       // step, epoch, data position, RNG, running chosen_win window (the checkpoint's)
    bn_model *m_q, *m_ste;  // --ste-type: the quantized base (reference) and the quantized model with W_eff (policy)
    const bn_model *m_pol;  // the policy model: m_ste or m
    bn_tether *teth;
    data_t d;
    FILE *logf;
    int *order;             // [n_train] this epoch's row order
    float **z, **dz;        // [batch] -> {V}: policy logits and their gradients
    row_graph *graphs;      // [batch]
    bn_ftpo_row *frows;     // [batch]
    int win_cap;            // rows of the running chosen_win window
    int64_t steps_this_run;
    int64_t run_end;        // the step this run stops at (--max-steps or the schedule's end)
    double t_run;           // when this run's steps began, ms (the ETA of the step lines: this run's pace so far)
    bool stall_checked;     // the chosen_win-has-moved check ran (run_epoch_eval)
    bool have_start;        // start holds the train rows' metrics before the first step (a fresh run)
    bn_ftpo_eval_result start;
    bn_progress bar;        // o->progress: the steps of this run
    int device;             // -ngl: the device the run opens (-1: the CPU)
    int64_t dev_plan;       // its memory plan's device total (bn_memplan_device)
    int64_t dev_in_use0;    // device bytes in use before the run opened it (all users)
    int64_t dev_peak;       // the most device bytes in use seen after a micro-batch's forwards or backwards
} train_run;

// run_free: frees everything run holds (NULL fields are fine).
static void run_free(train_run *run) {
    for (int b = 0; run->graphs && b < run->o->batch; b++) {
        graph_free(&run->d, &run->graphs[b]);
        free(run->z[b]);
        free(run->dz[b]);
    }
    if (run->d.dev) run->d.dev->close(run->d.dev_ctx);
    if (run->d.dev_ref_ctx) run->d.dev->close(run->d.dev_ref_ctx);
    free(run->graphs); free(run->z); free(run->dz); free(run->frows); free(run->order);
    if (run->logf) fclose(run->logf);
    bn_ftpo_refcache_free(run->d.ref);
    bn_tether_free(run->teth);
    bn_requant_model_free(run->m_q);
    bn_requant_model_free(run->m_ste);
    bn_lora_free(run->l);
    bn_adamw_free(run->opt);
    free(run->train_idx);
}

// run_rows: the training rows and the schedule (S, W); 0 or -1 (err: no rows, a non-positive size).
static int run_rows(train_run *run, char *err, size_t errlen) {
    const bn_ftpo_train_opts *o = run->o;
    run->train_idx = xmalloc(sizeof(int) * (run->rows->n_rows + 1));
    for (int i = 0; i < run->rows->n_rows; i++)
        if (!run->rows->rows[i].heldout) run->train_idx[run->n_train++] = i;
    if (run->n_train == 0) return bn_err(err, errlen, "no training rows (all rows are held out or filtered)");
    if (o->batch <= 0 || o->grad_accum <= 0 || o->epochs <= 0 || o->rank <= 0)
        return bn_err(err, errlen, "batch, grad_accum, epochs and rank must be positive");
    run->S = bn_sched_total_steps(run->n_train, o->batch * bn_dp_world(o->dp), o->grad_accum, o->epochs);
    run->W = bn_sched_warmup_steps(run->S, o->warmup_ratio);
    return 0;
}

// run_resume: the adapter, optimizer and position of o->resume_path's checkpoint in place of the fresh adapter, when
// they match this run (layout, schedule, row count, --ste-type tag ste_tag); 0 or -1 (err).
static int run_resume(train_run *run, const char *ste_tag, char *err, size_t errlen) {
    const bn_ftpo_train_opts *o = run->o;
    bn_lora *lr;
    if (bn_checkpoint_load(o->resume_path, &lr, &run->opt, &run->pos, err, errlen)) return -1;
    const bn_train_pos *pos = &run->pos;
    if (!bn_lora_same_layout(run->l, lr) || pos->total_steps != run->S || pos->data_pos > run->n_train) {
        bn_err(err, errlen, "%s: checkpoint does not match this run (targets/rank/model, %lld vs %lld total steps, or "
               "row %lld of %d)", o->resume_path, (long long)pos->total_steps, (long long)run->S,
               (long long)pos->data_pos, run->n_train);
        bn_lora_free(lr);
        return -1;
    }
    if (strcasecmp(pos->ste, ste_tag) != 0) {
        bn_err(err, errlen, "%s: checkpoint was trained with --ste-type '%s', this run uses '%s'", o->resume_path,
               pos->ste, ste_tag);
        bn_lora_free(lr);
        return -1;
    }
    bn_lora_free(run->l);
    run->l = lr;
    run->l->dropout = o->dropout;
    return 0;
}

// run_fresh: the PEFT initialisation of the adapter (or o->init_adapter's weights) and a new optimizer; 0 or -1 (err).
static int run_fresh(train_run *run, char *err, size_t errlen) {
    const bn_ftpo_train_opts *o = run->o;
    bn_lora *l = run->l;
    bn_lora_init_peft(l, o->seed);
    if (o->init_adapter) {
        bn_lora *li = bn_lora_load_gguf(o->init_adapter, err, errlen);
        bool same = li && bn_lora_same_layout(l, li) && li->alpha == l->alpha;
        if (same) memcpy(l->params, li->params, sizeof(float) * (size_t)l->n_params);
        else if (li)
            bn_err(err, errlen, "%s: adapter does not match this run (targets/rank/alpha/model)", o->init_adapter);
        bn_lora_free(li);
        if (!same) return -1;
    }
    run->opt = bn_adamw_new(l->n_params);
    return 0;
}

// ranks_note: " x N ranks" for a data-parallel run, "" otherwise (a static buffer).
static const char *ranks_note(const bn_dp *dp) {
    static char note[32];
    note[0] = 0;
    if (bn_dp_world(dp) > 1) snprintf(note, sizeof note, " x %d ranks", bn_dp_world(dp));
    return note;
}

// run_adapter: the adapter, optimizer and position, fresh or resumed, and the run's banner; 0 or -1 (err).
static int run_adapter(train_run *run, char *err, size_t errlen) {
    const bn_ftpo_train_opts *o = run->o;
    run->l = bn_lora_from_model(run->m, o->targets, o->rank, o->alpha > 0 ? o->alpha : (float)o->rank, o->dropout, err,
                                errlen);
    if (!run->l) return -1;
    run->pos = (bn_train_pos){.step = 0, .total_steps = run->S}; // win[] zeroed
    char ste_tag[sizeof run->pos.ste]; // what the checkpoint records of --ste-type: "", "Q1_0", "Q2_0+keep" ...
    if (o->ste_keep_scales && !o->ste_type) return bn_err(err, errlen, "keep-scales needs --ste-type");
    if (o->ste_output_type && !o->ste_type) return bn_err(err, errlen, "an STE output type needs --ste-type");
    int tag_len = snprintf(ste_tag, sizeof ste_tag, "%s%s%s%s", o->ste_type ? o->ste_type : "",
                           o->ste_keep_scales ? "+keep" : "", o->ste_output_type ? "/" : "",
                           o->ste_output_type ? o->ste_output_type : "");
    if (tag_len >= (int)sizeof ste_tag) return bn_err(err, errlen, "STE type tag '%s' is too long", ste_tag);
    bn_rng_seed(&run->pos.rng, o->seed + 1);
    if ((o->resume_path ? run_resume(run, ste_tag, err, errlen) : run_fresh(run, err, errlen)) != 0) return -1;
    if (bn_dp_rank(o->dp) > 0) // the other ranks' dropout masks: their own streams (rank 0's is the checkpoint's)
        bn_rng_seed(&run->pos.rng, (o->seed + 1) ^ (0x9e3779b97f4a7c15ULL * (uint64_t)bn_dp_rank(o->dp)) ^
                                       (uint64_t)run->pos.step);
    const bn_lora *l = run->l;
    if (!o->quiet)
        fprintf(stderr, "ftpo-train: %d train rows, %d held out, %d LoRA tensors, %lld params (r %d, alpha %g), "
                "%lld steps (warmup %lld), batch %d x %d%s%s\n", run->n_train, run->rows->n_rows - run->n_train,
                l->n_tensors, (long long)l->n_params, l->r, l->alpha, (long long)run->S, (long long)run->W, o->batch,
                o->grad_accum, ranks_note(o->dp), o->resume_path ? ", resumed" : "");
    if (!o->quiet && o->ste_type)
        fprintf(stderr, "ftpo-train: STE through %s%s%s: forward on deq(Q(W0 + s·B·A))%s, reference = the %s base\n",
                o->ste_type, o->ste_output_type ? ", output.weight " : "", o->ste_output_type ? o->ste_output_type : "",
                o->ste_keep_scales ? " with the base's block scales" : "", o->ste_type);
    snprintf(run->pos.ste, sizeof run->pos.ste, "%s", ste_tag);
    return 0;
}

// run_ste_models: with --ste-type, the STE models (reference = the quantized base; policy = the quantized model with
// W_eff for the adapted weights); the policy model either way; 0 or -1 (err).
static int run_ste_models(train_run *run, char *err, size_t errlen) {
    const bn_ftpo_train_opts *o = run->o;
    const bn_model *m = run->m;
    if (o->ste_type) {
        if (o->dropout > 0) return bn_err(err, errlen, "--ste-type needs LoRA dropout 0");
        if (!(run->m_q = bn_requant_model(m, o->ste_type, o->ste_output_type, err, errlen)) ||
            !(run->m_ste = bn_requant_model(m, o->ste_type, o->ste_output_type, err, errlen)))
            return -1;
        if (o->ste_keep_scales) bn_requant_model_keep_scales(run->m_ste);
        run->l->ste = true;
        if (bn_requant_model_apply_lora(run->m_ste, m, run->l, err, errlen)) return -1;
    }
    run->m_pol = run->m_ste ? run->m_ste : m;
    return 0;
}

// run_models: the tether, the reference cache and the log; 0 or -1 (err).
static int run_models(train_run *run, char *err, size_t errlen) {
    const bn_ftpo_train_opts *o = run->o;
    const bn_model *m = run->m;
    int trc = 0; // the tether runs on rank 0 alone: its gradient joins the sum of the ranks' (run_step)
    if (bn_dp_rank(o->dp) == 0)
        run->teth = bn_tether_new(o->tether_tokens, o->n_tether_tokens, o->lambda_tether, o->tether_ctx,
                                  o->tether_batch, o->tether_cache_mb, o->seed, &trc, err, errlen);
    if (trc) return -1;
    if (run->teth && !o->quiet) {
        int tb, tc, tn;
        bn_tether_windows(run->teth, &tb, &tc, &tn);
        fprintf(stderr, "ftpo-train: tether λ %g: KL(reference ‖ policy) over %d windows of %d tokens per step "
                "(%d windows of plain text)\n", o->lambda_tether, tb, tc, tn);
    }
    run->d = (data_t){.m = run->m_q ? run->m_q : m, .m_pol = run->m_pol, .rows = run->rows,
                      .ref = bn_ftpo_refcache_new(run->rows->n_rows, run->V), .V = run->V};
    if (o->log_jsonl && !(run->logf = fopen(o->log_jsonl, run->pos.step > 0 ? "a" : "w")))
        return bn_err(err, errlen, "cannot open log %s", o->log_jsonl);
    return 0;
}

// device_plan_cfg: the memory plan's settings of this run on the device: its longest row (train and held out: the
// evaluations run both), the batch of one rank, the tether's windows when the device runs them (tether_on_device; the
// same plan on every rank, though rank 0 alone runs the tether).
static bn_memplan_cfg device_plan_cfg(const train_run *run, bool tether_on_device) {
    const bn_ftpo_train_opts *o = run->o;
    int longest = 1;
    for (int i = 0; i < run->rows->n_rows; i++)
        if (run->rows->rows[i].n_ctx > longest) longest = run->rows->rows[i].n_ctx;
    bn_memplan_cfg c = bn_memplan_cfg_default(longest);
    c.targets = o->targets;
    c.rank = o->rank;
    c.batch = o->batch;
    c.grad_accum = o->grad_accum;
    c.dropout = o->dropout;
    c.ste = o->ste_type != NULL; // the reference's own context: a second copy of the (quantized) base
    c.gemm_bytes = o->train_gemm == BN_TRAIN_GEMM_F32 ? 4 : 2; // the device's base-weight GEMMs
    if (tether_on_device && o->lambda_tether > 0 && o->tether_tokens && o->n_tether_tokens > 0) {
        c.tether_ctx = o->tether_ctx;
        c.tether_batch = o->tether_batch;
        c.tether_cache_mb = o->tether_cache_mb;
    }
    return c;
}

// policy_shape: the memory plan's shape of the model the device holds: the policy's. With --ste-type its types are
// the requantized ones and its stored bytes are summed from its weights (the copy shares the file's tensor table).
static bn_memshape policy_shape(const train_run *run) {
    bn_memshape s = bn_memshape_of_model(run->m_pol);
    if (!run->m_ste) return s;
    const int n = bn_model_weight_slots(run->m_ste, NULL, 0);
    bn_weight **w = xmalloc(sizeof(bn_weight *) * (size_t)n);
    bn_model_weight_slots(run->m_ste, w, n);
    s.base_bytes = 0;
    for (int i = 0; i < n; i++)
        if (w[i]->data)
            s.base_bytes += (int64_t)bn_row_size(w[i]->type, w[i]->ne[0]) * (w[i]->ne[1] > 0 ? w[i]->ne[1] : 1) *
                            (w[i]->ne[2] > 0 ? w[i]->ne[2] : 1) * (w[i]->ne[3] > 0 ? w[i]->ne[3] : 1);
    free(w);
    return s;
}

// device_fits: the run's device plan against the free memory of every rank's device (on each machine, local ranks
// k, k + n_dev, ... share device k, each holding the plan). Each rank measures its own device before any rank opens
// one; the sum shares the measurements, so every rank takes the same decision, naming the first rank whose device
// is short. 0, or -1 with err naming the numbers.
static int device_fits(train_run *run, const bn_train_device *dev, int n_dev, char *err, size_t errlen) {
    bn_dp *dp = run->o->dp;
    const int world = bn_dp_world(dp), rank = bn_dp_rank(dp);
    bn_memshape s = policy_shape(run);
    bn_memplan_cfg c = device_plan_cfg(run, dev->forward_all != NULL);
    bn_memplan p;
    size_t fr = 0, tot = 0;
    if (bn_memplan_compute(&s, &c, &p, err, errlen) || dev->mem_info(run->device, &fr, &tot, err, errlen)) return -1;
    run->dev_plan = p.dev.total;
    run->dev_in_use0 = tot > fr ? (int64_t)(tot - fr) : 0;
    double *mem = xcalloc((size_t)world * 4, sizeof(double)); // rank k: free and total bytes, device, ranks on it
    double *mine = mem + 4 * rank;
    mine[0] = (double)fr, mine[1] = (double)tot, mine[2] = run->device;
    mine[3] = (bn_dp_local_world(dp) - run->device + n_dev - 1) / n_dev;
    int rc = bn_dp_sum_f64(dp, mem, 4 * (int64_t)world, err, errlen);
    char why[1024];
    for (int k = 0; rc == 0 && k < world; k++) {
        const double *m = mem + 4 * k;
        rc = bn_memplan_device_fits(&p, &c, (int)m[3], (int)m[2], (int64_t)m[0], (int64_t)m[1], why, sizeof why);
        if (rc && world > 1) bn_err(err, errlen, "rank %d's %s", k, why);
        else if (rc) bn_err(err, errlen, "%s", why);
    }
    free(mem);
    if (rc == 0 && !run->o->quiet) {
        char plan[32], free_b[32], parts[256];
        fprintf(stderr, "ftpo-train: device plan %s on %s device %d (%s free; %s)\n",
                bn_format_bytes(plan, sizeof plan, (double)p.dev.total), dev->name, run->device,
                bn_format_bytes(free_b, sizeof free_b, (double)fr), bn_memplan_device_parts(&p, parts, sizeof parts));
    }
    return rc;
}

// run_pick_device: with -ngl (o->n_gpu_layers > 0), the rank's device among those the backend sees, when the run's
// memory plan fits it (run->device; -1: the CPU); without a backend or a device, a warning and the CPU. Runs before
// anything is written. 0 or -1 (err: the plan does not fit).
static int run_pick_device(train_run *run, char *err, size_t errlen) {
    const bn_ftpo_train_opts *o = run->o;
    run->device = -1;
    if (o->n_gpu_layers <= 0) return 0;
    const bn_train_device *dev = bn_train_device_get();
    const int n_dev = dev ? dev->device_count() : 0;
    if (n_dev == 0) {
        if (bn_dp_rank(o->dp) == 0)
            fprintf(stderr, "ftpo-train: warning: -ngl %d: %s; training runs on the CPU\n", o->n_gpu_layers,
                    dev ? "no device found" : "this program has no device backend");
        return 0;
    }
    run->device = bn_dp_local_rank(o->dp) % n_dev;
    return device_fits(run, dev, n_dev, err, errlen);
}

// run_device: on the device run_pick_device chose, the device backend holding the model and a copy of the adapter,
// and the ranks' sums through the device transport when the program has one; 0 or -1 (err).
static int run_device(train_run *run, char *err, size_t errlen) {
    const bn_ftpo_train_opts *o = run->o;
    if (run->device < 0) return 0;
    const bn_train_device *dev = bn_train_device_get();
    const bn_train_device_opts dopts = {.gemm = o->train_gemm};
    void *ctx = dev->open(run->m_pol, run->l, run->device, &dopts, err, errlen);
    if (!ctx) return -1;
    run->d.dev = dev;
    run->d.dev_ctx = ctx;
    if (run->m_q && !(run->d.dev_ref_ctx = dev->open(run->m_q, NULL, run->device, &dopts, err, errlen))) return -1;
    if (!o->quiet)
        fprintf(stderr, "ftpo-train: forward and backward on %s device %d (base-weight GEMMs %s)%s\n", dev->name,
                run->device, o->train_gemm == BN_TRAIN_GEMM_F32 ? "fp32" : "bf16, fp32 accumulation",
                run->teth ? (dev->forward_all ? ", the tether too" : "; the tether on the CPU") : "");
    if (run->teth) bn_tether_use_device(run->teth, dev, ctx, run->d.dev_ref_ctx ? run->d.dev_ref_ctx : ctx);
    if (bn_dp_use_device(o->dp, run->device, err, errlen) < 0) return -1;
    if (!o->quiet && bn_dp_rank(o->dp) == 0 && bn_dp_world(o->dp) > 1)
        fprintf(stderr, "ftpo-train: gradient sums of %d ranks through %s\n", bn_dp_world(o->dp),
                bn_dp_transport(o->dp));
    return dev->load_params(ctx, run->l, err, errlen);
}

// note_device_peak: the device memory in use now, kept when it is the most seen.
static void note_device_peak(train_run *run) {
    if (!run->d.dev) return;
    const int64_t used = (int64_t)run->d.dev->mem_in_use(run->d.dev_ctx);
    if (used > run->dev_peak) run->dev_peak = used;
}

// report_device_peak: the device figures of a finished run into res, and on stderr (rank 0, not quiet).
static void report_device_peak(const train_run *run, bn_ftpo_train_result *res) {
    if (!run->d.dev) return;
    res->dev_plan_bytes = run->dev_plan;
    res->dev_peak_bytes = run->dev_peak > run->dev_in_use0 ? run->dev_peak - run->dev_in_use0 : 0;
    if (run->o->quiet) return;
    char peak[32], before[32], plan[32];
    fprintf(stderr, "ftpo-train: device %d memory: peak %s (%lld B) above the %s in use before the run; the plan's "
            "device total %s (%lld B)\n", run->device, bn_format_bytes(peak, sizeof peak, (double)res->dev_peak_bytes),
            (long long)res->dev_peak_bytes, bn_format_bytes(before, sizeof before, (double)run->dev_in_use0),
            bn_format_bytes(plan, sizeof plan, (double)run->dev_plan), (long long)run->dev_plan);
}

// run_buffers: the per-batch buffers and the running window's length.
static void run_buffers(train_run *run) {
    const bn_ftpo_train_opts *o = run->o;
    run->order = xmalloc(sizeof(int) * run->n_train);
    run->z = xcalloc((size_t)o->batch, sizeof(float *));
    run->dz = xcalloc((size_t)o->batch, sizeof(float *));
    for (int b = 0; b < o->batch; b++) {
        run->z[b] = xmalloc(sizeof(float) * run->V);
        run->dz[b] = xmalloc(sizeof(float) * run->V);
    }
    run->graphs = xcalloc((size_t)o->batch, sizeof(row_graph));
    run->frows = xcalloc((size_t)o->batch, sizeof(bn_ftpo_row));
    run->win_cap = o->log_window < 1 ? 1 : (o->log_window > BN_TRAIN_WIN_MAX ? BN_TRAIN_WIN_MAX : o->log_window);
    run->run_end = o->max_steps > 0 && run->pos.step + o->max_steps < run->S ? run->pos.step + o->max_steps : run->S;
    run->t_run = bn_time_ms();
}

// The sums over one step's micro-batches.
typedef struct {
    double loss, pref, nt, t, win, margin, delta;
    int n_micro, n_rows;
} step_sums;

// run_micro: one micro-batch (the next batch × ranks rows of the epoch's order; this rank's share of them): forward,
// FTPO loss, backward into the adapter's gradients, its metrics added to sum; 0 or -1 (err). A share's loss is the
// mean over its rows, weighted by its part of the micro-batch, so the ranks' gradients sum to the whole micro-batch's.
static int run_micro(train_run *run, step_sums *sum, char *err, size_t errlen) {
    const bn_ftpo_train_opts *o = run->o;
    bn_train_pos *pos = &run->pos;
    const int world = bn_dp_world(o->dp), rank = bn_dp_rank(o->dp), left = run->n_train - (int)pos->data_pos;
    const int nb_all = left < o->batch * world ? left : o->batch * world;
    const int lo = (int)((int64_t)nb_all * rank / world), nb = (int)((int64_t)nb_all * (rank + 1) / world) - lo;
    for (int b = 0; b < nb; b++) {
        int ri = run->order[pos->data_pos + lo + b];
        const bn_train_row *r = &run->rows->rows[ri];
        const float *zr = ref_logits(&run->d, ri, err, errlen);
        if (!zr) return -1;
        if (forward_row(&run->d, run->l, r->ctx, r->n_ctx, &pos->rng, run->z[b], &run->graphs[b], err, errlen))
            return -1;
        run->frows[b] = (bn_ftpo_row){run->z[b], zr, r->rejected, r->chosen, r->n_chosen};
    }
    note_device_peak(run); // the micro-batch's graphs are all alive here
    bn_ftpo_metrics mt = {0};
    double loss = nb > 0 ? bn_ftpo_loss(&o->loss, run->frows, nb, run->V, run->dz, &mt) : 0;
    const float share = (float)nb / (float)nb_all;
    for (int b = 0; b < nb; b++) {
        if (nb != nb_all) bn_grad_scale(run->dz[b], run->V, share);
        if (backward_row(&run->d, &run->graphs[b], run->dz[b], err, errlen)) return -1;
    }
    note_device_peak(run);
    sum->loss += share * loss; sum->pref += share * mt.pref; sum->nt += share * mt.nt; sum->t += share * mt.t;
    sum->win += share * mt.chosen_win; sum->margin += share * mt.margin_win; sum->delta += share * mt.mean_delta;
    sum->n_micro++;
    sum->n_rows += nb_all;
    pos->data_pos += nb_all;
    return 0;
}

// step_share: the ranks' sums of the step's gradients, metrics and tether KL, and whether any rank was asked to stop
// (*stop_req in and out); a no-op on one process. 0 or -1 (err).
static int step_share(train_run *run, step_sums *sum, double *tkl, bool *stop_req, char *err, size_t errlen) {
    bn_dp *dp = run->o->dp;
    if (bn_dp_world(dp) == 1) return 0;
    if (bn_dp_sum_f32(dp, run->l->grads, run->l->n_params, err, errlen)) return -1;
    double v[9] = {sum->loss, sum->pref, sum->nt, sum->t, sum->win, sum->margin, sum->delta, *tkl, *stop_req};
    if (bn_dp_sum_f64(dp, v, 9, err, errlen)) return -1;
    sum->loss = v[0]; sum->pref = v[1]; sum->nt = v[2]; sum->t = v[3];
    sum->win = v[4]; sum->margin = v[5]; sum->delta = v[6];
    *tkl = v[7];
    *stop_req = v[8] > 0;
    return 0;
}

// run_report: the step's line on stderr and in the log, the result's running figures; returns the running mean of
// chosen_win over the window (n_hist steps of it filled).
static double run_report(train_run *run, const step_sums *sum, double tkl, double gnorm, double lr_k, double ms,
                         bn_ftpo_train_result *res, int *n_hist_out) {
    const bn_ftpo_train_opts *o = run->o;
    const bn_train_pos *pos = &run->pos;
    const int n_micro = sum->n_micro;
    double *win_hist = run->pos.win; // in the checkpoint, so a resumed run keeps its running mean
    double step_win = sum->win / n_micro, step_loss = sum->loss / n_micro;
    win_hist[(pos->step - 1) % run->win_cap] = step_win;
    int n_hist = pos->step < run->win_cap ? (int)pos->step : run->win_cap;
    double avg = 0;
    for (int i = 0; i < n_hist; i++) avg += win_hist[i];
    avg /= n_hist;
    if (res->steps == 0) { res->first_loss = step_loss; res->first_chosen_win = step_win; res->first_tether = tkl; }
    res->last_tether = tkl;
    res->steps = pos->step;
    res->last_loss = step_loss;
    res->last_chosen_win = step_win;
    res->chosen_win_avg = avg;
    char eta[48];
    bn_eta_text(eta, sizeof eta, (bn_time_ms() - run->t_run) / 1e3, (double)run->steps_this_run,
                (double)(run->steps_this_run + run->run_end - pos->step));
    if (!o->quiet)
        fprintf(stderr, "step %lld/%lld epoch %lld lr %.3g loss %.5f pref %.5f nt %.3g t %.3g chosen_win %.3f "
                "(avg%d %.3f) margin_win %.3f mean_delta %.3f tether %.4g grad_norm %.4g rows %d %.1fs%s%s\n",
                (long long)pos->step, (long long)run->S, (long long)pos->epoch + 1, lr_k, step_loss,
                sum->pref / n_micro, sum->nt / n_micro, sum->t / n_micro, step_win, n_hist, avg, sum->margin / n_micro,
                sum->delta / n_micro, tkl, gnorm, sum->n_rows, ms / 1000, eta[0] ? " " : "", eta);
    if (run->logf) {
        fprintf(run->logf, "{\"step\":%lld,\"epoch\":%lld,\"lr\":%.6g,\"loss\":%.6g,\"pref_loss\":%.6g,"
                "\"mse_elem\":%.6g,\"mse_tgt_tokenwise\":%.6g,\"chosen_win\":%.6g,\"chosen_win_avg\":%.6g,"
                "\"margin_win\":%.6g,\"mean_delta\":%.6g,\"tether_kl\":%.6g,\"grad_norm\":%.6g,\"rows\":%d,"
                "\"seconds\":%.3f}\n", (long long)pos->step, (long long)pos->epoch + 1, lr_k, step_loss,
                sum->pref / n_micro, sum->nt / n_micro, sum->t / n_micro, step_win, avg, sum->margin / n_micro,
                sum->delta / n_micro, tkl, gnorm, sum->n_rows, ms / 1000);
        fflush(run->logf);
    }
    *n_hist_out = n_hist;
    return avg;
}

// run_stops: whether the run stops after this step (early stop on a full window's running chosen_win avg, max_steps,
// an interrupt request stop_req), noted in res.
static bool run_stops(train_run *run, double avg, int n_hist, bool stop_req, bn_ftpo_train_result *res) {
    const bn_ftpo_train_opts *o = run->o;
    bool stop = false;
    if (o->early_stop > 0 && n_hist == run->win_cap && avg >= o->early_stop) { // full window only
        res->early_stopped = true;
        stop = true;
        if (!o->quiet) fprintf(stderr, "early stop: running chosen_win %.3f >= %.3f\n", avg, o->early_stop);
    }
    if (o->max_steps > 0 && run->steps_this_run >= o->max_steps) stop = true;
    if (stop_req) {
        res->interrupted = true;
        stop = true;
        if (!o->quiet) fprintf(stderr, "interrupted after step %lld%s%s\n", (long long)run->pos.step,
                               o->ckpt_path ? ": checkpoint " : "", o->ckpt_path ? o->ckpt_path : "");
    }
    return stop;
}

// run_step: one optimizer step (grad_accum micro-batches, tether, clipping, AdamW, the STE weights), its report and
// checkpoint; *stop set when the run ends after it. 0 or -1 (err).
static int run_step(train_run *run, bn_ftpo_train_result *res, bool *stop, char *err, size_t errlen) {
    const bn_ftpo_train_opts *o = run->o;
    bn_train_pos *pos = &run->pos;
    bn_lora *l = run->l;
    double t0 = bn_time_ms();
    bn_lora_zero_grad(l);
    step_sums sum = {0};
    for (int micro = 0; micro < o->grad_accum && pos->data_pos < run->n_train; micro++)
        if (run_micro(run, &sum, err, errlen)) return -1;
    if (run->d.dev && run->d.dev->take_grads(run->d.dev_ctx, l->grads, err, errlen)) return -1;
    // mean of the micro-batch losses' gradients (HF scales each micro-batch loss by 1/GA)
    bn_grad_scale(l->grads, l->n_params, 1.0f / (float)sum.n_micro);
    double tkl = 0;
    if (run->teth && bn_tether_step(run->teth, run->d.m, run->m_pol, l, pos->step, &tkl, err, errlen)) return -1;
    if (run->teth && run->d.dev && run->d.dev->forward_all && // the tether's gradient, unscaled, from the device
        run->d.dev->take_grads(run->d.dev_ctx, l->grads, err, errlen))
        return -1;
    bool stop_req = g_stop_requested; // the ranks agree on it (step_share), so all stop after the same step
    if (stop_req) g_stop_requested = 0;
    if (step_share(run, &sum, &tkl, &stop_req, err, errlen)) return -1;
    double gnorm = bn_grad_clip(l->grads, l->n_params, o->max_grad_norm);
    double lr_k = bn_sched_lr(o->lr, pos->step, run->S, run->W);
    bn_adamw_step(run->opt, &o->adam, (float)lr_k, l->params, l->grads);
    if (run->m_ste && bn_requant_model_apply_lora(run->m_ste, run->m, l, err, errlen)) return -1;
    if (run->d.dev && run->d.dev->load_params(run->d.dev_ctx, l, err, errlen)) return -1; // W_eff with --ste-type
    pos->step++;
    run->steps_this_run++;
    int n_hist;
    double avg = run_report(run, &sum, tkl, gnorm, lr_k, bn_time_ms() - t0, res, &n_hist);
    *stop = run_stops(run, avg, n_hist, stop_req, res);
    bool at_epoch_end = pos->data_pos >= run->n_train;
    if (o->ckpt_path && ((o->save_every > 0 && pos->step % o->save_every == 0) || *stop || at_epoch_end)) {
        bn_train_pos save = *pos;
        if (at_epoch_end && !*stop) { save.epoch++; save.data_pos = 0; }
        if (bn_checkpoint_save(o->ckpt_path, l, run->opt, &save, err, errlen)) return -1;
    }
    return 0;
}

// run_epoch_eval: the end-of-epoch no-grad chosen_win on the train and held-out rows (stderr and the log); 0 or -1.
static int run_epoch_eval(train_run *run, bn_ftpo_train_result *res, char *err, size_t errlen) {
    const bn_ftpo_train_opts *o = run->o;
    bn_ftpo_eval_result tr, ho;
    if (eval_set(&run->d, &o->loss, run->l, 0, o->dp, &tr, err, errlen) ||
        eval_set(&run->d, &o->loss, run->l, 1, o->dp, &ho, err, errlen))
        return -1;
    long long epoch = (long long)run->pos.epoch + 1;
    if (!o->quiet) {
        fprintf(stderr, "epoch %lld eval: chosen_win train %.3f (%d rows)", epoch, tr.chosen_win, tr.n_rows);
        if (ho.n_rows) fprintf(stderr, ", held-out %.3f (%d rows)", ho.chosen_win, ho.n_rows);
        fputc('\n', stderr);
    }
    // the first epoch end with at least 20 steps behind it: when neither chosen_win nor the mean margin Δ over the
    // train rows has moved from the start (run_epochs' baseline), the learning rate is too low for this model
    // (bn_ftpo_size_preset's presets avoid it). A rising Δ under a flat chosen_win is the usual start: FTPO first
    // closes the gap to a confident rejected token (30-60 steps on the shipped model) before any pair flips.
    if (!run->stall_checked && run->pos.step >= 20 && run->have_start) {
        run->stall_checked = true;
        if (fabs(tr.chosen_win - run->start.chosen_win) < 0.02 && tr.mean_delta - run->start.mean_delta < 0.5) {
            res->stalled = true;
            if (bn_dp_rank(o->dp) == 0)
                fprintf(stderr, "ftpo-train: warning: chosen_win has not moved after epoch %lld, %lld steps (train "
                                "rows %.3f -> %.3f, mean delta %.3f -> %.3f): the learning rate (%g) is likely too low "
                                "for this model\n",
                        epoch, (long long)run->pos.step, run->start.chosen_win, tr.chosen_win, run->start.mean_delta,
                        tr.mean_delta, o->lr);
        }
    }
    if (run->logf) fprintf(run->logf, "{\"epoch_eval\":%lld,\"chosen_win_train\":%.6g,\"chosen_win_heldout\":%.6g}\n",
                           epoch, tr.chosen_win, ho.n_rows ? ho.chosen_win : -1.0);
    return 0;
}

// run_epochs: the epochs from the run's position on, until the schedule ends or a step stops the run; 0 or -1.
static int run_epochs(train_run *run, bn_ftpo_train_result *res, char *err, size_t errlen) {
    const bn_ftpo_train_opts *o = run->o;
    bn_train_pos *pos = &run->pos;
    bool stop = false;
    int64_t first = pos->step;
    if (o->eval_each_epoch && first == 0) { // the baseline of the stall check (run_epoch_eval)
        if (eval_set(&run->d, &o->loss, run->l, 0, o->dp, &run->start, err, errlen)) return -1;
        run->have_start = true;
    }
    if (o->progress) bn_progress_start(&run->bar, "steps", run->run_end - first);
    for (; pos->epoch < o->epochs && !stop; pos->epoch++, pos->data_pos = 0) {
        epoch_order(run->train_idx, run->n_train, o->seed, pos->epoch, run->order);
        while (pos->data_pos < run->n_train && !stop) {
            if (run_step(run, res, &stop, err, errlen)) return -1;
            if (o->progress) {
                char extra[48];
                snprintf(extra, sizeof extra, "chosen_win %.3f", res->chosen_win_avg);
                bn_progress_update(&run->bar, pos->step - first, extra);
            }
        }
        if (o->eval_each_epoch && pos->data_pos >= run->n_train && run_epoch_eval(run, res, err, errlen)) return -1;
        if (stop) break;
    }
    if (o->progress) bn_progress_finish(&run->bar, NULL);
    return 0;
}

int bn_ftpo_train(const bn_model *m, const bn_train_rows *rows, const bn_ftpo_train_opts *o,
                  bn_ftpo_train_result *res, char *err, size_t errlen) {
    memset(res, 0, sizeof *res);
    bn_ftpo_train_opts follower;
    if (bn_dp_rank(o->dp) > 0) { // rank 0 alone prints, logs and writes the checkpoint and adapter
        follower = *o;
        follower.quiet = true;
        follower.progress = false;
        follower.out_adapter = follower.ckpt_path = follower.log_jsonl = NULL;
        o = &follower;
    }
    train_run run = {.o = o, .m = m, .rows = rows, .V = m->cfg.n_vocab};
    int rc = -1;
    if (run_rows(&run, err, errlen) == 0 && run_adapter(&run, err, errlen) == 0 &&
        run_ste_models(&run, err, errlen) == 0 && run_pick_device(&run, err, errlen) == 0 &&
        run_models(&run, err, errlen) == 0 && run_device(&run, err, errlen) == 0) {
        run_buffers(&run);
        if (run_epochs(&run, res, err, errlen) == 0) {
            res->total_steps = run.S;
            report_device_peak(&run, res);
            rc = o->out_adapter && bn_lora_save_gguf(run.l, o->out_adapter, err, errlen) ? -1 : 0;
        }
    }
    run_free(&run);
    return rc;
}

void bn_ftpo_size_preset(int64_t n_params, float *lr, int *rank) {
    if (n_params < 50000000) *lr = 1e-3f, *rank = 16;
    else if (n_params < 1000000000) *lr = 3e-4f, *rank = 16;
    else if (n_params < 10000000000LL) *lr = 1e-4f, *rank = 32;
    else *lr = 3e-5f, *rank = 32;
}
