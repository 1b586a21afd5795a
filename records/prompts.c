// records/prompts.c — prompt JSONL formats (see prompts.h).
#include "records/prompts.h"
#include "base/util.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *const BN_ANTIDOOM_TEMPLATE =
    "{prompt}\n\nThink through the problem step by step, then respond with your final answer as \"Answer: <your answer>\".";

bn_prompt_opts bn_prompt_opts_default(void) {
    bn_prompt_opts o = {.skip_agentic = true, .template_ = NULL, .max_prompts = 0};
    return o;
}

bool bn_prompt_is_agentic_source(const char *source) {
    static const char *const bad[] = {"bfcl", "tau", "browse", "search"};
    for (int i = 0; i < 4; i++)
        if (strcasestr(source, bad[i])) return true;
    return false;
}

char *bn_prompt_apply_template(const char *tmpl, const char *prompt) {
    size_t plen = strlen(prompt), cap = strlen(tmpl) + 1, n = 0;
    for (const char *s = tmpl; (s = strstr(s, "{prompt}")); s += 8) cap += plen;
    char *out = xmalloc(cap);
    for (const char *s = tmpl; *s;) {
        if (!strncmp(s, "{prompt}", 8)) { memcpy(out + n, prompt, plen); n += plen; s += 8; }
        else if ((s[0] == '{' && s[1] == '{') || (s[0] == '}' && s[1] == '}')) { out[n++] = s[0]; s += 2; }
        else out[n++] = *s++;
    }
    out[n] = 0;
    return out;
}

const char *bn_prompt_user_text(const bn_prompt *p) {
    for (int i = p->n_msgs - 1; i >= 0; i--)
        if (!strcmp(p->msgs[i].role, "user")) return p->msgs[i].content;
    return "";
}

static void add_msg(bn_prompt *p, const char *role, const char *content) {
    p->msgs = xrealloc(p->msgs, (size_t)(p->n_msgs + 1) * sizeof *p->msgs);
    p->msgs[p->n_msgs].role = xstrdup(role);
    p->msgs[p->n_msgs].content = xstrdup(content);
    p->n_msgs++;
}

// ShareGPT "from" -> role; NULL when unknown.
static const char *sharegpt_role(const char *from) {
    if (!strcmp(from, "human") || !strcmp(from, "user")) return "user";
    if (!strcmp(from, "gpt") || !strcmp(from, "assistant") || !strcmp(from, "model") || !strcmp(from, "bot"))
        return "assistant";
    if (!strcmp(from, "system")) return "system";
    return NULL;
}

// Message content: a string, or an array of {"type":"text","text":...} parts (joined).
static char *content_text(json_t *c) {
    if (json_is_string(c)) return xstrdup(json_string_value(c));
    if (!json_is_array(c)) return NULL;
    size_t cap = 1, i;
    json_t *part;
    json_array_foreach(c, i, part) {
        json_t *t = json_object_get(part, "text");
        if (!json_is_string(t)) return NULL;
        cap += json_string_length(t);
    }
    char *out = xmalloc(cap);
    out[0] = 0;
    json_array_foreach(c, i, part) strcat(out, json_string_value(json_object_get(part, "text")));
    return out;
}

static int parse_turns(json_t *arr, const char *field, const char *role_key, const char *text_key, bn_prompt *p,
                       char *err, size_t errlen) {
    if (!json_is_array(arr)) return bn_err(err, errlen, "field '%s': expected an array", field);
    size_t i;
    json_t *turn;
    json_array_foreach(arr, i, turn) {
        json_t *r = json_object_get(turn, role_key);
        if (!json_is_string(r)) return bn_err(err, errlen, "field '%s[%zu].%s': expected a string", field, i, role_key);
        const char *role = strcmp(field, "conversations") ? json_string_value(r) : sharegpt_role(json_string_value(r));
        if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system")))
            return bn_err(err, errlen, "field '%s[%zu].%s': unknown role '%s'", field, i, role_key, json_string_value(r));
        char *text = content_text(json_object_get(turn, text_key));
        if (!text) return bn_err(err, errlen, "field '%s[%zu].%s': expected text", field, i, text_key);
        add_msg(p, role, text);
        free(text);
    }
    return 0;
}

int bn_prompt_parse_line(const char *line, size_t len, const bn_prompt_opts *o, bn_prompt *p, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    json_error_t je;
    json_t *j = json_loadb(line, len, JSON_DECODE_ANY, &je);
    if (!j) return bn_err(err, errlen, "invalid JSON at column %d: %s", je.column, je.text);
    int rc = -1;
    if (json_is_string(j)) {
        add_msg(p, "user", json_string_value(j));
    } else if (json_is_object(j)) {
        json_t *src = json_object_get(j, "source");
        if (src && !json_is_string(src)) { bn_err(err, errlen, "field 'source': expected a string"); goto out; }
        p->source = xstrdup(src ? json_string_value(src) : "");
        json_t *v;
        if ((v = json_object_get(j, "conversations"))) {
            if (parse_turns(v, "conversations", "from", "value", p, err, errlen)) goto out;
        } else if ((v = json_object_get(j, "messages"))) {
            if (parse_turns(v, "messages", "role", "content", p, err, errlen)) goto out;
        } else if ((v = json_object_get(j, "prompt")) || (v = json_object_get(j, "text"))) {
            if (!json_is_string(v)) { bn_err(err, errlen, "field 'prompt': expected a string"); goto out; }
            add_msg(p, "user", json_string_value(v));
        } else {
            bn_err(err, errlen, "no 'prompt', 'text', 'conversations' or 'messages' field");
            goto out;
        }
    } else {
        bn_err(err, errlen, "expected a string or an object");
        goto out;
    }
    if (!p->source) p->source = xstrdup("");
    while (p->n_msgs > 0 && !strcmp(p->msgs[p->n_msgs - 1].role, "assistant")) { // trailing answers
        p->n_msgs--;
        free(p->msgs[p->n_msgs].role);
        free(p->msgs[p->n_msgs].content);
    }
    if (p->n_msgs == 0 || strcmp(p->msgs[p->n_msgs - 1].role, "user")) {
        bn_err(err, errlen, "no user turn");
        goto out;
    }
    if (o && o->template_) {
        bn_msg *last = &p->msgs[p->n_msgs - 1];
        char *t = bn_prompt_apply_template(o->template_, last->content);
        free(last->content);
        last->content = t;
    }
    rc = 0;
out:
    json_decref(j);
    if (rc) bn_prompt_free(p);
    return rc;
}

int bn_prompts_read(const char *path, const bn_prompt_opts *o, bn_prompt **out, int *n_skipped, char *err,
                    size_t errlen) {
    *out = NULL;
    if (n_skipped) *n_skipped = 0;
    bn_lines *l = bn_lines_open(path, err, errlen);
    if (!l) return -1;
    bn_prompt *v = NULL;
    int n = 0, cap = 0, line_no = 0;
    const char *line;
    size_t len;
    char inner[512];
    while ((line = bn_lines_next(l, &len)) && !(o && o->max_prompts > 0 && n >= o->max_prompts)) {
        line_no++;
        size_t k = 0;
        while (k < len && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r')) k++;
        if (k == len) continue;
        bn_prompt p;
        if (bn_prompt_parse_line(line, len, o, &p, inner, sizeof inner) < 0) {
            bn_err(err, errlen, "%s:%d: %s", path, line_no, inner);
            bn_prompts_free(v, n);
            bn_lines_close(l);
            return -1;
        }
        if (o && o->skip_agentic && bn_prompt_is_agentic_source(p.source)) {
            bn_prompt_free(&p);
            if (n_skipped) (*n_skipped)++;
            continue;
        }
        p.line = line_no;
        if (n == cap) { cap = cap ? 2 * cap : 64; v = xrealloc(v, (size_t)cap * sizeof *v); }
        v[n++] = p;
    }
    if (bn_lines_failed(l, err, errlen)) {
        bn_prompts_free(v, n);
        bn_lines_close(l);
        return -1;
    }
    bn_lines_close(l);
    *out = v;
    return n;
}

void bn_prompt_free(bn_prompt *p) {
    for (int i = 0; i < p->n_msgs; i++) { free(p->msgs[i].role); free(p->msgs[i].content); }
    free(p->msgs);
    free(p->source);
    memset(p, 0, sizeof *p);
}

void bn_prompts_free(bn_prompt *p, int n) {
    if (!p) return;
    for (int i = 0; i < n; i++) bn_prompt_free(&p[i]);
    free(p);
}
