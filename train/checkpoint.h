// train/checkpoint.h — a training checkpoint file: the LoRA adapter (layout + parameters), AdamW
// moments and step, the training position (epoch, data position, RNG), written atomically and
// ending in a CRC32 of everything before it, verified on load.
#ifndef BONSAI_TRAIN_CHECKPOINT_H
#define BONSAI_TRAIN_CHECKPOINT_H
#include <stdint.h>
#include <stddef.h>
#include "train/lora.h"
#include "train/adamw.h"
#include "base/rng.h"

#define BN_TRAIN_WIN_MAX 64 // longest running-mean window kept in a checkpoint

typedef struct {
    int64_t step;        // optimizer updates done
    int64_t total_steps; // schedule length S (so a resumed run keeps the same schedule)
    int64_t epoch;       // current epoch (0-based)
    int64_t data_pos;    // next row index within the epoch's order
    bn_rng rng;          // RNG state (shuffling, dropout)
    double win[BN_TRAIN_WIN_MAX]; // per-step chosen_win ring (slot (step−1) % window) for the running mean
    char ste[16];        // quantizer type the LoRA is trained through (--ste-type, e.g. "Q1_0"); "" = none
} bn_train_pos;

// bn_checkpoint_save: writes path atomically; returns 0 or -1 (err).
int bn_checkpoint_save(const char *path, const bn_lora *l, const bn_adamw *o, const bn_train_pos *pos,
                       char *err, size_t errlen);
// bn_checkpoint_load: reads and verifies (magic, version, sizes, CRC32) a checkpoint into a new
// adapter (*l, grads zeroed) and optimizer (*o); returns 0 or -1 with a clear message.
int bn_checkpoint_load(const char *path, bn_lora **l, bn_adamw **o, bn_train_pos *pos, char *err, size_t errlen);

#endif
