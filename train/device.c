// train/device.c — the registered device backend of training. See device.h.
#include "train/device.h"

static const bn_train_device *g_device;

void bn_train_device_register(const bn_train_device *d) { g_device = d; }

const bn_train_device *bn_train_device_get(void) { return g_device; }

const char *bn_train_gemm_name(bn_train_gemm g) {
    return g == BN_TRAIN_GEMM_BF16 ? "bf16" : g == BN_TRAIN_GEMM_F32 ? "f32" : "?";
}
