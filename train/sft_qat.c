// train/sft_qat.c — quantization-aware full-parameter training: which tensors are fake-quantized
// (bonsai-quantize's own rules), the fake-quantized forward copies, and the write-back (bn_sft_save_gguf: the F32
// file, or the quantized one under QAT).
// See sft.h. The gradient the graph computes w.r.t. a fake-quantized weight is applied unchanged to
// its F32 master (straight-through estimator): nothing here touches the backward.
#include "train/sft.h"
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/util.h"
#include "quant/quant.h"
#include "quantize/quantize.h"
#include "quantize/rules.h"
#include "train/fakequant.h"

enum { MAX_SKIP = 16 };

// skip_overrides: splits the comma-separated skip list into "PATTERN=f16" --tensor-type rules in
// buf (one string per rule, pointers in rules[]); returns the count or -1 (err).
static int skip_overrides(const char *skip, char buf[MAX_SKIP][128], const char *rules[MAX_SKIP], char *err,
                          size_t errlen) {
    int n = 0;
    for (const char *s = skip ? skip : ""; *s;) {
        const char *end = strchr(s, ',');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        if (len > 0) {
            if (n == MAX_SKIP) return bn_err(err, errlen, "qat: more than %d --qat-skip patterns", MAX_SKIP);
            if (len > 100) return bn_err(err, errlen, "qat: --qat-skip pattern longer than 100 characters");
            snprintf(buf[n], sizeof buf[n], "%.*s=f16", (int)len, s);
            rules[n] = buf[n];
            n++;
        }
        s += len + (end ? 1 : 0);
    }
    return n;
}

// build_rules: bonsai-quantize's rules for TYPE with the skip overrides (exactly what the
// write-back's driver call uses); returns 0 or -1.
static int build_rules(bn_quant_rules *r, const char *type, const char *const *overrides, int n_overrides,
                       bool tied, char *err, size_t errlen) {
    int ftype, def;
    if (bn_parse_ftype(type, false, &ftype, &def, err, errlen) != 0) return -1;
    bn_quant_rules_init(r, ftype, def, false);
    r->tied = tied;
    for (int i = 0; i < n_overrides; i++)
        if (bn_quant_rules_add_override(r, overrides[i], err, errlen) != 0) {
            bn_quant_rules_free(r);
            return -1;
        }
    return 0;
}

int bn_sft_qat_enable(bn_sft_params *p, const char *type, const char *skip, char *err, size_t errlen) {
    if (p->fq) return bn_err(err, errlen, "qat: already enabled (%s)", p->qat_spec);
    char buf[MAX_SKIP][128];
    const char *overrides[MAX_SKIP];
    int n_over = skip_overrides(skip, buf, overrides, err, errlen);
    if (n_over < 0) return -1;
    bn_quant_rules r;
    if (build_rules(&r, type, overrides, n_over, p->src->cfg.tied_output, err, errlen) != 0) return -1;
    const int qtype = r.default_type;
    int n_qat = 0;
    for (int i = 0; i < p->n_tensors; i++) {
        bn_sft_tensor *t = &p->t[i];
        int n_dims = t->n_dims;
        while (n_dims > 1 && t->ne[n_dims - 1] == 1) n_dims--;
        bn_tensor_choice ch;
        if (bn_tensor_choose_type(&r, t->name, n_dims, t->ne, BN_F32, &ch, err, errlen) != 0) {
            bn_quant_rules_free(&r);
            for (int k = 0; k < i; k++) p->t[k].qat = false;
            return -1;
        }
        t->qat = ch.type == qtype;
        n_qat += t->qat;
    }
    bn_quant_rules_free(&r);
    if (n_qat == 0) return bn_err(err, errlen, "qat: no tensor of this model would be stored as %s", type);
    p->qat_type = qtype;
    // the spec keeps TYPE as given (upper-cased) so the write-back parses exactly what enable parsed
    int k = snprintf(p->qat_spec, sizeof p->qat_spec, "%.31s", type);
    for (int i = 0; i < k; i++) p->qat_spec[i] = (char)toupper((unsigned char)p->qat_spec[i]);
    if (skip && skip[0]) snprintf(p->qat_spec + k, sizeof p->qat_spec - (size_t)k, " skip=%s", skip);
    p->fq = xcalloc((size_t)p->n_params, sizeof(float));
    bn_sft_set_views(p);
    if (bn_sft_qat_sync(p, err, errlen) != 0) return -1;
    return n_qat;
}

int bn_sft_qat_sync(bn_sft_params *p, char *err, size_t errlen) {
    if (!p->fq) return 0;
    for (int i = 0; i < p->n_tensors; i++) {
        const bn_sft_tensor *t = &p->t[i];
        if (!t->qat) continue;
        const int64_t n_rows = t->n / t->ne[0];
        if (bn_fake_quantize(p->qat_type, p->params + t->off, p->fq + t->off, t->ne[0], n_rows) != 0)
            return bn_err(err, errlen, "qat: cannot fake-quantize %s to %s", t->name, bn_type_name(p->qat_type));
    }
    return 0;
}

int bn_sft_save_gguf(const bn_sft_params *p, const char *path, char *err, size_t errlen) {
    return p->fq ? bn_sft_qat_save_gguf(p, path, err, errlen) : bn_sft_save_gguf_f32(p, path, err, errlen);
}

int bn_sft_qat_save_gguf(const bn_sft_params *p, const char *path, char *err, size_t errlen) {
    // the spec holds what enable parsed: "<type>[ skip=<list>]"
    char type[32], tmp[4096];
    const char *skip = strstr(p->qat_spec, " skip=");
    snprintf(type, sizeof type, "%.*s", (int)(skip ? skip - p->qat_spec : (long)strlen(p->qat_spec)), p->qat_spec);
    char buf[MAX_SKIP][128];
    const char *overrides[MAX_SKIP];
    int n_over = skip_overrides(skip ? skip + 6 : NULL, buf, overrides, err, errlen);
    if (n_over < 0) return -1;
    if (snprintf(tmp, sizeof tmp, "%s.qat-f32.tmp", path) >= (int)sizeof tmp) return bn_err(err, errlen, "qat: path too long");
    if (bn_sft_save_gguf_f32(p, tmp, err, errlen) != 0) return -1;
    bn_quantize_params qp = bn_quantize_params_default();
    qp.type = type;
    qp.tensor_types = overrides;
    qp.n_tensor_types = n_over;
    qp.log = NULL;
    int rc = bn_quantize_file(&qp, tmp, path, err, errlen);
    unlink(tmp);
    return rc;
}
