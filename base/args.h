// base/args.h — the command-line option layer of every tool: a tool declares tables of options (llama.cpp's
// spellings: "-n, --n-predict"), each entry naming its type, where the value goes (an offset into the struct the
// table is read into), its range and its help line; bn_args_parse reads argv against one or more tables (shared
// tables — model/engine, sampling, mining, progress — are declared once next to the code they set), prints --help
// from them (only the options the tool has, with their defaults) and --version, and reports a bad value or an
// unknown option from one place ("bonsai-run: --top-k: 'abc' is not an integer (expected -1..)").
#ifndef BONSAI_ARGS_H
#define BONSAI_ARGS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
    BN_ARG_END = 0,  // ends a table ({0})
    BN_ARG_SECTION,  // a heading in --help: help is the title
    BN_ARG_TRUE,     // flag: the bool at off becomes true
    BN_ARG_FALSE,    // flag: the bool at off becomes false
    BN_ARG_INT,      // int in lo..hi
    BN_ARG_I64,      // int64_t in lo..hi
    BN_ARG_U64,      // uint64_t in lo..hi (seeds)
    BN_ARG_FLOAT,    // float in lo..hi (finite)
    BN_ARG_DOUBLE,   // double in lo..hi (finite)
    BN_ARG_STR,      // const char *: the argv string itself
    BN_ARG_STRS,     // repeatable: appended to the const char *[cap] at off, the count in the int at off_n
    BN_ARG_INTS,     // a comma-separated list of integers in lo..hi into the int[cap] at off, the count at off_n
    BN_ARG_CHOICE,   // one of the '|'-separated words of meta; its index goes into the int at off
    BN_ARG_FN,       // fn(base, opt, val) sets it; a flag (val NULL) when meta is NULL
    BN_ARG_POS,      // a positional argument (meta names it), const char * at off; filled in table order
    BN_ARG_FN2,      // fn2(base, opt, val, next) takes one or two values (it returns how many it used)
} bn_arg_type;

typedef struct bn_arg {
    const char *names; // every spelling, ", "-separated ("-ngl, --gpu-layers, --n-gpu-layers"); --help prints them
    bn_arg_type type;
    size_t off;        // where the value goes: offsetof into the table's struct (bn_arg_table.base)
    const char *meta;  // the value's name in --help ("N", "FILE"; choices "sample|prime"); NULL for flags
    const char *help;  // one line of help (wrapped to the terminal's 118 columns); NULL: accepted, not listed.
                       // "(default: X)" is added from the value before parsing unless the text says "default"
    double lo, hi;     // the range of a number (integers: hi >= 2^63 means no upper bound)
    // BN_ARG_FN: sets the option from val (NULL for a flag); returns 0, or -1 with err filled (the caller prefixes
    // "<tool>: ")
    int (*fn)(void *base, const char *opt, const char *val, char *err, size_t errlen);
    size_t off_n; // BN_ARG_STRS / BN_ARG_INTS: offsetof the int count
    int cap;      // BN_ARG_STRS / BN_ARG_INTS: room at off
    // BN_ARG_FN2: sets the option from val and, when it needs it, next (the argument after val, NULL at the end);
    // returns 1 or 2 (the values used), or -1 with err filled
    int (*fn2)(void *base, const char *opt, const char *val, const char *next, char *err, size_t errlen);
} bn_arg;

// Table entries: names, the offset of the value, its name in --help, the help line, a number's range. A table ends
// with {0}.
#define BN_SECTION(t_) {.type = BN_ARG_SECTION, .help = (t_)}
#define BN_TRUE(n_, o_, h_) {.names = (n_), .type = BN_ARG_TRUE, .off = (o_), .help = (h_)}
#define BN_FALSE(n_, o_, h_) {.names = (n_), .type = BN_ARG_FALSE, .off = (o_), .help = (h_)}
#define BN_NUM_(ty_, n_, o_, m_, h_, lo_, hi_)                                                                     \
    {.names = (n_), .type = (ty_), .off = (o_), .meta = (m_), .help = (h_), .lo = (lo_), .hi = (hi_)}
#define BN_INT(n_, o_, m_, h_, lo_, hi_) BN_NUM_(BN_ARG_INT, n_, o_, m_, h_, lo_, hi_)
#define BN_I64(n_, o_, m_, h_, lo_, hi_) BN_NUM_(BN_ARG_I64, n_, o_, m_, h_, lo_, hi_)
#define BN_U64(n_, o_, m_, h_, lo_, hi_) BN_NUM_(BN_ARG_U64, n_, o_, m_, h_, lo_, hi_)
#define BN_FLOAT(n_, o_, m_, h_, lo_, hi_) BN_NUM_(BN_ARG_FLOAT, n_, o_, m_, h_, lo_, hi_)
#define BN_DOUBLE(n_, o_, m_, h_, lo_, hi_) BN_NUM_(BN_ARG_DOUBLE, n_, o_, m_, h_, lo_, hi_)
#define BN_SEED(n_, o_, h_) BN_U64(n_, o_, "N", h_, 0, 0x1p63) // a seed: 0..INT64_MAX
#define BN_STR(n_, o_, m_, h_) {.names = (n_), .type = BN_ARG_STR, .off = (o_), .meta = (m_), .help = (h_)}
#define BN_STRS(n_, o_, c_, k_, m_, h_)                                                                            \
    {.names = (n_), .type = BN_ARG_STRS, .off = (o_), .off_n = (c_), .cap = (k_), .meta = (m_), .help = (h_)}
#define BN_INTS(n_, o_, c_, k_, m_, h_, lo_, hi_)                                                                  \
    {.names = (n_), .type = BN_ARG_INTS, .off = (o_), .off_n = (c_), .cap = (k_), .meta = (m_), .help = (h_),      \
     .lo = (lo_), .hi = (hi_)}
#define BN_CHOICE(n_, o_, m_, h_) {.names = (n_), .type = BN_ARG_CHOICE, .off = (o_), .meta = (m_), .help = (h_)}
#define BN_FN(n_, f_, m_, h_) {.names = (n_), .type = BN_ARG_FN, .fn = (f_), .meta = (m_), .help = (h_)}
#define BN_FN2(n_, f_, m_, h_) {.names = (n_), .type = BN_ARG_FN2, .fn2 = (f_), .meta = (m_), .help = (h_)}
#define BN_POS(o_, m_, h_) {.type = BN_ARG_POS, .off = (o_), .meta = (m_), .help = (h_)}

// One table and the struct its offsets point into.
typedef struct {
    const bn_arg *args; // {0}-terminated
    void *base;         // what the offsets point into (NULL for tables of BN_ARG_FN entries only)
    bool hidden;        // accepted but not listed in --help
} bn_arg_table;
// BN_TABLE / BN_HIDDEN_TABLE: a table read into base, listed in --help or not; a list of tables ends with {0}.
#define BN_TABLE(a_, b_) {.args = (a_), .base = (b_)}
#define BN_HIDDEN_TABLE(a_, b_) {.args = (a_), .base = (b_), .hidden = true}

// What a tool says of itself around its tables.
typedef struct {
    const char *name;  // "bonsai-run": every message starts with it
    const char *usage; // the usage lines ("usage: bonsai-run -m MODEL.gguf -p PROMPT [options]\n...")
    const char *notes; // printed after the options (NULL: none)
    int status;        // exit status of a usage error (0: 1)
} bn_args_tool;

// bn_args_parse: reads argv[1..argc) against tables (a list ended by {0}; the first table that knows an option
// takes it) and the built-in -h/--help and --version. --help prints the usage, the options of every table that is
// not hidden with their defaults, and the notes to stdout and exits 0; --version prints
// "<name> version <version> (<commit>)" and exits 0; a bad value, an option without its value, an unknown option or
// a surplus positional argument prints one line "<name>: ..." to stderr and exits with tool->status.
void bn_args_parse(const bn_args_tool *tool, const bn_arg_table *tables, int argc, char **argv);
// bn_args_read: the parser behind bn_args_parse for args[0..n) without printing or exiting: returns 0 when all
// were read, 1 on -h/--help, 2 on --version, or -1 with err ("--top-k: 'abc' is not an integer (expected -1..)",
// "unknown option '--x' (see --help)", "option '-n' needs a value N (see --help)").
int bn_args_read(const bn_arg_table *tables, int n, char *const *args, char *err, size_t errlen);
// bn_args_int / bn_args_real: s, the value of option opt, as a base-10 integer / a finite number in lo..hi into *v
// (for BN_ARG_FN callbacks); 0, or -1 with err in the words of the tables ("--port: 'x' is not an integer (expected
// 0..65535)", "--top-p: '2' is out of range (expected 0..1)").
int bn_args_int(const char *opt, const char *s, long long lo, long long hi, long long *v, char *err, size_t errlen);
int bn_args_real(const char *opt, const char *s, double lo, double hi, double *v, char *err, size_t errlen);
// bn_args_peek: the value after the last "name VALUE" pair of argv[1..argc) (read before parsing: an option whose
// value sets the other options' defaults, such as --preset), or dflt when there is none.
const char *bn_args_peek(int argc, char **argv, const char *name, const char *dflt);
// bn_args_given: true when the last bn_args_read / bn_args_parse met the option with this spelling (any of the
// spellings of its entry), e.g. bn_args_given("-c") after "--ctx-size 512".
bool bn_args_given(const char *name);
// bn_args_help: prints tool's usage, the tables' options and the notes to f.
void bn_args_help(FILE *f, const bn_args_tool *tool, const bn_arg_table *tables);
// bn_args_fail: prints "<name>: <message> (see --help)" to stderr and exits with tool->status (a usage error found
// after parsing: a required option missing, options that exclude each other).
__attribute__((noreturn, format(printf, 2, 3))) void bn_args_fail(const bn_args_tool *tool, const char *fmt, ...);

// bn_version / bn_build_commit / bn_build_number: the meson project version ("0.1.0"), the git commit the build was
// made from ("unknown" outside a git checkout) and the number of commits up to it (0 when unknown).
const char *bn_version(void);
const char *bn_build_commit(void);
int bn_build_number(void);

#endif
