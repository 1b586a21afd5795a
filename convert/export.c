// convert/export.c — GGUF model → HF directory (config.json, model.safetensors, tokenizer.json,
// tokenizer_config.json); the inverse of convert_import.c. Class names: see convert/convert.h.
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

static int64_t kv_int(const gguf_file *g, const char *arch, const char *suffix, int64_t def) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v;
    return gguf_get_int(g, key, &v) ? v : def;
}

static double kv_f32(const gguf_file *g, const char *arch, const char *suffix, double def) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    float v;
    return gguf_get_f32(g, key, &v) ? (double)v : def;
}

// jreal: a JSON number for an f32 KV, printed with the shortest decimal that reads back as the same float.
static json_t *jreal(double v) {
    char buf[64];
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if ((float)strtod(buf, NULL) == (float)v) break;
    }
    return json_real(strtod(buf, NULL));
}

static const char *token_str(const gguf_kv *toks, int64_t id) {
    return toks && id >= 0 && (uint64_t)id < toks->n ? toks->strs[id] : NULL;
}

static json_t *build_config(const gguf_file *g, int arch, const char *a, const gguf_kv *toks) {
    json_t *c = json_object();
    int64_t H = kv_int(g, a, "embedding_length", 0), nh = kv_int(g, a, "attention.head_count", 0);
    int64_t hd = kv_int(g, a, "attention.key_length", nh ? H / nh : 0);
    const char *cls = arch == CV_QWEN35 ? "Qwen3_5ForCausalLM" : arch == CV_QWEN3 ? "Qwen3ForCausalLM" : "Qwen2ForCausalLM";
    const char *mt = arch == CV_QWEN35 ? "qwen3_5_text" : arch == CV_QWEN3 ? "qwen3" : "qwen2";
    json_t *archs = json_array();
    json_array_append_new(archs, json_string(cls));
    json_object_set_new(c, "architectures", archs);
    json_object_set_new(c, "model_type", json_string(mt));
    const char *name = gguf_get_str(g, "general.name");
    if (name) json_object_set_new(c, "_name_or_path", json_string(name));
    json_object_set_new(c, "hidden_size", json_integer(H));
    json_object_set_new(c, "num_hidden_layers", json_integer(kv_int(g, a, "block_count", 0)));
    json_object_set_new(c, "intermediate_size", json_integer(kv_int(g, a, "feed_forward_length", 0)));
    json_object_set_new(c, "num_attention_heads", json_integer(nh));
    json_object_set_new(c, "num_key_value_heads", json_integer(kv_int(g, a, "attention.head_count_kv", nh)));
    char hkey[128];
    snprintf(hkey, sizeof hkey, "%s.attention.key_length", a);
    if (gguf_find_key(g, hkey) >= 0) json_object_set_new(c, "head_dim", json_integer(hd)); // else H / nh
    json_object_set_new(c, "rms_norm_eps", jreal(kv_f32(g, a, "attention.layer_norm_rms_epsilon", 1e-6)));
    int64_t ctx = kv_int(g, a, "context_length", -1);
    if (ctx > 0) json_object_set_new(c, "max_position_embeddings", json_integer(ctx));
    json_object_set_new(c, "vocab_size", json_integer(toks ? (json_int_t)toks->n : 0));
    json_object_set_new(c, "tie_word_embeddings", json_boolean(gguf_find_tensor(g, "output.weight") == NULL));
    json_object_set_new(c, "hidden_act", json_string("silu"));
    double theta = kv_f32(g, a, "rope.freq_base", 10000.0);
    if (arch == CV_QWEN35) {
        json_object_set_new(c, "attn_output_gate", json_true());
        json_object_set_new(c, "linear_conv_kernel_dim", json_integer(kv_int(g, a, "ssm.conv_kernel", 4)));
        int64_t dk = kv_int(g, a, "ssm.state_size", 0), Hk = kv_int(g, a, "ssm.group_count", 0);
        int64_t Hv = kv_int(g, a, "ssm.time_step_rank", 0);
        json_object_set_new(c, "linear_key_head_dim", json_integer(dk));
        json_object_set_new(c, "linear_value_head_dim", json_integer(Hv ? kv_int(g, a, "ssm.inner_size", 0) / Hv : dk));
        json_object_set_new(c, "linear_num_key_heads", json_integer(Hk));
        json_object_set_new(c, "linear_num_value_heads", json_integer(Hv));
        json_object_set_new(c, "full_attention_interval", json_integer(kv_int(g, a, "full_attention_interval", 4)));
        char key[128];
        snprintf(key, sizeof key, "%s.attention.recurrent_layers", a);
        const gguf_kv *rl = gguf_get_arr(g, key);
        if (rl && rl->arr_type == GGUF_TYPE_BOOL) {
            json_t *lt = json_array();
            for (uint64_t i = 0; i < rl->n; i++)
                json_array_append_new(lt, json_string(((const uint8_t *)rl->data)[i] ? "linear_attention" : "full_attention"));
            json_object_set_new(c, "layer_types", lt);
        }
        json_t *rp = json_object();
        json_object_set_new(rp, "rope_type", json_string("default"));
        json_object_set_new(rp, "rope_theta", jreal(theta));
        int64_t nrot = kv_int(g, a, "rope.dimension_count", hd / 4);
        json_object_set_new(rp, "partial_rotary_factor", jreal(hd ? (double)nrot / (double)hd : 0.25));
        snprintf(key, sizeof key, "%s.rope.dimension_sections", a);
        const gguf_kv *sec = gguf_get_arr(g, key);
        if (sec && (sec->arr_type == GGUF_TYPE_INT32 || sec->arr_type == GGUF_TYPE_UINT32) && sec->n >= 3) {
            json_t *ms = json_array();
            int n = ((const int32_t *)sec->data)[3] != 0 ? 4 : 3;
            for (int i = 0; i < n; i++) json_array_append_new(ms, json_integer(((const int32_t *)sec->data)[i]));
            json_object_set_new(rp, "mrope_section", ms);
        }
        json_object_set_new(rp, "mrope_interleaved", json_true());
        json_object_set_new(c, "rope_parameters", rp);
    } else {
        json_object_set_new(c, "rope_theta", jreal(theta));
        json_object_set_new(c, "attention_bias", json_boolean(arch == CV_QWEN2));
    }
    int64_t id;
    if (gguf_get_int(g, "tokenizer.ggml.bos_token_id", &id)) json_object_set_new(c, "bos_token_id", json_integer(id));
    if (gguf_get_int(g, "tokenizer.ggml.eos_token_id", &id)) json_object_set_new(c, "eos_token_id", json_integer(id));
    (void)token_str;
    json_object_set_new(c, "torch_dtype", json_string("bfloat16"));
    return c;
}

// build_tokenizer: tokenizer.json from the gpt2 tokenizer KVs (normal tokens → model.vocab,
// control/user-defined → added_tokens, unused [PAD] rows dropped).
static json_t *build_tokenizer(const gguf_file *g, int arch, char *err, size_t errlen) {
    const gguf_kv *toks = gguf_get_arr(g, "tokenizer.ggml.tokens");
    const gguf_kv *types = gguf_get_arr(g, "tokenizer.ggml.token_type");
    const gguf_kv *merges = gguf_get_arr(g, "tokenizer.ggml.merges");
    const char *model = gguf_get_str(g, "tokenizer.ggml.model");
    if (!toks || toks->arr_type != GGUF_TYPE_STRING || !model || strcmp(model, "gpt2") != 0) {
        bn_err(err, errlen, "GGUF has no gpt2 (byte-level BPE) tokenizer; only those can be exported");
        return NULL;
    }
    if (types && (types->arr_type != GGUF_TYPE_INT32 || types->n != toks->n)) types = NULL;
    json_t *root = json_object(), *added = json_array(), *vocab = json_object(), *jm = json_array();
    json_object_set_new(root, "version", json_string("1.0"));
    json_object_set_new(root, "truncation", json_null());
    json_object_set_new(root, "padding", json_null());
    for (uint64_t i = 0; i < toks->n; i++) {
        int t = types ? ((const int32_t *)types->data)[i] : 1;
        if (t == 5) continue; // unused padding rows: re-created by the importer as [PAD<id>]
        if (t == 3 || t == 4) {
            json_t *e = json_object();
            json_object_set_new(e, "id", json_integer((json_int_t)i));
            json_object_set_new(e, "content", json_string(toks->strs[i]));
            json_object_set_new(e, "single_word", json_false());
            json_object_set_new(e, "lstrip", json_false());
            json_object_set_new(e, "rstrip", json_false());
            json_object_set_new(e, "normalized", json_false());
            json_object_set_new(e, "special", json_boolean(t == 3));
            json_array_append_new(added, e);
        } else json_object_set_new(vocab, toks->strs[i], json_integer((json_int_t)i));
    }
    json_object_set_new(root, "added_tokens", added);
    json_t *norm = json_object();
    json_object_set_new(norm, "type", json_string("NFC"));
    json_object_set_new(root, "normalizer", norm);
    const char *pre_name = gguf_get_str(g, "tokenizer.ggml.pre");
    const char *re = (pre_name ? strcmp(pre_name, "qwen35") == 0 : arch == CV_QWEN35)
        ? "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
        : "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    json_t *pre = json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]}", "type", "Sequence",
                            "pretokenizers", "type", "Split", "pattern", "Regex", re, "behavior", "Isolated", "invert", 0,
                            "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0);
    json_object_set_new(root, "pre_tokenizer", pre);
    json_object_set_new(root, "post_processor", json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0,
                                                          "trim_offsets", 0, "use_regex", 0));
    json_object_set_new(root, "decoder", json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0,
                                                   "trim_offsets", 0, "use_regex", 0));
    if (merges && merges->arr_type == GGUF_TYPE_STRING)
        for (uint64_t i = 0; i < merges->n; i++) {
            const char *s = merges->strs[i];
            const char *sp = s[0] ? strchr(s + 1, ' ') : NULL; // split at the first space from index 1
            json_t *pair = json_array();
            if (sp) {
                json_array_append_new(pair, json_stringn(s, (size_t)(sp - s)));
                json_array_append_new(pair, json_string(sp + 1));
            } else {
                json_array_append_new(pair, json_string(s));
                json_array_append_new(pair, json_string(""));
            }
            json_array_append_new(jm, pair);
        }
    json_t *m = json_object();
    json_object_set_new(m, "type", json_string("BPE"));
    json_object_set_new(m, "dropout", json_null());
    json_object_set_new(m, "unk_token", json_null());
    json_object_set_new(m, "continuing_subword_prefix", json_string(""));
    json_object_set_new(m, "end_of_word_suffix", json_string(""));
    json_object_set_new(m, "fuse_unk", json_false());
    json_object_set_new(m, "byte_fallback", json_false());
    json_object_set_new(m, "ignore_merges", json_false());
    json_object_set_new(m, "vocab", vocab);
    json_object_set_new(m, "merges", jm);
    json_object_set_new(root, "model", m);
    return root;
}

static json_t *build_tokenizer_config(const gguf_file *g) {
    const gguf_kv *toks = gguf_get_arr(g, "tokenizer.ggml.tokens");
    json_t *tc = json_object();
    bool b;
    if (gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b)) json_object_set_new(tc, "add_bos_token", json_boolean(b));
    if (gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b)) json_object_set_new(tc, "add_eos_token", json_boolean(b));
    json_object_set_new(tc, "add_prefix_space", json_false());
    static const char *const kinds[] = {"bos_token", "eos_token", "unk_token", "pad_token"};
    static const char *const keys[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                       "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"};
    for (int i = 0; i < 4; i++) {
        int64_t id;
        const char *s = gguf_get_int(g, keys[i], &id) ? token_str(toks, id) : NULL;
        json_object_set_new(tc, kinds[i], s ? json_string(s) : json_null());
    }
    const char *tmpl = gguf_get_str(g, "tokenizer.chat_template");
    if (tmpl) json_object_set_new(tc, "chat_template", json_string(tmpl));
    json_object_set_new(tc, "clean_up_tokenization_spaces", json_false());
    json_object_set_new(tc, "errors", json_string("replace"));
    json_object_set_new(tc, "model_max_length", json_integer(131072));
    json_object_set_new(tc, "split_special_tokens", json_false());
    json_object_set_new(tc, "tokenizer_class", json_string("Qwen2Tokenizer"));
    return tc;
}

static int write_json(const char *dir, const char *file, json_t *j, char *err, size_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    if (!s) return bn_err(err, errlen, "%s: cannot encode JSON", path);
    size_t n = strlen(s);
    char *buf = xmalloc(n + 2);
    memcpy(buf, s, n);
    buf[n] = '\n';
    free(s);
    int rc = bn_write_file_atomic(path, buf, n + 1, err, errlen);
    free(buf);
    return rc;
}

// ---- tensors ------------------------------------------------------------------------------

typedef struct {
    char hf[160];
    const gguf_tensor *t;
    cv_map m;
    int type;
} export_item;

typedef struct {
    export_item *items;
    cv_params p;
    bn_progress prog;
    int64_t done;
} export_ctx;

// dtype_rank: the safetensors serializer lays tensors out by dtype, largest enum first (F32 > BF16 > F16).
static int dtype_rank(int type) { return type == BN_F32 ? 0 : type == BN_BF16 ? 1 : 2; }

// cmp_item: HF's safetensors order (dtype as above, then name), which llama.cpp's converter reads back.
static int cmp_item(const void *a, const void *b) {
    const export_item *x = a, *y = b;
    if (dtype_rank(x->type) != dtype_rank(y->type)) return dtype_rank(x->type) - dtype_rank(y->type);
    return strcmp(x->hf, y->hf);
}

static int fill_export(void *ctx, int idx, void *dst, size_t nbytes, char *err, size_t errlen) {
    export_ctx *c = ctx;
    const export_item *it = &c->items[idx];
    cv_job j = {.src = it->t->data, .src_type = it->t->type, .ne0 = it->t->ne[0], .n_el = gguf_tensor_nelements(it->t),
                .dst_type = it->type, .m = &it->m, .p = &c->p, .dir = -1};
    if (cv_transform(&j, dst, err, errlen) != 0) return -1;
    c->done += (int64_t)nbytes;
    bn_progress_update(&c->prog, c->done, it->hf);
    return 0;
}

int bn_convert_gguf_to_hf(const char *in, const char *out_dir, const bn_convert_opts *o, char *err, size_t errlen) {
    int outtype = o ? o->outtype : -1;
    if (outtype >= 0 && outtype != BN_F32 && outtype != BN_F16 && outtype != BN_BF16)
        return bn_err(err, errlen, "outtype must be f32, f16 or bf16");
    gguf_file *g = gguf_open(in, err, errlen);
    if (!g) return -1;
    const char *a = gguf_get_str(g, "general.architecture");
    const char *gt = gguf_get_str(g, "general.type");
    int arch = cv_arch_from_name(a);
    int rc = 0;
    if (gt && strcmp(gt, "model") != 0) rc = bn_err(err, errlen, "%s: general.type is '%s', not a model", in, gt);
    else if (arch < 0) rc = bn_err(err, errlen, "%s: unsupported architecture %s (qwen35, qwen3, qwen2)", in, a ? a : "(none)");
    json_t *config = NULL, *tok = NULL, *tc = NULL;
    if (rc == 0 && !(tok = build_tokenizer(g, arch, err, errlen))) rc = -1;
    export_ctx ec = {0};
    ec.p.arch = arch;
    if (arch == CV_QWEN35) {
        ec.p.Hk = (int)kv_int(g, a, "ssm.group_count", 0);
        ec.p.Hv = (int)kv_int(g, a, "ssm.time_step_rank", 0);
        ec.p.dk = (int)kv_int(g, a, "ssm.state_size", 0);
        ec.p.dv = ec.p.Hv ? (int)(kv_int(g, a, "ssm.inner_size", 0) / ec.p.Hv) : 0;
    }
    ec.items = xcalloc(g->n_tensors + 1, sizeof(export_item));
    int n = 0;
    for (size_t i = 0; i < g->n_tensors && rc == 0; i++) {
        const gguf_tensor *t = &g->tensors[i];
        export_item *it = &ec.items[n];
        if (cv_map_from_gguf(&ec.p, t->name, &it->m) != 0) {
            rc = bn_err(err, errlen, "%s: tensor %s has no HF name for %s", in, t->name, a);
            break;
        }
        it->t = t;
        snprintf(it->hf, sizeof it->hf, "%s%s", strcmp(it->m.hf, "lm_head.weight") == 0 ? "" : "model.", it->m.hf);
        bool is_float = t->type == BN_F32 || t->type == BN_F16 || t->type == BN_BF16;
        if (it->m.force_f32 || t->n_dims == 1) it->type = BN_F32;
        else if (outtype >= 0) it->type = outtype;
        else it->type = is_float ? t->type : BN_F32;
        n++;
    }
    if (rc == 0) {
        qsort(ec.items, (size_t)n, sizeof(export_item), cmp_item);
        rc = bn_mkdir_p(out_dir, err, errlen);
    }
    bn_st_writer *sw = bn_st_writer_new();
    int64_t total = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const export_item *it = &ec.items[i];
        int64_t shape[4];
        int nd = 0;
        if (it->m.conv) shape[nd++] = it->t->ne[1], shape[nd++] = 1, shape[nd++] = it->t->ne[0];
        else
            for (int d = (int)it->t->n_dims - 1; d >= 0; d--) shape[nd++] = it->t->ne[d];
        if (bn_st_writer_add(sw, it->hf, it->type, nd, shape, NULL, err, errlen) < 0) rc = -1;
        total += gguf_tensor_nelements(it->t) * (int64_t)cv_dtype_bytes(it->type);
    }
    if (rc == 0) {
        config = build_config(g, arch, a, gguf_get_arr(g, "tokenizer.ggml.tokens"));
        tc = build_tokenizer_config(g);
        rc = write_json(out_dir, "config.json", config, err, errlen);
    }
    if (rc == 0) rc = write_json(out_dir, "tokenizer.json", tok, err, errlen);
    if (rc == 0) rc = write_json(out_dir, "tokenizer_config.json", tc, err, errlen);
    if (rc == 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
        if (!(o && o->quiet)) bn_progress_start(&ec.prog, "bytes", total);
        rc = bn_st_writer_write(sw, path, fill_export, &ec, err, errlen);
        if (!(o && o->quiet)) {
            bn_progress_finish(&ec.prog, rc == 0 ? "done" : "failed");
            if (rc == 0) fprintf(stderr, "bonsai-convert: %s: %d tensors, %s\n", out_dir, n, a);
        }
    }
    bn_st_writer_free(sw);
    free(ec.items);
    json_decref(config);
    json_decref(tok);
    json_decref(tc);
    gguf_close(g);
    return rc;
}
