// train/trainer.c — the FTPO training loop. See trainer.h.
#include "train/trainer.h"
#include <math.h>
#include <string.h>
#include <strings.h>
#include <stdlib.h>
#include <stdio.h>
#include <signal.h>
#include "base/util.h"
#include "train/graph.h"
#include "train/lora.h"
#include "train/checkpoint.h"
#include "train/fakequant.h"
#include "train/tether.h"

static volatile sig_atomic_t g_stop_requested;

void bn_ftpo_train_request_stop(void) { g_stop_requested = 1; }

bn_ftpo_train_opts bn_ftpo_train_defaults(void) {
    bn_ftpo_train_opts o = {
        .targets = BN_LORA_ATTN | BN_LORA_FFN, .rank = 32, .alpha = 0, .dropout = 0, .seed = 3407,
        .epochs = 12, .lr = 3e-5f, .batch = 4, .grad_accum = 4, .warmup_ratio = 0.1f,
        .adam = bn_adamw_cfg_default(), .max_grad_norm = 2.5f, .loss = bn_ftpo_cfg_antidoom(),
        .early_stop = 0.4f, .log_window = 5, .eval_each_epoch = true,
        .lambda_tether = 0, .tether_ctx = 64, .tether_batch = 2, .tether_cache_mb = 512,
    };
    return o;
}

typedef struct {
    const bn_model *m;      // reference model (adapter disabled)
    const bn_model *m_pol;  // policy model: m, or with --ste-type the STE weights (train/fakequant.h)
    const bn_train_rows *rows;
    bn_ftpo_refcache *ref;
    int V;
} data_t;

// ref_logits: cached reference (adapter disabled) logits of row i; NULL on error.
static const float *ref_logits(data_t *d, int i, char *err, size_t errlen) {
    const float *z = bn_ftpo_refcache_get(d->ref, i);
    if (z) return z;
    float *buf = xmalloc(sizeof(float) * d->V);
    const bn_train_row *r = &d->rows->rows[i];
    bn_train_graph *g = bn_train_forward(d->m, NULL, r->ctx, r->n_ctx, NULL, buf, err, errlen);
    if (!g) { free(buf); return NULL; }
    bn_train_graph_free(g);
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

// eval_set: no-grad metrics of adapter l over the rows with heldout == which (-1 = all rows);
// returns 0 or -1 (err).
static int eval_set(data_t *d, const bn_ftpo_cfg *cfg, bn_lora *l, int which, bn_ftpo_eval_result *res,
                    char *err, size_t errlen) {
    memset(res, 0, sizeof *res);
    double win = 0, loss = 0, margin = 0, delta = 0;
    int n_chosen = 0;
    float *z = xmalloc(sizeof(float) * d->V);
    for (int i = 0; i < d->rows->n_rows; i++) {
        const bn_train_row *r = &d->rows->rows[i];
        if (which >= 0 && (int)r->heldout != which) continue;
        const float *zr = ref_logits(d, i, err, errlen);
        if (!zr) { free(z); return -1; }
        bn_train_graph *g = bn_train_forward(d->m_pol, l, r->ctx, r->n_ctx, NULL, z, err, errlen);
        if (!g) { free(z); return -1; }
        bn_train_graph_free(g);
        bn_ftpo_row row = {z, zr, r->rejected, r->chosen, r->n_chosen};
        bn_ftpo_metrics mt;
        loss += bn_ftpo_loss(cfg, &row, 1, d->V, NULL, &mt);
        win += mt.chosen_win;
        margin += mt.margin_win * mt.n_valid;
        delta += mt.mean_delta * mt.n_valid;
        n_chosen += mt.n_valid;
        res->n_rows++;
    }
    free(z);
    if (res->n_rows) { res->chosen_win = win / res->n_rows; res->loss = loss / res->n_rows; }
    if (n_chosen) { res->margin_win = margin / n_chosen; res->mean_delta = delta / n_chosen; }
    return 0;
}

int bn_ftpo_eval(const bn_model *m, const bn_train_rows *rows, bn_lora *l, const bn_ftpo_cfg *cfg, int which,
                 bn_ftpo_eval_result *res, char *err, size_t errlen) {
    data_t d = {.m = m, .m_pol = m, .rows = rows, .ref = bn_ftpo_refcache_new(rows->n_rows, m->cfg.n_vocab),
                .V = m->cfg.n_vocab};
    int rc = eval_set(&d, cfg, l, which, res, err, errlen);
    bn_ftpo_refcache_free(d.ref);
    return rc;
}

int bn_ftpo_train(const bn_model *m, const bn_train_rows *rows, const bn_ftpo_train_opts *o,
                  bn_ftpo_train_result *res, char *err, size_t errlen) {
    memset(res, 0, sizeof *res);
    int V = m->cfg.n_vocab;
    int n_train = 0;
    int *train_idx = xmalloc(sizeof(int) * (rows->n_rows + 1));
    for (int i = 0; i < rows->n_rows; i++) if (!rows->rows[i].heldout) train_idx[n_train++] = i;
    if (n_train == 0) { free(train_idx); return bn_err(err, errlen, "no training rows (all rows are held out or filtered)"); }
    if (o->batch <= 0 || o->grad_accum <= 0 || o->epochs <= 0 || o->rank <= 0)
        { free(train_idx); return bn_err(err, errlen, "batch, grad_accum, epochs and rank must be positive"); }
    int64_t S = bn_sched_total_steps(n_train, o->batch, o->grad_accum, o->epochs);
    int64_t W = bn_sched_warmup_steps(S, o->warmup_ratio);

    bn_lora *l = bn_lora_from_model(m, o->targets, o->rank, o->alpha > 0 ? o->alpha : (float)o->rank, o->dropout, err, errlen);
    if (!l) { free(train_idx); return -1; }
    bn_adamw *opt = NULL;
    bn_train_pos pos = {.step = 0, .total_steps = S}; // win[] zeroed
    char ste_tag[sizeof pos.ste]; // what the checkpoint records of --ste-type: "", "Q1_0", "Q2_0+keep" ...
    if (o->ste_keep_scales && !o->ste_type) { bn_lora_free(l); free(train_idx); return bn_err(err, errlen, "keep-scales needs --ste-type"); }
    snprintf(ste_tag, sizeof ste_tag, "%s%s", o->ste_type ? o->ste_type : "", o->ste_keep_scales ? "+keep" : "");
    bn_rng_seed(&pos.rng, o->seed + 1);
    if (o->resume_path) {
        bn_lora *lr;
        if (bn_checkpoint_load(o->resume_path, &lr, &opt, &pos, err, errlen)) { bn_lora_free(l); free(train_idx); return -1; }
        if (!bn_lora_same_layout(l, lr) || pos.total_steps != S || pos.data_pos > n_train) {
            bn_err(err, errlen, "%s: checkpoint does not match this run (targets/rank/model, %lld vs %lld total steps, or "
                   "row %lld of %d)", o->resume_path, (long long)pos.total_steps, (long long)S, (long long)pos.data_pos,
                   n_train);
            bn_lora_free(lr); bn_lora_free(l); bn_adamw_free(opt); free(train_idx);
            return -1;
        }
        if (strcasecmp(pos.ste, ste_tag) != 0) {
            bn_err(err, errlen, "%s: checkpoint was trained with --ste-type '%s', this run uses '%s'", o->resume_path,
                   pos.ste, ste_tag);
            bn_lora_free(lr); bn_lora_free(l); bn_adamw_free(opt); free(train_idx);
            return -1;
        }
        bn_lora_free(l);
        l = lr;
        l->dropout = o->dropout;
    } else {
        bn_lora_init_peft(l, o->seed);
        if (o->init_adapter) {
            bn_lora *li = bn_lora_load_gguf(o->init_adapter, err, errlen);
            bool same = li && bn_lora_same_layout(l, li) && li->alpha == l->alpha;
            if (same) memcpy(l->params, li->params, sizeof(float) * (size_t)l->n_params);
            else if (li) bn_err(err, errlen, "%s: adapter does not match this run (targets/rank/alpha/model)", o->init_adapter);
            bn_lora_free(li);
            if (!same) { bn_lora_free(l); free(train_idx); return -1; }
        }
        opt = bn_adamw_new(l->n_params);
    }
    if (!o->quiet)
        fprintf(stderr, "ftpo-train: %d train rows, %d held out, %d LoRA tensors, %lld params (r %d, alpha %g), "
                "%lld steps (warmup %lld), batch %d x %d%s\n", n_train, rows->n_rows - n_train, l->n_tensors,
                (long long)l->n_params, l->r, l->alpha, (long long)S, (long long)W, o->batch, o->grad_accum,
                o->resume_path ? ", resumed" : "");
    if (!o->quiet && o->ste_type)
        fprintf(stderr, "ftpo-train: STE through %s: forward on deq(Q(W0 + s·B·A))%s, reference = the %s base\n",
                o->ste_type, o->ste_keep_scales ? " with the base's block scales" : "", o->ste_type);

    snprintf(pos.ste, sizeof pos.ste, "%s", ste_tag);
    // STE: reference = the quantized base; policy = the quantized model with W_eff for the adapted weights
    bn_model *m_q = NULL, *m_ste = NULL;
    if (o->ste_type) {
        if (o->dropout > 0) { bn_err(err, errlen, "--ste-type needs LoRA dropout 0"); goto fail; }
        if (!(m_q = bn_requant_model(m, o->ste_type, err, errlen)) || !(m_ste = bn_requant_model(m, o->ste_type, err, errlen)))
            goto fail;
        if (o->ste_keep_scales) bn_requant_model_keep_scales(m_ste);
        l->ste = true;
        if (bn_requant_model_apply_lora(m_ste, m, l, err, errlen)) goto fail;
    }
    const bn_model *m_pol = m_ste ? m_ste : m;
    int trc;
    bn_tether *teth = bn_tether_new(o->tether_tokens, o->n_tether_tokens, o->lambda_tether, o->tether_ctx,
                                     o->tether_batch, o->tether_cache_mb, o->seed, &trc, err, errlen);
    if (trc) goto fail;
    if (teth && !o->quiet) {
        int tb, tc, tn;
        bn_tether_windows(teth, &tb, &tc, &tn);
        fprintf(stderr, "ftpo-train: tether λ %g: KL(reference ‖ policy) over %d windows of %d tokens per step "
                "(%d windows of plain text)\n", o->lambda_tether, tb, tc, tn);
    }
    data_t d = {.m = m_q ? m_q : m, .m_pol = m_pol, .rows = rows, .ref = bn_ftpo_refcache_new(rows->n_rows, V), .V = V};
    FILE *logf = NULL;
    if (o->log_jsonl && !(logf = fopen(o->log_jsonl, pos.step > 0 ? "a" : "w"))) {
        bn_err(err, errlen, "cannot open log %s", o->log_jsonl);
        bn_ftpo_refcache_free(d.ref);
        bn_tether_free(teth);
        goto fail;
    }
    int *order = xmalloc(sizeof(int) * n_train);
    float **z = xcalloc((size_t)o->batch, sizeof(float *));
    float **dz = xcalloc((size_t)o->batch, sizeof(float *));
    for (int b = 0; b < o->batch; b++) { z[b] = xmalloc(sizeof(float) * V); dz[b] = xmalloc(sizeof(float) * V); }
    bn_train_graph **graphs = xcalloc((size_t)o->batch, sizeof(bn_train_graph *));
    bn_ftpo_row *frows = xcalloc((size_t)o->batch, sizeof(bn_ftpo_row));
    int win_cap = o->log_window < 1 ? 1 : (o->log_window > BN_TRAIN_WIN_MAX ? BN_TRAIN_WIN_MAX : o->log_window);
    double *win_hist = pos.win; // in the checkpoint, so a resumed run keeps its running mean
    int64_t steps_this_run = 0;
    const int64_t run_end = o->max_steps > 0 && pos.step + o->max_steps < S ? pos.step + o->max_steps : S;
    const double t_run = bn_time_ms(); // the ETA of the step lines: this run's pace so far
    bool stop = false;
    int rc = -1;

    for (; pos.epoch < o->epochs && !stop; pos.epoch++, pos.data_pos = 0) {
        epoch_order(train_idx, n_train, o->seed, pos.epoch, order);
        while (pos.data_pos < n_train && !stop) {
            double t0 = bn_time_ms();
            bn_lora_zero_grad(l);
            double loss_sum = 0, pref_sum = 0, nt_sum = 0, t_sum = 0, win_sum = 0, margin_sum = 0, delta_sum = 0;
            int n_micro = 0, n_rows_step = 0;
            for (int micro = 0; micro < o->grad_accum && pos.data_pos < n_train; micro++) {
                int nb = n_train - (int)pos.data_pos < o->batch ? n_train - (int)pos.data_pos : o->batch;
                for (int b = 0; b < nb; b++) {
                    int ri = order[pos.data_pos + b];
                    const bn_train_row *r = &rows->rows[ri];
                    const float *zr = ref_logits(&d, ri, err, errlen);
                    if (!zr) goto fail_loop;
                    graphs[b] = bn_train_forward(m_pol, l, r->ctx, r->n_ctx, &pos.rng, z[b], err, errlen);
                    if (!graphs[b]) goto fail_loop;
                    frows[b] = (bn_ftpo_row){z[b], zr, r->rejected, r->chosen, r->n_chosen};
                }
                bn_ftpo_metrics mt;
                double loss = bn_ftpo_loss(&o->loss, frows, nb, V, dz, &mt);
                for (int b = 0; b < nb; b++) {
                    int brc = bn_train_backward(graphs[b], dz[b], err, errlen);
                    bn_train_graph_free(graphs[b]);
                    graphs[b] = NULL;
                    if (brc) goto fail_loop;
                }
                loss_sum += loss; pref_sum += mt.pref; nt_sum += mt.nt; t_sum += mt.t;
                win_sum += mt.chosen_win; margin_sum += mt.margin_win; delta_sum += mt.mean_delta;
                n_micro++;
                n_rows_step += nb;
                pos.data_pos += nb;
            }
            // mean of the micro-batch losses' gradients (HF scales each micro-batch loss by 1/GA)
            bn_grad_scale(l->grads, l->n_params, 1.0f / (float)n_micro);
            double tkl = 0;
            if (teth && bn_tether_step(teth, d.m, m_pol, l, pos.step, &tkl, err, errlen)) goto fail_loop;
            double gnorm = bn_grad_clip(l->grads, l->n_params, o->max_grad_norm);
            double lr_k = bn_sched_lr(o->lr, pos.step, S, W);
            bn_adamw_step(opt, &o->adam, (float)lr_k, l->params, l->grads);
            if (m_ste && bn_requant_model_apply_lora(m_ste, m, l, err, errlen)) goto fail_loop;
            pos.step++;
            steps_this_run++;
            double step_win = win_sum / n_micro, step_loss = loss_sum / n_micro;
            win_hist[(pos.step - 1) % win_cap] = step_win;
            int n_hist = pos.step < win_cap ? (int)pos.step : win_cap;
            double avg = 0;
            for (int i = 0; i < n_hist; i++) avg += win_hist[i];
            avg /= n_hist;
            if (res->steps == 0) { res->first_loss = step_loss; res->first_chosen_win = step_win; res->first_tether = tkl; }
            res->last_tether = tkl;
            res->steps = pos.step;
            res->last_loss = step_loss;
            res->last_chosen_win = step_win;
            res->chosen_win_avg = avg;
            double ms = bn_time_ms() - t0;
            char eta[48];
            bn_eta_text(eta, sizeof eta, (bn_time_ms() - t_run) / 1e3, (double)steps_this_run,
                        (double)(steps_this_run + run_end - pos.step));
            if (!o->quiet)
                fprintf(stderr, "step %lld/%lld epoch %lld lr %.3g loss %.5f pref %.5f nt %.3g t %.3g chosen_win %.3f "
                        "(avg%d %.3f) margin_win %.3f mean_delta %.3f tether %.4g grad_norm %.4g rows %d %.1fs%s%s\n",
                        (long long)pos.step, (long long)S, (long long)pos.epoch + 1, lr_k, step_loss, pref_sum / n_micro,
                        nt_sum / n_micro, t_sum / n_micro, step_win, n_hist, avg, margin_sum / n_micro, delta_sum / n_micro,
                        tkl, gnorm, n_rows_step, ms / 1000, eta[0] ? " " : "", eta);
            if (logf) {
                fprintf(logf, "{\"step\":%lld,\"epoch\":%lld,\"lr\":%.6g,\"loss\":%.6g,\"pref_loss\":%.6g,\"mse_elem\":%.6g,"
                        "\"mse_tgt_tokenwise\":%.6g,\"chosen_win\":%.6g,\"chosen_win_avg\":%.6g,\"margin_win\":%.6g,"
                        "\"mean_delta\":%.6g,\"tether_kl\":%.6g,\"grad_norm\":%.6g,\"rows\":%d,\"seconds\":%.3f}\n",
                        (long long)pos.step, (long long)pos.epoch + 1, lr_k, step_loss, pref_sum / n_micro, nt_sum / n_micro,
                        t_sum / n_micro, step_win, avg, margin_sum / n_micro, delta_sum / n_micro, tkl, gnorm, n_rows_step,
                        ms / 1000);
                fflush(logf);
            }
            if (o->early_stop > 0 && n_hist == win_cap && avg >= o->early_stop) { // full window only
                res->early_stopped = true;
                stop = true;
                if (!o->quiet) fprintf(stderr, "early stop: running chosen_win %.3f >= %.3f\n", avg, o->early_stop);
            }
            if (o->max_steps > 0 && steps_this_run >= o->max_steps) stop = true;
            if (g_stop_requested) {
                g_stop_requested = 0;
                res->interrupted = true;
                stop = true;
                if (!o->quiet) fprintf(stderr, "interrupted after step %lld%s%s\n", (long long)pos.step,
                                       o->ckpt_path ? ": checkpoint " : "", o->ckpt_path ? o->ckpt_path : "");
            }
            bool at_epoch_end = pos.data_pos >= n_train;
            if (o->ckpt_path && ((o->save_every > 0 && pos.step % o->save_every == 0) || stop || at_epoch_end)) {
                bn_train_pos save = pos;
                if (at_epoch_end && !stop) { save.epoch++; save.data_pos = 0; }
                if (bn_checkpoint_save(o->ckpt_path, l, opt, &save, err, errlen)) goto fail_loop;
            }
        }
        if (o->eval_each_epoch && pos.data_pos >= n_train) {
            bn_ftpo_eval_result tr, ho;
            if (eval_set(&d, &o->loss, l, 0, &tr, err, errlen) || eval_set(&d, &o->loss, l, 1, &ho, err, errlen)) goto fail_loop;
            if (!o->quiet) {
                fprintf(stderr, "epoch %lld eval: chosen_win train %.3f (%d rows)", (long long)pos.epoch + 1, tr.chosen_win, tr.n_rows);
                if (ho.n_rows) fprintf(stderr, ", held-out %.3f (%d rows)", ho.chosen_win, ho.n_rows);
                fputc('\n', stderr);
            }
            if (logf) fprintf(logf, "{\"epoch_eval\":%lld,\"chosen_win_train\":%.6g,\"chosen_win_heldout\":%.6g}\n",
                              (long long)pos.epoch + 1, tr.chosen_win, ho.n_rows ? ho.chosen_win : -1.0);
        }
        if (stop) break;
    }
    res->total_steps = S;
    if (o->out_adapter && bn_lora_save_gguf(l, o->out_adapter, err, errlen)) goto fail_loop;
    rc = 0;
fail_loop:
    for (int b = 0; b < o->batch; b++) { bn_train_graph_free(graphs[b]); free(z[b]); free(dz[b]); }
    free(graphs); free(z); free(dz); free(frows); free(order);
    if (logf) fclose(logf);
    bn_ftpo_refcache_free(d.ref);
    bn_tether_free(teth);
    bn_requant_model_free(m_q);
    bn_requant_model_free(m_ste);
    bn_lora_free(l);
    bn_adamw_free(opt);
    free(train_idx);
    return rc;
fail:
    bn_requant_model_free(m_q);
    bn_requant_model_free(m_ste);
    bn_lora_free(l);
    bn_adamw_free(opt);
    free(train_idx);
    return -1;
}
