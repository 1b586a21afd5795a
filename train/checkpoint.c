// train/checkpoint.c — checkpoint write/read with CRC32. See checkpoint.h.
// Layout (little-endian): "BNCKPT\0\1" | u32 version | i64 step, total_steps, epoch, data_pos |
// u64 rng[4] | f64 win[64] | char ste[16] (v3; v2 files read as "") | i32 r | f32 alpha | f32 dropout | char arch[32] | i32 n_tensors |
// per tensor: char name[96], i32 layer, i32 target, i64 n_in, i64 n_out | i64 n_params |
// f32 params[n] | i64 adam_t | f32 m[n] | f32 v[n] | u32 crc32(all preceding bytes).
#include "base/bytebuf.h"
#include "train/checkpoint.h"
#include <string.h>
#include <stdlib.h>
#include "base/util.h"

static const char MAGIC[8] = {'B', 'N', 'C', 'K', 'P', 'T', 0, 1};
#define CKPT_VERSION 3u


int bn_checkpoint_save(const char *path, const bn_lora *l, const bn_adamw *o, const bn_train_pos *pos,
                       char *err, size_t errlen) {
    if (o->n != l->n_params) return bn_err(err, errlen, "checkpoint: optimizer has %lld params, adapter %lld",
                                           (long long)o->n, (long long)l->n_params);
    bn_buf b = {0};
    uint32_t version = CKPT_VERSION;
    bn_put(&b, MAGIC, sizeof MAGIC);
    BN_PUT(&b, version);
    BN_PUT(&b, pos->step); BN_PUT(&b, pos->total_steps); BN_PUT(&b, pos->epoch); BN_PUT(&b, pos->data_pos);
    bn_put(&b, pos->rng.s, sizeof pos->rng.s);
    bn_put(&b, pos->win, sizeof pos->win);
    bn_put(&b, pos->ste, sizeof pos->ste);
    int32_t r = l->r, nt = l->n_tensors;
    BN_PUT(&b, r); BN_PUT(&b, l->alpha); BN_PUT(&b, l->dropout);
    bn_put(&b, l->arch, sizeof l->arch);
    BN_PUT(&b, nt);
    for (int i = 0; i < l->n_tensors; i++) {
        const bn_lora_tensor *t = &l->t[i];
        int32_t layer = t->layer, target = t->target;
        bn_put(&b, t->name, sizeof t->name);
        BN_PUT(&b, layer); BN_PUT(&b, target); BN_PUT(&b, t->n_in); BN_PUT(&b, t->n_out);
    }
    BN_PUT(&b, l->n_params);
    bn_put(&b, l->params, (size_t)l->n_params * sizeof(float));
    return bn_adamw_commit(&b, o, path, err, errlen);
}


int bn_checkpoint_load(const char *path, bn_lora **lp, bn_adamw **op, bn_train_pos *pos, char *err, size_t errlen) {
    *lp = NULL;
    *op = NULL;
    size_t size;
    char *data = bn_read_file(path, &size, err, errlen);
    if (!data) return -1;
    bn_lora *l = NULL;
    bn_adamw *o = NULL;
    bn_rbuf rd = {(const uint8_t *)data, size, 0};
    char magic[8];
    uint32_t version = 0, crc_file;
    if (size < sizeof MAGIC + 8 || memcmp(data, MAGIC, sizeof MAGIC) != 0) {
        bn_err(err, errlen, "%s: not a bonsai training checkpoint (bad magic)", path);
        goto fail;
    }
    memcpy(&crc_file, data + size - 4, 4);
    uint32_t crc = bn_crc32(0, data, size - 4);
    if (crc != crc_file) {
        bn_err(err, errlen, "%s: checkpoint is corrupted or truncated (CRC32 %08x, expected %08x)", path, crc, crc_file);
        goto fail;
    }
    rd.n = size - 4;
    bn_get(&rd, magic, sizeof magic);
    if (BN_GET(&rd, version) || (version != CKPT_VERSION && version != 2u)) {
        bn_err(err, errlen, "%s: unsupported checkpoint version %u (expected %u)", path, version, CKPT_VERSION);
        goto fail;
    }
    int32_t r, nt;
    float alpha, dropout;
    char arch[32];
    if (BN_GET(&rd, pos->step) || BN_GET(&rd, pos->total_steps) || BN_GET(&rd, pos->epoch) ||
        BN_GET(&rd, pos->data_pos) || bn_get(&rd, pos->rng.s, sizeof pos->rng.s) ||
        bn_get(&rd, pos->win, sizeof pos->win) || (version >= 3u && bn_get(&rd, pos->ste, sizeof pos->ste)) ||
        BN_GET(&rd, r) || BN_GET(&rd, alpha) || BN_GET(&rd, dropout) || bn_get(&rd, arch, sizeof arch) ||
        BN_GET(&rd, nt) || r <= 0 || r > 65536 || nt < 0) {
        bn_err(err, errlen, "%s: checkpoint header is malformed", path);
        goto fail;
    }
    if (pos->step < 0 || pos->total_steps < 1 || pos->step > pos->total_steps || pos->epoch < 0 || pos->data_pos < 0) {
        bn_err(err, errlen, "%s: checkpoint position is malformed (step %lld of %lld, epoch %lld, row %lld)", path,
               (long long)pos->step, (long long)pos->total_steps, (long long)pos->epoch, (long long)pos->data_pos);
        goto fail;
    }
    arch[sizeof arch - 1] = '\0';
    if (version < 3u) memset(pos->ste, 0, sizeof pos->ste);
    pos->ste[sizeof pos->ste - 1] = '\0';
    l = bn_lora_new(r, alpha, dropout, arch);
    for (int i = 0; i < nt; i++) {
        char name[96];
        int32_t layer, target;
        int64_t n_in, n_out;
        if (bn_get(&rd, name, sizeof name) || BN_GET(&rd, layer) || BN_GET(&rd, target) || BN_GET(&rd, n_in) ||
            BN_GET(&rd, n_out)) {
            bn_err(err, errlen, "%s: checkpoint tensor table is truncated", path);
            goto fail;
        }
        name[sizeof name - 1] = '\0';
        if (n_in <= 0 || n_out <= 0 || n_in > (1LL << 32) || n_out > (1LL << 32)) {
            bn_err(err, errlen, "%s: checkpoint tensor %s has a bad shape", path, name);
            goto fail;
        }
        // params, Adam m and v: 12 bytes per parameter must still fit the file (before anything is sized by it)
        if ((l->n_params + (n_in + n_out) * r) > (int64_t)(size / 12)) {
            bn_err(err, errlen, "%s: checkpoint tensor table does not fit the file (at %s)", path, name);
            goto fail;
        }
        if (bn_lora_add(l, name, layer, target, n_in, n_out, err, errlen) < 0) goto fail;
    }
    int64_t n_params, adam_t;
    if (BN_GET(&rd, n_params) || n_params != l->n_params) {
        bn_err(err, errlen, "%s: checkpoint parameter count does not match its tensor table", path);
        goto fail;
    }
    o = bn_adamw_new(n_params);
    size_t bytes = (size_t)n_params * sizeof(float);
    if (bn_get(&rd, l->params, bytes) || BN_GET(&rd, adam_t) || bn_get(&rd, o->m, bytes) || bn_get(&rd, o->v, bytes) ||
        rd.at != rd.n) {
        bn_err(err, errlen, "%s: checkpoint size does not match its header", path);
        goto fail;
    }
    o->t = adam_t;
    free(data);
    *lp = l;
    *op = o;
    return 0;
fail:
    free(data);
    bn_lora_free(l);
    bn_adamw_free(o);
    return -1;
}
