// tests/serve/fuzz_request.c — libFuzzer target for what bonsai-serve makes of a request body (serve/request.c): the
// body parsed as the server parses it (jansson, duplicate keys refused), then
//   - bn_parse_task_params on its "prompt" (/completion, /v1/completions), and
//   - bn_chat_prompt_json on its "messages" in the three chat formats (qwen35, qwen3, chatml), the rendered prompt
//     then parsed as /v1/chat/completions does.
// Checked beyond "no crash / no sanitizer report", for every accepted request: a non-empty prompt of in-vocabulary
// ids, at most BN_MAX_STOP non-empty stop strings, n_probs in 0..n_vocab, top_p / min_p in [0, 1], a finite
// temperature, finite repetition penalties (repeat_penalty > 0, repeat_last_n >= -1), and a "generation_settings" object that jansson can write (a value it cannot encode used to drop the
// field from the answer silently); a rendered chat prompt is valid UTF-8 (it becomes a JSON string).
//
// In the suite (any compiler) test serve_fuzz_replay runs it without libFuzzer: tests/fuzz_replay.c feeds it the seed
// corpus (tests/serve/corpus) and fixed-seed mutants of it.
// Build and run (clang with libFuzzer):
//   CC=clang meson setup build-fuzz -Dfuzz=true -Dcuda=disabled -Db_sanitize=address,undefined -Db_lundef=false -Dc_args=-fsanitize=fuzzer-no-link
//   ninja -C build-fuzz tests/serve/fuzz_request
//   mkdir -p /tmp/request-corpus && ./build-fuzz/tests/serve/fuzz_request -max_total_time=300 -max_len=4096 /tmp/request-corpus tests/serve/corpus
#include "serve/request.h"
#include "gguf/gguf.h"
#include "synth/mkmodel.h"
#include "core/tokenizer.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bn_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    char err[256], path[64];
    snprintf(path, sizeof path, "/tmp/fuzz-request-vocab-%d.gguf", (int)getpid());
    bn_mkmodel_params p;
    bn_mkmodel_defaults(&p, "tiny");
    if (bn_mkmodel_write(&p, path, err, sizeof err) != 0) fprintf(stderr, "fuzz_request: %s\n", err), abort();
    gguf_file *g = gguf_open(path, err, sizeof err);
    tok = g ? bn_tokenizer_from_gguf(g, err, sizeof err) : NULL;
    if (!tok) fprintf(stderr, "fuzz_request: %s\n", err), abort();
    gguf_close(g);
    unlink(path);
    return 0;
}

// must: aborts with what broke (the replay driver names the input)
static void must(bool ok, const char *what) {
    if (!ok) fprintf(stderr, "fuzz_request: %s\n", what), abort();
}

// task: the params of body with this prompt; when accepted, the invariants above
static void task(json_t *body, json_t *prompt) {
    char err[512];
    bn_task_params p;
    if (bn_parse_task_params(tok, NULL, body, prompt, &p, err, sizeof err) != 0) {
        must(err[0] != 0, "a refused request without a message");
        return;
    }
    int n_vocab = bn_tokenizer_n_vocab(tok);
    must(p.n_prompt > 0 && p.prompt, "an accepted request with an empty prompt");
    for (int i = 0; i < p.n_prompt; i++) must(p.prompt[i] >= 0 && p.prompt[i] < n_vocab, "a prompt id outside the vocabulary");
    must(p.n_stop >= 0 && p.n_stop <= BN_MAX_STOP, "too many stop strings");
    for (int i = 0; i < p.n_stop; i++) must(p.stop[i] && p.stop[i][0], "an empty stop string");
    must(p.n_probs >= 0 && p.n_probs <= n_vocab, "n_probs outside 0..n_vocab");
    must(p.sp.top_p >= 0 && p.sp.top_p <= 1 && p.sp.min_p >= 0 && p.sp.min_p <= 1, "top_p / min_p outside [0, 1]");
    must(isfinite(p.sp.temperature), "a temperature that is not finite");
    must(p.sp.repeat_penalty > 0 && isfinite(p.sp.repeat_penalty) && isfinite(p.sp.frequency_penalty) &&
             isfinite(p.sp.presence_penalty) && p.sp.repeat_last_n >= -1,
         "repetition penalties outside their ranges");
    must(isfinite(p.sp.dry_multiplier) && p.sp.dry_base >= 1 && isfinite(p.sp.dry_base) && p.sp.dry_allowed_length >= 0 &&
             p.sp.dry_penalty_last_n >= -1 && (p.dry_strs == NULL) == (p.n_dry_strs == 0),
         "DRY settings outside their ranges");
    must(p.n_predict >= -1 && p.id_slot >= -1, "n_predict / id_slot below -1");
    json_t *gs = bn_generation_settings_json(&p, 4096);
    must(gs != NULL, "no generation_settings for an accepted request");
    char *s = json_dumps(gs, JSON_COMPACT);
    must(s != NULL, "generation_settings that jansson cannot write");
    free(s);
    json_decref(gs);
    bn_task_params_free(&p);
}

// chat: the messages rendered in one template, then parsed as /v1/chat/completions does
static void chat(json_t *body, bn_chat_format fmt) {
    char err[512];
    char *prompt = bn_chat_prompt_json(fmt, body, err, sizeof err);
    if (!prompt) {
        must(err[0] != 0, "a refused chat request without a message");
        return;
    }
    json_t *pj = json_string(prompt);
    must(pj != NULL, "a rendered chat prompt that is not valid UTF-8");
    task(body, pj);
    json_decref(pj);
    free(prompt);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_error_t je;
    json_t *body = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je); // as serve/routes.c
    if (!body) return 0;
    if (json_is_object(body)) {
        task(body, json_object_get(body, "prompt"));
        chat(body, BN_CHAT_FORMAT_QWEN35);
        chat(body, BN_CHAT_FORMAT_QWEN3);
        chat(body, BN_CHAT_FORMAT_CHATML);
    } else {
        task(body, NULL); // refused: not an object
    }
    json_decref(body);
    return 0;
}
