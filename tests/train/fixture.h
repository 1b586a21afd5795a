// tests/train/fixture.h — set-up shared by the training tests (test_sft_train, test_qat, test_ste,
// test_fakequant): the "tiny" bonsai-mkmodel model in a temp directory and the small SFT config.
#ifndef BONSAI_TEST_TRAIN_FIXTURE_H
#define BONSAI_TEST_TRAIN_FIXTURE_H
#include <stdio.h>
#include "tests/test.h"
#include "core/mkmodel.h"
#include "core/model.h"
#include "train/sft.h"

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
#endif
