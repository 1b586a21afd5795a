// mine/resume.h — resuming an interrupted mining run. bonsai-mine-pairs appends one
// generation-log line per prompt (after that prompt's pair line) and flushes; both carry
// "prompt_index". After a crash the log may end in a partial line and the pairs file may hold a
// pair whose log line never made it. Resume keeps the complete, parseable log lines (truncating
// the file after the last one), takes the prompts they cover as done, and keeps only pairs whose
// prompt_index is below that count (the pairs file is rewritten atomically when needed).
#ifndef BONSAI_DETECT_RESUME_H
#define BONSAI_DETECT_RESUME_H
#include <stddef.h>

typedef struct {
    int n_done;   // prompts already processed (next prompt_index)
    int n_pairs;  // pair rows kept
    int n_loops;  // log rows with status loop_detected
} bn_resume_state;

// bn_mine_resume: repairs gen_log and pairs as described (missing files = fresh start); returns 0
// or -1 with err filled.
int bn_mine_resume(const char *gen_log, const char *pairs, bn_resume_state *st, char *err, size_t errlen);
#endif
