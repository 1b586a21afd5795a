// train/device.c — the registered device backend of training. See device.h.
#include "train/device.h"

static const bn_train_device *g_device;

void bn_train_device_register(const bn_train_device *d) { g_device = d; }

const bn_train_device *bn_train_device_get(void) { return g_device; }
