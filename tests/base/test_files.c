// tests/base/test_files.c — base/util.h's bn_mkdir_p: a nested directory whose parents are missing is made, an
// existing one (with or without a trailing '/') is fine, and a parent that is a plain file is refused with a message
// naming the path that could not be made.
#include "tests/test.h"
#include "base/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int main(void) {
    char root[] = "/tmp/bn_files_XXXXXX", path[256], err[256];
    CHECK(mkdtemp(root) != NULL, "mkdtemp");
    snprintf(path, sizeof path, "%s/a/b/c", root);
    CHECK(bn_mkdir_p(path, err, sizeof err) == 0, "nested: %s", err);
    CHECK(is_dir(path), "%s is a directory", path);
    CHECK(bn_mkdir_p(path, err, sizeof err) == 0, "existing: %s", err);
    snprintf(path, sizeof path, "%s/a/b/", root);
    CHECK(bn_mkdir_p(path, err, sizeof err) == 0, "trailing slash: %s", err);
    snprintf(path, sizeof path, "%s/file", root);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "create %s", path);
    if (f) fclose(f);
    snprintf(path, sizeof path, "%s/file/sub/dir", root);
    err[0] = 0;
    CHECK(bn_mkdir_p(path, err, sizeof err) == -1, "a file as parent is refused");
    char want[256];
    snprintf(want, sizeof want, "cannot create %s/file/sub", root);
    CHECK(strstr(err, want) != NULL, "the message names the path (%s)", err);
    snprintf(path, sizeof path, "rm -rf %s", root);
    CHECK(system(path) == 0, "cleanup");
    return test_done("test_files");
}
