// convert/lora.c — llama.cpp LoRA adapter GGUF ↔ PEFT (adapter_model.safetensors +
// adapter_config.json), docs/formats.md §7. PEFT keys: base_model.model.model.layers.N.<module>.lora_A.weight
// (Qwen3_5ForCausalLM paths; model.language_model.layers.N also accepted on input), lm_head for the head.
// qwen35 V-head permutation: lora_b rows of attn_qkv (V part) / attn_gate / ssm_alpha / ssm_beta and
// lora_a columns of ssm_out, tiled (GGUF) ↔ grouped (HF).
#include "convert/convert.h"
#include "convert/convert_impl.h"
#include "convert/safetensors.h"
#include "gguf/gguf.h"
#include "base/util.h"
#include "quant/quant.h"
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PEFT_PREFIX "base_model.model."

static int base_params(const gguf_file *b, cv_params *p, char *err, size_t errlen) {
    const char *a = gguf_get_str(b, "general.architecture");
    memset(p, 0, sizeof *p);
    p->arch = cv_arch_from_name(a);
    if (p->arch < 0) return bn_err(err, errlen, "base model: unsupported architecture %s", a ? a : "(none)");
    if (p->arch == CV_QWEN35) {
        int64_t v;
        char key[128];
#define GET(field, suffix) (snprintf(key, sizeof key, "%s.%s", a, suffix), p->field = gguf_get_int(b, key, &v) ? (int)v : 0)
        GET(Hk, "ssm.group_count");
        GET(Hv, "ssm.time_step_rank");
        GET(dk, "ssm.state_size");
        GET(dv, "ssm.inner_size");
#undef GET
        if (p->Hv) p->dv /= p->Hv;
    }
    return 0;
}

// lora_maps: the permutation each half of an adapted weight needs (copied from the base map: rows
// of lora_b follow the base rows; columns of the base become columns of lora_a).
static void lora_maps(const cv_map *base, cv_map *ma, cv_map *mb) {
    memset(ma, 0, sizeof *ma);
    memset(mb, 0, sizeof *mb);
    snprintf(ma->gguf, sizeof ma->gguf, "%s", base->gguf);
    snprintf(mb->gguf, sizeof mb->gguf, "%s", base->gguf);
    if (base->perm_rows) mb->perm_rows = true, mb->row0 = base->row0, mb->blk = base->blk;
    if (base->perm_cols) ma->perm_cols = true, ma->blk = base->blk;
}

// ---- GGUF adapter → PEFT --------------------------------------------------------------------

typedef struct {
    char key[224];
    const gguf_tensor *t;
    cv_map m;
} peft_item;

typedef struct {
    peft_item *items;
    cv_params p;
} peft_ctx;

static int cmp_peft(const void *a, const void *b) { return strcmp(((const peft_item *)a)->key, ((const peft_item *)b)->key); }

static int fill_peft(void *ctx, int idx, void *dst, size_t nbytes, char *err, size_t errlen) {
    peft_ctx *c = ctx;
    const peft_item *it = &c->items[idx];
    cv_job j = {.src = it->t->data, .src_type = it->t->type, .ne0 = it->t->ne[0], .n_el = gguf_tensor_nelements(it->t),
                .dst_type = BN_F32, .m = &it->m, .p = &c->p, .dir = -1};
    return cv_transform(&j, dst, err, errlen);
}

// module_of: "self_attn.q_proj" style module path of an HF weight name ("layers.3.self_attn.q_proj.weight").
static void module_of(const char *hf, char *out, size_t n) {
    snprintf(out, n, "%s", hf);
    char *dot = strrchr(out, '.');
    if (dot && strcmp(dot, ".weight") == 0) *dot = 0;
}

int bn_convert_lora_to_peft(const char *adapter, const char *base, const char *out_dir, const bn_convert_opts *o,
                            char *err, size_t errlen) {
    if (!base) return bn_err(err, errlen, "--lora-to-peft needs --base BASE.gguf (architecture and V-head layout)");
    gguf_file *ad = gguf_open(adapter, err, errlen);
    if (!ad) return -1;
    gguf_file *b = gguf_open(base, err, errlen);
    if (!b) {
        gguf_close(ad);
        return -1;
    }
    int rc = 0;
    const char *at = gguf_get_str(ad, "general.type"), *lt = gguf_get_str(ad, "adapter.type");
    const char *aa = gguf_get_str(ad, "general.architecture"), *ba = gguf_get_str(b, "general.architecture");
    peft_ctx pc = {0};
    if (!at || strcmp(at, "adapter") != 0 || !lt || strcmp(lt, "lora") != 0)
        rc = bn_err(err, errlen, "%s: not a LoRA adapter (general.type adapter, adapter.type lora)", adapter);
    else if (!aa || !ba || strcmp(aa, ba) != 0)
        rc = bn_err(err, errlen, "adapter architecture %s does not match the base's %s", aa ? aa : "?", ba ? ba : "?");
    else rc = base_params(b, &pc.p, err, errlen);
    float alpha = 0;
    gguf_get_f32(ad, "adapter.lora.alpha", &alpha);
    pc.items = xcalloc(ad->n_tensors + 1, sizeof(peft_item));
    int n = 0, r = -1;
    json_t *targets = json_array();
    for (size_t i = 0; i < ad->n_tensors && rc == 0; i++) {
        const gguf_tensor *t = &ad->tensors[i];
        size_t len = strlen(t->name);
        bool is_a = len > 7 && strcmp(t->name + len - 7, ".lora_a") == 0, is_b = len > 7 && strcmp(t->name + len - 7, ".lora_b") == 0;
        if (!is_a && !is_b) {
            rc = bn_err(err, errlen, "%s: unexpected tensor %s (only X.lora_a / X.lora_b)", adapter, t->name);
            break;
        }
        char bname[96];
        snprintf(bname, sizeof bname, "%.*s", (int)(len - 7), t->name);
        cv_map bm;
        const gguf_tensor *bt = gguf_find_tensor(b, bname);
        if (cv_map_from_gguf(&pc.p, bname, &bm) != 0 || !bt) {
            rc = bn_err(err, errlen, "%s: %s adapts %s, which the base has no HF name for or lacks", adapter, t->name, bname);
            break;
        }
        if (strcmp(bname, "token_embd.weight") == 0) {
            rc = bn_err(err, errlen, "%s: token_embd adapters (PEFT lora_embedding_A/B) are not supported", adapter);
            break;
        }
        int rank = (int)(is_a ? t->ne[1] : t->ne[0]);
        bool shape_ok = is_a ? t->ne[0] == bt->ne[0] : t->ne[1] == bt->ne[1];
        if (!shape_ok || (r >= 0 && rank != r)) {
            rc = bn_err(err, errlen, "%s: %s has shape {%lld, %lld} (base {%lld, %lld}, rank %d)", adapter, t->name,
                        (long long)t->ne[0], (long long)t->ne[1], (long long)bt->ne[0], (long long)bt->ne[1], r);
            break;
        }
        r = rank;
        peft_item *it = &pc.items[n++];
        char mod[128];
        module_of(bm.hf, mod, sizeof mod);
        snprintf(it->key, sizeof it->key, PEFT_PREFIX "%s%s.%s.weight", strcmp(bm.hf, "lm_head.weight") == 0 ? "" : "model.",
                 mod, is_a ? "lora_A" : "lora_B");
        it->t = t;
        cv_map ma, mb;
        lora_maps(&bm, &ma, &mb);
        it->m = is_a ? ma : mb;
        const char *short_name = strrchr(mod, '.') ? strrchr(mod, '.') + 1 : mod;
        bool seen = false;
        for (size_t k = 0; k < json_array_size(targets) && !seen; k++)
            seen = strcmp(json_string_value(json_array_get(targets, k)), short_name) == 0;
        if (!seen) json_array_append_new(targets, json_string(short_name));
    }
    if (rc == 0 && n == 0) rc = bn_err(err, errlen, "%s: adapter has no tensors", adapter);
    if (rc == 0) rc = bn_mkdir_p(out_dir, err, errlen);
    if (rc == 0) {
        qsort(pc.items, (size_t)n, sizeof(peft_item), cmp_peft);
        bn_st_writer *sw = bn_st_writer_new();
        for (int i = 0; i < n && rc == 0; i++) {
            int64_t shape[2] = {pc.items[i].t->ne[1], pc.items[i].t->ne[0]};
            if (bn_st_writer_add(sw, pc.items[i].key, BN_F32, 2, shape, NULL, err, errlen) < 0) rc = -1;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/adapter_model.safetensors", out_dir);
        if (rc == 0) rc = bn_st_writer_write(sw, path, fill_peft, &pc, err, errlen);
        bn_st_writer_free(sw);
    }
    if (rc == 0) {
        // alpha 0 means "scale 1" in llama.cpp; PEFT's scaling is lora_alpha / r, so write r
        double lora_alpha = alpha != 0 ? (double)alpha : (double)r;
        const char *bn = gguf_get_str(b, "general.name");
        json_t *cfg = json_pack("{s:s, s:s, s:s, s:i, s:f, s:f, s:O, s:s, s:b, s:b, s:n, s:b, s:b, s:b, s:n, s:n, s:{}, s:{}}",
                                "peft_type", "LORA", "task_type", "CAUSAL_LM", "base_model_name_or_path", bn ? bn : base,
                                "r", r, "lora_alpha", lora_alpha, "lora_dropout", 0.0, "target_modules", targets,
                                "bias", "none", "use_rslora", 0, "use_dora", 0, "modules_to_save", "fan_in_fan_out", 0,
                                "inference_mode", 1, "init_lora_weights", 1, "layers_to_transform", "layers_pattern",
                                "rank_pattern", "alpha_pattern");
        char *s = json_dumps(cfg, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
        char path[4096];
        snprintf(path, sizeof path, "%s/adapter_config.json", out_dir);
        rc = bn_write_file_atomic(path, s, strlen(s), err, errlen);
        free(s);
        json_decref(cfg);
        if (rc == 0 && !(o && o->quiet))
            fprintf(stderr, "bonsai-convert: %s: %d tensors, r %d, lora_alpha %g\n", out_dir, n, r, lora_alpha);
    }
    json_decref(targets);
    free(pc.items);
    gguf_close(ad);
    gguf_close(b);
    return rc;
}

// ---- PEFT → GGUF adapter --------------------------------------------------------------------

typedef struct {
    const bn_st_tensor *t;
    cv_map m;
    int64_t ne[2];
} lora_item;

typedef struct {
    lora_item *items;
    cv_params p;
} lora_ctx;

static int fill_lora(void *ctx, int idx, void *dst, size_t nbytes, char *err, size_t errlen) {
    lora_ctx *c = ctx;
    const lora_item *it = &c->items[idx];
    cv_job j = {.src = it->t->data, .src_type = it->t->type, .ne0 = it->ne[0], .n_el = bn_st_nelements(it->t),
                .dst_type = BN_F32, .m = &it->m, .p = &c->p, .dir = +1};
    return cv_transform(&j, dst, err, errlen);
}

int bn_convert_peft_to_lora(const char *peft_dir, const char *base, const char *out, const bn_convert_opts *o,
                            char *err, size_t errlen) {
    if (!base) return bn_err(err, errlen, "--peft-to-lora needs --base BASE.gguf (architecture, names, V-head layout)");
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_config.json", peft_dir);
    json_error_t je;
    json_t *cfg = json_load_file(path, 0, &je);
    if (!cfg) return bn_err(err, errlen, "%s: %s", path, je.text);
    int rc = 0;
    const char *pt = json_string_value(json_object_get(cfg, "peft_type"));
    int r = (int)json_integer_value(json_object_get(cfg, "r"));
    json_t *ja = json_object_get(cfg, "lora_alpha");
    double alpha = json_is_number(ja) ? json_number_value(ja) : 8.0;
    if (!pt || strcmp(pt, "LORA") != 0) rc = bn_err(err, errlen, "%s: peft_type is not LORA", path);
    else if (json_is_true(json_object_get(cfg, "use_dora"))) rc = bn_err(err, errlen, "%s: DoRA adapters are not supported", path);
    else if (r <= 0) rc = bn_err(err, errlen, "%s: bad r", path);
    else if (json_object_size(json_object_get(cfg, "rank_pattern")) || json_object_size(json_object_get(cfg, "alpha_pattern")))
        rc = bn_err(err, errlen, "%s: rank_pattern / alpha_pattern are not supported (one r and alpha per adapter)", path);
    if (json_is_true(json_object_get(cfg, "use_rslora"))) alpha *= sqrt((double)r); // scale α/√r = α'/r
    json_decref(cfg);
    if (rc != 0) return rc;
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", peft_dir);
    bn_safetensors *st = bn_st_open_file(path, err, errlen);
    if (!st) return -1;
    gguf_file *b = gguf_open(base, err, errlen);
    if (!b) {
        bn_st_close(st);
        return -1;
    }
    lora_ctx lc = {0};
    rc = base_params(b, &lc.p, err, errlen);
    lc.items = xcalloc((size_t)st->n_tensors + 1, sizeof(lora_item));
    gguf_writer *w = gguf_writer_new();
    gguf_set_str(w, "general.architecture", gguf_get_str(b, "general.architecture"));
    gguf_set_str(w, "general.type", "adapter");
    gguf_set_str(w, "adapter.type", "lora");
    gguf_set_f32(w, "adapter.lora.alpha", (float)alpha);
    int n = 0;
    for (int i = 0; i < st->n_tensors && rc == 0; i++) {
        const bn_st_tensor *t = &st->t[i];
        const char *k = t->name;
        if (strncmp(k, PEFT_PREFIX, strlen(PEFT_PREFIX)) == 0) k += strlen(PEFT_PREFIX);
        char hf[192];
        snprintf(hf, sizeof hf, "%s", k);
        size_t len = strlen(hf);
        bool is_a = len > 14 && strcmp(hf + len - 14, ".lora_A.weight") == 0;
        bool is_b = len > 14 && strcmp(hf + len - 14, ".lora_B.weight") == 0;
        if (!is_a && !is_b) {
            rc = bn_err(err, errlen, "%s: unexpected tensor %s (only <module>.lora_A/B.weight)", path, t->name);
            break;
        }
        strcpy(hf + len - 14, ".weight");
        const char *rel = hf;
        if (strncmp(rel, "model.language_model.", 21) == 0) rel += 21;
        else if (strncmp(rel, "model.", 6) == 0) rel += 6;
        lora_item *it = &lc.items[n];
        cv_map bm;
        const gguf_tensor *bt = NULL;
        if (cv_map_from_hf(&lc.p, rel, &bm) != 0 || !(bt = gguf_find_tensor(b, bm.gguf))) {
            rc = bn_err(err, errlen, "%s: %s has no matching weight in the base model", path, t->name);
            break;
        }
        if (t->n_dims != 2 || t->shape[is_a ? 0 : 1] != r || t->shape[is_a ? 1 : 0] != (is_a ? bt->ne[0] : bt->ne[1])) {
            rc = bn_err(err, errlen, "%s: %s has shape [%lld, %lld]; base %s is {%lld, %lld}, r %d", path, t->name,
                        (long long)t->shape[0], (long long)t->shape[1], bm.gguf, (long long)bt->ne[0],
                        (long long)bt->ne[1], r);
            break;
        }
        cv_map ma, mb;
        lora_maps(&bm, &ma, &mb);
        it->m = is_a ? ma : mb;
        it->t = t;
        it->ne[0] = t->shape[1];
        it->ne[1] = t->shape[0];
        char gname[160];
        snprintf(gname, sizeof gname, "%s.%s", bm.gguf, is_a ? "lora_a" : "lora_b");
        if (gguf_writer_add_tensor(w, gname, 2, it->ne, BN_F32, BN_F32, NULL, err, errlen) < 0) {
            rc = -1;
            break;
        }
        n++;
    }
    if (rc == 0 && n == 0) rc = bn_err(err, errlen, "%s: no LoRA tensors", path);
    if (rc == 0) rc = gguf_writer_write(w, out, fill_lora, &lc, err, errlen);
    if (rc == 0 && !(o && o->quiet)) fprintf(stderr, "bonsai-convert: %s: %d tensors, r %d, alpha %g\n", out, n, r, alpha);
    gguf_writer_free(w);
    free(lc.items);
    gguf_close(b);
    bn_st_close(st);
    return rc;
}
