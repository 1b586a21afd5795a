// base/util.c — see util.h.
#include "base/util.h"
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>
#include <errno.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <dirent.h>
#include <sys/stat.h>
#include <zlib.h>

int bn_err(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void bn_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("bonsai: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) bn_die("out of memory allocating %zu bytes", n);
    return p;
}

void *xcalloc(size_t n, size_t sz) {
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p) bn_die("out of memory allocating %zu x %zu bytes", n, sz);
    return p;
}

void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) bn_die("out of memory reallocating %zu bytes", n);
    return q;
}

char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = xmalloc(n);
    memcpy(d, s, n);
    return d;
}

void *bn_aligned_alloc(size_t n) {
    void *p = NULL;
    size_t sz = (n + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, sz ? sz : 64) != 0) bn_die("out of memory allocating %zu bytes", n);
    memset(p, 0, sz ? sz : 64);
    return p;
}

double bn_time_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

// ---- temp files removed on SIGINT / SIGTERM / SIGHUP ----------------------------------------
#define TMP_SLOTS 32
static const char *volatile tmp_slots[TMP_SLOTS]; // claimed with compare-and-swap, read by the handler
static const int tmp_signals[] = {SIGINT, SIGTERM, SIGHUP};

// on_stop_signal: removes the tracked temp files, then dies of the signal with its default action
static void on_stop_signal(int sig) {
    for (int i = 0; i < TMP_SLOTS; i++) {
        const char *p = tmp_slots[i];
        if (p) unlink(p); // async-signal-safe
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

// install_once: on_stop_signal for each signal still at its default action
static void install_once(void) {
    for (size_t i = 0; i < sizeof tmp_signals / sizeof tmp_signals[0]; i++) {
        struct sigaction old;
        if (sigaction(tmp_signals[i], NULL, &old) != 0 || old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO))
            continue;
        struct sigaction sa = {0};
        sa.sa_handler = on_stop_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(tmp_signals[i], &sa, NULL);
    }
}

// install_stop_handlers: install_once, once per process
static void install_stop_handlers(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, install_once);
}

int bn_tmp_track(const char *path) {
    install_stop_handlers();
    for (int i = 0; i < TMP_SLOTS; i++) {
        const char *expected = NULL;
        if (__atomic_compare_exchange_n((const char **)&tmp_slots[i], &expected, path, false, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST))
            return 0;
    }
    return -1;
}

void bn_tmp_untrack(const char *path) {
    for (int i = 0; i < TMP_SLOTS; i++) {
        const char *expected = path;
        if (path && __atomic_compare_exchange_n((const char **)&tmp_slots[i], &expected, NULL, false, __ATOMIC_SEQ_CST,
                                                __ATOMIC_SEQ_CST))
            return;
    }
}

// pid_of_stale_tmp: for a directory entry NAME of the form "<base>.tmp.<pid>" returns that pid, else 0
static long pid_of_stale_tmp(const char *name, const char *base) {
    size_t nb = strlen(base);
    if (strncmp(name, base, nb) != 0 || strncmp(name + nb, ".tmp.", 5) != 0) return 0;
    const char *d = name + nb + 5;
    long pid = 0;
    for (; *d; d++) {
        if (*d < '0' || *d > '9' || pid > 100000000) return 0;
        pid = pid * 10 + (*d - '0');
    }
    return pid;
}

// remove_stale_tmps: removes the temp files of path ("<path>.tmp.<pid>") whose writer no longer runs on this machine
// (it was killed by SIGKILL, or the machine went down): an atomic writer's only leftover
static void remove_stale_tmps(const char *path) {
    char *dup_dir = xstrdup(path), *dup_base = xstrdup(path);
    const char *dir = dirname(dup_dir), *base = basename(dup_base);
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        long pid = pid_of_stale_tmp(e->d_name, base);
        if (pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        if (unlinkat(dirfd(d), e->d_name, 0) == 0)
            fprintf(stderr, "bonsai: removed %s/%s, left by process %ld, which no longer runs\n", dir, e->d_name, pid);
    }
    if (d) closedir(d);
    free(dup_dir);
    free(dup_base);
}

char *bn_tmp_path_for(const char *path) {
    remove_stale_tmps(path);
    size_t n = strlen(path) + 32;
    char *tmp = xmalloc(n);
    snprintf(tmp, n, "%s.tmp.%d", path, (int)getpid());
    return tmp;
}

int bn_atomic_open(bn_atomic_file *af, const char *path, char *err, size_t errlen) {
    memset(af, 0, sizeof *af);
    af->path = xstrdup(path);
    af->tmp_path = bn_tmp_path_for(path);
    bn_tmp_track(af->tmp_path); // before the file exists: a signal in between finds nothing to remove
    af->f = fopen(af->tmp_path, "wb");
    if (!af->f) {
        bn_err(err, errlen, "cannot create %s: %s", af->tmp_path, strerror(errno));
        bn_tmp_untrack(af->tmp_path);
        free(af->path);
        free(af->tmp_path);
        af->path = af->tmp_path = NULL;
        return -1;
    }
    return 0;
}

static void fsync_dir_of(const char *path) {
    char *dup = xstrdup(path);
    int fd = open(dirname(dup), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dup);
}

int bn_atomic_commit(bn_atomic_file *af, char *err, size_t errlen) {
    int rc = 0;
    if (fflush(af->f) != 0 || ferror(af->f) || fsync(fileno(af->f)) != 0) {
        rc = bn_err(err, errlen, "cannot write %s: %s", af->tmp_path, strerror(errno));
    }
    if (fclose(af->f) != 0 && rc == 0) rc = bn_err(err, errlen, "cannot close %s: %s", af->tmp_path, strerror(errno));
    af->f = NULL;
    if (rc == 0 && rename(af->tmp_path, af->path) != 0)
        rc = bn_err(err, errlen, "cannot rename %s to %s: %s", af->tmp_path, af->path, strerror(errno));
    if (rc != 0) unlink(af->tmp_path);
    else fsync_dir_of(af->path);
    bn_tmp_untrack(af->tmp_path);
    free(af->path);
    free(af->tmp_path);
    af->path = af->tmp_path = NULL;
    return rc;
}

void bn_atomic_abort(bn_atomic_file *af) {
    if (af->f) fclose(af->f);
    if (af->tmp_path) unlink(af->tmp_path);
    bn_tmp_untrack(af->tmp_path);
    free(af->path);
    free(af->tmp_path);
    memset(af, 0, sizeof *af);
}

int bn_mkdir_p(const char *dir, char *err, size_t errlen) {
    char *p = xstrdup(dir);
    int rc = 0;
    for (char *s = p + 1;; s++) { // each prefix that ends before a '/', then the whole path
        if (*s && *s != '/') continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            rc = bn_err(err, errlen, "cannot create %s: %s", p, strerror(errno));
            break;
        }
        *s = c;
        if (!c) break;
    }
    free(p);
    return rc;
}

int bn_write_file_atomic(const char *path, const void *data, size_t n, char *err, size_t errlen) {
    bn_atomic_file af;
    if (bn_atomic_open(&af, path, err, errlen) != 0) return -1;
    if (n && fwrite(data, 1, n, af.f) != n) {
        bn_err(err, errlen, "cannot write %s: %s", path, strerror(errno));
        bn_atomic_abort(&af);
        return -1;
    }
    return bn_atomic_commit(&af, err, errlen);
}

char *bn_read_file(const char *path, size_t *n, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        bn_err(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = xmalloc(cap);
    for (;;) {
        if (len + 1 >= cap) buf = xrealloc(buf, cap *= 2);
        size_t got = fread(buf + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0) break;
    }
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        bn_err(err, errlen, "cannot read %s", path);
        return NULL;
    }
    buf[len] = 0;
    if (n) *n = len;
    return buf;
}

struct bn_lines {
    gzFile gz;
    char *buf;
    size_t cap;
    char *path;
    char why[160]; // "" while reading went well
};

bn_lines *bn_lines_open(const char *path, char *err, size_t errlen) {
    gzFile gz = gzopen(path, "rb"); // reads plain files transparently too
    if (!gz) {
        bn_err(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    bn_lines *l = xcalloc(1, sizeof *l);
    l->gz = gz;
    l->cap = 1 << 16;
    l->buf = xmalloc(l->cap);
    l->path = xstrdup(path);
    return l;
}

const char *bn_gz_error(gzFile gz, int *errnum) {
    int e = Z_OK;
    const char *msg = gzerror(gz, &e);
    if (errnum) *errnum = e;
    return e == Z_ERRNO || !msg || !msg[0] ? strerror(errno) : msg;
}

// read_failed: true (and the reason kept in l->why) when gzgets stopped on an error, not at the end of the file
static bool read_failed(bn_lines *l) {
    int errnum;
    const char *why = bn_gz_error(l->gz, &errnum);
    if (errnum == Z_OK) return false;
    snprintf(l->why, sizeof l->why, "%s", why);
    return true;
}

const char *bn_lines_next(bn_lines *l, size_t *len) {
    size_t n = 0;
    for (;;) {
        if (n + 2 >= l->cap) l->buf = xrealloc(l->buf, l->cap *= 2);
        if (!gzgets(l->gz, l->buf + n, (int)(l->cap - n))) {
            if (read_failed(l)) return NULL; // a partial last line of a truncated file is not a line
            if (n == 0) return NULL;
            break;
        }
        n += strlen(l->buf + n);
        if (n > 0 && l->buf[n - 1] == '\n') {
            l->buf[--n] = 0;
            break;
        }
    }
    if (n > 0 && l->buf[n - 1] == '\r') l->buf[--n] = 0;
    if (len) *len = n;
    return l->buf;
}

bool bn_lines_failed(const bn_lines *l, char *err, size_t errlen) {
    if (!l->why[0]) return false;
    bn_err(err, errlen, "%s: read error (%s): the file is truncated or damaged", l->path, l->why);
    return true;
}

void bn_lines_close(bn_lines *l) {
    if (!l) return;
    gzclose(l->gz);
    free(l->buf);
    free(l->path);
    free(l);
}

uint32_t bn_crc32(uint32_t crc, const void *data, size_t n) {
    const unsigned char *p = data;
    while (n > 0) {
        uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = (uint32_t)crc32(crc, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return crc;
}

int bn_n_threads_default(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

const char *bn_format_bytes(char *buf, size_t n, double bytes) {
    if (bytes < 1024.0 * 1024 * 1024) snprintf(buf, n, "%.2f MiB", bytes / (1024.0 * 1024));
    else snprintf(buf, n, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
    return buf;
}

int bn_parse_int_list(const char *s, long lo, long hi, int *out, int max) {
    int n = 0;
    for (const char *p = s;; p++) { // one element per pass: digits, then ',' or the end
        if (!isdigit((unsigned char)*p) && *p != '-') return 0; // an empty element ("1,,2", ",1", "1,"), a sign, a space
        char *end;
        errno = 0;
        const long v = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',') || errno == ERANGE || v < lo || v > hi || n == max) return 0;
        out[n++] = (int)v;
        if (!*end) return n;
        p = end;
    }
}

bool bn_env_is(const char *name, const char *value) {
    const char *v = getenv(name);
    return v && strcmp(v, value) == 0;
}
