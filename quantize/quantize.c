// quantize/quantize.c — the requantize driver (docs/formats.md §5): type selection per tensor, KV copy
// with general.quantization_version / general.file_type re-appended, llama-quantize tensor order,
// and a streaming multithreaded fp32 round trip per tensor (dequantize a chunk of rows, quantize it).
#include "quantize/quantize.h"
#include "quantize/rules.h"
#include "quantize/fast.h"
#include "quant/quant.h"
#include "gguf/gguf.h"
#include "base/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <stdatomic.h>

bn_quantize_params bn_quantize_params_default(void) {
    bn_quantize_params p;
    memset(&p, 0, sizeof p);
    p.n_threads = 0;
    p.log = stderr;
    return p;
}

// ---- row conversion -------------------------------------------------------------------------

// Rows per work item: at least ~64K elements so thread hand-off stays cheap.
#define CHUNK_ELEMS 65536

static bool is_plain(int type) { return type == BN_F32 || type == BN_F16 || type == BN_BF16; }

// can_decode / can_encode: this build can turn the type into fp32 / produce it from fp32.
static bool can_decode(int type) {
    const bn_type_traits *t = bn_type_traits_of(type);
    return is_plain(type) || (t && t->to_float);
}
static bool can_encode(int type) {
    const bn_type_traits *t = bn_type_traits_of(type);
    return is_plain(type) || (t && t->from_float_ref);
}

// encode_row: fp32 → dst_type for n elements (the type's reference quantizer; F32 / F16 / BF16: plain conversion).
static void encode_row(int dst_type, const float *x, void *dst, int64_t n) {
    bn_type_traits_of(dst_type)->from_float_ref(x, dst, n);
}

typedef struct {
    int src_type, dst_type;
    const uint8_t *src;
    uint8_t *dst;
    int64_t nrows, n_per_row, rows_per_chunk, n_chunks;
    size_t src_row, dst_row;
    atomic_llong next_chunk; // work queue: chunks are claimed one at a time
} rows_job;

// convert_chunk: converts chunk c of the job, using scratch (rows_per_chunk * n_per_row floats).
static void convert_chunk(rows_job *j, int64_t c, float *scratch) {
    int64_t r0 = c * j->rows_per_chunk;
    int64_t nr = j->nrows - r0 < j->rows_per_chunk ? j->nrows - r0 : j->rows_per_chunk;
    int64_t n = nr * j->n_per_row;
    const uint8_t *src = j->src + (size_t)r0 * j->src_row;
    uint8_t *dst = j->dst + (size_t)r0 * j->dst_row;
    // fused kernels (bit-identical to dequantize + reference quantizer)
    if (bn_quantize_fast(j->src_type, src, j->dst_type, dst, n)) return;
    const float *x = (const float *)src;
    if (j->src_type != BN_F32) {
        bn_dequantize(j->src_type, src, scratch, n);
        x = scratch;
    }
    encode_row(j->dst_type, x, dst, n);
}

// rows_worker: claims and converts chunks until none are left (one thread).
static void *rows_worker(void *arg) {
    rows_job *j = arg;
    float *scratch = NULL;
    for (;;) {
        int64_t c = atomic_fetch_add(&j->next_chunk, 1);
        if (c >= j->n_chunks) break;
        if (!scratch) scratch = xmalloc((size_t)(j->rows_per_chunk * j->n_per_row) * sizeof(float));
        convert_chunk(j, c, scratch);
    }
    free(scratch);
    return NULL;
}

int bn_quantize_rows(int src_type, const void *src, int dst_type, void *dst, int64_t nrows, int64_t n_per_row,
                     int n_threads, char *err, size_t errlen) {
    if (!can_decode(src_type)) return bn_err(err, errlen, "cannot dequantize type %s", bn_type_name(src_type));
    if (!can_encode(dst_type)) return bn_err(err, errlen, "no quantizer for type %s", bn_type_name(dst_type));
    if (n_per_row % bn_type_blck(src_type) || n_per_row % bn_type_blck(dst_type))
        return bn_err(err, errlen, "row of %lld elements does not fit %s/%s blocks", (long long)n_per_row,
                      bn_type_name(src_type), bn_type_name(dst_type));
    if (n_threads <= 0) n_threads = bn_n_threads_default();
    rows_job j = {
        .src_type = src_type, .dst_type = dst_type, .src = src, .dst = dst, .nrows = nrows, .n_per_row = n_per_row,
        .src_row = bn_row_size(src_type, n_per_row), .dst_row = bn_row_size(dst_type, n_per_row),
    };
    j.rows_per_chunk = n_per_row >= CHUNK_ELEMS ? 1 : (CHUNK_ELEMS + n_per_row - 1) / n_per_row;
    j.n_chunks = (nrows + j.rows_per_chunk - 1) / j.rows_per_chunk;
    atomic_init(&j.next_chunk, 0);
    if (n_threads > j.n_chunks) n_threads = j.n_chunks > 0 ? (int)j.n_chunks : 1;
    pthread_t *tids = xcalloc((size_t)n_threads, sizeof(pthread_t));
    int started = 0;
    for (int t = 1; t < n_threads; t++)
        if (pthread_create(&tids[started], NULL, rows_worker, &j) == 0) started++;
    rows_worker(&j); // the caller works too; if thread creation failed it simply does more chunks
    for (int t = 0; t < started; t++) pthread_join(tids[t], NULL);
    free(tids);
    return 0;
}

// ---- the file driver --------------------------------------------------------------------------

typedef struct {
    const gguf_tensor *in; // source tensor
    int n_dims;            // after dropping trailing 1s
    int64_t nrows;         // ne1*ne2*ne3
    bn_tensor_choice choice;
    uint32_t file_id;      // id stored for the output
    size_t out_bytes;
} plan_row;

typedef struct {
    const bn_quantize_params *p;
    plan_row *rows;     // in output order
    int n_threads;
    bn_progress prog;
    int64_t done_elems;
} fill_ctx;

static int64_t n_elems(const gguf_tensor *t) { return gguf_tensor_nelements(t); }

// fill_tensor: gguf_fill_fn producing output tensor idx.
static int fill_tensor(void *vctx, int idx, void *dst, size_t nbytes, char *err, size_t errlen) {
    fill_ctx *c = vctx;
    plan_row *r = &c->rows[idx];
    int rc = bn_quantize_rows(r->in->type, r->in->data, r->choice.type, dst, r->nrows, r->in->ne[0], c->n_threads,
                              err, errlen);
    if (rc != 0) {
        char why[256];
        snprintf(why, sizeof why, "%s", err);
        return bn_err(err, errlen, "%s: %s", r->in->name, why);
    }
    c->done_elems += n_elems(r->in);
    if (c->p->progress) bn_progress_update(&c->prog, c->done_elems, r->in->name);
    return 0;
}

static const gguf_file *g_sort_file; // qsort context (the driver is not reentrant within one call)
static int cmp_index(const void *a, const void *b) {
    const gguf_tensor *ta = &g_sort_file->tensors[*(const int *)a], *tb = &g_sort_file->tensors[*(const int *)b];
    return bn_tensor_order_cmp(ta->name, tb->name);
}

static void shape_str(char *buf, size_t n, const gguf_tensor *t, int n_dims) {
    int k = snprintf(buf, n, "[");
    for (int d = 0; d < n_dims && k < (int)n; d++) k += snprintf(buf + k, n - k, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
    if (k < (int)n) snprintf(buf + k, n - k, "]");
}

// build_rules: parses the type arguments of p into r; returns 0 or -1.
static int build_rules(const bn_quantize_params *p, bn_quant_rules *r, char *err, size_t errlen) {
    if (!p->type) return bn_err(err, errlen, "no output TYPE given");
    int ftype, def;
    if (bn_parse_ftype(p->type, p->q2_g128, &ftype, &def, err, errlen) != 0) return -1;
    if (!can_encode(def)) return bn_err(err, errlen, "type %s has no quantizer in this build", p->type);
    bn_quant_rules_init(r, ftype, def, p->q2_g128);
    r->pure = p->pure;
    r->llama_mix = p->llama_mix;
    r->leave_output = p->leave_output;
    if (p->output_type && (r->output_type = bn_parse_tensor_type_name(p->output_type, p->q2_g128, err, errlen)) < 0)
        return -1;
    if (p->token_embd_type &&
        (r->token_embd_type = bn_parse_tensor_type_name(p->token_embd_type, p->q2_g128, err, errlen)) < 0)
        return -1;
    for (int i = 0; i < p->n_tensor_types; i++)
        if (bn_quant_rules_add_override(r, p->tensor_types[i], err, errlen) != 0) {
            bn_quant_rules_free(r);
            return -1;
        }
    return 0;
}

// scan_model: tied-output flag and llama-quantize's mixture counters (tensor names, block count).
static void scan_model(bn_quant_rules *r, const gguf_file *f) {
    const char **names = xcalloc(f->n_tensors ? f->n_tensors : 1, sizeof(char *));
    for (size_t i = 0; i < f->n_tensors; i++) names[i] = f->tensors[i].name;
    const char *arch = gguf_get_str(f, "general.architecture");
    char key[128];
    snprintf(key, sizeof key, "%s.block_count", arch ? arch : "");
    int64_t n_layer = 0;
    if (!gguf_get_int(f, key, &n_layer)) n_layer = 0;
    bn_quant_rules_scan(r, names, f->n_tensors, (int)n_layer);
    free(names);
}

// plan: chooses every tensor's type (output order); returns 0 or -1.
static int plan(const bn_quantize_params *p, bn_quant_rules *r, const gguf_file *f, plan_row *rows, int *order,
                char *err, size_t errlen) {
    for (size_t k = 0; k < f->n_tensors; k++) {
        const gguf_tensor *t = &f->tensors[order[k]];
        plan_row *row = &rows[k];
        row->in = t;
        row->n_dims = (int)t->n_dims;
        while (row->n_dims > 1 && t->ne[row->n_dims - 1] == 1) row->n_dims--;
        row->nrows = gguf_tensor_nrows(t);
        if (bn_tensor_choose_type(r, t->name, row->n_dims, t->ne, t->type, &row->choice, err, errlen) != 0) return -1;
        int to = row->choice.type;
        if (to != t->type) {
            const bn_type_traits *src_tr = bn_type_traits_of(t->type);
            if (src_tr && src_tr->is_quantized && bn_type_traits_of(to)->is_quantized && !p->allow_requantize)
                return bn_err(err, errlen, "%s: requantizing from type %s is disabled (pass --allow-requantize)",
                              t->name, bn_type_name(t->type));
            if (!can_decode(t->type))
                return bn_err(err, errlen, "%s: cannot dequantize type %s", t->name, bn_type_name(t->type));
            if (!can_encode(to)) return bn_err(err, errlen, "%s: no quantizer for type %s", t->name, bn_type_name(to));
        }
        row->file_id = to == BN_PQ2_0 ? (p->q2_g128 ? 42u : 142u) : (uint32_t)to;
        row->out_bytes = bn_row_size(to, t->ne[0]) * (size_t)row->nrows;
    }
    return 0;
}

static void print_table(FILE *log, const plan_row *rows, size_t n, bool dry_run) {
    fprintf(log, "%-40s %-22s %-8s   %-9s %12s %12s\n", "tensor", "shape", "type in", "out", "bytes in",
            dry_run ? "bytes (est)" : "bytes out");
    for (size_t k = 0; k < n; k++) {
        const plan_row *r = &rows[k];
        char shape[64];
        shape_str(shape, sizeof shape, r->in, r->n_dims);
        const char *out_name = r->file_id == 42 && r->choice.type == BN_PQ2_0 ? "q2_0_g128" : bn_type_name(r->choice.type);
        fprintf(log, "%-40s %-22s %-8s → %-9s %12zu %12zu%s\n", r->in->name, shape, bn_type_name(r->in->type), out_name,
                r->in->nbytes, r->out_bytes, r->choice.type == r->in->type ? "  (copy)" : "");
    }
}

int bn_quantize_file_stats(const bn_quantize_params *p, const char *in, const char *out, bn_quantize_stats *stats,
                           char *err, size_t errlen) {
    double t0 = bn_time_ms();
    bn_quant_rules rules;
    if (build_rules(p, &rules, err, errlen) != 0) return -1;
    gguf_file *f = gguf_open(in, err, errlen);
    if (!f) {
        bn_quant_rules_free(&rules);
        return -1;
    }
    int64_t n_split = 1;
    if (gguf_get_int(f, "split.count", &n_split) && n_split > 1) {
        bn_err(err, errlen, "%s is part 1 of a %lld-file split GGUF; merge it first (llama-gguf-split --merge)", in,
               (long long)n_split);
        gguf_close(f);
        bn_quant_rules_free(&rules);
        return -1;
    }
    scan_model(&rules, f);
    int rc = -1;
    int *order = xcalloc(f->n_tensors ? f->n_tensors : 1, sizeof(int));
    plan_row *rows = xcalloc(f->n_tensors ? f->n_tensors : 1, sizeof(plan_row));
    gguf_writer *w = NULL;
    for (size_t i = 0; i < f->n_tensors; i++) order[i] = (int)i;
    g_sort_file = f;
    qsort(order, f->n_tensors, sizeof(int), cmp_index);
    if (plan(p, &rules, f, rows, order, err, errlen) != 0) goto done;

    // warnings as llama-quantize prints them, then the stats
    bn_quantize_stats st = {0};
    for (size_t k = 0; k < f->n_tensors; k++) {
        plan_row *r = &rows[k];
        if (r->choice.warning[0] && p->log) fprintf(p->log, "%s\n", r->choice.warning);
        st.n_fallback += r->choice.fallback;
        if (r->choice.type == r->in->type) st.n_copied++;
        else st.n_quantized++;
        st.bytes_in += r->in->nbytes;
        st.bytes_out += r->out_bytes;
        st.n_elements += (uint64_t)n_elems(r->in);
    }
    st.n_tensors = (int)f->n_tensors;
    if (st.n_fallback && p->log)
        fprintf(p->log, "WARNING: %d of %d tensor(s) required fallback quantization\n", st.n_fallback, st.n_tensors);

    if (!p->dry_run) {
        w = gguf_writer_new();
        for (size_t i = 0; i < f->n_kv; i++) {
            const char *key = f->kv[i].key;
            if (!strcmp(key, "split.no") || !strcmp(key, "split.count") || !strcmp(key, "split.tensors.count")) continue;
            gguf_set_kv(w, &f->kv[i]);
        }
        gguf_set_u32(w, "general.quantization_version", 2);
        gguf_set_u32(w, "general.file_type", (uint32_t)rules.ftype);
        for (size_t k = 0; k < f->n_tensors; k++) {
            plan_row *r = &rows[k];
            bool copy = r->choice.type == r->in->type;
            if (gguf_writer_add_tensor(w, r->in->name, r->n_dims, r->in->ne, r->choice.type, r->file_id,
                                       copy ? r->in->data : NULL, err, errlen) < 0)
                goto done;
        }
        fill_ctx fc = {.p = p, .rows = rows, .n_threads = p->n_threads > 0 ? p->n_threads : bn_n_threads_default()};
        int64_t total = 0;
        for (size_t k = 0; k < f->n_tensors; k++)
            if (rows[k].choice.type != rows[k].in->type) total += n_elems(rows[k].in);
        if (p->progress) bn_progress_start(&fc.prog, "weights", total > 0 ? total : 1);
        if (gguf_writer_write(w, out, fill_tensor, &fc, err, errlen) != 0) goto done;
        if (p->progress) bn_progress_finish(&fc.prog, NULL);
    }
    st.seconds = (bn_time_ms() - t0) / 1000.0;
    if (p->log) {
        if (!p->no_table) print_table(p->log, rows, f->n_tensors, p->dry_run);
        char b_in[32], b_out[32];
        double bpw = st.n_elements ? 8.0 * (double)st.bytes_out / (double)st.n_elements : 0;
        fprintf(p->log, "%s: %d tensors (%d converted, %d copied), ftype %u (%s)\n", p->dry_run ? "dry run" : "done",
                st.n_tensors, st.n_quantized, st.n_copied, (unsigned)rules.ftype, bn_ftype_name(rules.ftype));
        fprintf(p->log, "size: %s → %s, %.4f bpw, %.2f s\n", bn_format_bytes(b_in, sizeof b_in, (double)st.bytes_in),
                bn_format_bytes(b_out, sizeof b_out, (double)st.bytes_out), bpw, st.seconds);
    }
    if (stats) *stats = st;
    rc = 0;
done:
    gguf_writer_free(w);
    free(rows);
    free(order);
    gguf_close(f);
    bn_quant_rules_free(&rules);
    return rc;
}

int bn_quantize_file(const bn_quantize_params *p, const char *in, const char *out, char *err, size_t errlen) {
    return bn_quantize_file_stats(p, in, out, NULL, err, errlen);
}
