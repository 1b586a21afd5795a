// core/adapter_apply.c — the adapters an engine applies and the low-rank path y += s·B·(A·x) (see core/adapter.h).
// u = s·A·x runs through bn_float_rows (quant/float_rows.c), whose every result depends only on its two rows; then
// y[j] += u[k]·B[j][k] for k = 0..r-1 in order, over B transposed (r rows of n_out, made when the set is built), a
// loop the compiler vectorizes across j. Each output element sees the same operations in the same order whatever the
// number of activation rows and the thread split, so a row's delta has the same bits in a decode and in a batch.
#include "core/adapter.h"
#include "base/util.h"
#include "quant/quant.h"
#include <stdlib.h>
#include <string.h>

#define MIN_PARALLEL_MACS (1 << 15) // smaller products run on the calling thread
#define B_BLOCK 256                 // output rows per task of the B product

// One adapted weight of one adapter.
typedef struct {
    int adapter;
    const bn_adapter_tensor *t;
    float *Bt; // B transposed: {n_out, r}, r rows of n_out (in the set's bt storage)
} lora_ref;

struct bn_lora_set {
    const bn_model *m;
    int n;
    bn_adapter *a[BN_LORA_MAX];
    float scale[BN_LORA_MAX]; // global user scales
    bool own;
    int max_rank;
    int n_fields;  // bn_weight fields per layer (bn_layer_weights holds only bn_weight)
    int n_slots;   // n_layer × n_fields + 1 (the output head)
    int *first;    // [n_slots + 1]: slot k's refs are refs[first[k] .. first[k + 1])
    lora_ref *refs;
    float *bt;     // every ref's Bt
};

_Static_assert(sizeof(bn_layer_weights) % sizeof(bn_weight) == 0, "bn_layer_weights holds only bn_weight fields");

// slot_of: the slot of weight w of m (a layer field or the output head), or -1.
static int slot_of(const bn_lora_set *s, const bn_weight *w) {
    const bn_model *m = s->m;
    if (w == &m->w.output) return s->n_slots - 1;
    const char *p = (const char *)w, *l0 = (const char *)m->w.layers;
    const size_t span = (size_t)m->cfg.n_layer * sizeof(bn_layer_weights);
    if (p < l0 || p >= l0 + span) return -1;
    return (int)((size_t)(p - l0) / sizeof(bn_weight));
}

bn_lora_set *bn_lora_set_new(const bn_model *m, bn_adapter *const *adapters, const float *scales, int n, bool own) {
    bn_lora_set *s = xcalloc(1, sizeof *s);
    s->m = m;
    s->n = n < BN_LORA_MAX ? n : BN_LORA_MAX;
    s->own = own;
    s->n_fields = (int)(sizeof(bn_layer_weights) / sizeof(bn_weight));
    s->n_slots = m->cfg.n_layer * s->n_fields + 1;
    int total = 0;
    for (int i = 0; i < s->n; i++) {
        s->a[i] = adapters[i];
        s->scale[i] = scales ? scales[i] : 1.0f;
        total += adapters[i]->n_tensors;
    }
    int *count = xcalloc((size_t)s->n_slots, sizeof *count);
    int *slot = xcalloc((size_t)total + 1, sizeof *slot);
    for (int i = 0, k = 0; i < s->n; i++)
        for (int j = 0; j < s->a[i]->n_tensors; j++, k++) {
            const bn_weight *w = bn_adapter_weight(m, s->a[i]->t[j].name); // checked: never NULL
            slot[k] = w ? slot_of(s, w) : -1;
            if (slot[k] >= 0) count[slot[k]]++;
            if (s->a[i]->t[j].r > s->max_rank) s->max_rank = s->a[i]->t[j].r;
        }
    s->first = xcalloc((size_t)s->n_slots + 1, sizeof *s->first);
    for (int k = 0; k < s->n_slots; k++) s->first[k + 1] = s->first[k] + count[k];
    s->refs = xcalloc((size_t)total + 1, sizeof *s->refs);
    memset(count, 0, (size_t)s->n_slots * sizeof *count);
    size_t n_bt = 0;
    for (int i = 0; i < s->n; i++)
        for (int j = 0; j < s->a[i]->n_tensors; j++) n_bt += (size_t)(s->a[i]->t[j].n_out * s->a[i]->t[j].r);
    s->bt = xmalloc(sizeof(float) * (n_bt + 1));
    float *bt = s->bt;
    for (int i = 0, k = 0; i < s->n; i++) // adapter order within a slot: the deltas are summed in --lora order
        for (int j = 0; j < s->a[i]->n_tensors; j++, k++) {
            const bn_adapter_tensor *t = &s->a[i]->t[j];
            for (int64_t o = 0; o < t->n_out; o++)
                for (int q = 0; q < t->r; q++) bt[(size_t)q * t->n_out + o] = t->B[(size_t)o * t->r + q];
            if (slot[k] >= 0) s->refs[s->first[slot[k]] + count[slot[k]]++] = (lora_ref){i, t, bt};
            bt += t->n_out * t->r;
        }
    free(count);
    free(slot);
    return s;
}

bn_lora_set *bn_lora_set_open(const bn_model *m, const char *const *paths, const float *scales, int n, char *err,
                              size_t errlen) {
    if (n < 0 || n > BN_LORA_MAX) return bn_err(err, errlen, "%d LoRA adapters (at most %d)", n, BN_LORA_MAX), NULL;
    bn_adapter *a[BN_LORA_MAX] = {0};
    for (int i = 0; i < n; i++) {
        a[i] = bn_adapter_load(paths[i], err, errlen);
        if (!a[i] || bn_adapter_check(a[i], m, err, errlen) != 0) {
            for (int k = 0; k <= i; k++) bn_adapter_free(a[k]);
            return NULL;
        }
    }
    return bn_lora_set_new(m, a, scales, n, true);
}

void bn_lora_set_free(bn_lora_set *s) {
    if (!s) return;
    if (s->own)
        for (int i = 0; i < s->n; i++) bn_adapter_free(s->a[i]);
    free(s->first);
    free(s->refs);
    free(s->bt);
    free(s);
}

int bn_lora_set_count(const bn_lora_set *s) { return s ? s->n : 0; }
const bn_adapter *bn_lora_set_adapter(const bn_lora_set *s, int i) { return s->a[i]; }
float *bn_lora_set_scales(bn_lora_set *s) { return s->scale; }
int bn_lora_set_max_rank(const bn_lora_set *s) { return s ? s->max_rank : 0; }

bool bn_lora_set_adapts(const bn_lora_set *s, const bn_weight *w) {
    const int k = s ? slot_of(s, w) : -1;
    return k >= 0 && s->first[k + 1] > s->first[k];
}

// ---- the low-rank path ----------------------------------------------------------------------
typedef struct {
    const bn_adapter_tensor *t;
    const float *Bt;    // {n_out, r}
    const float *x;     // [n][ne0]
    float *y;           // [n][ne1]
    float *u;           // [n][r]: s_t · A·x[t]
    const float *s;     // [n]: each row's scale (0: the row is skipped)
    int n;
} lora_job;

// a_task: u[t] = s_t · A·x[t] for rows [t0, t1).
static void a_task(void *ctx, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    const lora_job *job = ctx;
    const bn_adapter_tensor *t = job->t;
    for (int64_t i = t0; i < t1; i++) {
        if (job->s[i] == 0.0f) continue;
        float *u = job->u + (size_t)i * t->r;
        bn_float_rows(BN_F32, (int)t->n_in, t->r, 1, u, 0, t->A, (size_t)t->n_in * sizeof(float),
                      job->x + (size_t)i * t->n_in, 0);
        for (int k = 0; k < t->r; k++) u[k] *= job->s[i];
    }
}

// b_task: y[t][j] += u[t][k]·B[j][k] for k = 0..r-1 in order, for the output elements j of blocks [b0, b1) and every
// row t whose scale is not 0.
static void b_task(void *ctx, int64_t b0, int64_t b1, int tid) {
    (void)tid;
    const lora_job *job = ctx;
    const int64_t n_out = job->t->n_out, j0 = b0 * B_BLOCK, j1 = b1 * B_BLOCK < n_out ? b1 * B_BLOCK : n_out;
    const int r = job->t->r;
    for (int i = 0; i < job->n; i++) {
        if (job->s[i] == 0.0f) continue;
        const float *u = job->u + (size_t)i * r;
        float *y = job->y + (size_t)i * n_out;
        for (int k = 0; k < r; k++) {
            const float uk = u[k], *bt = job->Bt + (size_t)k * n_out;
            for (int64_t j = j0; j < j1; j++) y[j] += uk * bt[j];
        }
    }
}

void bn_lora_apply(const bn_lora_set *s, const bn_weight *w, const float *x, float *y, int n,
                   const float *const *scales, float *scratch, bn_pool *pool) {
    const int k = s && n > 0 ? slot_of(s, w) : -1;
    if (k < 0) return;
    float row_s_stack[64];
    float *row_s = n <= 64 ? row_s_stack : xmalloc(sizeof(float) * (size_t)n);
    for (int e = s->first[k]; e < s->first[k + 1]; e++) {
        const lora_ref *ref = &s->refs[e];
        const bn_adapter *a = s->a[ref->adapter];
        bool any = false;
        for (int i = 0; i < n; i++) {
            row_s[i] = bn_adapter_tensor_scale(a, ref->t, scales[i][ref->adapter]);
            any |= row_s[i] != 0.0f;
        }
        if (!any) continue;
        lora_job job = {.t = ref->t, .Bt = ref->Bt, .x = x, .y = y, .u = scratch, .s = row_s, .n = n};
        const int64_t macs = (int64_t)n * ref->t->r * (ref->t->n_in > ref->t->n_out ? ref->t->n_in : ref->t->n_out);
        bn_pool *p = macs >= MIN_PARALLEL_MACS ? pool : NULL;
        bn_parallel_for(n > 1 ? p : NULL, n, a_task, &job);
        bn_parallel_for(p, (ref->t->n_out + B_BLOCK - 1) / B_BLOCK, b_task, &job);
    }
    if (row_s != row_s_stack) free(row_s);
}
