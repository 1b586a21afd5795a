// tests/train/test_lora_io.c — LoRA targets (name groups, which layers get which tensors), PEFT
// init (bounds ±1/√n_in, B = 0, seeded), adapter GGUF round trip in llama.cpp's format (KVs,
// tensor names/shapes/types), the fp32 merge W + (α/r)·B·A against an explicit sum, and the
// training checkpoint round trip with corruption / truncation detection.
#include <string.h>
#include <unistd.h>
#include "tests/test.h"
#include "train/lora.h"
#include "train/checkpoint.h"
#include "gguf/gguf.h"
#include "base/util.h"
#include "quant/quant.h"

static char tmpdir[256];

// A fake 4-layer qwen35 description (3 GDN + 1 attention layer): only shapes and non-NULL data.
static bn_model *fake_model(void) {
    static bn_layer_weights L[4];
    static bn_model m;
    static const char dummy = 0;
    memset(L, 0, sizeof L);
    memset(&m, 0, sizeof m);
    m.cfg.arch = BN_ARCH_QWEN35;
    m.cfg.n_layer = 4;
#define W(field, a, b) do { field.data = &dummy; field.type = BN_F32; field.ne[0] = a; field.ne[1] = b; field.ne[2] = field.ne[3] = 1; } while (0)
    for (int il = 0; il < 4; il++) {
        W(L[il].ffn_gate, 64, 96); W(L[il].ffn_up, 64, 96); W(L[il].ffn_down, 96, 64);
        if (il == 3) {
            W(L[il].attn_q, 64, 128); W(L[il].attn_k, 64, 32); W(L[il].attn_v, 64, 32); W(L[il].attn_output, 64, 64);
        } else {
            W(L[il].attn_qkv, 64, 128); W(L[il].attn_gate, 64, 64); W(L[il].ssm_beta, 64, 4); W(L[il].ssm_alpha, 64, 4);
            W(L[il].ssm_out, 64, 64);
        }
    }
    W(m.w.output, 64, 200);
#undef W
    m.w.layers = L;
    return &m;
}

static void test_targets(void) {
    char err[256];
    int m = bn_lora_parse_targets("q,k,v,o,gate,up,down", err, sizeof err);
    CHECK(m == (BN_LORA_ATTN | BN_LORA_FFN), "seed recipe targets mask %x", m);
    CHECK(bn_lora_parse_targets("q_proj,ffn_down,lm_head", err, sizeof err) == (BN_LORA_Q | BN_LORA_DOWN | BN_LORA_HEAD), "mixed names");
    CHECK(bn_lora_parse_targets("attn_gate", err, sizeof err) == BN_LORA_Z, "attn_gate is the GDN z projection");
    CHECK(bn_lora_parse_targets("gdn", err, sizeof err) == BN_LORA_GDN, "gdn group");
    CHECK(bn_lora_parse_targets("q,bogus", err, sizeof err) == -1 && strstr(err, "bogus"), "unknown name rejected: %s", err);

    bn_lora *l = bn_lora_from_model(fake_model(), BN_LORA_ATTN | BN_LORA_FFN, 8, 16, 0, err, sizeof err);
    CHECK(l != NULL, "from_model: %s", err);
    if (!l) return;
    // q/k/v/o only in the attention layer 3; gate/up/down in all 4 layers
    CHECK(l->n_tensors == 4 + 12, "n_tensors %d (expected 16)", l->n_tensors);
    CHECK(bn_lora_find(l, "blk.3.attn_q.weight") >= 0 && bn_lora_find(l, "blk.0.attn_q.weight") < 0, "q only in attention layers");
    CHECK(bn_lora_get(l, 2, BN_LORA_DOWN) == bn_lora_find(l, "blk.2.ffn_down.weight"), "get by (layer, target)");
    int64_t expect = 8 * ((64 + 128) + (64 + 32) * 2 + (64 + 64) + 4 * ((64 + 96) * 2 + (96 + 64)));
    CHECK(l->n_params == expect, "n_params %lld (expected %lld)", (long long)l->n_params, (long long)expect);
    CHECK_NEAR(bn_lora_scale(l), 2.0, 0, "scale alpha/r");
    bn_lora_free(l);
    l = bn_lora_from_model(fake_model(), BN_LORA_GDN | BN_LORA_HEAD, 4, 0, 0, err, sizeof err);
    CHECK(l && l->n_tensors == 3 * 5 + 1 && bn_lora_find(l, "output.weight") >= 0, "GDN + head targets");
    if (l) CHECK_NEAR(bn_lora_scale(l), 1.0, 0, "alpha 0 → scale 1 (llama.cpp)");
    bn_lora_free(l);
}

static void test_init_and_adapter(void) {
    char err[256], path[512];
    bn_lora *l = bn_lora_from_model(fake_model(), BN_LORA_ATTN | BN_LORA_FFN | BN_LORA_HEAD, 8, 16, 0, err, sizeof err);
    if (!l) { CHECK(0, "%s", err); return; }
    bn_lora_init_peft(l, 3407);
    // A within ±1/√n_in and spread over it; B zero
    double worst = 0, maxfrac = 0;
    int bzero = 1;
    for (int i = 0; i < l->n_tensors; i++) {
        const bn_lora_tensor *t = &l->t[i];
        double bound = 1.0 / sqrt((double)t->n_in), amax = 0;
        for (int64_t e = 0; e < t->n_in * l->r; e++) amax = fmax(amax, fabs(l->params[t->off_a + e]));
        worst = fmax(worst, amax / bound);
        maxfrac = fmax(maxfrac, amax / bound);
        for (int64_t e = 0; e < t->n_out * l->r; e++) bzero &= l->params[t->off_b + e] == 0.0f;
    }
    CHECK(worst <= 1.0 && maxfrac > 0.95, "A within the kaiming bound (max |A|·√n_in = %g)", worst);
    CHECK(bzero, "B initialised to zero");
    bn_lora *l2 = bn_lora_from_model(fake_model(), BN_LORA_ATTN | BN_LORA_FFN | BN_LORA_HEAD, 8, 16, 0, err, sizeof err);
    bn_lora_init_peft(l2, 3407);
    CHECK(memcmp(l->params, l2->params, (size_t)l->n_params * 4) == 0, "same seed → same init");
    bn_lora_init_peft(l2, 42);
    CHECK(memcmp(l->params, l2->params, (size_t)l->n_params * 4) != 0, "different seed → different init");
    bn_lora_free(l2);
    // give B values so the round trip is meaningful
    for (int i = 0; i < l->n_tensors; i++)
        for (int64_t e = 0; e < l->t[i].n_out * l->r; e++) l->params[l->t[i].off_b + e] = 0.001f * (float)((e * 7 + i) % 13 - 6);

    snprintf(path, sizeof path, "%s/adapter.gguf", tmpdir);
    CHECK(bn_lora_save_gguf(l, path, err, sizeof err) == 0, "save: %s", err);
    gguf_file *g = gguf_open(path, err, sizeof err);
    CHECK(g != NULL, "open written adapter: %s", err);
    if (g) {
        const char *gt = gguf_get_str(g, "general.type"), *at = gguf_get_str(g, "adapter.type");
        const char *arch = gguf_get_str(g, "general.architecture");
        float alpha = 0;
        CHECK(gt && strcmp(gt, "adapter") == 0, "general.type adapter");
        CHECK(at && strcmp(at, "lora") == 0, "adapter.type lora");
        CHECK(arch && strcmp(arch, "qwen35") == 0, "general.architecture qwen35");
        CHECK(gguf_get_f32(g, "adapter.lora.alpha", &alpha) && alpha == 16.0f, "adapter.lora.alpha 16");
        const gguf_tensor *ta = gguf_find_tensor(g, "blk.3.attn_q.weight.lora_a");
        const gguf_tensor *tb = gguf_find_tensor(g, "blk.3.attn_q.weight.lora_b");
        CHECK(ta && ta->type == BN_F32 && ta->ne[0] == 64 && ta->ne[1] == 8, "lora_a {n_in, r} f32");
        CHECK(tb && tb->type == BN_F32 && tb->ne[0] == 8 && tb->ne[1] == 128, "lora_b {r, n_out} f32");
        CHECK((int)g->n_tensors == 2 * l->n_tensors, "2 tensors per adapted weight (%zu)", g->n_tensors);
        gguf_close(g);
    }
    bn_lora *r = bn_lora_load_gguf(path, err, sizeof err);
    CHECK(r != NULL, "load: %s", err);
    if (r) {
        CHECK(bn_lora_same_layout(l, r), "loaded layout matches");
        CHECK(r->alpha == 16.0f && r->r == 8, "alpha/r restored");
        CHECK(memcmp(l->params, r->params, (size_t)l->n_params * 4) == 0, "parameters bit-identical");
        CHECK(bn_lora_get(r, -1, BN_LORA_HEAD) >= 0 && bn_lora_get(r, 3, BN_LORA_O) >= 0, "names parsed back to targets");
        bn_lora_free(r);
    }
    // a file that is not an adapter is refused with a clear message
    gguf_writer *w = gguf_writer_new();
    gguf_set_str(w, "general.architecture", "qwen35");
    snprintf(path, sizeof path, "%s/not_adapter.gguf", tmpdir);
    gguf_writer_write(w, path, NULL, NULL, err, sizeof err);
    gguf_writer_free(w);
    r = bn_lora_load_gguf(path, err, sizeof err);
    CHECK(r == NULL && strstr(err, "general.type"), "non-adapter refused: %s", err);

    // merge: W + scale·B·A vs an explicit triple loop
    const bn_lora_tensor *t = &l->t[bn_lora_find(l, "blk.0.ffn_gate.weight")];
    float *Wm = malloc(sizeof(float) * t->n_in * t->n_out);
    for (int64_t e = 0; e < t->n_in * t->n_out; e++) Wm[e] = 0.01f * (float)(e % 17);
    bn_lora_merge_f32(Wm, t->n_in, t->n_out, l->params + t->off_a, l->params + t->off_b, l->r, bn_lora_scale(l));
    double md = 0;
    for (int64_t o = 0; o < t->n_out; o++)
        for (int64_t i = 0; i < t->n_in; i++) {
            double s = 0;
            for (int k = 0; k < l->r; k++) s += (double)l->params[t->off_b + o * l->r + k] * l->params[t->off_a + k * t->n_in + i];
            md = fmax(md, fabs(Wm[o * t->n_in + i] - (0.01f * (float)((o * t->n_in + i) % 17) + 2.0 * s)));
        }
    CHECK(md < 1e-6, "merge max error %g (tol 1e-6)", md);
    free(Wm);
    bn_lora_free(l);
}

static void test_checkpoint(void) {
    char err[256], path[512];
    bn_lora *l = bn_lora_from_model(fake_model(), BN_LORA_FFN, 4, 8, 0.05f, err, sizeof err);
    if (!l) { CHECK(0, "%s", err); return; }
    bn_lora_init_peft(l, 7);
    bn_adamw *o = bn_adamw_new(l->n_params);
    bn_adamw_cfg cfg = bn_adamw_cfg_default();
    for (int64_t i = 0; i < l->n_params; i++) l->grads[i] = 0.01f * (float)((i % 11) - 5);
    bn_adamw_step(o, &cfg, 1e-3f, l->params, l->grads);
    bn_adamw_step(o, &cfg, 1e-3f, l->params, l->grads);
    bn_train_pos pos = {.step = 2, .total_steps = 120, .epoch = 1, .data_pos = 17};
    bn_rng_seed(&pos.rng, 99);
    bn_rng_next(&pos.rng);
    snprintf(path, sizeof path, "%s/ckpt.bin", tmpdir);
    CHECK(bn_checkpoint_save(path, l, o, &pos, err, sizeof err) == 0, "save: %s", err);
    bn_lora *l2;
    bn_adamw *o2;
    bn_train_pos p2;
    CHECK(bn_checkpoint_load(path, &l2, &o2, &p2, err, sizeof err) == 0, "load: %s", err);
    if (l2) {
        CHECK(bn_lora_same_layout(l, l2) && l2->alpha == 8.0f && l2->dropout == 0.05f, "adapter layout and hyper-parameters");
        CHECK(memcmp(l->params, l2->params, (size_t)l->n_params * 4) == 0, "params bit-identical");
        CHECK(o2->t == 2 && memcmp(o->m, o2->m, (size_t)o->n * 4) == 0 && memcmp(o->v, o2->v, (size_t)o->n * 4) == 0, "AdamW m, v, t");
        CHECK(p2.step == 2 && p2.total_steps == 120 && p2.epoch == 1 && p2.data_pos == 17, "position");
        CHECK(bn_rng_next(&p2.rng) == bn_rng_next(&pos.rng), "RNG continues identically");
        bn_lora_free(l2);
        bn_adamw_free(o2);
    }
    // corruption: flip one byte in the middle → CRC error; truncate → error; bad magic → error
    size_t n;
    char *data = bn_read_file(path, &n, err, sizeof err);
    char bad[512];
    snprintf(bad, sizeof bad, "%s/ckpt_bad.bin", tmpdir);
    data[n / 2] ^= 0x10;
    bn_write_file_atomic(bad, data, n, err, sizeof err);
    CHECK(bn_checkpoint_load(bad, &l2, &o2, &p2, err, sizeof err) == -1 && strstr(err, "CRC32") && !l2, "bit flip detected: %s", err);
    data[n / 2] ^= 0x10;
    bn_write_file_atomic(bad, data, n - 100, err, sizeof err);
    CHECK(bn_checkpoint_load(bad, &l2, &o2, &p2, err, sizeof err) == -1 && strstr(err, "corrupted or truncated"), "truncation detected: %s", err);
    // hostile but well-formed: each 4-byte word of the header and tensor table (everything before the parameter
    // count) set to an edge value, the CRC recomputed: the load refuses with a message or loads; nothing is sized by
    // a value before it is checked against the file (a crash or an out-of-memory exit ends this test)
    const size_t header_end = n - 4 - (size_t)(12 * l->n_params + 16);
    const uint32_t edges[] = {0, 1, 0x7fffffffu, 0x80000000u, 0xffffffffu, 65537};
    int hostile = 0, hostile_loaded = 0;
    for (size_t k = 8; k + 4 <= header_end; k += 4)
        for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++) {
            char *h = xmalloc(n);
            memcpy(h, data, n);
            memcpy(h + k, &edges[e], 4);
            uint32_t crc = bn_crc32(0, h, n - 4);
            memcpy(h + n - 4, &crc, 4);
            bn_write_file_atomic(bad, h, n, err, sizeof err);
            free(h);
            err[0] = 0;
            hostile++;
            if (bn_checkpoint_load(bad, &l2, &o2, &p2, err, sizeof err) == 0) {
                hostile_loaded++;
                bn_lora_free(l2);
                bn_adamw_free(o2);
            } else CHECK(err[0] != 0, "hostile word at %zu = %u: refused without a message", k, edges[e]);
        }
    printf("hostile checkpoint headers: %d, %d loaded, the rest refused with a message\n", hostile, hostile_loaded);
    CHECK(hostile > 100 && hostile_loaded < hostile, "hostile headers exercised (%d)", hostile);
    memcpy(data, "GGUF", 4);
    bn_write_file_atomic(bad, data, n, err, sizeof err);
    CHECK(bn_checkpoint_load(bad, &l2, &o2, &p2, err, sizeof err) == -1 && strstr(err, "magic"), "wrong file type detected: %s", err);
    free(data);
    snprintf(bad, sizeof bad, "%s/missing.bin", tmpdir);
    CHECK(bn_checkpoint_load(bad, &l2, &o2, &p2, err, sizeof err) == -1, "missing file: %s", err);
    bn_lora_free(l);
    bn_adamw_free(o);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/bonsai_test_lora_XXXXXX");
    if (!mkdtemp(tmpdir)) return test_skip("cannot create a temp dir");
    test_targets();
    test_init_and_adapter();
    test_checkpoint();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", tmpdir);
    return test_done("train_lora_io");
}
