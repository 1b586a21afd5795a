// core/chat.h — ChatML prompt rendering for Qwen models (MODEL.md §11.3).
#ifndef BONSAI_CHAT_H
#define BONSAI_CHAT_H
#include <stdbool.h>

typedef struct {
    const char *role;    // "system", "user", "assistant" or "tool"
    const char *content; // UTF-8 text (NULL = "")
} bn_chat_msg;

// bn_chat_render: the ChatML string for msgs as a malloc'd NUL-terminated string:
//   <|im_start|>{role}\n{content}<|im_end|>\n per message (role "tool" is wrapped as a user turn
//   holding <tool_response>\n{content}\n</tool_response>, consecutive tool messages share a turn),
//   then if add_generation_prompt: "<|im_start|>assistant\n" followed by
//   thinking == 0: "<think>\n\n</think>\n\n"; thinking == 1: "<think>\n"; thinking == -1: nothing.
// Returns NULL for an unknown role.
char *bn_chat_render(const bn_chat_msg *msgs, int n, bool add_generation_prompt, int thinking);

#endif
