// core/chat.c — ChatML rendering per the Qwen3.5 and Qwen3 chat templates (rules in core/chat.h).
#include "core/chat.h"
#include "base/util.h"
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *s;
    size_t n, cap;
} sbuf;

static void put_n(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->s = xrealloc(b->s, b->cap);
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void put(sbuf *b, const char *s) { put_n(b, s, strlen(s)); }

// Python str.strip() whitespace (ASCII subset, as Jinja's trim on these prompts)
static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// span of s[0..n) without leading/trailing characters matching the predicate
static void trim_span(const char **s, size_t *n, bool newline_only) {
    while (*n && (newline_only ? (*s)[0] == '\n' : is_ws((*s)[0]))) { (*s)++; (*n)--; }
    while (*n && (newline_only ? (*s)[*n - 1] == '\n' : is_ws((*s)[*n - 1]))) (*n)--;
}

// put_content: content (NULL = ""), trimmed for the Qwen3.5 template.
static void put_content(sbuf *b, const char *s, bool trim) {
    size_t n = s ? strlen(s) : 0;
    const char *p = s ? s : "";
    if (trim) trim_span(&p, &n, false);
    put_n(b, p, n);
}

// last occurrence of needle in s[0..n), or NULL
static const char *find_last(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    const char *last = NULL;
    for (const char *p = s; n >= k && (p = memmem(p, n - (size_t)(p - s), needle, k)); p++) last = p;
    return last;
}

static bool is_tool_response(const char *content, bool trim) {
    size_t n = content ? strlen(content) : 0;
    const char *p = content ? content : "";
    if (trim) trim_span(&p, &n, false);
    const char *a = "<tool_response>", *z = "</tool_response>";
    return n >= strlen(a) && memcmp(p, a, strlen(a)) == 0 && n >= strlen(z) && memcmp(p + n - strlen(z), z, strlen(z)) == 0;
}

// render_assistant: one assistant turn (reasoning split as the templates do).
static void render_assistant(sbuf *b, const bn_chat_msg *m, bn_chat_style style, bool after_last_query, bool last) {
    bool qwen35 = style == BN_CHAT_QWEN35;
    const char *c = m->content ? m->content : "";
    size_t cn = strlen(c);
    if (qwen35) trim_span(&c, &cn, false);
    const char *r = "";
    size_t rn = 0;
    if (m->reasoning) {
        r = m->reasoning;
        rn = strlen(r);
    } else {
        const char *end = memmem(c, cn, "</think>", 8);
        if (end) {
            // reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
            size_t head = (size_t)(end - c);
            while (head && c[head - 1] == '\n') head--;
            const char *open = find_last(c, head, "<think>");
            r = open ? open + 7 : c;
            rn = (size_t)(c + head - r);
            while (rn && r[0] == '\n') { r++; rn--; }
            // content = content.split('</think>')[-1].lstrip('\n')
            const char *last_end = find_last(c, cn, "</think>") + 8;
            cn = (size_t)(c + cn - last_end);
            c = last_end;
            while (cn && c[0] == '\n') { c++; cn--; }
        }
    }
    trim_span(&r, &rn, !qwen35); // Qwen3.5: |trim; Qwen3: .strip('\n')
    put(b, "<|im_start|>assistant\n");
    bool think_block = after_last_query && (qwen35 || last || rn > 0);
    if (think_block) {
        if (!qwen35) while (cn && c[0] == '\n') { c++; cn--; } // content.lstrip('\n')
        put(b, "<think>\n");
        put_n(b, r, rn);
        put(b, "\n</think>\n\n");
    }
    put_n(b, c, cn);
    put(b, "<|im_end|>\n");
}

bn_chat_style bn_chat_style_for_arch(const char *arch) {
    return arch && strcmp(arch, "qwen35") == 0 ? BN_CHAT_QWEN35 : BN_CHAT_QWEN3;
}

int bn_chat_thinking_for_template(const char *tmpl) { return tmpl && strstr(tmpl, "<think>") ? 1 : -1; }

char *bn_chat_render(const bn_chat_msg *msgs, int n, bool add_generation_prompt, int thinking) {
    return bn_chat_render_style(BN_CHAT_QWEN35, msgs, n, add_generation_prompt, thinking);
}

char *bn_chat_render_style(bn_chat_style style, const bn_chat_msg *msgs, int n, bool add_generation_prompt,
                           int thinking) {
    bool qwen35 = style == BN_CHAT_QWEN35;
    // the last user message that is a real query (not a wrapped tool response)
    int last_query = n - 1;
    for (int i = 0; i < n; i++)
        if (!msgs[i].role) return NULL;
    for (int i = n - 1; i >= 0; i--) {
        if (strcmp(msgs[i].role, "user") == 0 && !is_tool_response(msgs[i].content, qwen35)) { last_query = i; break; }
    }
    sbuf b = {0};
    put(&b, "");
    for (int i = 0; i < n; i++) {
        const bn_chat_msg *m = &msgs[i];
        if (strcmp(m->role, "system") == 0 || strcmp(m->role, "user") == 0) {
            if (qwen35 && m->role[0] == 's' && i != 0) { free(b.s); return NULL; }
            put(&b, "<|im_start|>");
            put(&b, m->role);
            put(&b, "\n");
            put_content(&b, m->content, qwen35);
            put(&b, "<|im_end|>\n");
        } else if (strcmp(m->role, "assistant") == 0) {
            render_assistant(&b, m, style, i > last_query, i == n - 1);
        } else if (strcmp(m->role, "tool") == 0) {
            if (i == 0 || strcmp(msgs[i - 1].role, "tool") != 0) put(&b, "<|im_start|>user");
            put(&b, "\n<tool_response>\n");
            put_content(&b, m->content, qwen35);
            put(&b, "\n</tool_response>");
            if (i == n - 1 || strcmp(msgs[i + 1].role, "tool") != 0) put(&b, "<|im_end|>\n");
        } else {
            free(b.s);
            return NULL;
        }
    }
    if (add_generation_prompt) {
        put(&b, "<|im_start|>assistant\n");
        if (thinking == 0) put(&b, "<think>\n\n</think>\n\n");
        else if (thinking == 1 && qwen35) put(&b, "<think>\n");
    }
    return b.s;
}
