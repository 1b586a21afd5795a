// tools/bonsai-gguf.c — inspect and compare GGUF files.
//   bonsai-gguf show FILE [--all]   header, KVs (arrays abbreviated unless --all), tensor table, totals
//   bonsai-gguf diff A B            KV / tensor-list / type / shape / byte differences; exit 0 if identical
#include "gguf/gguf.h"
#include "quantize/rules.h"
#include "base/util.h"
#include "base/args.h"
#include "quant/quant.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>

#define ABBREV_ELEMS 5   // array elements shown without --all
#define ABBREV_CHARS 120 // string characters shown without --all

// ftype_name: general.file_type display name (docs/formats.md §4) or NULL.
static const char *ftype_name(int64_t v) {
    const char *s = v >= 0 && v <= 1024 ? bn_ftype_name((int)v) : "?";
    return strcmp(s, "?") ? s : NULL;
}

// print_str: a quoted, escaped string, cut at max chars (0 = whole).
static void print_str(FILE *o, const char *s, uint64_t len, size_t max) {
    fputc('"', o);
    uint64_t n = max && len > max ? max : len;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(o, "\\%c", c);
        else if (c == '\n') fputs("\\n", o);
        else if (c == '\t') fputs("\\t", o);
        else if (c == '\r') fputs("\\r", o);
        else if (c < 0x20 || c == 0x7f) fprintf(o, "\\x%02x", c);
        else fputc(c, o);
    }
    fputc('"', o);
    if (n < len) fprintf(o, "... (%" PRIu64 " bytes)", len);
}

// print_scalar: element i of packed values of type t.
static void print_scalar(FILE *o, uint32_t t, const void *data, uint64_t i) {
    const uint8_t *p = (const uint8_t *)data + i * gguf_type_size(t);
    switch (t) {
    case GGUF_TYPE_UINT8: fprintf(o, "%u", *p); break;
    case GGUF_TYPE_INT8: fprintf(o, "%d", *(const int8_t *)p); break;
    case GGUF_TYPE_UINT16: { uint16_t v; memcpy(&v, p, 2); fprintf(o, "%u", v); break; }
    case GGUF_TYPE_INT16: { int16_t v; memcpy(&v, p, 2); fprintf(o, "%d", v); break; }
    case GGUF_TYPE_UINT32: { uint32_t v; memcpy(&v, p, 4); fprintf(o, "%u", v); break; }
    case GGUF_TYPE_INT32: { int32_t v; memcpy(&v, p, 4); fprintf(o, "%d", v); break; }
    case GGUF_TYPE_FLOAT32: { float v; memcpy(&v, p, 4); fprintf(o, "%.9g", v); break; }
    case GGUF_TYPE_BOOL: fputs(*p ? "true" : "false", o); break;
    case GGUF_TYPE_UINT64: { uint64_t v; memcpy(&v, p, 8); fprintf(o, "%" PRIu64, v); break; }
    case GGUF_TYPE_INT64: { int64_t v; memcpy(&v, p, 8); fprintf(o, "%" PRId64, v); break; }
    case GGUF_TYPE_FLOAT64: { double v; memcpy(&v, p, 8); fprintf(o, "%.17g", v); break; }
    default: fputs("?", o);
    }
}

// print_value: a KV's value; arrays as `[N type: a, b, ...]`.
static void print_value(FILE *o, const gguf_kv *kv, bool all) {
    if (kv->type == GGUF_TYPE_STRING) {
        print_str(o, kv->str, kv->str_len, all ? 0 : ABBREV_CHARS);
        return;
    }
    if (kv->type != GGUF_TYPE_ARRAY) {
        print_scalar(o, kv->type, kv->data, 0);
        return;
    }
    bool strs = kv->arr_type == GGUF_TYPE_STRING;
    fprintf(o, "[%" PRIu64 " %s%s", kv->n, strs ? "strings" : gguf_type_name(kv->arr_type), kv->n ? ": " : "");
    uint64_t shown = all || kv->n <= ABBREV_ELEMS + 1 ? kv->n : ABBREV_ELEMS;
    for (uint64_t i = 0; i < shown; i++) {
        if (i) fputs(", ", o);
        if (strs) print_str(o, kv->strs[i], kv->str_lens[i], all ? 0 : ABBREV_CHARS);
        else print_scalar(o, kv->arr_type, kv->data, i);
    }
    if (shown < kv->n) fputs(", ...", o);
    fputc(']', o);
}

static void print_ne(FILE *o, const gguf_tensor *t, int width) {
    char buf[128];
    int n = snprintf(buf, sizeof buf, "{");
    for (uint32_t d = 0; d < t->n_dims; d++)
        n += snprintf(buf + n, sizeof buf - n, "%s%" PRId64, d ? ", " : "", t->ne[d]);
    snprintf(buf + n, sizeof buf - n, "}");
    fprintf(o, "%-*s", width, buf);
}

static int cmd_show(const char *path, bool all) {
    char err[1024], nb[32];
    gguf_file *f = gguf_open(path, err, sizeof err);
    if (!f) {
        fprintf(stderr, "bonsai-gguf: %s\n", err);
        return 1;
    }
    printf("file:        %s\n", path);
    printf("size:        %zu bytes (%s)\n", f->size, bn_format_bytes(nb, sizeof nb, (double)f->size));
    printf("version:     %u\n", f->version);
    printf("alignment:   %u\n", f->alignment);
    printf("data offset: %" PRIu64 "\n", f->data_offset);
    const char *arch = gguf_get_str(f, "general.architecture");
    int64_t ft;
    if (arch) printf("arch:        %s\n", arch);
    if (gguf_get_int(f, "general.file_type", &ft))
        printf("file type:   %" PRId64 " (%s)\n", ft, ftype_name(ft) ? ftype_name(ft) : "unknown");
    // layout notes: ggml's back-to-back ordering rule (docs/formats.md 1.4) and the type-42 trap (3.9)
    uint64_t expect = 0;
    size_t n42 = 0, bad_order = f->n_tensors;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (t->offset != expect && bad_order == f->n_tensors) bad_order = i;
        expect = (t->offset + t->nbytes + f->alignment - 1) / f->alignment * f->alignment;
        n42 += t->file_type == BN_Q2_0;
    }
    if (bad_order < f->n_tensors)
        printf("layout:      tensor '%s' is not where ggml expects it (offset %" PRIu64 "); ggml's reader rejects this file\n",
               f->tensors[bad_order].name, f->tensors[bad_order].offset);
    if (n42) {
        bool g128 = false;
        for (size_t i = 0; i < f->n_tensors; i++) g128 |= f->tensors[i].file_type == BN_Q2_0 && f->tensors[i].type == BN_PQ2_0;
        printf("type 42:     %zu tensors read as %s\n", n42,
               g128 ? "q2_0 group 128 (legacy PrismML fork layout; mainline llama.cpp cannot read this file)"
                    : "q2_0 group 64 (mainline layout)");
    }
    printf("\n%zu key/values:\n", f->n_kv);
    size_t kw = 0;
    for (size_t i = 0; i < f->n_kv; i++) kw = strlen(f->kv[i].key) > kw ? strlen(f->kv[i].key) : kw;
    for (size_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        printf("  %-*s  %-6s  ", (int)kw, kv->key, gguf_type_name(kv->type));
        print_value(stdout, kv, all);
        putchar('\n');
    }
    printf("\n%zu tensors:\n", f->n_tensors);
    size_t nw = 4;
    for (size_t i = 0; i < f->n_tensors; i++) nw = strlen(f->tensors[i].name) > nw ? strlen(f->tensors[i].name) : nw;
    printf("  %5s  %-*s  %-9s  %-24s  %14s  %14s\n", "#", (int)nw, "name", "type", "ne", "offset", "bytes");
    // per-type totals (id -> index into the small arrays below)
    int types[BN_TYPE_MAX] = {0};
    int64_t t_count[BN_TYPE_MAX] = {0}, t_elems[BN_TYPE_MAX] = {0};
    uint64_t t_bytes[BN_TYPE_MAX] = {0};
    int64_t elems = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        char tname[32];
        if (t->file_type != (uint32_t)t->type) snprintf(tname, sizeof tname, "%s(%u)", bn_type_name(t->type), t->file_type);
        else snprintf(tname, sizeof tname, "%s", bn_type_name(t->type));
        printf("  %5zu  %-*s  %-9s  ", i, (int)nw, t->name, tname);
        print_ne(stdout, t, 24);
        printf("  %14" PRIu64 "  %14zu\n", t->offset, t->nbytes);
        int64_t n = gguf_tensor_nelements(t);
        elems += n;
        bytes += t->nbytes;
        types[t->type] = 1;
        t_count[t->type]++;
        t_elems[t->type] += n;
        t_bytes[t->type] += t->nbytes;
    }
    printf("\ntotals by type:\n");
    for (int ty = 0; ty < BN_TYPE_MAX; ty++)
        if (types[ty])
            printf("  %-9s  %5" PRId64 " tensors  %15" PRId64 " elements  %15" PRIu64 " bytes  %7.4f bpw\n",
                   bn_type_name(ty), t_count[ty], t_elems[ty], t_bytes[ty],
                   t_elems[ty] ? 8.0 * (double)t_bytes[ty] / (double)t_elems[ty] : 0.0);
    printf("  %-9s  %5zu tensors  %15" PRId64 " elements  %15" PRIu64 " bytes  %7.4f bpw (%s)\n", "all", f->n_tensors,
           elems, bytes, elems ? 8.0 * (double)bytes / (double)elems : 0.0, bn_format_bytes(nb, sizeof nb, (double)bytes));
    gguf_close(f);
    return 0;
}

// kv_equal: same type, element type, count and bytes.
static bool kv_equal(const gguf_kv *a, const gguf_kv *b) {
    if (a->type != b->type || a->n != b->n) return false;
    if (a->type == GGUF_TYPE_STRING) return a->str_len == b->str_len && memcmp(a->str, b->str, a->str_len) == 0;
    if (a->type != GGUF_TYPE_ARRAY) return memcmp(a->data, b->data, gguf_type_size(a->type)) == 0;
    if (a->arr_type != b->arr_type) return false;
    if (a->arr_type == GGUF_TYPE_STRING) {
        for (uint64_t i = 0; i < a->n; i++)
            if (a->str_lens[i] != b->str_lens[i] || memcmp(a->strs[i], b->strs[i], a->str_lens[i]) != 0) return false;
        return true;
    }
    return a->n == 0 || memcmp(a->data, b->data, a->n * gguf_type_size(a->arr_type)) == 0;
}

// first_array_diff: index of the first differing element of two same-typed arrays (or the shorter length).
static uint64_t first_array_diff(const gguf_kv *a, const gguf_kv *b) {
    uint64_t n = a->n < b->n ? a->n : b->n;
    size_t es = gguf_type_size(a->arr_type);
    for (uint64_t i = 0; i < n; i++) {
        if (a->arr_type == GGUF_TYPE_STRING) {
            if (a->str_lens[i] != b->str_lens[i] || memcmp(a->strs[i], b->strs[i], a->str_lens[i]) != 0) return i;
        } else if (memcmp((const uint8_t *)a->data + i * es, (const uint8_t *)b->data + i * es, es) != 0) {
            return i;
        }
    }
    return n;
}

static bool same_shape(const gguf_tensor *a, const gguf_tensor *b) {
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        if (a->ne[d] != b->ne[d]) return false;
    return true;
}

static int cmd_diff(const char *pa, const char *pb) {
    char err[1024];
    gguf_file *a = gguf_open(pa, err, sizeof err);
    if (!a) {
        fprintf(stderr, "bonsai-gguf: %s\n", err);
        return 2;
    }
    gguf_file *b = gguf_open(pb, err, sizeof err);
    if (!b) {
        fprintf(stderr, "bonsai-gguf: %s\n", err);
        gguf_close(a);
        return 2;
    }
    int n_diff = 0;
    if (a->version != b->version) printf("~ version: %u -> %u\n", a->version, b->version), n_diff++;
    if (a->alignment != b->alignment) printf("~ alignment: %u -> %u\n", a->alignment, b->alignment), n_diff++;
    // KVs
    for (size_t i = 0; i < a->n_kv; i++) {
        const gguf_kv *ka = &a->kv[i];
        int j = gguf_find_key(b, ka->key);
        if (j < 0) {
            printf("- kv %s = ", ka->key);
            print_value(stdout, ka, false);
            putchar('\n');
            n_diff++;
            continue;
        }
        const gguf_kv *kb = &b->kv[j];
        if (kv_equal(ka, kb)) continue;
        n_diff++;
        printf("~ kv %s: ", ka->key);
        if (ka->type == GGUF_TYPE_ARRAY && kb->type == GGUF_TYPE_ARRAY && ka->arr_type == kb->arr_type) {
            uint64_t at = first_array_diff(ka, kb);
            printf("[%" PRIu64 " %s] -> [%" PRIu64 " %s], first difference at element %" PRIu64 "\n", ka->n,
                   gguf_type_name(ka->arr_type), kb->n, gguf_type_name(kb->arr_type), at);
            continue;
        }
        printf("%s ", gguf_type_name(ka->type));
        print_value(stdout, ka, false);
        printf(" -> %s ", gguf_type_name(kb->type));
        print_value(stdout, kb, false);
        putchar('\n');
    }
    for (size_t i = 0; i < b->n_kv; i++)
        if (gguf_find_key(a, b->kv[i].key) < 0) {
            printf("+ kv %s = ", b->kv[i].key);
            print_value(stdout, &b->kv[i], false);
            putchar('\n');
            n_diff++;
        }
    bool kv_order_same = a->n_kv == b->n_kv;
    for (size_t i = 0; kv_order_same && i < a->n_kv; i++) kv_order_same = strcmp(a->kv[i].key, b->kv[i].key) == 0;
    if (!kv_order_same && a->n_kv == b->n_kv) printf("~ kv order differs\n"), n_diff++;
    // tensors
    int identical = 0, differing = 0;
    for (size_t i = 0; i < a->n_tensors; i++) {
        const gguf_tensor *ta = &a->tensors[i], *tb = gguf_find_tensor(b, ta->name);
        if (!tb) {
            printf("- tensor %s (%s)\n", ta->name, bn_type_name(ta->type));
            n_diff++;
            continue;
        }
        if (ta->type != tb->type || ta->file_type != tb->file_type) {
            printf("~ tensor %s: type %s(%u) -> %s(%u)\n", ta->name, bn_type_name(ta->type), ta->file_type,
                   bn_type_name(tb->type), tb->file_type);
            n_diff++, differing++;
            continue;
        }
        if (!same_shape(ta, tb)) {
            printf("~ tensor %s: shape ", ta->name);
            print_ne(stdout, ta, 0);
            printf(" -> ");
            print_ne(stdout, tb, 0);
            putchar('\n');
            n_diff++, differing++;
            continue;
        }
        if (memcmp(ta->data, tb->data, ta->nbytes) == 0) {
            identical++;
            continue;
        }
        size_t nbad = 0;
        const uint8_t *x = ta->data, *y = tb->data;
        for (size_t k = 0; k < ta->nbytes; k++) nbad += x[k] != y[k];
        printf("~ tensor %s (%s): data differs in %zu of %zu bytes", ta->name, bn_type_name(ta->type), nbad, ta->nbytes);
        if (ta->type == BN_F32) {
            double mx = 0;
            for (int64_t k = 0; k < gguf_tensor_nelements(ta); k++) {
                float u, v;
                memcpy(&u, x + 4 * k, 4);
                memcpy(&v, y + 4 * k, 4);
                double dlt = u > v ? (double)u - v : (double)v - u;
                mx = dlt > mx ? dlt : mx;
            }
            printf(", max |diff| %.6g", mx);
        }
        putchar('\n');
        n_diff++, differing++;
    }
    for (size_t i = 0; i < b->n_tensors; i++)
        if (!gguf_find_tensor(a, b->tensors[i].name)) {
            printf("+ tensor %s (%s)\n", b->tensors[i].name, bn_type_name(b->tensors[i].type));
            n_diff++;
        }
    bool order_same = a->n_tensors == b->n_tensors;
    for (size_t i = 0; order_same && i < a->n_tensors; i++)
        order_same = strcmp(a->tensors[i].name, b->tensors[i].name) == 0;
    if (!order_same && a->n_tensors == b->n_tensors) printf("~ tensor order differs\n"), n_diff++;
    printf("%s: %d difference%s; %d common tensors byte-identical, %d differ\n", n_diff ? "different" : "identical",
           n_diff, n_diff == 1 ? "" : "s", identical, differing);
    gguf_close(a);
    gguf_close(b);
    return n_diff ? 1 : 0;
}

typedef struct {
    const char *cmd, *a, *b;
    bool all;
} gguf_opts;

#define O(f) offsetof(gguf_opts, f)
static const bn_arg gguf_args[] = {
    BN_POS(O(cmd), "COMMAND",
           "show FILE: header, key/values (arrays and long strings abbreviated), tensor table (name, type, ne, offset, "
           "bytes), totals per type and bits per weight; diff A B: key/value differences, tensors only in one file, "
           "type/shape changes, and whether each common tensor is byte-identical (exit 0 if identical, 1 if different, "
           "2 on error)"),
    BN_POS(O(a), "FILE", "the file (show) or A (diff)"),
    BN_POS(O(b), "B", "diff: the file compared with A"),
    BN_TRUE("--all", O(all), "show: print arrays and long strings whole"),
    {0}};
#undef O

int main(int argc, char **argv) {
    // diff's usage errors exit 2 (1 means "different")
    bn_args_tool tool = {.name = "bonsai-gguf",
                         .usage = "usage: bonsai-gguf show FILE [--all]\n"
                                  "       bonsai-gguf diff A B\n",
                         .status = argc > 1 && !strcmp(argv[1], "diff") ? 2 : 1};
    gguf_opts o = {0};
    const bn_arg_table tables[] = {BN_TABLE(gguf_args, &o), {0}};
    bn_args_parse(&tool, tables, argc, argv);
    if (!o.cmd) bn_args_fail(&tool, "a command is required (show or diff)");
    if (!strcmp(o.cmd, "show")) {
        if (!o.a || o.b) bn_args_fail(&tool, "show takes one FILE");
        return cmd_show(o.a, o.all);
    }
    if (!strcmp(o.cmd, "diff")) {
        if (!o.a || !o.b || o.all) bn_args_fail(&tool, "diff takes A and B (and no --all)");
        return cmd_diff(o.a, o.b);
    }
    bn_args_fail(&tool, "unknown command '%s' (show or diff)", o.cmd);
}
