// base/progress.c — progress of long work on stderr (see progress.h).
#include "base/progress.h"
#include "base/util.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool g_off; // --no-progress

void bn_progress_off(void) { g_off = true; }

// off_fn: --no-progress.
static int off_fn(void *base, const char *opt, const char *val, char *err, size_t errlen) {
    bn_progress_off();
    return 0;
}

const bn_arg bn_progress_args[] = {
    BN_SECTION("progress"),
    BN_FN("--no-progress", off_fn, NULL,
          "no progress on stderr (otherwise a bar with an ETA on a terminal, a plain line every 5s when stderr is not "
          "one). The environment: BONSAI_PROGRESS=0 is --no-progress, BONSAI_PROGRESS=1 draws the bar even off a "
          "terminal, BONSAI_PROGRESS_INTERVAL=S prints the plain line every S seconds"),
    {0}};

bn_progress_mode bn_progress_mode_now(void) {
    const char *env = getenv("BONSAI_PROGRESS");
    if (g_off || (env && !strcmp(env, "0"))) return BN_PROGRESS_OFF;
    if ((env && !strcmp(env, "1")) || isatty(STDERR_FILENO)) return BN_PROGRESS_BAR;
    return BN_PROGRESS_LINES;
}

// line_interval_ms: milliseconds between plain lines (BONSAI_PROGRESS_INTERVAL seconds, default 5).
static double line_interval_ms(void) {
    const char *env = getenv("BONSAI_PROGRESS_INTERVAL");
    char *end;
    double s = env ? strtod(env, &end) : 5;
    return env && (end == env || *end || !(s >= 0)) ? 5000 : s * 1000;
}

const char *bn_format_duration(char *buf, size_t n, double seconds) {
    long long s = seconds > 0 ? (long long)(seconds + 0.5) : 0;
    if (s < 60) snprintf(buf, n, "%llds", s);
    else if (s < 3600) snprintf(buf, n, "%lldm%02llds", s / 60, s % 60);
    else snprintf(buf, n, "%lldh%02lldm", s / 3600, s / 60 % 60);
    return buf;
}

const char *bn_eta_text(char *buf, size_t n, double elapsed, double done, double total) {
    char d[32];
    buf[0] = 0;
    if (done > 0 && done < total && elapsed > 0)
        snprintf(buf, n, "ETA %s", bn_format_duration(d, sizeof d, elapsed / done * (total - done)));
    return buf;
}

void bn_progress_start(bn_progress *p, const char *label, int64_t total) {
    p->label = label;
    p->total = total;
    p->done = 0;
    p->t_start = p->t_last = bn_time_ms();
    p->mode = bn_progress_mode_now();
    p->shown = false;
}

// counts: "40/88 prompts" (or "1.20 GiB/3.40 GiB") into buf.
static void counts(const bn_progress *p, char *buf, size_t n) {
    if (!strcmp(p->label, "bytes")) {
        char a[32], b[32];
        snprintf(buf, n, "%s/%s", bn_format_bytes(a, sizeof a, (double)p->done),
                 bn_format_bytes(b, sizeof b, (double)p->total));
    } else {
        snprintf(buf, n, "%lld/%lld %s", (long long)p->done, (long long)p->total, p->label);
    }
}

// draw: the bar (redrawn in place; final ends the line) or one plain line.
static void draw(bn_progress *p, const char *extra, bool final) {
    double el = (bn_time_ms() - p->t_start) / 1e3;
    double frac = p->total > 0 ? (double)p->done / (double)p->total : 0;
    if (frac > 1) frac = 1;
    char cnt[96], eta[48], took[32];
    counts(p, cnt, sizeof cnt);
    bn_eta_text(eta, sizeof eta, el, (double)p->done, (double)p->total);
    bn_format_duration(took, sizeof took, el);
    const char *tool = program_invocation_short_name;
    if (p->mode == BN_PROGRESS_BAR) {
        char bar[32];
        int w = 24, fill = (int)(frac * w);
        for (int i = 0; i < w; i++) bar[i] = i < fill ? '#' : '.';
        bar[w] = 0;
        fprintf(stderr, "\r%s [%s] %3.0f%% %s %s%s%s%s%s", tool, bar, frac * 100, cnt, took,
                eta[0] && !final ? " " : "", final ? "" : eta, extra && *extra ? " " : "", extra ? extra : "");
        fputs(final ? "\033[K\n" : "\033[K", stderr);
    } else {
        fprintf(stderr, "%s: %s, %.0f %%, %s elapsed%s%s%s%s\n", tool, cnt, frac * 100, took,
                eta[0] && !final ? ", " : "", final ? "" : eta, extra && *extra ? ", " : "", extra ? extra : "");
    }
    fflush(stderr);
    p->shown = true;
    p->done_shown = p->done;
}

void bn_progress_update(bn_progress *p, int64_t done, const char *extra) {
    p->done = done;
    if (p->mode == BN_PROGRESS_OFF) return;
    double now = bn_time_ms();
    double every = p->mode == BN_PROGRESS_BAR ? 100 : line_interval_ms();
    if (now - p->t_last < every && (p->mode == BN_PROGRESS_LINES || done < p->total)) return;
    p->t_last = now;
    draw(p, extra, false);
}

void bn_progress_finish(bn_progress *p, const char *extra) {
    if (p->mode == BN_PROGRESS_BAR || (p->mode == BN_PROGRESS_LINES && p->shown && p->done_shown != p->done))
        draw(p, extra, true);
}
