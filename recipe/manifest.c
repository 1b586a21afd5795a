// recipe/manifest.c — OUT/manifest.json: which stages finished, with what settings, and their results.
#include "recipe/manifest.h"
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/util.h"

struct bn_manifest {
    char *dir, *path;
    json_t *root;   // {"config": {...}, "stages": {name: {"sig": hex, "done": true, "seconds": s, "result": {...}}}}
    json_t *stages; // borrowed from root
};

bn_manifest *bn_manifest_open(const char *dir, char *err, size_t errlen) {
    if (bn_mkdir_p(dir, err, errlen) != 0) return NULL;
    bn_manifest *m = xcalloc(1, sizeof *m);
    m->dir = xstrdup(dir);
    m->path = xmalloc(strlen(dir) + 32);
    sprintf(m->path, "%s/manifest.json", dir);
    if (access(m->path, F_OK) == 0) {
        json_error_t je;
        m->root = json_load_file(m->path, 0, &je);
        if (!m->root || !json_is_object(json_object_get(m->root, "stages"))) {
            bn_err(err, errlen, "%s: %s (remove it to start over)", m->path,
                   m->root ? "no \"stages\" object" : je.text);
            json_decref(m->root);
            free(m->dir), free(m->path), free(m);
            return NULL;
        }
    } else {
        m->root = json_pack("{s:{}}", "stages");
    }
    m->stages = json_object_get(m->root, "stages");
    return m;
}

void bn_manifest_free(bn_manifest *m) {
    if (!m) return;
    json_decref(m->root);
    free(m->dir), free(m->path), free(m);
}

// save: the manifest, atomically; 0 or -1 (err).
static int save(bn_manifest *m, char *err, size_t errlen) {
    char *text = json_dumps(m->root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    int rc = bn_write_file_atomic(m->path, text, strlen(text), err, errlen);
    free(text);
    return rc;
}

json_t *bn_manifest_done(bn_manifest *m, const char *name, uint64_t sig) {
    json_t *s = json_object_get(m->stages, name);
    if (!s || !json_is_true(json_object_get(s, "done"))) return NULL;
    char hex[32];
    snprintf(hex, sizeof hex, "%016" PRIx64, sig);
    const char *was = json_string_value(json_object_get(s, "sig"));
    if (!was || strcmp(was, hex)) {
        fprintf(stderr, "bonsai-antidoom: stage %s: its settings or inputs changed since it ran; running it again\n",
                name);
        return NULL;
    }
    fprintf(stderr, "bonsai-antidoom: stage %s: done before, reused\n", name);
    return json_object_get(s, "result");
}

json_t *bn_manifest_finish(bn_manifest *m, const char *name, uint64_t sig, double seconds, json_t *result, char *err,
                           size_t errlen) {
    char hex[32];
    snprintf(hex, sizeof hex, "%016" PRIx64, sig);
    json_object_set_new(m->stages, name,
                        json_pack("{s:s,s:b,s:f,s:o}", "sig", hex, "done", 1, "seconds", seconds, "result",
                                  result ? result : json_object()));
    if (save(m, err, errlen) < 0) return NULL;
    return json_object_get(json_object_get(m->stages, name), "result");
}

int bn_manifest_set_config(bn_manifest *m, const char *config_json, char *err, size_t errlen) {
    json_t *c = json_loads(config_json, 0, NULL);
    json_object_set_new(m->root, "config", c ? c : json_null());
    return save(m, err, errlen);
}

json_t *bn_manifest_result(const bn_manifest *m, const char *name) {
    json_t *s = json_object_get(m->stages, name);
    return s && json_is_true(json_object_get(s, "done")) ? json_object_get(s, "result") : NULL;
}

const char *bn_manifest_path(const bn_manifest *m, const char *name, char *buf, size_t n) {
    snprintf(buf, n, "%s/%s", m->dir, name);
    return buf;
}
