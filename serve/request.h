// serve/request.h — parsing of completion requests into bn_task_params (docs/server.md §3.1).
#ifndef BONSAI_SERVE_REQUEST_H
#define BONSAI_SERVE_REQUEST_H
#include <jansson.h>
#include "core/tokenizer.h"
#include "serve/slots.h"

// bn_task_params_free: frees a params struct's allocations (for params never submitted) and zeroes it.
void bn_task_params_free(bn_task_params *p);
// bn_parse_prompt: a prompt (string, array of ids, mixed array) → malloc'd token ids. Returns 0 or
// -1 with err (400): unknown element types, out-of-range ids, several prompts.
int bn_parse_prompt(const bn_tokenizer *tok, json_t *prompt, bool add_special, bool parse_special, int32_t **out,
                    int *n_out, char *err, size_t errlen);
// A body's JSON weight (bn_json_weight) above this is refused (413) before it is parsed: its tree would take more than
// about 128 MB (jansson spends ~230 bytes on an object, ~130 on an array, ~50-100 on a member or an element).
#define BN_SERVE_JSON_WEIGHT_MAX (1 << 21)
// bn_json_weight: an upper estimate of the values in JSON text s[0..n): 4 per '{', 2 per '[' and per ',' outside
// strings (valid or not; a scan, not a parse).
size_t bn_json_weight(const char *s, size_t n);

// n_probs above this is refused (400): the top-n list of every generated token is kept and written out
#define BN_SERVE_N_PROBS_MAX 1024

// bn_parse_task_params: body fields (n_predict/max_completion_tokens/max_tokens, temperature, top_k, top_p, min_p,
// seed, repeat_last_n, repeat_penalty, frequency_penalty, presence_penalty, dry_multiplier, dry_base,
// dry_allowed_length, dry_penalty_last_n, dry_sequence_breakers, logit_bias, stop, n_probs, post_sampling_probs,
// cache_prompt, ignore_eos, stream, id_slot) and the prompt → params; DRY uses dry_default (the server's, built once)
// unless the request names its own breakers. Other llama-server fields are ignored (generation_settings shows what
// was used). Returns 0 or -1 with err (400); on error nothing needs freeing.
int bn_parse_task_params(const bn_tokenizer *tok, const bn_dry_breakers *dry_default, json_t *body, json_t *prompt,
                         bn_task_params *p, char *err, size_t errlen);

// bn_parse_lora: llama-server's list of adapter scales [{"id": 0, "scale": 0.5}, ...] for a server of n adapters into
// scales[0..n) (an adapter not listed: 0; a missing scale: 0); 0, or -1 with err (400) naming the bad entry.
int bn_parse_lora(json_t *v, int n, float *scales, char *err, size_t errlen);

// The chat formats the server renders (docs/server.md §7): plain ChatML (no reasoning blocks), or core/chat.h's
// Qwen3.5 and Qwen3 templates (reasoning blocks, chat_template_kwargs.enable_thinking).
typedef enum { BN_CHAT_FORMAT_CHATML = 0, BN_CHAT_FORMAT_QWEN35, BN_CHAT_FORMAT_QWEN3 } bn_chat_format;
// bn_chat_format_name: "chatml", "qwen35" or "qwen3".
const char *bn_chat_format_name(bn_chat_format f);
// bn_chat_format_parse: the format named name, or -1.
int bn_chat_format_parse(const char *name);
// bn_chat_format_for_model: the model's own: with a tokenizer.chat_template tmpl that has no <think>, plain ChatML;
// else the thinking template of general.architecture arch (qwen35: Qwen3.5, others: Qwen3).
bn_chat_format bn_chat_format_for_model(const char *arch, const char *tmpl);
// bn_chat_prompt_json: the prompt (malloc'd) for the request's "messages" (string content or text parts;
// reasoning_content; chat_template_kwargs.enable_thinking) in format fmt; NULL with err (400) on bad input.
char *bn_chat_prompt_json(bn_chat_format fmt, json_t *body, char *err, size_t errlen);
// bn_generation_settings_json: the "generation_settings" / slot "params" object for p.
json_t *bn_generation_settings_json(const bn_task_params *p, int n_ctx);
#endif
