// tests/tool_out.h — reading what a tool under test printed: the tests that run a program send its stdout and stderr
// to DIR/out.txt and look for lines in it.
#ifndef BONSAI_TESTS_TOOL_OUT_H
#define BONSAI_TESTS_TOOL_OUT_H
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/util.h"

// tool_out_text: dir/out.txt whole (the caller frees it), or NULL.
static inline char *tool_out_text(const char *dir) {
    char path[700], err[256];
    snprintf(path, sizeof path, "%s/out.txt", dir);
    size_t n;
    return bn_read_file(path, &n, err, sizeof err);
}

// tool_out_has: whether dir/out.txt holds s (the output is printed when it does not).
static inline bool tool_out_has(const char *dir, const char *s) {
    char *t = tool_out_text(dir);
    bool has = t && strstr(t, s);
    if (!has && t) fprintf(stderr, "--- output ---\n%s\n---\n", t);
    free(t);
    return has;
}

// tool_out_count: how many times s occurs in dir/out.txt.
static inline int tool_out_count(const char *dir, const char *s) {
    char *t = tool_out_text(dir);
    int count = 0;
    for (const char *p = t; p && (p = strstr(p, s)); p += strlen(s)) count++;
    free(t);
    return count;
}

#endif
