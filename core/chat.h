// core/chat.h — ChatML prompt rendering for Qwen models (docs/model.md §11.3), following the Qwen3.5
// chat template (llama.cpp models/templates/Qwen3.5-4B.jinja) without tools and vision.
#ifndef BONSAI_CHAT_H
#define BONSAI_CHAT_H
#include <stdbool.h>

typedef struct {
    const char *role;      // "system", "user", "assistant" or "tool"
    const char *content;   // UTF-8 text (NULL = "")
    const char *reasoning; // assistant only, optional reasoning_content (NULL: taken from <think>…</think>)
} bn_chat_msg;

// bn_chat_render: the prompt for msgs as a malloc'd NUL-terminated string, or NULL for a NULL/unknown
// role or a system message that is not first. Rules (Qwen3.5 template; contents are trimmed):
//   system (first only): <|im_start|>system\n{content}<|im_end|>\n
//   user:                <|im_start|>user\n{content}<|im_end|>\n
//   assistant:           reasoning = msg.reasoning, or the text between <think> and </think> in content
//                        (content keeps what follows </think>); after the last real user turn:
//                        <|im_start|>assistant\n<think>\n{reasoning}\n</think>\n\n{content}<|im_end|>\n,
//                        before it the reasoning is dropped: <|im_start|>assistant\n{content}<|im_end|>\n
//   tool:                consecutive tool messages share one user turn:
//                        <|im_start|>user(\n<tool_response>\n{content}\n</tool_response>)+<|im_end|>\n
//   add_generation_prompt: <|im_start|>assistant\n then
//                        thinking == 0: <think>\n\n</think>\n\n (thinking off, enable_thinking = false)
//                        thinking == 1: <think>\n (thinking on: the Qwen3.5 template's default)
//                        thinking == -1: nothing (plain ChatML; the model decides)
char *bn_chat_render(const bn_chat_msg *msgs, int n, bool add_generation_prompt, int thinking);
// bn_chat_thinking_for_template: the thinking setting a model's own template implies: 1 when tmpl (the GGUF's
// tokenizer.chat_template) has a thinking block ("<think>"), else -1 (plain ChatML: never given <think>; also when
// the model has no template).
int bn_chat_thinking_for_template(const char *tmpl);

// Template variants: Qwen3.5 (qwen35 GGUFs, the rules above) and Qwen3 (dense Bonsai 8B/4B/1.7B,
// llama.cpp models/templates/Qwen-Qwen3-0.6B.jinja). Qwen3 differs: contents are not trimmed; a
// system message after the first is an ordinary turn; an assistant turn after the last user query
// gets <think>\n{reasoning}\n</think>\n\n only if it is the last message or has reasoning; thinking == 1
// adds nothing to the generation prompt (the Qwen3 template's default, the model opens <think> itself).
typedef enum { BN_CHAT_QWEN35 = 0, BN_CHAT_QWEN3 = 1 } bn_chat_style;
// bn_chat_style_for_arch: BN_CHAT_QWEN35 for general.architecture "qwen35", else BN_CHAT_QWEN3.
bn_chat_style bn_chat_style_for_arch(const char *arch);
// bn_chat_render_style: bn_chat_render for the given template; same return convention.
char *bn_chat_render_style(bn_chat_style style, const bn_chat_msg *msgs, int n, bool add_generation_prompt,
                           int thinking);

#endif
