// base/progress.h — progress of long work on stderr: a bar with an ETA redrawn in place on a terminal, a plain line
// every few seconds otherwise ("bonsai-mine-pairs: 40/88 prompts, 45 %, 1m12s elapsed, ETA 1m28s"), nothing with
// --no-progress (bn_progress_args) or BONSAI_PROGRESS=0. BONSAI_PROGRESS=1 draws the bar even off a terminal;
// BONSAI_PROGRESS_INTERVAL=S sets the seconds between plain lines (5).
#ifndef BONSAI_PROGRESS_H
#define BONSAI_PROGRESS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "base/args.h"

typedef enum { BN_PROGRESS_OFF, BN_PROGRESS_BAR, BN_PROGRESS_LINES } bn_progress_mode;

typedef struct {
    const char *label; // what is counted, plural ("prompts", "tensors"); "bytes" shows sizes (1.20 GiB)
    int64_t total, done;
    double t_start, t_last;
    bn_progress_mode mode;
    bool shown;          // something was printed (a plain run prints its last line only when it printed one before)
    int64_t done_shown;  // the count the last line printed showed
} bn_progress;
// bn_progress_start: starts counting total units of label (the mode: bn_progress_mode_now).
void bn_progress_start(bn_progress *p, const char *label, int64_t total);
// bn_progress_update: done units so far; redraws the bar (at most ~10x/s) or prints a line when one is due. extra is
// a short free-text suffix (e.g. "12.3 tok/s"; NULL: none).
void bn_progress_update(bn_progress *p, int64_t done, const char *extra);
// bn_progress_finish: the final bar (ends its line), or the final plain line when a line was printed before and not
// at this count, with the count of the last update (a run that stopped early shows where).
void bn_progress_finish(bn_progress *p, const char *extra);
// bn_progress_mode_now: off after bn_progress_off (--no-progress) or with BONSAI_PROGRESS=0; the bar with
// BONSAI_PROGRESS=1 or when stderr is a terminal; plain lines otherwise.
bn_progress_mode bn_progress_mode_now(void);
// bn_progress_off: no progress from now on (what --no-progress does).
void bn_progress_off(void);
// bn_format_duration: seconds as "45s", "1m12s" or "2h05m" into buf; returns buf.
const char *bn_format_duration(char *buf, size_t n, double seconds);
// bn_eta_text: "ETA 1m28s" for done of total units after elapsed seconds, assuming the same pace, into buf ("" when
// nothing is done yet or all is); returns buf.
const char *bn_eta_text(char *buf, size_t n, double elapsed, double done, double total);

// bn_progress_args: the shared --no-progress option (a table read with base NULL).
extern const bn_arg bn_progress_args[];

#endif
