// tests/recipe/test_recipe.c — bonsai-antidoom's settings and stage bookkeeping, without a model:
//   - the JSON config: every key read with its type, --full's budget under the file's keys, and an unknown key, a
//     wrong type or an out-of-range value refused with the file and the key named;
//   - bonsai-antidoom's flags, made from the same key table: the fields, ranges and list flags they set;
//   - output kinds and number lists;
//   - the manifest: a finished stage is reused only with the same signature, survives a reload, and a missing or
//     malformed manifest is handled;
//   - round balancing: a larger later round is thinned to 3x round 1, a smaller one repeated, validation rows last;
//   - the candidate order (shortfall, then |drift|) and the SVG writer's output;
//   - the merged kinds' head type fitted to the model's width (q6_k on a head 128 wide: llama-quantize's q8_0).
#include <string.h>
#include <unistd.h>
#include "recipe/candidate.h"
#include "recipe/config.h"
#include "recipe/manifest.h"
#include "recipe/mining.h"
#include "recipe/svg.h"
#include "records/pairs.h"
#include "base/util.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "tests/test.h"

static char dir[256];

// put_file: text into dir/name; returns the path (static buffer of 4).
static const char *put_file(const char *name, const char *text) {
    static char bufs[4][512];
    static int k;
    char *p = bufs[k++ % 4], err[256];
    snprintf(p, 512, "%s/%s", dir, name);
    bn_write_file_atomic(p, text, strlen(text), err, sizeof err);
    return p;
}

static void test_config(void) {
    char err[512];
    void *doc;
    bn_recipe_cfg c = bn_recipe_cfg_default();
    const char *f = put_file("ok.json", "{\"kinds\": \"adapter,q2_0\", \"seed\": 4, \"lr\": 0.002, \"full\": true, "
                                     "\"rounds\": 2, \"mine_prompts\": [\"a.jsonl\"], \"tethers_q1_0\": [5, 50]}");
    CHECK(bn_recipe_cfg_load_json(&c, f, &doc, err, sizeof err) == 0, "%s", err);
    CHECK(!strcmp(c.kinds, "adapter,q2_0") && c.seed == 4 && fabs(c.lr - 0.002) < 1e-12, "values read");
    CHECK(c.full && c.mine_max == 0 && c.rounds == 2, "full's budget first, the file's rounds over it (%d)", c.rounds);
    CHECK(c.n_mine_prompts == 1 && !strcmp(c.mine_prompts[0], "a.jsonl"), "string list");
    CHECK(c.n_tethers[BN_KIND_Q1_0] == 2 && c.tethers[BN_KIND_Q1_0][1] == 50, "number list");
    bn_recipe_json_free(doc);
    struct { const char *text, *want; } bad[] = {
        {"{\"kinsd\": \"q1_0\"}", "key \"kinsd\": unknown key"},
        {"{\"seed\": \"4\"}", "key \"seed\": expected an integer"},
        {"{\"lr\": true}", "key \"lr\": expected a number"},
        {"{\"rounds\": 0}", "key \"rounds\": 0 is out of range"},
        {"{\"mine_prompts\": [1]}", "key \"mine_prompts\": element 0 is not a string"},
        {"{\"full\": 1}", "key \"full\": expected true or false"},
        {"[1]", "expected a JSON object"},
        {"{\"seed\": 1,}", "bad.json:1:"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        c = bn_recipe_cfg_default();
        f = put_file("bad.json", bad[i].text);
        int rc = bn_recipe_cfg_load_json(&c, f, &doc, err, sizeof err);
        CHECK(rc < 0 && strstr(err, bad[i].want) && strstr(err, "bad.json"), "'%s' -> '%s'", bad[i].text, err);
    }
    CHECK(bn_recipe_parse_kinds("q1_0,ADAPTER", err, sizeof err) == (1 << BN_KIND_Q1_0 | 1 << BN_KIND_ADAPTER),
          "kinds");
    CHECK(bn_recipe_parse_kinds("q4_0", err, sizeof err) < 0 && strstr(err, "q4_0"), "%s", err);
    double v[4];
    CHECK(bn_recipe_parse_reals("1,2.5", v, 4, err, sizeof err) == 2 && v[1] == 2.5, "reals");
    CHECK(bn_recipe_parse_reals("1,x", v, 4, err, sizeof err) < 0, "junk in a list");
    char *js = bn_recipe_cfg_json(&c);
    CHECK(js && strstr(js, "\"tethers_q2_0\""), "settings as JSON");
    free(js);
}

// test_flags: bonsai-antidoom's flags come from the config's key table: a flag sets the field its key sets, with the
// key's range (a value the config refuses, the flag refuses too), and the list flags replace the defaults.
static void test_flags(void) {
    char err[512];
    bn_arg args[BN_RECIPE_N_ARGS];
    int n = bn_recipe_args(args, BN_RECIPE_N_ARGS);
    CHECK(n > 20 && bn_recipe_args(args, 8) < 0, "%d flags; a short table is refused", n);
    bn_recipe_args(args, BN_RECIPE_N_ARGS);
    bn_recipe_cfg c = bn_recipe_cfg_default();
    bn_arg_table tables[] = {BN_TABLE(args, &c), {0}};
    char *ok[] = {"--rounds", "3", "-s", "9", "--lr", "0.5", "--mine-spread", "--kind", "f16", "--mine-prompts",
                  "x.jsonl", "--tethers", "q2_0=4,5,6", "--goal-drift", "2.5", "--thinking", "0"};
    int rc = bn_args_read(tables, (int)(sizeof ok / sizeof *ok), ok, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    CHECK(c.rounds == 3 && c.seed == 9 && c.lr == 0.5 && c.mine_spread && !strcmp(c.kinds, "f16") &&
              c.goal_drift == 2.5 && c.thinking == 0,
          "values set");
    CHECK(c.n_mine_prompts == 1 && !strcmp(c.mine_prompts[0], "x.jsonl"), "the first --mine-prompts replaces");
    CHECK(c.n_tethers[BN_KIND_Q2_0] == 3 && c.tethers[BN_KIND_Q2_0][2] == 6, "--tethers");
    char *bad[] = {"--rounds", "65"};
    CHECK(bn_args_read(tables, 2, bad, err, sizeof err) < 0 && strstr(err, "--rounds"), "flag range: %s", err);
    void *doc;
    const char *f = put_file("rounds.json", "{\"rounds\": 65}");
    CHECK(bn_recipe_cfg_load_json(&c, f, &doc, err, sizeof err) < 0 && strstr(err, "\"rounds\""),
          "the config's range is the flag's: %s", err);
    char *none[] = {"--headroom", "2"};
    CHECK(bn_args_read(tables, 2, none, err, sizeof err) < 0 && strstr(err, "unknown option"),
          "a config-only key has no flag: %s", err);
}

static void test_manifest(void) {
    char err[512], sub[300];
    snprintf(sub, sizeof sub, "%s/run", dir);
    bn_manifest *m = bn_manifest_open(sub, err, sizeof err);
    CHECK(m != NULL, "%s", err);
    if (!m) return;
    CHECK(bn_manifest_done(m, "mine", 7) == NULL, "nothing done yet");
    CHECK(bn_manifest_finish(m, "mine", 7, 1.5, json_pack("{s:i}", "pairs", 12), err, sizeof err) != NULL, "%s", err);
    bn_manifest_free(m);
    m = bn_manifest_open(sub, err, sizeof err); // a rerun
    json_t *r = m ? bn_manifest_done(m, "mine", 7) : NULL;
    CHECK(r && json_integer_value(json_object_get(r, "pairs")) == 12, "reused after a reload");
    CHECK(m && bn_manifest_done(m, "mine", 8) == NULL, "another signature: run again");
    CHECK(m && bn_manifest_result(m, "mine") != NULL, "the last result stays readable");
    bn_manifest_free(m);
    put_file("run/manifest.json", "{\"stages\": 3}");
    m = bn_manifest_open(sub, err, sizeof err);
    CHECK(!m && strstr(err, "manifest.json"), "a malformed manifest is refused: %s", err);
    bn_manifest_free(m);
    CHECK(bn_sig(0, "ab") != bn_sig(0, "ba") && bn_sig(bn_sig(0, "a"), "bc") != bn_sig(bn_sig(0, "ab"), "c"),
          "signatures separate their parts");
}

// pairs_file: n rows with rejected token base + i, split, into dir/name.
static const char *pairs_file(const char *name, int n, int base, const char *split) {
    char *text = xcalloc(1, (size_t)n * 500 + 1), err[256];
    for (int i = 0; i < n; i++)
        sprintf(text + strlen(text),
                "{\"context_before\":\"c%d\",\"rejected_token\":\"r\",\"rejected_decoded\":\"r\","
                "\"multi_chosen_tokens\":[\"x\"],\"multi_chosen_decoded\":[\"x\"],\"source\":\"s\",\"source_prompt\":\"p\","
                "\"repetition\":{\"start_char\":0,\"repeat_start_char\":4,\"rejected_token_index\":1,\"period\":4,"
                "\"repeats\":4,\"snippet\":\"abcd\"},\"split\":\"%s\"}\n",
                base + i, split);
    const char *p = put_file(name, text);
    free(text);
    bn_pair_row *rows;
    int k = bn_pairs_read(p, &rows, err, sizeof err);
    CHECK(k == n, "%s: %d rows (%s)", name, k, err);
    if (k > 0) bn_pairs_free(rows, k);
    return p;
}

static void test_round_pairs(void) {
    char err[256], out[300];
    const char *r1 = pairs_file("r1.jsonl", 10, 0, "train");
    const char *r2 = pairs_file("r2.jsonl", 50, 100, "train");
    const char *r3 = pairs_file("r3.jsonl", 4, 200, "train");
    const char *val = pairs_file("val.jsonl", 3, 300, "heldout");
    const char *rounds[] = {r1, r2, r3};
    snprintf(out, sizeof out, "%s/all.jsonl", dir);
    int n = bn_recipe_round_pairs(rounds, 3, val, out, err, sizeof err);
    // T = min(50, 3 x 10) = 30: round 1 x 3 = 30, round 2 thinned to 30, round 3 (4 rows) x 3 = 12, then 3 val rows
    CHECK(n == 30 + 30 + 12 + 3, "%d rows (%s)", n, err);
    bn_pair_row *rows;
    int k = bn_pairs_read(out, &rows, err, sizeof err);
    CHECK(k == n && k > 3 && !strcmp(rows[k - 1].split, "heldout") && !strcmp(rows[0].split, "train"),
          "validation rows last");
    if (k > 0) bn_pairs_free(rows, k);
}

static void test_order_and_svg(void) {
    bn_recipe_cfg c = bn_recipe_cfg_default();
    bn_val_base vb = {.loop = 0.8, .ppl = 10};
    CHECK_NEAR(bn_candidate_score(&c, &vb, 0.04, 0.5), 0, 1e-12, "goals met: no shortfall");
    CHECK_NEAR(bn_candidate_score(&c, &vb, 0.16, 0.5), 0.1, 1e-9, "cut 80 %: 0.1 short");
    CHECK_NEAR(bn_candidate_score(&c, &vb, 0.04, -3), 0.2, 1e-9, "|drift| 3 %: (3 - 1) / 10");
    bn_candidate a = {.score = 0, .val_drift = -0.8}, b = {.score = 0, .val_drift = 0.3}, d = {.score = 0.01};
    CHECK(bn_candidate_better(&b, &a) && bn_candidate_better(&a, &d) && bn_candidate_better(&d, NULL), "order");
    char path[300];
    snprintf(path, sizeof path, "%s/p.svg", dir);
    FILE *f = fopen(path, "w");
    bn_svg s;
    double x[3] = {0, 1, 2}, y[3] = {1, 0.5, 0.25};
    bn_svg_begin(&s, f, 300, 200, "a <title>", 0, 2, 0, 1, "x", "y");
    bn_svg_line(&s, x, y, 3, bn_svg_color(0), 0);
    bn_svg_bar(&s, 1, 0.5, 0.5, "#000", "tip & more");
    bn_svg_end(&s);
    fclose(f);
    char err[128];
    char *t = bn_read_file(path, NULL, err, sizeof err);
    CHECK(t && strstr(t, "<svg") && strstr(t, "</svg>") && strstr(t, "a &lt;title&gt;") && strstr(t, "tip &amp; more"),
          "an SVG with escaped text");
    CHECK(t && bn_svg_py(&s, 1) < bn_svg_py(&s, 0) && bn_svg_px(&s, 2) > bn_svg_px(&s, 0), "axes point up and right");
    free(t);
}

// head_file: a GGUF holding only an F32 output.weight of ncols x 2 values; returns its path (static).
static const char *head_file(int64_t ncols) {
    static char path[512];
    static float zeros[512];
    char err[256];
    snprintf(path, sizeof path, "%s/head-%lld.gguf", dir, (long long)ncols);
    gguf_writer *w = gguf_writer_new();
    int64_t ne[2] = {ncols, 2};
    gguf_writer_add_tensor(w, "output.weight", 2, ne, BN_F32, BN_F32, zeros, err, sizeof err);
    CHECK(gguf_writer_write(w, path, NULL, NULL, err, sizeof err) == 0, "%s", err);
    gguf_writer_free(w);
    return path;
}

static void test_fit_output_type(void) {
    char note[256], err[512];
    bn_recipe_cfg c = bn_recipe_cfg_default();
    c.kinds = "q1_0";
    c.model = head_file(256);
    CHECK(bn_recipe_fit_output_type(&c, note, sizeof note, err, sizeof err) == 0 && !note[0], "256 wide: %s", err);
    CHECK(!strcmp(c.output_type, "q6_k"), "256 wide keeps q6_k: %s", c.output_type);
    c.model = head_file(128);
    c.kinds = "adapter";
    CHECK(bn_recipe_fit_output_type(&c, note, sizeof note, err, sizeof err) == 0 && !note[0], "no merged kind");
    CHECK(!strcmp(c.output_type, "q6_k"), "the adapter kind leaves the head type: %s", c.output_type);
    c.kinds = "adapter,q2_0";
    CHECK(bn_recipe_fit_output_type(&c, note, sizeof note, err, sizeof err) == 0, "%s", err);
    CHECK(!strcmp(c.output_type, "q8_0") && strstr(note, "rows of 128 values") && strstr(note, "q8_0 instead"),
          "128 wide: %s / %s", c.output_type, note);
    c.output_type = "q1_0";
    c.model = head_file(192);
    CHECK(bn_recipe_fit_output_type(&c, note, sizeof note, err, sizeof err) == -1 && strstr(err, "192 values"),
          "q1_0 at 192 refused: %s", err);
    c.model = "/nonexistent/model.gguf";
    c.output_type = "q6_k";
    CHECK(bn_recipe_fit_output_type(&c, note, sizeof note, err, sizeof err) == -1 && strstr(err, "nonexistent"),
          "missing model named: %s", err);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/bonsai-test-recipe-%d", (int)getpid());
    char cmd[300];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (system(cmd) != 0) return test_skip("cannot make a temporary folder");
    test_config();
    test_flags();
    test_manifest();
    test_round_pairs();
    test_order_and_svg();
    test_fit_output_type();
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
    return test_done("recipe");
}
