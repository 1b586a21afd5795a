// tests/train/sft_fixture.h — set-up shared by the full-parameter training tests (test_sft_train,
// test_qat): the small training config and the "tiny" bonsai-mkmodel model in a temp directory.
#ifndef BONSAI_TEST_SFT_FIXTURE_H
#define BONSAI_TEST_SFT_FIXTURE_H
#include <stdio.h>
#include "tests/test.h"
#include "core/mkmodel.h"
#include "core/model.h"
#include "train/sft.h"

// sft_fx_cfg: context 32, batch 2, lr 3e-3 without warm-up, for `steps` optimizer steps.
static inline bn_sft_cfg sft_fx_cfg(int64_t steps) {
    bn_sft_cfg c = bn_sft_cfg_default();
    c.ctx = 32;
    c.batch = 2;
    c.total_steps = steps;
    c.lr = 3e-3f;
    c.warmup_ratio = 0.0f;
    return c;
}

// sft_fx_tiny_model: writes the "tiny" preset to <dir>/tiny.gguf (its path into path) and loads it;
// returns the model, or NULL after a failed CHECK naming the error.
static inline bn_model *sft_fx_tiny_model(const char *dir, char *path, size_t n) {
    char err[256];
    snprintf(path, n, "%s/tiny.gguf", dir);
    bn_mkmodel_params mp;
    bn_mkmodel_defaults(&mp, "tiny");
    if (bn_mkmodel_write(&mp, path, err, sizeof err)) {
        CHECK(0, "mkmodel: %s", err);
        return NULL;
    }
    bn_model *m = bn_model_load(path, err, sizeof err);
    CHECK(m != NULL, "load: %s", err);
    return m;
}
#endif
