// tests/test.h — a tiny check harness shared by every test program.
// CHECK(cond, fmt, ...) records a failure with file:line and keeps going; test_done() prints
// "<name>: N checks, M failed" and returns the process exit code (0, 1, or 77 = skipped).
#ifndef BONSAI_TEST_H
#define BONSAI_TEST_H
#include <stdio.h>
#include <stdlib.h>
#include <math.h>

static int test_checks, test_failures;

// test_line_buffered: stdout line by line, so that a test killed by its timeout shows how far it got in meson's log.
__attribute__((constructor)) static void test_line_buffered(void) { setvbuf(stdout, NULL, _IOLBF, 0); }

#define CHECK(cond, ...) do { test_checks++; if (!(cond)) { test_failures++; \
    fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); fprintf(stderr, __VA_ARGS__); \
    fputc('\n', stderr); } } while (0)

// CHECK_NEAR: |a - b| <= tol, printing both values on failure.
#define CHECK_NEAR(a, b, tol, what) do { double _a = (a), _b = (b); test_checks++; \
    if (!(fabs(_a - _b) <= (tol))) { test_failures++; fprintf(stderr, "FAIL %s:%d: %s: %.9g vs %.9g (tol %g)\n", \
    __FILE__, __LINE__, (what), _a, _b, (double)(tol)); } } while (0)

// test_skip: prints why and returns the meson "skipped" exit code.
static inline int test_skip(const char *why) { printf("SKIP: %s\n", why); return 77; }

// test_done: prints the summary line and returns the exit code for main; a test that checked nothing fails.
static inline int test_done(const char *name) {
    printf("%s: %d checks, %d failed%s\n", name, test_checks, test_failures, test_checks ? "" : " (no checks ran)");
    return test_failures || !test_checks ? 1 : 0;
}

// test_third_party: path under third_party/ (BONSAI_THIRD_PARTY), written into buf; returns buf.
static inline const char *test_third_party(char *buf, size_t n, const char *rel) {
    const char *tp = getenv("BONSAI_THIRD_PARTY");
    snprintf(buf, n, "%s/%s", tp ? tp : "third_party", rel);
    return buf;
}
#endif
