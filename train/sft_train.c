// train/sft_train.c — one full-parameter SFT optimizer step. See sft.h.
#include "train/sft.h"
#include "base/util.h"

bn_sft_cfg bn_sft_cfg_default(void) {
    bn_sft_cfg c = {.ctx = 128, .batch = 8, .total_steps = 1000, .lr = 1e-3f, .warmup_ratio = 0.05f,
                    .max_grad_norm = 1.0f};
    c.adam = bn_adamw_cfg_default();
    c.adam.beta2 = 0.95f;
    return c;
}

int bn_sft_step(bn_sft_params *p, bn_adamw *o, const bn_sft_cfg *cfg, const bn_sft_data *d, bn_sft_pos *pos,
                double *loss, double *grad_norm, double *lr_used, char *err, size_t errlen) {
    const int len = cfg->ctx + 1;
    if (d->n_train < 2) return bn_err(err, errlen, "sft: fewer than 2 training tokens");
    bn_sft_zero_grad(p);
    const float scale = 1.0f / (float)cfg->batch;
    double sum = 0;
    for (int b = 0; b < cfg->batch; b++) {
        int64_t start = bn_sft_window(d, len, &pos->rng);
        int n = (int)(d->n_train - start < len ? d->n_train - start : len);
        double l = bn_sft_seq_loss(p, d->tok + start, n, scale, true, err, errlen);
        if (l < 0) return -1;
        sum += l;
    }
    const int64_t warmup = bn_sched_warmup_steps(cfg->total_steps, cfg->warmup_ratio);
    const double lr = bn_sched_lr(cfg->lr, pos->step, cfg->total_steps, warmup);
    const double gn = bn_grad_clip(p->grads, p->n_params, cfg->max_grad_norm);
    // decoupled weight decay on matrices only (torch AdamW order: decay, then the Adam update);
    // vectors (norms, ssm_a, ssm_dt) are not decayed
    const float keep = 1.0f - (float)lr * cfg->adam.weight_decay;
    for (int i = 0; i < p->n_tensors && keep != 1.0f; i++) {
        if (p->t[i].n_dims < 2) continue;
        float *w = p->params + p->t[i].off;
        for (int64_t k = 0; k < p->t[i].n; k++) w[k] *= keep;
    }
    bn_adamw_cfg no_decay = cfg->adam;
    no_decay.weight_decay = 0.0f;
    bn_adamw_step(o, &no_decay, (float)lr, p->params, p->grads);
    pos->step++;
    if (bn_sft_qat_sync(p, err, errlen) != 0) return -1; // QAT: the next forward sees deq(Q(new master))
    if (loss) *loss = sum / cfg->batch;
    if (grad_norm) *grad_norm = gn;
    if (lr_used) *lr_used = lr;
    return 0;
}
