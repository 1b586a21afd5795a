// tests/hostile.h — running a file with hostile contents through a loader in a child process, for the "refuse with
// a message, or run" tests (tests/core/test_model_hostile.c: GGUF models, drafters and adapters;
// tests/convert/test_convert_hostile.c: Hugging Face and PEFT directories). A child ends with exit code
// HOSTILE_REFUSED (the loader refused and said why) or HOSTILE_RAN (what loaded also ran); a crash, an abort, a
// hang (HOSTILE_SECONDS) or a refusal without a message fails the case. Under scripts/sanitize.sh the children run
// with ASan + UBSan. Include after tests/test.h.
#ifndef BONSAI_TESTS_HOSTILE_H
#define BONSAI_TESTS_HOSTILE_H
#include "core/engine.h"
#include "core/model.h"
#include "core/tokenizer.h"
#include "train/lora.h"
#include "train/merge.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { HOSTILE_RAN = 10, HOSTILE_REFUSED = 11, HOSTILE_NO_MESSAGE = 12, HOSTILE_SECONDS = 20 };

static int hostile_cases, hostile_refused, hostile_ran;

// hostile_refuse: ends a child that refused: with a message (err non-empty) or without one; never returns
static inline void hostile_refuse(const char *err) { _exit(err[0] ? HOSTILE_REFUSED : HOSTILE_NO_MESSAGE); }

// hostile_run_model: loads path as a model and uses it as a server would (tokenizes a prompt, runs a 3-token forward
// on the CPU engine, detokenizes every id the model can produce); never returns
static inline void hostile_run_model(const char *path) {
    char err[512] = "";
    bn_model *m = bn_model_load(path, err, sizeof err);
    if (!m) hostile_refuse(err);
    bn_tokenizer *tok = bn_tokenizer_from_gguf(m->gguf, err, sizeof err);
    if (!tok) hostile_refuse(err);
    int32_t *ids = NULL;
    const char *prompt = "hello world <|im_start|>";
    int n = bn_tokenize(tok, prompt, strlen(prompt), false, true, &ids);
    bn_engine *e = bn_engine_cpu_new(m, 1);
    bn_engine_state *s = e ? bn_engine_state_new(e, 32, err, sizeof err) : NULL;
    if (!s) hostile_refuse(e ? err : "no engine");
    int32_t toks[3] = {0, n > 1 ? ids[1] : 1, 2};
    for (int i = 0; i < 3; i++) toks[i] %= m->cfg.n_vocab > 0 ? m->cfg.n_vocab : 1;
    float *logits = malloc(sizeof(float) * (size_t)m->cfg.n_vocab);
    bn_forward_out out = {.logits = logits};
    if (bn_engine_forward(s, toks, 3, &out, err, sizeof err) != 0) hostile_refuse(err);
    // every id the model can produce, as a server prints it (ids past the tokenizer's vocabulary give "")
    int32_t *all = malloc(sizeof(int32_t) * (size_t)m->cfg.n_vocab);
    int n_eog = 0;
    for (int i = 0; i < m->cfg.n_vocab; i++) all[i] = i, n_eog += bn_token_is_eog(tok, i);
    size_t len = 0;
    free(bn_detokenize(tok, all, m->cfg.n_vocab, true, &len));
    char piece[256];
    bn_token_to_piece(tok, bn_token_eos(tok), piece, sizeof piece, true);
    _exit(HOSTILE_RAN);
}

// hostile_run_adapter: loads path as a LoRA adapter for the valid model at target and runs it there unmerged (the
// engine's --lora), then merges it into that model (the merged file at scratch, removed) and runs the merged model;
// never returns
static inline void hostile_run_adapter(const char *path, const char *target, const char *scratch) {
    char err[512] = "";
    bn_model *base = bn_model_load(target, err, sizeof err);
    bn_lora_set *set = base ? bn_lora_set_open(base, &path, NULL, 1, err, sizeof err) : NULL;
    if (!set) hostile_refuse(err);
    bn_engine *eu = bn_engine_open_lora(base, 0, 1, set, err, sizeof err);
    bn_engine_state *su = eu ? bn_engine_state_new(eu, 32, err, sizeof err) : NULL;
    if (!su) hostile_refuse(err);
    float *logits = malloc(sizeof(float) * 3 * (size_t)base->cfg.n_vocab);
    int32_t tu[3] = {0, 1, 2};
    if (bn_engine_forward(su, tu, 3, &(bn_forward_out){.logits = logits, .all_logits = true}, err, sizeof err) != 0)
        hostile_refuse(err);
    free(logits);
    bn_lora *l = bn_lora_load_gguf(path, err, sizeof err);
    if (!l) hostile_refuse(err);
    if (bn_lora_merge_gguf(target, l, 1.0f, BN_MERGE_F32, scratch, NULL, err, sizeof err) != 0) hostile_refuse(err);
    bn_model *m = bn_model_load(scratch, err, sizeof err);
    unlink(scratch);
    if (!m) hostile_refuse(err);
    bn_engine *e = bn_engine_cpu_new(m, 1);
    bn_engine_state *s = bn_engine_state_new(e, 32, err, sizeof err);
    if (!s) hostile_refuse(err);
    int32_t toks[3] = {0, 1, 2};
    if (bn_engine_forward(s, toks, 3, &(bn_forward_out){0}, err, sizeof err) != 0) hostile_refuse(err);
    _exit(HOSTILE_RAN);
}

// hostile_child: runs child(ctx) (which must end the process with hostile_refuse or _exit(HOSTILE_RAN)) in a child
// process with stderr silenced (unless HOSTILE_VERBOSE is set) and a time limit, and CHECKs how it ended; what
// names the case in a failure. Counts the case and its outcome.
static inline void hostile_child(const char *what, void (*child)(void *ctx), void *ctx) {
    hostile_cases++;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        if (!getenv("HOSTILE_VERBOSE") && !freopen("/dev/null", "w", stderr)) _exit(3);
        alarm(HOSTILE_SECONDS);
        child(ctx);
        _exit(4); // a child that returns
    }
    int st = 0;
    waitpid(pid, &st, 0);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (code == HOSTILE_REFUSED) hostile_refused++;
    else if (code == HOSTILE_RAN) hostile_ran++, getenv("HOSTILE_VERBOSE") && printf("ran: %s\n", what);
    CHECK(code == HOSTILE_REFUSED || code == HOSTILE_RAN, "%s: child %s %d", what,
          WIFSIGNALED(st) ? "killed by signal" : code == HOSTILE_NO_MESSAGE ? "refused without a message, exit" : "exit",
          WIFSIGNALED(st) ? WTERMSIG(st) : code);
}
#endif
