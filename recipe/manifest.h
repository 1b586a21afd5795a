// recipe/manifest.h — the stage manifest of a bonsai-antidoom run (OUT/manifest.json): per stage its signature
// (the settings and inputs it depends on, recipe/config.h's bn_sig), whether it finished, its seconds and its result
// (a JSON object: figures, file names). A stage is written as done only after its outputs are complete (they are
// written atomically), and the manifest itself is rewritten atomically after each stage, so a killed run loses at
// most the stage in flight. A rerun reuses a done stage whose signature matches; a changed signature says so and
// runs the stage again (and, since later signatures chain earlier ones, everything that depends on it).
#ifndef BONSAI_RECIPE_MANIFEST_H
#define BONSAI_RECIPE_MANIFEST_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct bn_manifest bn_manifest;

// bn_manifest_open: loads DIR/manifest.json (or starts an empty one, creating DIR); NULL with err on an unreadable
// or malformed manifest.
bn_manifest *bn_manifest_open(const char *dir, char *err, size_t errlen);
// bn_manifest_free: frees m.
void bn_manifest_free(bn_manifest *m);
// bn_manifest_done: the result of stage name when it finished with signature sig (borrowed; NULL: run it). Says on
// stderr that it is reused, or that its settings changed since it ran.
json_t *bn_manifest_done(bn_manifest *m, const char *name, uint64_t sig);
// bn_manifest_finish: records stage name as done with sig, seconds and result (the manifest takes the reference) and
// rewrites the manifest atomically; returns the stored result (borrowed), or NULL with err.
json_t *bn_manifest_finish(bn_manifest *m, const char *name, uint64_t sig, double seconds, json_t *result, char *err,
                           size_t errlen);
// bn_manifest_set_config: stores the settings text (JSON) under "config"; 0 or -1 (err) when it cannot be written.
int bn_manifest_set_config(bn_manifest *m, const char *config_json, char *err, size_t errlen);
// bn_manifest_result: the result of a done stage, whatever its signature (borrowed; NULL when not done).
json_t *bn_manifest_result(const bn_manifest *m, const char *name);
// bn_manifest_path: DIR/name into buf; returns buf.
const char *bn_manifest_path(const bn_manifest *m, const char *name, char *buf, size_t n);
#endif
