// mine/resume.c — repair + count for resumable mining (see resume.h).
#include "mine/resume.h"
#include "records/pairs.h"
#include "base/lineout.h"
#include "base/util.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int bn_mine_resume(const char *gen_log, const char *pairs, bn_resume_state *st, char *err, size_t errlen) {
    memset(st, 0, sizeof *st);
    size_t n = 0;
    char *buf = access(gen_log, F_OK) == 0 ? bn_read_file(gen_log, &n, err, errlen) : NULL;
    if (!buf && access(gen_log, F_OK) == 0) return -1;
    size_t keep = 0; // bytes of complete valid lines
    for (size_t pos = 0; buf && pos < n;) {
        char *nl = memchr(buf + pos, '\n', n - pos);
        if (!nl) break; // partial last line
        size_t len = (size_t)(nl - (buf + pos));
        bool looped = false;
        int idx = bn_record_prompt_index(buf + pos, len, &looped);
        if (idx < 0) break;
        if (idx + 1 > st->n_done) st->n_done = idx + 1;
        st->n_loops += looped;
        pos += len + 1;
        keep = pos;
    }
    if (buf && keep < n && truncate(gen_log, (off_t)keep) != 0) {
        free(buf);
        return bn_err(err, errlen, "cannot truncate %s: %s", gen_log, strerror(errno));
    }
    free(buf);
    if (access(pairs, F_OK) != 0) return 0;
    buf = bn_read_file(pairs, &n, err, errlen);
    if (!buf) return -1;
    bn_lineout *out = NULL;
    bool dropped = false;
    // first pass: does anything need dropping?
    for (int pass = 0; pass < 2; pass++) {
        st->n_pairs = 0;
        for (size_t pos = 0; pos < n;) {
            char *nl = memchr(buf + pos, '\n', n - pos);
            size_t len = nl ? (size_t)(nl - (buf + pos)) : n - pos;
            int idx = nl ? bn_record_prompt_index(buf + pos, len, NULL) : -1;
            if (idx >= 0 && idx < st->n_done) {
                st->n_pairs++;
                if (out && bn_lineout_write(out, buf + pos, len, err, errlen) < 0) {
                    bn_lineout_abort(out);
                    free(buf);
                    return -1;
                }
            } else if (len > 0) {
                dropped = true;
            }
            pos += len + 1;
        }
        if (pass == 0) {
            if (!dropped) break;
            if (!(out = bn_lineout_open(pairs, err, errlen))) { free(buf); return -1; }
        }
    }
    free(buf);
    if (out && bn_lineout_commit(out, err, errlen) < 0) return -1;
    return 0;
}
