// tests/records/test_tasks.c — the task-file codec (records/tasks.h): a good file read back field by field, and every
// refusal naming the file and the line: bad JSON, not an object, non-UTF-8 text, a missing or empty field, a field of
// the wrong type, a bad family name, a duplicate id (naming the first line too), a file with no tasks, a missing file.
#include "tests/test.h"
#include "records/tasks.h"
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/bonsai-test-tasks-XXXXXX";

// put: writes text to dir/name; returns the path (static buffer).
static const char *put(const char *name, const char *text) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
    return path;
}

// refused: true when reading text fails with an error that contains want (and the path).
static bool refused(const char *text, const char *want) {
    char err[512];
    bn_task *t;
    const char *path = put("bad.jsonl", text);
    int n = bn_tasks_read(path, &t, err, sizeof err);
    bool ok = n == -1 && strstr(err, path) && strstr(err, want);
    if (!ok) fprintf(stderr, "  got %d '%s', wanted '%s'\n", n, n < 0 ? err : "", want);
    if (n >= 0) bn_tasks_free(t, n);
    return ok;
}

#define GOOD1 "{\"id\": \"code-0001\", \"family\": \"code\", \"prompt\": \"def f(x):\\n\", \"reference\": \"    return x\\n\"}\n"
#define GOOD2 "{\"id\": \"copy-1\", \"family\": \"copy\", \"prompt\": \"Say hi\", \"reference\": \"hi\\n\", \"chat\": true, \"x\": 1}\n"

int main(void) {
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char err[512];
    bn_task *t;
    int n = bn_tasks_read(put("good.jsonl", GOOD1 "\n  \n" GOOD2), &t, err, sizeof err);
    CHECK(n == 2, "good file: %d %s", n, n < 0 ? err : "");
    if (n == 2) {
        CHECK(!strcmp(t[0].id, "code-0001") && !strcmp(t[0].family, "code") && !strcmp(t[0].prompt, "def f(x):\n") &&
              !strcmp(t[0].reference, "    return x\n") && !t[0].chat && t[0].line == 1, "task 1");
        CHECK(!strcmp(t[1].id, "copy-1") && t[1].chat && t[1].line == 4, "task 2 (line %d)", t[1].line);
        bn_tasks_free(t, n);
    }
    CHECK(refused(GOOD1 "{\"id\": \"a\", \"family\": \"code\", \"prompt\": \"p\"}\n", ":2: missing \"reference\""),
          "missing reference");
    CHECK(refused(GOOD1 "{\"id\": \"a\", \"family\": \"code\", \"prompt\": \"\", \"reference\": \"r\"}\n",
                  ":2: empty \"prompt\""), "empty prompt");
    CHECK(refused("{\"id\": \"a\", \"family\": \"code\", \"prompt\": \"p\", \"reference\": \"\"}\n",
                  ":1: empty \"reference\""), "empty reference");
    CHECK(refused(GOOD1 GOOD2 GOOD1, ":3: duplicate id \"code-0001\" (first on line 1)"), "duplicate id");
    CHECK(refused(GOOD1 "{\"id\": \"b\", \"family\": \"code\", \"prompt\": \"caf\xe9\", \"reference\": \"r\"}\n",
                  ":2: not valid UTF-8 (byte 45)"), "non-UTF-8 text");
    CHECK(refused(GOOD1 GOOD2 "{\"id\": \"b\", \"family\": \"code\",\n", ":3: bad JSON at column"), "bad JSON");
    CHECK(refused("[1, 2]\n", ":1: not a JSON object"), "an array");
    CHECK(refused("{\"id\": 7, \"family\": \"code\", \"prompt\": \"p\", \"reference\": \"r\"}\n",
                  ":1: \"id\" is not a string"), "id a number");
    CHECK(refused("{\"id\": \"a\", \"family\": \"two words\", \"prompt\": \"p\", \"reference\": \"r\"}\n",
                  ":1: family \"two words\" is not a short word"), "family with a space");
    CHECK(refused("{\"id\": \"a\", \"family\": \"code\", \"prompt\": \"p\", \"reference\": \"r\", \"chat\": 1}\n",
                  ":1: \"chat\" is not true or false"), "chat a number");
    CHECK(refused("{\"id\": \"a\", \"family\": \"code\", \"prompt\": \"p\\u0000q\", \"reference\": \"r\"}\n",
                  ":1: \"prompt\" holds a NUL"), "NUL in a prompt");
    CHECK(refused("\n\n", ": no tasks"), "no tasks");
    CHECK(bn_tasks_read("/nonexistent/tasks.jsonl", &t, err, sizeof err) == -1 && strstr(err, "/nonexistent/tasks.jsonl"),
          "missing file: %s", err);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cleanup");
    return test_done("test_tasks");
}
