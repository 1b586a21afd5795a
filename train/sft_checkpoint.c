// train/sft_checkpoint.c — the SFT checkpoint: params (the F32 master weights under QAT), the QAT spec, AdamW
// state and position with a CRC32, written atomically; loading refreshes the QAT copies. See sft.h.
#include "base/bytebuf.h"
#include "train/sft.h"
#include <string.h>
#include <stdlib.h>
#include "base/util.h"

// ---- checkpoint ----------------------------------------------------------------------------------
// Layout (little-endian): "BNSFTCK\3" | i64 step, total_steps | u64 rng[4] | i32 ctx, batch |
// f32 lr, warmup_ratio, max_grad_norm, weight_decay | char qat_spec[256] | i32 n_tensors |
// per tensor: char name[96], i64 n | i64 n_params | f32 params[n] | i64 adam_t | f32 m[n] | f32 v[n] |
// u32 crc32(all preceding bytes). Version 2 is the same without qat_spec (plain training).
static const char SFT_MAGIC[8] = {'B', 'N', 'S', 'F', 'T', 'C', 'K', 3};
enum { SFT_MAGIC_V2 = 2 };


int bn_sft_checkpoint_save(const char *path, const bn_sft_params *p, const bn_adamw *o, const bn_sft_pos *pos,
                           char *err, size_t errlen) {
    if (o->n != p->n_params) return bn_err(err, errlen, "sft checkpoint: optimizer/parameter size mismatch");
    bn_buf b = {0};
    bn_put(&b, SFT_MAGIC, sizeof SFT_MAGIC);
    BN_PUT(&b, pos->step);
    BN_PUT(&b, pos->total_steps);
    bn_put(&b, pos->rng.s, sizeof pos->rng.s);
    BN_PUT(&b, pos->ctx); BN_PUT(&b, pos->batch);
    BN_PUT(&b, pos->lr); BN_PUT(&b, pos->warmup_ratio); BN_PUT(&b, pos->max_grad_norm); BN_PUT(&b, pos->weight_decay);
    bn_put(&b, p->qat_spec, sizeof p->qat_spec);
    int32_t nt = p->n_tensors;
    BN_PUT(&b, nt);
    for (int i = 0; i < p->n_tensors; i++) {
        bn_put(&b, p->t[i].name, sizeof p->t[i].name);
        BN_PUT(&b, p->t[i].n);
    }
    BN_PUT(&b, p->n_params);
    bn_put(&b, p->params, sizeof(float) * (size_t)p->n_params);
    return bn_adamw_commit(&b, o, path, err, errlen);
}


int bn_sft_checkpoint_load(const char *path, bn_sft_params *p, bn_adamw **op, bn_sft_pos *pos,
                           char *err, size_t errlen) {
    *op = NULL;
    size_t size;
    char *data = bn_read_file(path, &size, err, errlen);
    if (!data) return -1;
    int rc = -1;
    bn_rbuf rd = {(const uint8_t *)data, size, 0};
    uint32_t crc_file;
    if (size < sizeof SFT_MAGIC + 4 || memcmp(data, SFT_MAGIC, sizeof SFT_MAGIC - 1) != 0 ||
        (data[7] != SFT_MAGIC[7] && data[7] != SFT_MAGIC_V2)) {
        bn_err(err, errlen, "%s: not a bonsai SFT checkpoint (version 2 or 3)", path);
        goto out;
    }
    memcpy(&crc_file, data + size - 4, 4);
    if (bn_crc32(0, data, size - 4) != crc_file) {
        bn_err(err, errlen, "%s: CRC mismatch (truncated or corrupt checkpoint)", path);
        goto out;
    }
    rd.n = size - 4;
    rd.at = sizeof SFT_MAGIC;
    int32_t nt = 0;
    int64_t n_params = 0;
    if (BN_GET(&rd, pos->step) || BN_GET(&rd, pos->total_steps) || bn_get(&rd, pos->rng.s, sizeof pos->rng.s) ||
        BN_GET(&rd, pos->ctx) || BN_GET(&rd, pos->batch) || BN_GET(&rd, pos->lr) || BN_GET(&rd, pos->warmup_ratio) ||
        BN_GET(&rd, pos->max_grad_norm) || BN_GET(&rd, pos->weight_decay))
        goto trunc;
    if (pos->step < 0 || pos->total_steps < 1 || pos->step > pos->total_steps || pos->ctx < 0 || pos->ctx > (1 << 20) ||
        pos->batch < 0 || pos->batch > (1 << 20) || !(pos->lr >= 0 && pos->lr <= 1e6) ||
        !(pos->warmup_ratio >= 0 && pos->warmup_ratio <= 1) || !(pos->max_grad_norm >= 0 && pos->max_grad_norm <= 1e30) ||
        !(pos->weight_decay >= 0 && pos->weight_decay <= 1e6)) {
        bn_err(err, errlen, "%s: checkpoint schedule is malformed (step %lld of %lld, ctx %d, batch %d, lr %g)", path,
               (long long)pos->step, (long long)pos->total_steps, (int)pos->ctx, (int)pos->batch, (double)pos->lr);
        goto out;
    }
    char qat_spec[sizeof p->qat_spec] = "";
    if (data[7] != SFT_MAGIC_V2 && bn_get(&rd, qat_spec, sizeof qat_spec)) goto trunc;
    qat_spec[sizeof qat_spec - 1] = '\0';
    if (strcmp(qat_spec, p->qat_spec) != 0) {
        bn_err(err, errlen, "%s: checkpoint was trained with QAT \"%s\", this run has \"%s\"", path,
               qat_spec[0] ? qat_spec : "none", p->qat_spec[0] ? p->qat_spec : "none");
        goto out;
    }
    if (BN_GET(&rd, nt)) goto trunc;
    if (nt != p->n_tensors) {
        bn_err(err, errlen, "%s: %d tensors, the model has %d", path, nt, p->n_tensors);
        goto out;
    }
    for (int i = 0; i < nt; i++) {
        char name[96];
        int64_t n;
        if (bn_get(&rd, name, sizeof name) || BN_GET(&rd, n)) goto trunc;
        if (strncmp(name, p->t[i].name, sizeof name) != 0 || n != p->t[i].n) {
            bn_err(err, errlen, "%s: tensor %d is %.96s (%lld), the model has %s (%lld)", path, i, name, (long long)n,
                   p->t[i].name, (long long)p->t[i].n);
            goto out;
        }
    }
    if (BN_GET(&rd, n_params) || n_params != p->n_params) goto trunc;
    if (bn_get(&rd, p->params, sizeof(float) * (size_t)n_params)) goto trunc;
    bn_adamw *o = bn_adamw_new(n_params);
    if (BN_GET(&rd, o->t) || bn_get(&rd, o->m, sizeof(float) * (size_t)n_params) ||
        bn_get(&rd, o->v, sizeof(float) * (size_t)n_params) || rd.at != rd.n) {
        bn_adamw_free(o);
        goto trunc;
    }
    *op = o;
    bn_sft_zero_grad(p);
    rc = bn_sft_qat_sync(p, err, errlen);
    if (rc) {
        bn_adamw_free(o);
        *op = NULL;
    }
    goto out;
trunc:
    bn_err(err, errlen, "%s: checkpoint layout does not match", path);
out:
    free(data);
    return rc;
}
