// records/tasks.h — held-out task files (docs/antidoom.md §17): JSONL, one object per line,
//   {"id": "code-0001", "family": "code", "prompt": "...", "reference": "...", "chat": false}
// prompt: raw text given to the model as is (a completion), or with "chat": true the user message put through the
// model's chat template; reference: the true continuation (at least one full line); id unique in the file; family a
// short word (letters, digits, '-', '_'; at most 32). Other keys are ignored. Blank lines are skipped.
#ifndef BONSAI_RECORDS_TASKS_H
#define BONSAI_RECORDS_TASKS_H
#include <stdbool.h>
#include <stddef.h>

#define BN_TASK_FAMILY_MAX 32

typedef struct {
    char *id, *family, *prompt, *reference;
    bool chat;
    int line; // 1-based line in the file
} bn_task;

// bn_task_parse_line: one line into t; returns 0, or -1 with err (what is wrong with the line: bad JSON, not valid
// UTF-8, a missing or empty field, a bad family name).
int bn_task_parse_line(const char *line, size_t len, bn_task *t, char *err, size_t errlen);
// bn_tasks_read: every task of path into a malloc'd *out; returns the count (>= 1), or -1 with err "path:N: ..." (the
// line's fault, a duplicate id naming the first line too) or "path: ..." (no tasks, cannot read).
int bn_tasks_read(const char *path, bn_task **out, char *err, size_t errlen);
// bn_task_free / bn_tasks_free: release one task / an array of n.
void bn_task_free(bn_task *t);
void bn_tasks_free(bn_task *t, int n);
#endif
