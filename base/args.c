// base/args.c — table-driven command-line options (see args.h).
#include "base/args.h"
#include "base/util.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define HELP_COL 32    // where the help text starts
#define HELP_WIDTH 118 // the help is wrapped to this many columns
#define MAX_SEEN 512   // entries remembered for bn_args_given (more than any table list has)

static const bn_arg builtin_args[] = {
    BN_SECTION("general"),
    BN_TRUE("-h, --help", 0, "print this help and exit"),
    BN_TRUE("--version", 0, "print the version and the git commit of the build and exit"),
    {0}};

static const bn_arg *g_seen[MAX_SEEN];
static int g_n_seen;

// name_is: true when arg is one of the ", "-separated spellings in names.
static bool name_is(const char *names, const char *arg) {
    size_t n = strlen(arg);
    for (const char *p = names; p && *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && memcmp(p, arg, n) == 0) return true;
        p += len;
        while (*p == ',' || *p == ' ') p++;
    }
    return false;
}

// find: the entry (and its table) that takes option arg; NULL when none.
static const bn_arg *find(const bn_arg_table *tables, const char *arg, const bn_arg_table **tab) {
    for (const bn_arg_table *t = tables; t && t->args; t++)
        for (const bn_arg *a = t->args; a->type != BN_ARG_END; a++)
            if (a->type != BN_ARG_SECTION && a->type != BN_ARG_POS && name_is(a->names, arg)) {
                *tab = t;
                return a;
            }
    return NULL;
}

static bool takes_value(const bn_arg *a) {
    if (a->type == BN_ARG_TRUE || a->type == BN_ARG_FALSE) return false;
    return a->type != BN_ARG_FN || a->meta != NULL;
}

static bool is_int(bn_arg_type t) { return t == BN_ARG_INT || t == BN_ARG_I64 || t == BN_ARG_U64; }

// range_text: "LO..HI" with an open end left out ("0..", "..1", "any value") into buf; the ends at the type's limits
// (an int's, int64_t's, ±1e30 for reals) are open. Returns buf.
static const char *range_text(bool integer, double lo, double hi, char *buf, size_t n) {
    char l[32] = "", h[32] = "";
    if (integer) {
        if (lo > -2147483648.0 && lo > -0x1p63) snprintf(l, sizeof l, "%lld", (long long)lo);
        if (hi != 2147483647.0 && hi < 0x1p63 - 1024) snprintf(h, sizeof h, "%lld", (long long)hi);
    } else {
        if (lo > -1e30) snprintf(l, sizeof l, "%g", lo);
        if (hi < 1e30) snprintf(h, sizeof h, "%g", hi);
    }
    if (!l[0] && !h[0]) snprintf(buf, n, "any value");
    else snprintf(buf, n, "%s..%s", l, h);
    return buf;
}

int bn_args_int(const char *opt, const char *s, long long lo, long long hi, long long *v, char *err, size_t errlen) {
    char rng[80], *end;
    range_text(true, (double)lo, (double)hi, rng, sizeof rng);
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (!*s || isspace((unsigned char)*s) || *end || errno == ERANGE)
        return bn_err(err, errlen, "%s: '%s' is not an integer (expected %s)", opt, s, rng);
    if (x < lo || x > hi) return bn_err(err, errlen, "%s: '%s' is out of range (expected %s)", opt, s, rng);
    *v = x;
    return 0;
}

int bn_args_real(const char *opt, const char *s, double lo, double hi, double *v, char *err, size_t errlen) {
    char rng[80], *end;
    range_text(false, lo, hi, rng, sizeof rng);
    errno = 0;
    double x = strtod(s, &end);
    if (!*s || isspace((unsigned char)*s) || *end || errno == ERANGE || !isfinite(x))
        return bn_err(err, errlen, "%s: '%s' is not a number (expected %s)", opt, s, rng);
    if (!(x >= lo && x <= hi)) return bn_err(err, errlen, "%s: '%s' is out of range (expected %s)", opt, s, rng);
    *v = x;
    return 0;
}

// read_int: s as a base-10 integer in a's range into *v; 0, or -1 with err naming opt and s.
static int read_int(const bn_arg *a, const char *opt, const char *s, long long *v, char *err, size_t errlen) {
    long long lo = a->lo <= -0x1p63 ? INT64_MIN : (long long)a->lo, hi = a->hi >= 0x1p63 ? INT64_MAX : (long long)a->hi;
    return bn_args_int(opt, s, lo, hi, v, err, errlen);
}

// choice_index: the index of s among the '|'-separated words of choices, or -1.
static int choice_index(const char *choices, const char *s) {
    int i = 0;
    for (const char *p = choices; *p; i++) {
        size_t len = strcspn(p, "|");
        if (len == strlen(s) && memcmp(p, s, len) == 0) return i;
        p += len + (p[len] == '|');
    }
    return -1;
}

// set: stores val (NULL for a flag) of option opt by entry a into the struct at base; 0 or -1 with err.
static int set(const bn_arg *a, void *base, const char *opt, const char *val, char *err, size_t errlen) {
    char *dst = (char *)base + a->off;
    long long i = 0;
    double r = 0;
    if (is_int(a->type) && read_int(a, opt, val, &i, err, errlen) != 0) return -1;
    if ((a->type == BN_ARG_FLOAT || a->type == BN_ARG_DOUBLE) && bn_args_real(opt, val, a->lo, a->hi, &r, err, errlen))
        return -1;
    switch (a->type) {
    case BN_ARG_TRUE: *(bool *)dst = true; break;
    case BN_ARG_FALSE: *(bool *)dst = false; break;
    case BN_ARG_INT: *(int *)dst = (int)i; break;
    case BN_ARG_I64: *(int64_t *)dst = (int64_t)i; break;
    case BN_ARG_U64: *(uint64_t *)dst = (uint64_t)i; break;
    case BN_ARG_FLOAT: *(float *)dst = (float)r; break;
    case BN_ARG_DOUBLE: *(double *)dst = r; break;
    case BN_ARG_STR: *(const char **)dst = val; break;
    case BN_ARG_STRS: {
        int *count = (int *)((char *)base + a->off_n);
        if (*count >= a->cap) return bn_err(err, errlen, "%s: at most %d values", opt, a->cap);
        ((const char **)dst)[(*count)++] = val;
        break;
    }
    case BN_ARG_INTS: {
        char rng[80];
        int n = bn_parse_int_list(val, (long)a->lo, (long)a->hi, (int *)dst, a->cap);
        if (n == 0)
            return bn_err(err, errlen, "%s: '%s' is not a list of integers in %s (at most %d, comma-separated)", opt,
                          val, range_text(true, a->lo, a->hi, rng, sizeof rng), a->cap);
        *(int *)((char *)base + a->off_n) = n;
        break;
    }
    case BN_ARG_CHOICE: {
        int k = choice_index(a->meta, val);
        if (k < 0) return bn_err(err, errlen, "%s: '%s' is not one of %s", opt, val, a->meta);
        *(int *)dst = k;
        break;
    }
    case BN_ARG_FN: {
        char why[448];
        why[0] = 0;
        if (a->fn(base, opt, val, why, sizeof why) != 0) { // (a message from bn_args_int names opt already)
            size_t n = strlen(opt);
            bool named = !strncmp(why, opt, n) && !strncmp(why + n, ": ", 2);
            return named ? bn_err(err, errlen, "%s", why) : bn_err(err, errlen, "%s: %s", opt, why);
        }
        break;
    }
    default: break;
    }
    return 0;
}

// fn2_set: a BN_ARG_FN2 entry from val and next; the values used (1 or 2), or -1 with err naming opt.
static int fn2_set(const bn_arg *a, void *base, const char *opt, const char *val, const char *next, char *err,
                   size_t errlen) {
    char why[448];
    why[0] = 0;
    const int used = a->fn2(base, opt, val, next, why, sizeof why);
    if (used == 1 || used == 2) return used;
    size_t n = strlen(opt);
    bool named = !strncmp(why, opt, n) && !strncmp(why + n, ": ", 2);
    return named ? bn_err(err, errlen, "%s", why) : bn_err(err, errlen, "%s: %s", opt, why);
}

// next_pos: the first positional entry not yet given; NULL when all are.
static const bn_arg *next_pos(const bn_arg_table *tables, const bn_arg_table **tab) {
    for (const bn_arg_table *t = tables; t && t->args; t++)
        for (const bn_arg *a = t->args; a->type != BN_ARG_END; a++) {
            if (a->type != BN_ARG_POS) continue;
            bool used = false;
            for (int k = 0; k < g_n_seen && !used; k++) used = g_seen[k] == a;
            if (!used) {
                *tab = t;
                return a;
            }
        }
    return NULL;
}

// seen: remembers that entry a was given (once; for bn_args_given and the positional entries still free).
static void seen(const bn_arg *a) {
    for (int k = 0; k < g_n_seen; k++)
        if (g_seen[k] == a) return;
    if (g_n_seen < MAX_SEEN) g_seen[g_n_seen++] = a;
}

int bn_args_read(const bn_arg_table *tables, int n, char *const *args, char *err, size_t errlen) {
    g_n_seen = 0;
    bool options_end = false;
    for (int i = 0; i < n; i++) {
        const char *s = args[i];
        const bn_arg_table *t;
        if (!options_end && !strcmp(s, "--")) {
            options_end = true;
            continue;
        }
        if (options_end || s[0] != '-' || !s[1]) { // a positional argument
            const bn_arg *p = next_pos(tables, &t);
            if (!p) return bn_err(err, errlen, "unexpected argument '%s' (see --help)", s);
            *(const char **)((char *)t->base + p->off) = s;
            seen(p);
            continue;
        }
        if (name_is(builtin_args[1].names, s)) return 1;
        if (name_is(builtin_args[2].names, s)) return 2;
        const bn_arg *a = find(tables, s, &t);
        if (!a) return bn_err(err, errlen, "unknown option '%s' (see --help)", s);
        const char *val = NULL;
        if (a->type == BN_ARG_FN2) {
            if (i + 1 >= n)
                return bn_err(err, errlen, "option '%s' needs a value %s (see --help)", s, a->meta ? a->meta : "VALUE");
            const int used = fn2_set(a, t->base, s, args[i + 1], i + 2 < n ? args[i + 2] : NULL, err, errlen);
            if (used < 0) return -1;
            i += used;
            seen(a);
            continue;
        }
        if (takes_value(a)) {
            if (i + 1 >= n)
                return bn_err(err, errlen, "option '%s' needs a value %s (see --help)", s, a->meta ? a->meta : "VALUE");
            val = args[++i];
        }
        if (set(a, t->base, s, val, err, errlen) != 0) return -1;
        seen(a);
    }
    return 0;
}

const char *bn_args_peek(int argc, char **argv, const char *name, const char *dflt) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) dflt = argv[++i];
    return dflt;
}

bool bn_args_given(const char *name) {
    for (int k = 0; k < g_n_seen; k++)
        if (g_seen[k]->names && name_is(g_seen[k]->names, name)) return true;
    return false;
}

// default_text: the value at a's destination as --help shows it ("" when it shows none) into buf.
static void default_text(const bn_arg *a, const void *base, char *buf, size_t n) {
    buf[0] = 0;
    if (!base || !a->help || strstr(a->help, "default")) return;
    const char *p = (const char *)base + a->off;
    switch (a->type) {
    case BN_ARG_INT: snprintf(buf, n, "%d", *(const int *)p); break;
    case BN_ARG_I64: snprintf(buf, n, "%lld", (long long)*(const int64_t *)p); break;
    case BN_ARG_U64: snprintf(buf, n, "%llu", (unsigned long long)*(const uint64_t *)p); break;
    case BN_ARG_FLOAT:
        if (!isnan(*(const float *)p)) snprintf(buf, n, "%g", *(const float *)p);
        break;
    case BN_ARG_DOUBLE:
        if (!isnan(*(const double *)p)) snprintf(buf, n, "%g", *(const double *)p);
        break;
    case BN_ARG_STR:
        if (*(const char *const *)p && **(const char *const *)p) snprintf(buf, n, "\"%s\"", *(const char *const *)p);
        break;
    case BN_ARG_CHOICE: {
        int k = *(const int *)p, i = 0;
        for (const char *q = a->meta; *q && k >= 0; i++) {
            size_t len = strcspn(q, "|");
            if (i == k) snprintf(buf, n, "%.*s", (int)len, q);
            q += len + (q[len] == '|');
        }
        break;
    }
    default: break;
    }
}

// print_wrapped: text from column col (the cursor is at column at), words wrapped at HELP_WIDTH, '\n' kept.
static void print_wrapped(FILE *f, const char *text, int at, int col) {
    if (at > col - 1) {
        fputc('\n', f);
        at = 0;
    }
    fprintf(f, "%*s", col - at, "");
    int x = col;
    for (const char *p = text; *p;) {
        if (*p == '\n' || *p == ' ') {
            if (*p++ == '\n') fprintf(f, "\n%*s", col, ""), x = col;
            continue;
        }
        size_t w = strcspn(p, " \n");
        if (x > col && x + 1 + (int)w > HELP_WIDTH) fprintf(f, "\n%*s", col, ""), x = col;
        else if (x > col) fputc(' ', f), x++;
        for (size_t k = 0; k < w; k++) fputc(p[k] == '\x01' ? ' ' : p[k], f); // \x01: a space that does not break
        x += (int)w;
        p += w;
    }
    fputc('\n', f);
}

// print_table: the listed entries of one table; defs (NULL: the values now) are their defaults, one per entry.
static void print_table(FILE *f, const bn_arg_table *t, char (*defs)[64]) {
    int k = 0;
    for (const bn_arg *a = t->args; a->type != BN_ARG_END; a++, k++) {
        if (!a->help) continue;
        if (a->type == BN_ARG_SECTION) {
            fprintf(f, "\n%s:\n", a->help);
            continue;
        }
        char head[160], def[64], text[1024];
        if (a->type == BN_ARG_POS) snprintf(head, sizeof head, "  %s", a->meta);
        else snprintf(head, sizeof head, "  %s%s%s", a->names, a->meta ? " " : "", a->meta ? a->meta : "");
        if (defs) snprintf(def, sizeof def, "%s", defs[k]);
        else default_text(a, t->base, def, sizeof def);
        for (char *c = def; *c; c++) *c = *c == ' ' ? '\x01' : *c; // the default is not broken across lines
        snprintf(text, sizeof text, def[0] ? "%s (default:\x01%s)" : "%s", a->help, def);
        fputs(head, f);
        print_wrapped(f, text, (int)strlen(head), HELP_COL);
    }
}

static int count_entries(const bn_arg *args) {
    int n = 0;
    while (args[n].type != BN_ARG_END) n++;
    return n;
}

// help: the whole --help; defs[i] (NULL: none) are table i's defaults captured before parsing.
static void help(FILE *f, const bn_args_tool *tool, const bn_arg_table *tables, char (**defs)[64]) {
    fputs(tool->usage, f);
    if (tables[0].args && tables[0].args[0].type != BN_ARG_SECTION) fputs("\noptions:\n", f);
    int i = 0;
    for (const bn_arg_table *t = tables; t && t->args; t++, i++)
        if (!t->hidden) print_table(f, t, defs ? defs[i] : NULL);
    bn_arg_table builtin = {builtin_args, NULL, false};
    print_table(f, &builtin, NULL);
    if (tool->notes) fprintf(f, "\n%s", tool->notes);
}

void bn_args_help(FILE *f, const bn_args_tool *tool, const bn_arg_table *tables) { help(f, tool, tables, NULL); }

void bn_args_fail(const bn_args_tool *tool, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", tool->name);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see --help)\n");
    va_end(ap);
    exit(tool->status ? tool->status : 1);
}

void bn_args_parse(const bn_args_tool *tool, const bn_arg_table *tables, int argc, char **argv) {
    int n_tables = 0;
    while (tables[n_tables].args) n_tables++;
    char(**defs)[64] = xcalloc((size_t)n_tables + 1, sizeof *defs); // the defaults, before parsing changes them
    for (int i = 0; i < n_tables; i++) {
        int n = count_entries(tables[i].args);
        defs[i] = xcalloc((size_t)n + 1, sizeof *defs[i]);
        for (int k = 0; k < n; k++) default_text(&tables[i].args[k], tables[i].base, defs[i][k], sizeof defs[i][k]);
    }
    char err[512];
    int r = bn_args_read(tables, argc - 1, argv + 1, err, sizeof err);
    if (r == 1) help(stdout, tool, tables, defs);
    if (r == 2) printf("%s version %s (%s)\n", tool->name, bn_version(), bn_build_commit());
    for (int i = 0; i < n_tables; i++) free(defs[i]);
    free(defs);
    if (r > 0) exit(0);
    if (r < 0) {
        fprintf(stderr, "%s: %s\n", tool->name, err);
        exit(tool->status ? tool->status : 1);
    }
}
