// train/adamw.c — AdamW, clipping and the linear schedule. See adamw.h.
#include "train/adamw.h"
#include <math.h>
#include <stdlib.h>
#include "base/threads.h"
#include "base/util.h"
#include "train/backward_impl.h"

bn_adamw_cfg bn_adamw_cfg_default(void) {
    bn_adamw_cfg c = {.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f};
    return c;
}

bn_adamw *bn_adamw_new(int64_t n) {
    bn_adamw *o = xcalloc(1, sizeof *o);
    o->n = n;
    o->m = xcalloc((size_t)(n > 0 ? n : 1), sizeof(float));
    o->v = xcalloc((size_t)(n > 0 ? n : 1), sizeof(float));
    return o;
}

void bn_adamw_free(bn_adamw *o) {
    if (!o) return;
    free(o->m);
    free(o->v);
    free(o);
}

// adamw_job: one step's constants and arrays, shared by the threads that update its parameters.
typedef struct {
    const bn_adamw_cfg *cfg;
    float step_size, sqrt_bc2, decay;
    float *m, *v, *params;
    const float *grads;
} adamw_job;

// adamw_range: the update of parameters [i0, i1) (each element on its own: any split gives the same bits).
static void adamw_range(void *ctx, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const adamw_job *j = ctx;
    const bn_adamw_cfg *cfg = j->cfg;
    for (int64_t i = i0; i < i1; i++) {
        float g = j->grads[i];
        j->m[i] = cfg->beta1 * j->m[i] + (1.0f - cfg->beta1) * g;
        j->v[i] = cfg->beta2 * j->v[i] + (1.0f - cfg->beta2) * g * g;
        float denom = sqrtf(j->v[i]) / j->sqrt_bc2 + cfg->eps;
        j->params[i] = j->params[i] * j->decay - j->step_size * j->m[i] / denom;
    }
}

int64_t bn_adamw_step(bn_adamw *o, const bn_adamw_cfg *cfg, float lr, float *params, const float *grads) {
    o->t++;
    double bc1 = 1.0 - pow(cfg->beta1, (double)o->t);
    double bc2 = 1.0 - pow(cfg->beta2, (double)o->t);
    // torch: step_size = lr/bc1; denom = sqrt(v)/sqrt(bc2) + eps
    adamw_job j = {cfg, (float)(lr / bc1), (float)sqrt(bc2), 1.0f - lr * cfg->weight_decay, o->m, o->v, params, grads};
    bn_parallel_for(bn_train_pool(), o->n, adamw_range, &j); // bonsai-ftpo-train's -t threads
    return o->t;
}

double bn_grad_norm(const float *g, int64_t n) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)g[i] * g[i];
    return sqrt(ss);
}

double bn_grad_clip(float *g, int64_t n, float max_norm) {
    double norm = bn_grad_norm(g, n);
    if (max_norm > 0) {
        double coef = max_norm / (norm + 1e-6);
        if (coef < 1.0) bn_grad_scale(g, n, (float)coef);
    }
    return norm;
}

void bn_grad_scale(float *g, int64_t n, float s) {
    for (int64_t i = 0; i < n; i++) g[i] *= s;
}

int64_t bn_sched_total_steps(int64_t n_rows, int batch, int grad_accum, int epochs) {
    int64_t per_step = (int64_t)batch * grad_accum;
    if (per_step <= 0) return 0;
    return (n_rows + per_step - 1) / per_step * epochs;
}

int64_t bn_sched_warmup_steps(int64_t total, double ratio) { return (int64_t)ceil(ratio * (double)total - 1e-9); }

double bn_sched_lr(double lr, int64_t k, int64_t total, int64_t warmup) {
    if (k < warmup) return lr * (double)k / (double)warmup;
    if (total <= warmup) return 0.0;
    double f = (double)(total - k) / (double)(total - warmup);
    return lr * (f > 0 ? f : 0);
}

int bn_adamw_commit(bn_buf *b, const bn_adamw *o, const char *path, char *err, size_t errlen) {
    BN_PUT(b, o->t);
    bn_put(b, o->m, sizeof(float) * (size_t)o->n);
    bn_put(b, o->v, sizeof(float) * (size_t)o->n);
    uint32_t crc = bn_crc32(0, b->p, b->n);
    BN_PUT(b, crc);
    int rc = bn_write_file_atomic(path, b->p, b->n, err, errlen);
    free(b->p);
    b->p = NULL, b->n = b->cap = 0;
    return rc;
}
