// records/tasks.c — the task-file codec (records/tasks.h).
#include "records/tasks.h"
#include "base/strmap.h"
#include "base/unicode.h"
#include "base/util.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

// text_field: o[key] as a non-empty string into *out (a copy); returns 0 or -1 with err.
static int text_field(json_t *o, const char *key, char **out, char *err, size_t errlen) {
    json_t *v = json_object_get(o, key);
    if (!v) return bn_err(err, errlen, "missing \"%s\"", key);
    if (!json_is_string(v)) return bn_err(err, errlen, "\"%s\" is not a string", key);
    if (json_string_length(v) == 0) return bn_err(err, errlen, "empty \"%s\"", key);
    if (strlen(json_string_value(v)) != json_string_length(v))
        return bn_err(err, errlen, "\"%s\" holds a NUL character", key);
    *out = xstrdup(json_string_value(v));
    return 0;
}

static bool family_ok(const char *f) {
    size_t n = strlen(f);
    if (n > BN_TASK_FAMILY_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        char c = f[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
            return false;
    }
    return true;
}

int bn_task_parse_line(const char *line, size_t len, bn_task *t, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    size_t ok = bn_utf8_valid_prefix(line, len);
    if (ok != len) return bn_err(err, errlen, "not valid UTF-8 (byte %zu)", ok + 1);
    json_error_t je;
    json_t *o = json_loadb(line, len, JSON_ALLOW_NUL, &je);
    if (!o) return bn_err(err, errlen, "bad JSON at column %d: %s", je.column, je.text);
    int rc = -1;
    json_t *chat = json_object_get(o, "chat");
    if (!json_is_object(o)) bn_err(err, errlen, "not a JSON object");
    else if (text_field(o, "id", &t->id, err, errlen) < 0 || text_field(o, "family", &t->family, err, errlen) < 0 ||
             text_field(o, "prompt", &t->prompt, err, errlen) < 0 ||
             text_field(o, "reference", &t->reference, err, errlen) < 0) {
    } else if (!family_ok(t->family)) {
        bn_err(err, errlen, "family \"%.40s\" is not a short word (letters, digits, - and _, at most %d)", t->family,
               BN_TASK_FAMILY_MAX);
    } else if (chat && !json_is_boolean(chat)) {
        bn_err(err, errlen, "\"chat\" is not true or false");
    } else {
        t->chat = json_is_true(chat);
        rc = 0;
    }
    json_decref(o);
    if (rc < 0) bn_task_free(t);
    return rc;
}

// blank: true for a line of spaces, tabs and carriage returns only.
static bool blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return false;
    return true;
}

int bn_tasks_read(const char *path, bn_task **out, char *err, size_t errlen) {
    *out = NULL;
    bn_lines *l = bn_lines_open(path, err, errlen);
    if (!l) return -1;
    bn_strmap ids;
    bn_strmap_init(&ids);
    int n = 0, cap = 0, line_no = 0, rc = 0;
    bn_task *v = NULL;
    const char *line;
    size_t len;
    char why[512];
    while (rc == 0 && (line = bn_lines_next(l, &len))) {
        line_no++;
        if (blank(line, len)) continue;
        if (n == cap) v = xrealloc(v, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *v);
        if (bn_task_parse_line(line, len, &v[n], why, sizeof why) < 0) {
            rc = bn_err(err, errlen, "%s:%d: %s", path, line_no, why);
            break;
        }
        v[n].line = line_no;
        int inserted = 0, k = bn_strmap_get(&ids, v[n].id, strlen(v[n].id), &inserted);
        if (!inserted) {
            rc = bn_err(err, errlen, "%s:%d: duplicate id \"%.80s\" (first on line %d)", path, line_no, v[n].id,
                        v[k].line);
            bn_task_free(&v[n]);
            break;
        }
        n++;
    }
    if (rc == 0 && bn_lines_failed(l, why, sizeof why)) rc = bn_err(err, errlen, "%s", why);
    if (rc == 0 && n == 0) rc = bn_err(err, errlen, "%s: no tasks", path);
    bn_lines_close(l);
    bn_strmap_free(&ids);
    if (rc < 0) {
        bn_tasks_free(v, n);
        return -1;
    }
    *out = v;
    return n;
}

void bn_task_free(bn_task *t) {
    free(t->id), free(t->family), free(t->prompt), free(t->reference);
    memset(t, 0, sizeof *t);
}

void bn_tasks_free(bn_task *t, int n) {
    for (int i = 0; i < n; i++) bn_task_free(&t[i]);
    free(t);
}
