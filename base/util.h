// base/util.h — small shared helpers: allocation that dies loudly, error buffers, timing,
// atomic file output, gzip-aware line I/O, CRC32 (and, through base/progress.h, the progress bar).
#ifndef BONSAI_UTIL_H
#define BONSAI_UTIL_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include "base/progress.h" // bn_progress (here before it had its own file)

// ---- errors -------------------------------------------------------------------------------
// Functions that can fail take (char *err, size_t errlen) and fill it with one clear line.
// bn_err: formats into err (if non-NULL); returns -1 so callers can `return bn_err(...)`.
int bn_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// bn_die: prints "bonsai: <msg>" to stderr and exits 1.
void bn_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

// ---- memory -------------------------------------------------------------------------------
// xmalloc/xcalloc/xrealloc: like malloc but exit with a message on failure; return non-NULL.
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t sz);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
// bn_aligned_alloc: 64-byte aligned, zeroed; free with free(). Dies on failure.
void *bn_aligned_alloc(size_t n);

// ---- time ---------------------------------------------------------------------------------
// bn_time_ms: monotonic milliseconds as a double.
double bn_time_ms(void);

// ---- atomic output ------------------------------------------------------------------------
// bn_atomic_file: writes go to "<path>.tmp.<pid>"; commit fsyncs, renames over path and
// fsyncs the directory; abort removes the temp file. A killed writer never leaves a partial
// file under the final name; one stopped by SIGINT, SIGTERM or SIGHUP (where the program left
// that signal's default action) removes its temp files first (bn_tmp_track); SIGKILL leaves them,
// and the next writer of the same path removes them (bn_tmp_path_for).
typedef struct {
    FILE *f;
    char *path, *tmp_path;
} bn_atomic_file;
// bn_atomic_open: returns 0 or -1 (err filled).
int bn_atomic_open(bn_atomic_file *af, const char *path, char *err, size_t errlen);
// bn_atomic_commit: flush+fsync+rename; returns 0 or -1 (err filled, temp removed). Closes.
int bn_atomic_commit(bn_atomic_file *af, char *err, size_t errlen);
// bn_atomic_abort: close and remove the temp file.
void bn_atomic_abort(bn_atomic_file *af);
// bn_write_file_atomic: whole buffer to path atomically; returns 0 or -1.
int bn_write_file_atomic(const char *path, const void *data, size_t n, char *err, size_t errlen);
// bn_tmp_path_for: returns the malloc'd temp name "<path>.tmp.<pid>" for this process, after removing (with a note on
// stderr) the temp files of path whose writer's pid no longer runs on this machine: what a SIGKILL or a crash left.
// A writer on another machine (or in another pid namespace) sharing the directory is not seen: its temp file may be
// removed too.
char *bn_tmp_path_for(const char *path);
// bn_tmp_track: path (kept by the caller until bn_tmp_untrack) is removed if SIGINT, SIGTERM or SIGHUP ends the
// process before bn_tmp_untrack(path); the handler is installed only for signals still at their default action (a
// program's own handler, e.g. ftpo-train's "finish the step", is left alone). At most 32 paths at once; returns 0,
// or -1 when all slots are taken (the file is then not tracked).
int bn_tmp_track(const char *path);
// bn_tmp_untrack: stops tracking path (the same pointer); no-op if it is not tracked.
void bn_tmp_untrack(const char *path);
// bn_mkdir_p: creates dir and every missing parent (mkdir -p); returns 0 (also when it exists) or -1 naming the
// directory that could not be made.
int bn_mkdir_p(const char *dir, char *err, size_t errlen);
// bn_read_file: whole file into a malloc'd NUL-terminated buffer (*n = length); NULL on error.
char *bn_read_file(const char *path, size_t *n, char *err, size_t errlen);

// ---- line I/O with optional gzip (by ".gz" suffix) -----------------------------------------
typedef struct bn_lines bn_lines;
// bn_lines_open: opens a text or .gz file for line reading; NULL on error.
bn_lines *bn_lines_open(const char *path, char *err, size_t errlen);
// bn_lines_next: next line without the trailing newline (valid until the next call); NULL at the end of the file
// or on a read error (truncated or corrupt gzip data, an I/O error): bn_lines_failed tells them apart.
const char *bn_lines_next(bn_lines *l, size_t *len);
// bn_gz_error: the reason for gz's last failure (the system's for a file error, else zlib's message); zlib's code
// (Z_OK: no failure) in *errnum when errnum is not NULL.
struct gzFile_s;
const char *bn_gz_error(struct gzFile_s *gz, int *errnum);
// bn_lines_failed: true (err filled: the path and zlib's or the system's reason) when reading stopped on an error
// rather than at the end of the file; the lines before it were read. False otherwise.
bool bn_lines_failed(const bn_lines *l, char *err, size_t errlen);
void bn_lines_close(bn_lines *l);

// ---- checksums ----------------------------------------------------------------------------
// bn_crc32: zlib CRC32 of a buffer, continuing from crc (start with 0).
uint32_t bn_crc32(uint32_t crc, const void *data, size_t n);

// ---- misc ---------------------------------------------------------------------------------
// bn_n_threads_default: number of online CPUs (>= 1).
int bn_n_threads_default(void);
// bn_format_bytes: "1.23 MiB" style into buf; returns buf.
const char *bn_format_bytes(char *buf, size_t n, double bytes);
// bn_parse_int_list: a comma-separated list of integers in [lo, hi] ("1,2,4,8") into out (room for max); returns the
// count, or 0 for an empty or bad list (a value out of range or not a number, an empty element as in "1,,2", more
// than max values).
int bn_parse_int_list(const char *s, long lo, long hi, int *out, int max);
// bn_env_is: true when the environment variable name is set to exactly value (the BONSAI_CUDA_* switches).
bool bn_env_is(const char *name, const char *value);

#endif
