// base/lineout.h — an atomic line writer for .jsonl or .jsonl.gz (chosen by the ".gz" suffix):
// lines go to "<path>.tmp.<pid>", commit renames over path, abort removes the temp file.
#ifndef BONSAI_DETECT_GZOUT_H
#define BONSAI_DETECT_GZOUT_H
#include <stdbool.h>
#include <stddef.h>

typedef struct bn_lineout bn_lineout;

// bn_lineout_open: returns a writer, or NULL (err filled).
bn_lineout *bn_lineout_open(const char *path, char *err, size_t errlen);
// bn_lineout_write: appends one line (a '\n' is added); returns 0 or -1 (err filled).
int bn_lineout_write(bn_lineout *o, const char *line, size_t len, char *err, size_t errlen);
// bn_lineout_commit: closes, fsyncs and renames into place, frees o; returns 0 or -1.
int bn_lineout_commit(bn_lineout *o, char *err, size_t errlen);
// bn_lineout_abort: closes, removes the temp file, frees o.
void bn_lineout_abort(bn_lineout *o);
// bn_path_is_gz: returns true when path ends in ".gz".
bool bn_path_is_gz(const char *path);
#endif
