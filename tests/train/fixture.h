// tests/train/fixture.h — set-up shared by the training tests (test_sft_train, test_qat, test_ste,
// test_fakequant, test_tether, test_trainer, test_tool, test_dp, test_device, tests/cuda/test_cuda_ftpo_train): the
// "tiny" bonsai-mkmodel model in a temp directory, the small SFT config, a small set of FTPO rows, complete pair-row
// lines to write training files with, the options of a short FTPO run, and how far two adapter files are apart.
#ifndef BONSAI_TEST_TRAIN_FIXTURE_H
#define BONSAI_TEST_TRAIN_FIXTURE_H
#include <math.h>
#include <stdio.h>
#include "tests/test.h"
#include "synth/mkmodel.h"
#include "core/model.h"
#include "train/sft.h"
#include "train/graph.h"
#include "train/pairs_in.h"
#include "train/lora.h"
#include "train/trainer.h"
#include "records/pairs.h"
#include "base/rng.h"
#include "base/util.h"

// fx_sft_cfg: context 32, batch 2, lr 3e-3 without warm-up, for `steps` optimizer steps.
static inline bn_sft_cfg fx_sft_cfg(int64_t steps) {
    bn_sft_cfg c = bn_sft_cfg_default();
    c.ctx = 32;
    c.batch = 2;
    c.total_steps = steps;
    c.lr = 3e-3f;
    c.warmup_ratio = 0.0f;
    return c;
}

// fx_ftpo_opts: the trainer's defaults for a short quiet run on the tiny model: LoRA rank 4 with alpha on targets,
// learning rate lr, batch rows per micro-batch, grad_accum micro-batches per step, epochs, no early stop.
static inline bn_ftpo_train_opts fx_ftpo_opts(unsigned targets, float alpha, float lr, int batch, int grad_accum,
                                              int epochs) {
    bn_ftpo_train_opts o = bn_ftpo_train_defaults();
    o.rank = 4;
    o.alpha = alpha;
    o.targets = targets;
    o.lr = lr;
    o.batch = batch;
    o.grad_accum = grad_accum;
    o.epochs = epochs;
    o.early_stop = 0;
    o.quiet = true;
    return o;
}

// fx_write_tiny: writes the "tiny" preset with 2-D weights of `type` to <dir>/tiny.gguf (its path
// into path); returns 0, or -1 after a failed CHECK naming the error.
static inline int fx_write_tiny(const char *dir, int type, char *path, size_t n) {
    char err[256];
    snprintf(path, n, "%s/tiny.gguf", dir);
    bn_mkmodel_params mp;
    bn_mkmodel_defaults(&mp, "tiny");
    mp.type = type;
    if (bn_mkmodel_write(&mp, path, err, sizeof err)) {
        CHECK(0, "mkmodel: %s", err);
        return -1;
    }
    return 0;
}

// fx_tiny_model: fx_write_tiny, then loads the file; returns the model, or NULL after a failed CHECK.
static inline bn_model *fx_tiny_model(const char *dir, int type, char *path, size_t n) {
    char err[256];
    if (fx_write_tiny(dir, type, path, n) != 0) return NULL;
    bn_model *m = bn_model_load(path, err, sizeof err);
    CHECK(m != NULL, "load: %s", err);
    return m;
}
// fx_ftpo_rows: 12 FTPO rows of random contexts (6–9 ids < 250, seed 77) for model m: rejected = m's argmax at
// the last position, chosen = 3 other ids; free with bn_train_rows_free.
static inline bn_train_rows *fx_ftpo_rows(const bn_model *m) {
    int V = m->cfg.n_vocab;
    bn_train_rows *rs = xcalloc(1, sizeof *rs);
    rs->n_rows = 12;
    rs->rows = xcalloc(12, sizeof(bn_train_row));
    float *z = xmalloc(sizeof(float) * V);
    bn_rng rng;
    bn_rng_seed(&rng, 77);
    char err[256];
    for (int r = 0; r < rs->n_rows; r++) {
        bn_train_row *row = &rs->rows[r];
        row->n_ctx = 6 + r % 4;
        row->ctx = xmalloc(sizeof(int32_t) * row->n_ctx);
        for (int i = 0; i < row->n_ctx; i++) row->ctx[i] = (int32_t)bn_rng_below(&rng, 250);
        bn_train_graph_free(bn_train_forward(m, NULL, row->ctx, row->n_ctx, NULL, z, err, sizeof err));
        int rej = 0;
        for (int j = 1; j < V; j++) if (z[j] > z[rej]) rej = j;
        row->rejected = rej;
        row->n_chosen = 3;
        row->chosen = xmalloc(sizeof(int32_t) * 3);
        for (int k = 0; k < 3; k++) row->chosen[k] = (rej + 1 + 17 * k) % V;
        row->line = r + 1;
    }
    free(z);
    return rs;
}

// fx_pair_line: writes one complete pair row (records/pairs.h) with ids to f: context ctx[n_ctx], rejected id rej,
// chosen ids chosen[n_chosen] (<= 16), the given source_prompt and split (NULL = absent); the text fields are
// placeholders.
static inline void fx_pair_line(FILE *f, const char *source_prompt, const char *split, const int32_t *ctx, int n_ctx,
                                int32_t rej, const int32_t *chosen, int n_chosen) {
    char *strs[16];
    for (int i = 0; i < n_chosen && i < 16; i++) strs[i] = "c";
    bn_pair_row r = {.context_before = "ctx", .rejected_token = "r", .rejected_decoded = "r", .n_chosen = n_chosen,
                     .chosen_tokens = strs, .chosen_decoded = strs, .source = "test", .source_prompt = (char *)source_prompt,
                     .rep = {.rejected_token_index = 0, .period = 1, .repeats = 1, .snippet = "r"}, .has_ids = true,
                     .n_context = n_ctx, .context_ids = (int32_t *)ctx, .rejected_id = rej, .chosen_ids = (int32_t *)chosen,
                     .split = (char *)split};
    char err[256], *line = bn_pair_row_to_line(&r, err, sizeof err);
    CHECK(line != NULL, "pair row: %s", err);
    if (line) fprintf(f, "%s\n", line);
    free(line);
}

// How far two adapters' parameters are apart.
typedef struct {
    double l2;  // ‖a − b‖ / ‖a‖
    double max; // max |a − b| / max |a|
} fx_param_diff;

// fx_adapter_diff: the difference of two adapter files' parameters (1e9 both when either is missing or the layouts
// differ).
static inline fx_param_diff fx_adapter_diff(const char *pa, const char *pb) {
    char err[256];
    bn_lora *a = bn_lora_load_gguf(pa, err, sizeof err), *b = bn_lora_load_gguf(pb, err, sizeof err);
    fx_param_diff d = {1e9, 1e9};
    if (a && b && bn_lora_same_layout(a, b)) {
        double dd = 0, aa = 0, dmax = 0, amax = 0;
        for (int64_t i = 0; i < a->n_params; i++) {
            double x = a->params[i], e = x - b->params[i];
            dd += e * e;
            aa += x * x;
            dmax = fmax(dmax, fabs(e));
            amax = fmax(amax, fabs(x));
        }
        d = (fx_param_diff){sqrt(dd / (aa > 0 ? aa : 1)), dmax / (amax > 0 ? amax : 1)};
    }
    bn_lora_free(a);
    bn_lora_free(b);
    return d;
}
#endif
