// base/lineout.c — atomic plain/gzip line output.
#include "base/lineout.h"
#include "base/util.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

struct bn_lineout {
    bn_atomic_file af; // plain files
    gzFile gz;         // .gz files (written to tmp_path)
    char *path, *tmp_path;
};

bool bn_path_is_gz(const char *path) {
    size_t n = strlen(path);
    return n >= 3 && strcmp(path + n - 3, ".gz") == 0;
}

bn_lineout *bn_lineout_open(const char *path, char *err, size_t errlen) {
    bn_lineout *o = xcalloc(1, sizeof *o);
    if (!bn_path_is_gz(path)) {
        if (bn_atomic_open(&o->af, path, err, errlen) < 0) { free(o); return NULL; }
        return o;
    }
    o->path = xstrdup(path);
    o->tmp_path = bn_tmp_path_for(path);
    bn_tmp_track(o->tmp_path);
    o->gz = gzopen(o->tmp_path, "wb6");
    if (!o->gz) {
        bn_err(err, errlen, "cannot create %s: %s", o->tmp_path, strerror(errno));
        bn_tmp_untrack(o->tmp_path);
        free(o->path); free(o->tmp_path); free(o);
        return NULL;
    }
    return o;
}

int bn_lineout_write(bn_lineout *o, const char *line, size_t len, char *err, size_t errlen) {
    if (o->gz) {
        if ((len && gzwrite(o->gz, line, (unsigned)len) != (int)len) || gzputc(o->gz, '\n') < 0)
            return bn_err(err, errlen, "cannot write %s: %s", o->path, bn_gz_error(o->gz, NULL));
        return 0;
    }
    if (fwrite(line, 1, len, o->af.f) != len || fputc('\n', o->af.f) == EOF)
        return bn_err(err, errlen, "cannot write %s: %s", o->af.path, strerror(errno));
    return 0;
}

int bn_lineout_commit(bn_lineout *o, char *err, size_t errlen) {
    int rc = 0;
    if (!o->gz) {
        rc = bn_atomic_commit(&o->af, err, errlen);
        free(o);
        return rc;
    }
    errno = 0;
    int zrc = gzclose(o->gz); // flushes the compressor's last blocks: a full disk shows here
    if (zrc != Z_OK)
        rc = bn_err(err, errlen, "cannot write %s: %s", o->path,
                    zrc == Z_ERRNO && errno ? strerror(errno) : zrc == Z_BUF_ERROR ? "incomplete data" : "zlib error");
    if (rc == 0) {
        int fd = open(o->tmp_path, O_RDONLY);
        if (fd >= 0) { fsync(fd); close(fd); }
        if (rename(o->tmp_path, o->path) != 0)
            rc = bn_err(err, errlen, "cannot rename %s to %s: %s", o->tmp_path, o->path, strerror(errno));
    }
    if (rc != 0) unlink(o->tmp_path);
    bn_tmp_untrack(o->tmp_path);
    free(o->path); free(o->tmp_path); free(o);
    return rc;
}

void bn_lineout_abort(bn_lineout *o) {
    if (o->gz) {
        gzclose(o->gz);
        unlink(o->tmp_path);
        bn_tmp_untrack(o->tmp_path);
        free(o->path); free(o->tmp_path);
    } else {
        bn_atomic_abort(&o->af);
    }
    free(o);
}
