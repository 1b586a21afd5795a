// tests/serve/server_fixture.c — see server_fixture.h.
#include "tests/serve/server_fixture.h"
#include "synth/mkmodel.h"
#include "synth/mkdrafter.h"
#include "tests/serve/http_client.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int fixture_model(server_fixture *f, const char *preset) {
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/bonsai-serve-test-XXXXXX");
    if (!mkdtemp(f->dir)) return -1;
    snprintf(f->model, sizeof f->model, "%s/model.gguf", f->dir);
    bn_mkmodel_params p;
    bn_mkmodel_defaults(&p, preset);
    p.seed = 7;
    char err[256];
    if (bn_mkmodel_write(&p, f->model, err, sizeof err) != 0) {
        fprintf(stderr, "fixture: %s\n", err);
        return -1;
    }
    return 0;
}

bool fixture_serves(const server_fixture *f) {
    http_resp r;
    const char *b = "{\"prompt\":\"ok\",\"n_predict\":2,\"temperature\":0}";
    bool ok = http_request(f->port, "POST", "/completion", b, strlen(b), NULL, &r) == 0 && r.status == 200;
    http_resp_free(&r);
    return ok;
}

int fixture_drafter(server_fixture *f) {
    snprintf(f->drafter, sizeof f->drafter, "%s/drafter.gguf", f->dir);
    bn_mkdrafter_params dp;
    bn_mkdrafter_defaults(&dp);
    char err[256];
    if (bn_mkdrafter_write(&dp, f->drafter, err, sizeof err) != 0) {
        fprintf(stderr, "fixture: %s\n", err);
        return -1;
    }
    return 0;
}

int fixture_start(server_fixture *f, const char *const *extra) {
    char exe[512], ready[320];
    const char *build = getenv("BONSAI_BUILD_ROOT"), *exe_env = getenv("BONSAI_SERVE_EXE");
    snprintf(exe, sizeof exe, "%s/tools/bonsai-serve", build ? build : "build");
    if (exe_env && *exe_env) snprintf(exe, sizeof exe, "%s", exe_env);
    snprintf(ready, sizeof ready, "%s/ready.%d", f->dir, rand());
    const char *argv[64] = {exe, "-m", f->model, "--port", "0", "--ready-file", ready, "-t", "2"};
    int argc = 9;
    char env_args[256] = ""; // BONSAI_SERVE_ARGS: space-separated arguments for every server (e.g. -ngl 99)
    snprintf(env_args, sizeof env_args, "%s", getenv("BONSAI_SERVE_ARGS") ? getenv("BONSAI_SERVE_ARGS") : "");
    char *save = NULL;
    for (char *a = strtok_r(env_args, " ", &save); a && argc < 40; a = strtok_r(NULL, " ", &save)) argv[argc++] = a;
    for (int i = 0; extra && extra[i] && argc < 62; i++) argv[argc++] = extra[i];
    argv[argc] = NULL;
    f->pid = fork();
    if (f->pid == 0) {
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < 600; i++) { // 60 s
        FILE *fp = fopen(ready, "r");
        if (fp) {
            int ok = fscanf(fp, "%*[^:]:%d", &f->port) == 1;
            fclose(fp);
            unlink(ready);
            if (ok) return 0;
        }
        int st;
        if (waitpid(f->pid, &st, WNOHANG) == f->pid) {
            fprintf(stderr, "fixture: bonsai-serve exited early (status %d)\n", st);
            f->pid = 0;
            return -1;
        }
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kill(f->pid, SIGKILL);
    waitpid(f->pid, NULL, 0);
    f->pid = 0;
    return -1;
}

int fixture_stop(server_fixture *f) {
    if (f->pid <= 0) return -1;
    kill(f->pid, SIGTERM);
    for (int i = 0; i < 300; i++) { // 30 s
        int st;
        if (waitpid(f->pid, &st, WNOHANG) == f->pid) {
            f->pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        }
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kill(f->pid, SIGKILL);
    waitpid(f->pid, NULL, 0);
    f->pid = 0;
    return -1;
}

long fixture_status_kb(const server_fixture *f, const char *field) {
    char path[64], line[256], fmt[64];
    snprintf(path, sizeof path, "/proc/%d/status", (int)f->pid);
    snprintf(fmt, sizeof fmt, "%s: %%ld kB", field);
    FILE *fp = fopen(path, "r");
    if (!fp) return -1;
    long kb = -1;
    while (fgets(line, sizeof line, fp))
        if (sscanf(line, fmt, &kb) == 1) break;
    fclose(fp);
    return kb;
}

long fixture_rss_kb(const server_fixture *f) { return fixture_status_kb(f, "VmRSS"); }

int fixture_wait(server_fixture *f, int timeout_ms) {
    if (f->pid <= 0) return -1;
    for (int waited = 0;; waited += 10) {
        int st;
        if (waitpid(f->pid, &st, WNOHANG) == f->pid) {
            f->pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        if (waited >= timeout_ms) return -1;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}
