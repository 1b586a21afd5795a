// tools/bonsai-run.c — generate text with our engine (CPU, or CUDA with -ngl N > 0; partial offload below the
// layer count):
//   bonsai-run -m MODEL.gguf (-p PROMPT | -f FILE) [-n 128] [--temp T] [--top-k K] [--top-p P] [--min-p M] [-s S]
//              [-t THREADS] [--chat] [--think] [-c CTX] [--ignore-eos] [-ngl N] [penalties, DRY]
// Streams the generated text to stdout as it decodes (pieces cut to whole UTF-8 characters) and
// prints prompt and decode speed to stderr at the end. --chat wraps the prompt in ChatML (thinking
// off unless --think).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/chat.h"
#include "core/engine.h"
#include "core/model.h"
#include "core/sampler.h"
#include "core/tokenizer.h"
#include "base/unicode.h"
#include "base/util.h"
#include "base/args.h"

// Bytes of generated pieces not yet printed because they end inside a UTF-8 character.
typedef struct {
    char buf[64];
    size_t len;
} utf8_stream;

// stream_put: appends a piece and prints the longest complete UTF-8 prefix (flushes garbage if the
// pending tail grows beyond one character).
static void stream_put(utf8_stream *st, const char *piece, int n) {
    for (int i = 0; i < n; i++) {
        if (st->len == sizeof st->buf) { fwrite(st->buf, 1, st->len, stdout); st->len = 0; }
        st->buf[st->len++] = piece[i];
    }
    size_t ok = bn_utf8_valid_prefix(st->buf, st->len);
    if (ok == 0 && st->len >= 4) ok = st->len; // not valid UTF-8 at all: print the bytes as they are
    fwrite(st->buf, 1, ok, stdout);
    memmove(st->buf, st->buf + ok, st->len - ok);
    st->len -= ok;
    fflush(stdout);
}

typedef struct {
    bn_engine_opts eng;
    const char *prompt, *file;
    int n_gen;
    bool chat, think, ignore_eos;
    bn_sampler_params sp;
    bn_sampler_args sa;
} run_opts;

#define O(f) offsetof(run_opts, f)
static const bn_arg run_args[] = {
    BN_STR("-p, --prompt", O(prompt), "TEXT", "the prompt (or -f)"),
    BN_STR("-f, --file", O(file), "FILE", "read the prompt from FILE (one trailing newline dropped)"),
    BN_INT("-n, --n-predict", O(n_gen), "N", "tokens to generate", 0, INT32_MAX),
    BN_SEED("-s, --seed", O(sp.seed), "RNG seed"),
    BN_TRUE("--chat", O(chat), "wrap the prompt in ChatML (thinking off unless --think)"),
    BN_TRUE("--think", O(think), "with --chat: leave the <think> block open"),
    BN_TRUE("--ignore-eos", O(ignore_eos), "keep generating after an end-of-generation token"),
    {0}};
#undef O

static const bn_args_tool tool = {
    .name = "bonsai-run",
    .usage = "usage: bonsai-run -m MODEL.gguf (-p PROMPT | -f FILE) [options]\n"
             "Generates text on the engine -ngl picks, streaming it to stdout; prompt and decode speed go to stderr.\n",
    .notes = "-c 0 (the default) sizes the context to the prompt + -n tokens.\n"};

// parse_args: the options into o (exits on --help, --version or a bad option); the prompt text into *prompt.
static void parse_args(run_opts *o, int argc, char **argv, char **prompt) {
    *o = (run_opts){.n_gen = 128, .sp = bn_sampler_params_default()};
    const bn_arg_table tables[] = {BN_TABLE(run_args, o),
                                   BN_TABLE(bn_engine_args, &o->eng),
                                   BN_TABLE(bn_sampler_chain_args, &o->sp),
                                   BN_TABLE(bn_sampler_penalty_args, &o->sp),
                                   BN_TABLE(bn_sampler_breaker_args, &o->sa),
                                   {0}};
    bn_args_parse(&tool, tables, argc, argv);
    if (!o->eng.model) bn_args_fail(&tool, "-m MODEL.gguf is required");
    if (!o->prompt == !o->file) bn_args_fail(&tool, "give the prompt with -p TEXT or -f FILE (one of them)");
    if (o->prompt) {
        *prompt = xstrdup(o->prompt);
        return;
    }
    char err[512];
    size_t n;
    if (!(*prompt = bn_read_file(o->file, &n, err, sizeof err))) {
        fprintf(stderr, "bonsai-run: %s\n", err);
        exit(1);
    }
    if (n > 0 && (*prompt)[n - 1] == '\n') (*prompt)[n - 1] = 0; // llama.cpp's -f does the same
}

int main(int argc, char **argv) {
    run_opts o;
    char *prompt, err[512];
    parse_args(&o, argc, argv, &prompt);
    const int n_gen = o.n_gen;
    int n_ctx = o.eng.n_ctx;

    bn_model *m = bn_model_load(o.eng.model, err, sizeof err);
    if (!m) { fprintf(stderr, "bonsai-run: %s\n", err); return 1; }
    bn_tokenizer *tok = bn_tokenizer_from_gguf(m->gguf, err, sizeof err);
    if (!tok) { fprintf(stderr, "bonsai-run: %s\n", err); return 1; }

    char *text = NULL;
    if (o.chat) {
        bn_chat_msg msg = {.role = "user", .content = prompt};
        text = bn_chat_render(&msg, 1, true, o.think ? 1 : 0);
    } else {
        text = xstrdup(prompt);
    }
    free(prompt);
    int32_t *ids = NULL;
    int n_prompt = bn_tokenize(tok, text, strlen(text), true, true, &ids);
    if (n_prompt <= 0) { fprintf(stderr, "bonsai-run: the prompt tokenizes to nothing\n"); return 1; }
    if (n_ctx <= 0) n_ctx = n_prompt + n_gen;
    if (n_prompt + n_gen > n_ctx) {
        fprintf(stderr, "bonsai-run: prompt (%d tokens) + %d to generate exceed the context %d\n", n_prompt, n_gen, n_ctx);
        return 1;
    }

    bn_engine *eng = bn_engine_open_opts(m, &o.eng, err, sizeof err);
    if (!eng) { fprintf(stderr, "bonsai-run: %s\n", err); return 1; }
    bn_engine_state *st = bn_engine_state_new(eng, n_ctx, err, sizeof err);
    if (!st) { fprintf(stderr, "bonsai-run: %s\n", err); return 1; }
    bn_dry_breakers *dry = bn_sampler_args_breakers(&o.sp, &o.sa, tok);
    bn_sampler *smp = bn_sampler_new(&o.sp);
    ids = xrealloc(ids, sizeof(int32_t) * (size_t)(n_prompt + n_gen + 1)); // prompt, then the output: the history
    int n_vocab = m->cfg.n_vocab;
    float *logits = xmalloc(sizeof(float) * (size_t)n_vocab);
    bn_forward_out out = {.logits = logits};

    double t0 = bn_time_ms();
    if (bn_engine_forward(st, ids, n_prompt, &out, err, sizeof err) != 0) {
        fprintf(stderr, "bonsai-run: %s\n", err);
        return 1;
    }
    double t_prompt = bn_time_ms() - t0;

    utf8_stream stream = {.len = 0};
    char piece[256];
    int n_done = 0;
    double t1 = bn_time_ms();
    for (; n_done < n_gen; n_done++) {
        bn_sampler_set_history(smp, ids, n_prompt + n_done);
        int32_t id = bn_sampler_sample(smp, logits, n_vocab);
        ids[n_prompt + n_done] = id;
        if (!o.ignore_eos && bn_token_is_eog(tok, id)) break;
        int len = bn_token_to_piece(tok, id, piece, sizeof piece, false);
        if (len > 0) stream_put(&stream, piece, len);
        if (n_done + 1 < n_gen && bn_engine_forward(st, &id, 1, &out, err, sizeof err) != 0) {
            fprintf(stderr, "\nbonsai-run: %s\n", err);
            return 1;
        }
    }
    double t_decode = bn_time_ms() - t1;
    fwrite(stream.buf, 1, stream.len, stdout);
    printf("\n");
    fflush(stdout);
    fprintf(stderr, "bonsai-run: %s: prompt %d tokens in %.1f ms (%.2f tok/s), decode %d tokens in %.1f ms (%.2f tok/s)\n",
            bn_engine_name(eng), n_prompt, t_prompt, n_prompt * 1000.0 / (t_prompt > 0 ? t_prompt : 1e-9), n_done, t_decode,
            n_done * 1000.0 / (t_decode > 0 ? t_decode : 1e-9));

    bn_dry_breakers_free(dry);
    free(logits);
    free(ids);
    free(text);
    bn_sampler_free(smp);
    bn_engine_state_free(st);
    bn_engine_free(eng);
    bn_tokenizer_free(tok);
    bn_model_free(m);
    return 0;
}
