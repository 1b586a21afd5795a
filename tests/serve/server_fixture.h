// tests/serve/server_fixture.h — starts the real bonsai-serve on a free loopback port with a
// generated tiny model, for the integration tests.
#ifndef BONSAI_TEST_SERVER_FIXTURE_H
#define BONSAI_TEST_SERVER_FIXTURE_H
#include <stdbool.h>
#include <sys/types.h>

typedef struct {
    pid_t pid;
    int port;
    char dir[256];      // temp dir holding the model and the ready file
    char model[320];
    char drafter[320];  // fixture_drafter's file
} server_fixture;

// fixture_model: writes the tiny generated model into a fresh temp dir; returns 0 or -1.
int fixture_model(server_fixture *f, const char *preset);
// fixture_drafter: writes the default tiny DSpark drafter (bn_mkdrafter_defaults) next to the model and its path
// into f->drafter; returns 0 or -1 (message on stderr).
int fixture_drafter(server_fixture *f);
// fixture_start: execs build/tools/bonsai-serve (env BONSAI_SERVE_EXE: another binary, e.g. the CUDA
// emulator's bonsai-serve-emu) -m model --port 0, the arguments in env BONSAI_SERVE_ARGS (space-separated,
// e.g. "-ngl 99"), then extra args (NULL-terminated list), and waits (≤ 60 s) until it listens; returns 0 or -1.
int fixture_start(server_fixture *f, const char *const *extra_args);
// fixture_serves: true when a short greedy /completion gets a 200 (the server still answers).
bool fixture_serves(const server_fixture *f);
// fixture_stop: SIGTERM and wait; returns the exit status (or -1 if it had to be killed).
int fixture_stop(server_fixture *f);
// fixture_rss_kb: the server's resident set size in KiB (from /proc), or -1.
long fixture_rss_kb(const server_fixture *f);
// fixture_status_kb: a KiB field of the server's /proc/PID/status (e.g. "VmHWM", its peak RSS), or -1.
long fixture_status_kb(const server_fixture *f, const char *field);
// fixture_wait: waits up to timeout_ms for the server to exit; returns its exit status (128 + signal when a signal
// ended it), or -1 when it still runs.
int fixture_wait(server_fixture *f, int timeout_ms);

#endif
