// tests/core/test_chat.c — ChatML rendering (core/chat.h) against hand-written expected
// strings derived from the Qwen3.5 chat template (docs/model.md §11.3); each expected string was
// cross-checked against a jinja2 rendering of llama.cpp models/templates/Qwen3.5-4B.jinja (and
// Qwen-Qwen3-0.6B.jinja for the BN_CHAT_QWEN3 cases).
#include "core/chat.h"
#include "tests/test.h"
#include <string.h>

static void expect(const bn_chat_msg *m, int n, bool gen, int thinking, const char *want, const char *what) {
    char *got = bn_chat_render(m, n, gen, thinking);
    CHECK(got && strcmp(got, want) == 0, "%s:\n--- got ---\n%s\n--- want ---\n%s", what, got ? got : "(null)", want);
    free(got);
}

static void expect_style(bn_chat_style st, const bn_chat_msg *m, int n, bool gen, int thinking, const char *want,
                         const char *what) {
    char *got = bn_chat_render_style(st, m, n, gen, thinking);
    CHECK(got && strcmp(got, want) == 0, "%s:\n--- got ---\n%s\n--- want ---\n%s", what, got ? got : "(null)", want);
    free(got);
}

int main(void) {
    bn_chat_msg su[] = {{"system", "You are helpful.", NULL}, {"user", "Hi there", NULL}};
    expect(su, 2, true, 0,
           "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
           "<|im_start|>assistant\n<think>\n\n</think>\n\n",
           "system + user, thinking off");
    expect(su, 2, true, 1,
           "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
           "<|im_start|>assistant\n<think>\n",
           "thinking on");
    expect(su, 2, true, -1,
           "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
           "<|im_start|>assistant\n",
           "plain generation prompt");
    expect(su + 1, 1, false, 0, "<|im_start|>user\nHi there<|im_end|>\n", "no generation prompt");

    // contents are trimmed
    bn_chat_msg ws[] = {{"user", "  \n hello \n\n", NULL}};
    expect(ws, 1, false, -1, "<|im_start|>user\nhello<|im_end|>\n", "trimmed user content");

    // multi-turn: the reasoning of an earlier assistant turn is dropped, the last kept
    bn_chat_msg mt[] = {
        {"user", "2+2?", NULL},
        {"assistant", "<think>\nadd them\n</think>\n\n4", NULL},
        {"user", "and 3+3?", NULL},
        {"assistant", "<think>\nagain\n</think>\n\n6", NULL},
    };
    expect(mt, 4, false, 0,
           "<|im_start|>user\n2+2?<|im_end|>\n"
           "<|im_start|>assistant\n4<|im_end|>\n"
           "<|im_start|>user\nand 3+3?<|im_end|>\n"
           "<|im_start|>assistant\n<think>\nagain\n</think>\n\n6<|im_end|>\n",
           "multi-turn reasoning");
    // explicit reasoning field, empty reasoning after the last query
    bn_chat_msg rf[] = {{"user", "q", NULL}, {"assistant", "answer", "  why  "}};
    expect(rf, 2, false, 0,
           "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nwhy\n</think>\n\nanswer<|im_end|>\n",
           "reasoning field");
    bn_chat_msg nr[] = {{"user", "q", NULL}, {"assistant", "plain", NULL}};
    expect(nr, 2, true, 0,
           "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nplain<|im_end|>\n"
           "<|im_start|>assistant\n<think>\n\n</think>\n\n",
           "assistant without reasoning after the query");

    // tool responses: consecutive tool messages share one user turn; they do not count as the query
    bn_chat_msg tl[] = {
        {"user", "weather?", NULL},
        {"assistant", "<tool_call>\nx\n</tool_call>", NULL},
        {"tool", "sunny", NULL},
        {"tool", "20C", NULL},
        {"assistant", "It is sunny.", NULL},
    };
    expect(tl, 5, false, 0,
           "<|im_start|>user\nweather?<|im_end|>\n"
           "<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\nx\n</tool_call><|im_end|>\n"
           "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\n20C\n</tool_response><|im_end|>\n"
           "<|im_start|>assistant\n<think>\n\n</think>\n\nIt is sunny.<|im_end|>\n",
           "tool turns");

    // the Qwen3 (dense) template: no trimming, late system turns allowed, think block only on the
    // last assistant turn or one with reasoning; thinking on adds nothing to the generation prompt
    bn_chat_msg q3a[] = {{"system", " You are helpful. ", NULL}, {"user", " Hi there\n", NULL}};
    expect_style(BN_CHAT_QWEN3, q3a, 2, true, 0,
                 "<|im_start|>system\n You are helpful. <|im_end|>\n<|im_start|>user\n Hi there\n<|im_end|>\n"
                 "<|im_start|>assistant\n<think>\n\n</think>\n\n",
                 "qwen3: untrimmed, thinking off");
    bn_chat_msg q3b[] = {{"system", "S", NULL}, {"user", "Hi", NULL}};
    expect_style(BN_CHAT_QWEN3, q3b, 2, true, 1,
                 "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
                 "qwen3: thinking on = template default");
    expect_style(BN_CHAT_QWEN3, mt, 4, false, 0,
                 "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
                 "<|im_start|>user\nand 3+3?<|im_end|>\n<|im_start|>assistant\n<think>\nagain\n</think>\n\n6<|im_end|>\n",
                 "qwen3: multi-turn reasoning");
    bn_chat_msg q3c[] = {{"user", "q", NULL}, {"assistant", "mid", NULL},
                         {"user", "<tool_response>\nx\n</tool_response>", NULL}, {"assistant", "plain", NULL},
                         {"assistant", "\nend", NULL}};
    expect_style(BN_CHAT_QWEN3, q3c, 5, false, 0,
                 "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\nmid<|im_end|>\n"
                 "<|im_start|>user\n<tool_response>\nx\n</tool_response><|im_end|>\n<|im_start|>assistant\nplain<|im_end|>\n"
                 "<|im_start|>assistant\n<think>\n\n</think>\n\nend<|im_end|>\n",
                 "qwen3: think block only on the last assistant turn");
    bn_chat_msg q3d[] = {{"user", "a", NULL}, {"system", "late", NULL}, {"tool", " t ", NULL}};
    expect_style(BN_CHAT_QWEN3, q3d, 3, true, 0,
                 "<|im_start|>user\na<|im_end|>\n<|im_start|>system\nlate<|im_end|>\n"
                 "<|im_start|>user\n<tool_response>\n t \n</tool_response><|im_end|>\n"
                 "<|im_start|>assistant\n<think>\n\n</think>\n\n",
                 "qwen3: late system turn, untrimmed tool");
    expect_style(BN_CHAT_QWEN35, mt, 4, false, 0,
                 "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
                 "<|im_start|>user\nand 3+3?<|im_end|>\n<|im_start|>assistant\n<think>\nagain\n</think>\n\n6<|im_end|>\n",
                 "explicit qwen35 style");
    CHECK(bn_chat_style_for_arch("qwen35") == BN_CHAT_QWEN35 && bn_chat_style_for_arch("qwen3") == BN_CHAT_QWEN3,
          "style for arch");

    bn_chat_msg bad[] = {{"user", "x", NULL}, {"system", "late", NULL}};
    char *r = bn_chat_render(bad, 2, false, 0);
    CHECK(r == NULL, "system not first -> NULL");
    free(r);
    bn_chat_msg unk[] = {{"robot", "x", NULL}};
    r = bn_chat_render(unk, 1, false, 0);
    CHECK(r == NULL, "unknown role -> NULL");
    free(r);
    bn_chat_msg norole[] = {{NULL, "x", NULL}};
    r = bn_chat_render(norole, 1, false, 0);
    CHECK(r == NULL, "NULL role -> NULL");
    free(r);
    r = bn_chat_render(NULL, 0, true, 0);
    CHECK(r && strcmp(r, "<|im_start|>assistant\n<think>\n\n</think>\n\n") == 0, "no messages");
    free(r);
    // the thinking a model's own template implies: a thinking block -> <think> open; none, or no template -> plain
    CHECK(bn_chat_thinking_for_template("{%- if enable_thinking %}<think>\n{%- endif %}") == 1, "template with <think>");
    CHECK(bn_chat_thinking_for_template("{{- '<|im_start|>' + message.role }}") == -1, "plain ChatML template");
    CHECK(bn_chat_thinking_for_template(NULL) == -1, "no template: plain ChatML");
    return test_done("test_chat");
}
