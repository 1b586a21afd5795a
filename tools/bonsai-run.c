// tools/bonsai-run.c — generate text with our engine (CPU, or CUDA with -ngl N > 0; partial offload below the
// layer count):
//   bonsai-run -m MODEL.gguf -p PROMPT [-n 128] [--temp T] [--top-k K] [--top-p P] [--min-p M] [--seed S]
//              [-t THREADS] [--chat] [--think] [-c CTX] [--ignore-eos] [-ngl N]
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

// usage: prints the help to f; exits 0 for --help (stdout), 1 otherwise
static void usage(FILE *f) {
    fprintf(f, "usage: bonsai-run -m MODEL.gguf -p PROMPT [-n N] [--temp T] [--top-k K] [--top-p P] [--min-p M]\n"
                    "                  [--seed S] [-t THREADS] [--chat] [--think] [-c CTX] [--ignore-eos] [-ngl N]\n"
                    "                  [--repeat-penalty X] [--repeat-last-n N] [--frequency-penalty X] [--presence-penalty X]\n"
                    "  --repeat-penalty X (1 = off), --frequency-penalty X, --presence-penalty X (0 = off): llama.cpp's\n"
                    "          repetition penalties over the last --repeat-last-n tokens of prompt + output (64; -1 all)\n"
                    "  --dry-multiplier X (0 = off), --dry-base X (1.75), --dry-allowed-length N (2), --dry-penalty-last-n N\n"
                    "          (64; -1 all), --dry-sequence-breaker S (repeatable; replaces \\n : \" *; \"none\"): llama.cpp's DRY\n"
                    "  -ngl N: layers on the GPU (CUDA builds; llama.cpp's -ngl): 0 (default) all on the CPU, >= the\n"
                    "          model's layer count all on the GPU, in between the last N layers + the output head on the\n"
                    "          GPU and the embedding + first layers on the CPU (-t threads)\n");
    exit(f == stdout ? 0 : 1);
}

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

static const char *const T = "bonsai-run";

int main(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL;
    int n_gen = 128, n_threads = bn_n_threads_default(), n_ctx = 0, n_gpu_layers = 0;
    bool chat = false, think = false, ignore_eos = false;
    bn_sampler_params sp = bn_sampler_params_default();
    bn_sampler_args sa = {0};
    char err[512];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        int r = has ? bn_sampler_arg(a, argv[i + 1], &sp, &sa, err, sizeof err) : 0; // penalties and DRY
        if (r < 0) { fprintf(stderr, "%s: %s\n", T, err); return 1; }
        if (r > 0) { i++; continue; }
        if (!strcmp(a, "-m") && has) model_path = argv[++i];
        else if (!strcmp(a, "-p") && has) prompt = argv[++i];
        else if (!strcmp(a, "-n") && has) n_gen = (int)bn_arg_int(T, a, argv[++i], 0, INT32_MAX);
        else if (!strcmp(a, "--temp") && has) sp.temperature = (float)bn_arg_float(T, a, argv[++i], -1e6, 1e6);
        else if (!strcmp(a, "--top-k") && has) sp.top_k = (int)bn_arg_int(T, a, argv[++i], -1, INT32_MAX);
        else if (!strcmp(a, "--top-p") && has) sp.top_p = (float)bn_arg_float(T, a, argv[++i], 0, 1);
        else if (!strcmp(a, "--min-p") && has) sp.min_p = (float)bn_arg_float(T, a, argv[++i], 0, 1);
        else if (!strcmp(a, "--seed") && has) sp.seed = (uint64_t)bn_arg_int(T, a, argv[++i], 0, INT64_MAX);
        else if (!strcmp(a, "-t") && has) n_threads = (int)bn_arg_int(T, a, argv[++i], 1, 4096);
        else if (!strcmp(a, "-c") && has) n_ctx = (int)bn_arg_int(T, a, argv[++i], 0, INT32_MAX);
        else if ((!strcmp(a, "-ngl") || !strcmp(a, "--n-gpu-layers")) && has) n_gpu_layers = (int)bn_arg_int(T, a, argv[++i], 0, INT32_MAX);
        else if (!strcmp(a, "--chat")) chat = true;
        else if (!strcmp(a, "--think")) think = true;
        else if (!strcmp(a, "--ignore-eos")) ignore_eos = true;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) usage(stdout);
        else bn_arg_unknown(T, a);
    }
    if (!model_path || !prompt || n_gen < 0) usage(stderr);

    bn_model *m = bn_model_load(model_path, err, sizeof err);
    if (!m) { fprintf(stderr, "bonsai-run: %s\n", err); return 1; }
    bn_tokenizer *tok = bn_tokenizer_from_gguf(m->gguf, err, sizeof err);
    if (!tok) { fprintf(stderr, "bonsai-run: %s\n", err); return 1; }

    char *text = NULL;
    if (chat) {
        bn_chat_msg msg = {.role = "user", .content = prompt};
        text = bn_chat_render(&msg, 1, true, think ? 1 : 0);
    } else {
        text = xstrdup(prompt);
    }
    int32_t *ids = NULL;
    int n_prompt = bn_tokenize(tok, text, strlen(text), true, true, &ids);
    if (n_prompt <= 0) { fprintf(stderr, "bonsai-run: the prompt tokenizes to nothing\n"); return 1; }
    if (n_ctx <= 0) n_ctx = n_prompt + n_gen;
    if (n_prompt + n_gen > n_ctx) {
        fprintf(stderr, "bonsai-run: prompt (%d tokens) + %d to generate exceed the context %d\n", n_prompt, n_gen, n_ctx);
        return 1;
    }

    bn_engine *eng = bn_engine_open(m, n_gpu_layers, n_threads, err, sizeof err);
    if (!eng) { fprintf(stderr, "bonsai-run: %s\n", err); return 1; }
    bn_engine_state *st = bn_engine_state_new(eng, n_ctx, err, sizeof err);
    if (!st) { fprintf(stderr, "bonsai-run: %s\n", err); return 1; }
    bn_dry_breakers *dry = bn_sampler_args_breakers(&sp, &sa, tok);
    bn_sampler *smp = bn_sampler_new(&sp);
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
        if (!ignore_eos && bn_token_is_eog(tok, id)) break;
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
