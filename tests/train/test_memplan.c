// tests/train/test_memplan.c — the training memory plan (train/memplan.h, docs/antidoom.md §19):
//  - the Qwen3.5-27B shape (bonsai-mkmodel's "27b" preset as a config, no file): every term against arithmetic written
//    out here from docs/model.md §3 and §10 (Q1_0 and F16 bases, r 32 on q,k,v,o,gate,up,down, 4096 tokens), the
//    CPU trainer's and the device's (cuda/train_graph.cu's buffers), the device's workspace with bf16 and fp32 GEMMs;
//  - tiny models written by bonsai-mkmodel: the planned base bytes against the file's tensors, the adapter size
//    against bn_lora_from_model, and the kept activations + one layer's working set against the peak of the
//    training graph's buffers (bn_train_mem_peak) for real forward and backward passes, exactly;
//  - bn_parse_bytes.
#include <string.h>
#include <unistd.h>
#include "tests/test.h"
#include "tests/train/fixture.h"
#include "train/memplan.h"
#include "train/lora.h"
#include "train/graph.h"
#include "train/trainer.h"
#include "quant/quant.h"

// shape_of_preset: a bonsai-mkmodel preset's config as the plan reads it (the metadata only; nothing written).
static bn_memshape shape_of_preset(const char *preset, int type) {
    bn_mkmodel_params mp;
    bn_mkmodel_defaults(&mp, preset);
    bn_memshape s = {.type_layer = type, .type_embd = type, .type_head = type};
    bn_config *c = &s.cfg;
    c->arch = strcmp(mp.arch, "qwen35") == 0 ? BN_ARCH_QWEN35 : BN_ARCH_QWEN3;
    c->n_embd = mp.n_embd, c->n_layer = mp.n_layer, c->n_ff = mp.n_ff, c->n_head = mp.n_head;
    c->n_head_kv = mp.n_head_kv, c->head_dim = mp.head_dim, c->n_rot = mp.n_rot, c->n_vocab = mp.n_vocab_small;
    c->ssm_d_state = mp.ssm_d_state, c->ssm_n_group = mp.ssm_n_group, c->ssm_dt_rank = mp.ssm_dt_rank;
    c->ssm_conv_kernel = mp.ssm_conv_kernel, c->full_attn_interval = mp.full_attn_interval;
    c->ssm_d_inner = mp.ssm_dt_rank * mp.ssm_d_state, c->tied_output = mp.tied;
    return s;
}

// The 27B, from docs/model.md: 2-D weights 26,893,352,960 elements, 1-D + conv 2,645,504 (F32); LoRA parameters per
// rank: 40,960 per attention layer (q 5120+12288, k and v 5120+1024, o 6144+5120) × 16, 67,584 per FFN × 64.
#define E2D 26893352960LL
#define E1D 2645504LL
#define LORA_PER_RANK (40960LL * 16 + 67584LL * 64)
// Elements per token of one layer's backward working set at r 32 (graph.c's buffers, counted by hand):
// GDN: the FFN/norm intermediates 4·5120 + 3·17408 = 72,704; the mixer's 2·10240 (mix, conv) + 4·48 (b, a, β, g) +
// 4·2048 (q, k, qn, kn) + 4·6144 (z, v, o, y) = 53,440; A·x of gate/up/down 3·32 = 96; gradients 3·5120 + 3·17408
// (layer) + 4·6144 + 5·2048 + 4·48 + 2·10240 (mixer) + 2·5120 (dx, dx_prev) = 133,312. Total 259,552.
// Attention: 72,704 + 12288 (q+gate) + 3·1024 (k, v, k normed) + 5·6144 = 118,784; A·x 7·32 = 224; gradients
// 15,360 + 52,224 + 6·6144 + 4·1024 + 12,288 + 10,240 = 131,072. Total 250,080 (the GDN layer is the larger).
#define WS_GDN_PER_TOKEN 259552LL
// Kept without recomputation, elements per token: the layer input + intermediates + A·x.
#define KEEP_GDN_FULL (5120LL + 72704 + 53440 + 96)
#define KEEP_ATTN_FULL (5120LL + 118784 + 224)
// Kernel scratch at 4096 tokens: the dequantization chunk (819 rows of 5120; the 27B's layers are too large for a
// dequantized copy), the LoRA backward's 2·r·T, the GDN checkpoints of 48 value heads: (4096/32 + 1 + 32 + 2) states
// of 128·128 + 7·128 floats each.
#define SCRATCH (819LL * 5120 * 4 + 2LL * 32 * 4096 * 4 + 48LL * (163LL * 16384 + 7 * 128) * 4)

// The device (cuda/train_graph.cu) at 4096 tokens, r 32, bf16 GEMMs (the default). Its one-layer arena holds, in
// fp32, the buffers every layer has, the larger of the two layer kinds' (they share that part), and A·x for all 13
// targets: 5·5120 (n; mo, which h and then dn reuse; dx, dx_prev; x_in, the kept bf16 input widened) + the Gated
// DeltaNet's 94,592 = 3·10240 (mix, dconv which the conv output reuses, dmix) + 7·2048 (q, k, qn, kn, dqn, dkn, dqs)
// + 8·6144 (z, v, o, y, dz, dv; dy and d_o, which dk and dq reuse) + 8·48 (b, a, β, g and 4 gradients), over
// attention's 87,040 = 11·6144 (query-sized rows) + 7·1024 (key-sized rows) + 12288 (dq with its gate, which q with its
// gate reuses) + 13·32 = 120,608 floats per token; and the FFN block's buffers for one span of 512 tokens: 2·5120 (mm,
// dmm) + 6·17408 (ga, up, act and their gradients) = 114,688 floats per span token.
#define DEV_LAYER_PER_TOKEN 120608LL
#define DEV_LAYER_SPAN (114688LL * 512)
#define DEV_LAYER (DEV_LAYER_PER_TOKEN * 4096 * 4 + DEV_LAYER_SPAN * 4)
// Its workspace: the largest of the linears' (attn_q's over 4096 tokens, bf16: its 1632-row bf16 chunk of 5120,
// 4,177,920 floats, dy's bf16 copy 12288·4096/2, 2·5120·4096 copies of x, 2·r·4096: 71,565,312 floats; the FFN's run
// over 512-token spans) and the GDN backward's 48 heads × ((4096/64 + 64 + 2) states of 128·128, checkpoints every
// ⌈√4096⌉ = 64 steps and one chunk, + 2·4096·128 q/k rows + 2·4096 dβ, dα sums), 152,961,024 floats: the GDN's.
#define DEV_SCRATCH (48LL * (130LL * 16384 + 2 * 4096 * 129) * 4)

// check_27b_device: the device column of the 27B plan p (B rows, 4096 tokens) against the arithmetic above.
static void check_27b_device(const bn_memplan *p, int batch, int64_t base, int64_t n_lora) {
    const int64_t T = 4096;
    const bn_memplan_device *d = &p->dev;
    CHECK(d->base == base && d->adapter == 4 * n_lora && d->grads == 4 * n_lora, "27b device weights and adapter");
    CHECK(d->kept == batch * (64LL * 5120 * T * 2 + 5120 * 4 + T * 4), "27b device kept %lld", (long long)d->kept);
    CHECK(d->layer == DEV_LAYER, "27b device layer buffers %lld vs %lld", (long long)d->layer, (long long)DEV_LAYER);
    CHECK(d->scratch == DEV_SCRATCH, "27b device scratch %lld vs %lld", (long long)d->scratch, (long long)DEV_SCRATCH);
    CHECK(d->head == (2LL * 248320 + 2 * 5120) * 4, "27b device head %lld", (long long)d->head);
    const int64_t want = base + 8 * n_lora + d->kept + DEV_LAYER + DEV_SCRATCH + d->head;
    CHECK(d->total == want, "27b device total %lld vs %lld", (long long)d->total, (long long)want);
}

// The device's workspace with bf16 GEMMs (the default) and fp32 ones. A linear's backward workspace with bf16 GEMMs
// holds the weight's bf16 chunk (8 Mi values in whole 8s of rows: 480 rows of 17408, 1632 of 5120, 1360 of 6144; all
// 8,355,840 values, 4,177,920 floats) and dy's bf16 copy (n_out·T values) where the fp32 path holds an fp32 chunk (4 Mi
// floats: 240 rows of 17408, 4,177,920 floats). The FFN's linears run over 512-token spans (ffn_down's bf16
// workspace: 4,177,920 + 5120·512/2 + 2·17408·512 + 2·32·512 = 23,347,200 floats), so the largest linear is attn_q
// over the whole row: at 65,536 tokens 4,177,920 + 12288·65536/2 + 2·5120·65536 + 2·32·65536 = 1,082,114,048 floats
// with bf16 GEMMs. The GDN backward's 48·((256 + 256 + 2)·16384 + 2·65536·(128 + 1)) = 1,215,823,872 floats
// (checkpoints every ⌈√65536⌉ = 256 steps; the dq/dk rows and the dβ, dα sums of every step) stay the largest at
// every length and with either GEMM.
#define DEV_SCRATCH_64K (1215823872LL * 4)

// check_27b_gemm: the 27B Q1_0 device workspace with bf16 and fp32 GEMMs at 4096 and 65,536 tokens against the
// arithmetic above; a GEMM input of 3 bytes is refused.
static void check_27b_gemm(void) {
    bn_memshape s = shape_of_preset("27b", BN_Q1_0);
    char err[256];
    const int ctx[2] = {4096, 65536};
    const int64_t want[2][2] = {{DEV_SCRATCH, DEV_SCRATCH}, {DEV_SCRATCH_64K, DEV_SCRATCH_64K}};
    for (int i = 0; i < 2; i++)
        for (int g = 0; g < 2; g++) {
            bn_memplan_cfg c = bn_memplan_cfg_default(ctx[i]);
            c.gemm_bytes = g ? 4 : 2;
            bn_memplan p;
            CHECK(bn_memplan_compute(&s, &c, &p, err, sizeof err) == 0, "27b plan: %s", err);
            CHECK(p.dev.scratch == want[i][g], "27b device workspace at %d tokens, %s GEMMs: %lld vs %lld", ctx[i],
                  g ? "fp32" : "bf16", (long long)p.dev.scratch, (long long)want[i][g]);
        }
    bn_memplan_cfg c = bn_memplan_cfg_default(4096);
    c.gemm_bytes = 3;
    bn_memplan p;
    CHECK(bn_memplan_compute(&s, &c, &p, err, sizeof err) != 0 && strstr(err, "GEMM"), "gemm_bytes 3 accepted: %s",
          err);
}

// check_27b_span: the 27B Q1_0 device at 4096 tokens with the FFN over the whole row (one span of 4096 tokens: the
// arena of 120,608 + 114,688 floats per token), and with fp32 GEMMs (the kept inputs fp32, no x_in); a negative span
// is refused.
static void check_27b_span(void) {
    bn_memshape s = shape_of_preset("27b", BN_Q1_0);
    char err[256];
    bn_memplan p, pf;
    bn_memplan_cfg c = bn_memplan_cfg_default(4096);
    c.ffn_chunk = 4096;
    CHECK(bn_memplan_compute(&s, &c, &p, err, sizeof err) == 0, "27b plan: %s", err);
    CHECK(p.dev.layer == (120608LL + 114688) * 4096 * 4, "27b device layer buffers, one 4096-token span: %lld",
          (long long)p.dev.layer);
    c = bn_memplan_cfg_default(4096);
    c.gemm_bytes = 4, c.batch = 1;
    CHECK(bn_memplan_compute(&s, &c, &pf, err, sizeof err) == 0, "27b plan: %s", err);
    CHECK(pf.dev.kept == 64LL * 5120 * 4096 * 4 + 5120 * 4 + 4096 * 4 && pf.dev.layer == DEV_LAYER - 5120LL * 4096 * 4,
          "27b device with fp32 GEMMs: kept %lld, layer buffers %lld", (long long)pf.dev.kept, (long long)pf.dev.layer);
    c.ffn_chunk = -1;
    CHECK(bn_memplan_compute(&s, &c, &pf, err, sizeof err) != 0 && strstr(err, "FFN span"), "a span of -1 accepted: %s",
          err);
}

// check_27b_tether: with a tether of 64-token windows the device adds one all-position graph: the 64 layer inputs
// {H, 64} as bf16, the final residual, the head's input and its gradient {H, 64}, the logits {V, 64} and the ids; the
// per-length buffers stay sized for the 4096-token rows.
static void check_27b_tether(void) {
    bn_memshape s = shape_of_preset("27b", BN_Q1_0);
    bn_memplan_cfg c = bn_memplan_cfg_default(4096);
    bn_memplan p, pt;
    char err[256];
    CHECK(bn_memplan_compute(&s, &c, &p, err, sizeof err) == 0, "27b plan: %s", err);
    c.tether_ctx = 64;
    CHECK(bn_memplan_compute(&s, &c, &pt, err, sizeof err) == 0, "27b plan with a tether: %s", err);
    const int64_t tether = 64LL * 5120 * 64 * 2 + (3LL * 5120 * 64 + 248320LL * 64) * 4 + 64 * 4;
    CHECK(pt.dev.tether == tether && pt.dev.total == p.dev.total + tether && pt.dev.layer == p.dev.layer &&
              pt.dev.scratch == p.dev.scratch, "27b device tether %lld vs %lld", (long long)pt.dev.tether,
          (long long)tether);
}

static void check_27b(int type, int bytes_per_block_x128, int batch, int act_bytes, int64_t *total) {
    bn_memshape s = shape_of_preset("27b", type);
    bn_memplan_cfg c = bn_memplan_cfg_default(4096);
    c.batch = batch;
    c.act_bytes = act_bytes;
    bn_memplan p;
    char err[256];
    CHECK(bn_memplan_compute(&s, &c, &p, err, sizeof err) == 0, "27b plan: %s", err);
    printf("\n27B %s, batch %d, %d-byte activations:\n", bn_type_name(type), batch, act_bytes);
    bn_memplan_print(stdout, &s, &c, &p);
    const int64_t T = 4096, base = E2D * bytes_per_block_x128 / 128 + E1D * 4, n_lora = 32 * LORA_PER_RANK;
    CHECK(p.n_gdn == 48 && p.n_attn == 16, "27b layers %d GDN %d attention", p.n_gdn, p.n_attn);
    CHECK(p.base == base, "27b base %lld vs %lld", (long long)p.base, (long long)base);
    CHECK(p.lora_params == n_lora && p.lora_tensors == 16 * 7 + 48 * 3, "27b LoRA %lld params, %d tensors",
          (long long)p.lora_params, p.lora_tensors);
    CHECK(p.adapter == 4 * n_lora && p.grads == 4 * n_lora && p.adamw == 8 * n_lora, "27b adapter state");
    CHECK(p.kept == batch * (64LL * 5120 * T + 5120) * act_bytes, "27b kept %lld", (long long)p.kept);
    CHECK(p.kept_full == batch * ((48 * KEEP_GDN_FULL + 16 * KEEP_ATTN_FULL) * T + 5120) * act_bytes,
          "27b kept without recompute %lld", (long long)p.kept_full);
    CHECK(p.keep_gdn_full == KEEP_GDN_FULL && p.keep_attn_full == KEEP_ATTN_FULL, "27b per-token keep");
    CHECK(p.layer_ws == WS_GDN_PER_TOKEN * T * act_bytes, "27b working set %lld vs %lld", (long long)p.layer_ws,
          (long long)(WS_GDN_PER_TOKEN * T * act_bytes));
    CHECK(p.scratch == SCRATCH, "27b scratch %lld vs %lld", (long long)p.scratch, (long long)SCRATCH);
    CHECK(p.logits == (2LL * batch + 1) * 248320 * 4, "27b logits");
    int64_t want = base + 16 * n_lora + p.kept + WS_GDN_PER_TOKEN * T * act_bytes + SCRATCH + p.logits;
    CHECK(p.total == want, "27b total %lld vs %lld", (long long)p.total, (long long)want);
    check_27b_device(&p, batch, base, n_lora);
    printf("device total %.2f GB\n", p.dev.total / 1e9);
    *total = p.total;
}

// peak_of_graphs: the training graph's buffer peak over `batch` forwards of T tokens and the first one's backward.
static size_t peak_of_graphs(const bn_model *m, bn_lora *l, int batch, int T) {
    char err[256];
    int32_t *tok = xmalloc(sizeof(int32_t) * T);
    for (int t = 0; t < T; t++) tok[t] = (int32_t)((t * 37 + 11) % 250);
    float *z = xmalloc(sizeof(float) * m->cfg.n_vocab), *dz = xcalloc((size_t)m->cfg.n_vocab, sizeof(float));
    dz[3] = 1.0f;
    bn_train_graph **g = xcalloc((size_t)batch, sizeof *g);
    bn_rng rng;
    bn_rng_seed(&rng, 5);
    bn_train_mem_peak(true);
    for (int b = 0; b < batch; b++) {
        g[b] = bn_train_forward(m, l, tok, T, &rng, z, err, sizeof err);
        CHECK(g[b] != NULL, "forward: %s", err);
    }
    CHECK(g[0] && bn_train_backward(g[0], dz, err, sizeof err) == 0, "backward: %s", err);
    size_t peak = bn_train_mem_peak(true);
    for (int b = 0; b < batch; b++) bn_train_graph_free(g[b]);
    free(g), free(z), free(dz), free(tok);
    return peak;
}

// check_tiny: a tiny model of 2-D type `type` (preset): base bytes, adapter size and activation peak against the plan.
static void check_tiny(const char *dir, const char *preset, int type, unsigned targets, float dropout, int batch,
                       int T) {
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/%s-%s.gguf", dir, preset, bn_type_name(type));
    bn_mkmodel_params mp;
    bn_mkmodel_defaults(&mp, preset);
    mp.type = type;
    CHECK(bn_mkmodel_write(&mp, path, err, sizeof err) == 0, "mkmodel: %s", err);
    bn_model *m = bn_model_load(path, err, sizeof err);
    CHECK(m != NULL, "load: %s", err);
    if (!m) return;
    bn_memshape s = bn_memshape_of_model(m);
    int64_t measured = s.base_bytes;
    s.base_bytes = 0;
    CHECK(bn_memplan_base_bytes(&s) == measured, "%s %s: base %lld computed vs %lld in the file", preset,
          bn_type_name(type), (long long)bn_memplan_base_bytes(&s), (long long)measured);
    bn_memplan_cfg c = bn_memplan_cfg_default(T);
    c.targets = targets, c.rank = 8, c.dropout = dropout, c.batch = batch;
    bn_memplan p;
    CHECK(bn_memplan_compute(&s, &c, &p, err, sizeof err) == 0, "plan: %s", err);
    bn_lora *l = bn_lora_from_model(m, targets, 8, 8, dropout, err, sizeof err);
    CHECK(l != NULL, "lora: %s", err);
    if (l) {
        CHECK(p.lora_params == l->n_params && p.lora_tensors == l->n_tensors, "%s: LoRA %lld/%d planned vs %lld/%d",
              preset, (long long)p.lora_params, p.lora_tensors, (long long)l->n_params, l->n_tensors);
        bn_lora_init_peft(l, 1);
        size_t peak = peak_of_graphs(m, l, batch, T);
        printf("%s %s targets 0x%x dropout %g batch %d T %d: graph peak %zu B, planned kept %lld + working set %lld\n",
               preset, bn_type_name(type), targets, dropout, batch, T, peak, (long long)p.kept, (long long)p.layer_ws);
        CHECK((int64_t)peak == p.kept + p.layer_ws, "%s %s: graph peak %zu vs planned %lld", preset, bn_type_name(type),
              peak, (long long)(p.kept + p.layer_ws));
        bn_lora_free(l);
    }
    bn_model_free(m);
}

// check_trainer: a short bn_ftpo_train run on the tiny model stays within the plan of its longest row.
static void check_trainer(const char *dir) {
    char path[512], err[256];
    bn_model *m = fx_tiny_model(dir, BN_F32, path, sizeof path);
    if (!m) return;
    bn_train_rows *rows = fx_ftpo_rows(m);
    bn_ftpo_train_opts o = bn_ftpo_train_defaults();
    o.rank = 4, o.batch = 3, o.grad_accum = 1, o.epochs = 1, o.max_steps = 2, o.quiet = true, o.eval_each_epoch = false;
    bn_memshape s = bn_memshape_of_model(m);
    bn_memplan_cfg c = bn_memplan_cfg_default(9); // fx_ftpo_rows: 6-9 tokens
    c.rank = 4, c.batch = 3, c.grad_accum = 1;
    bn_memplan p;
    CHECK(bn_memplan_compute(&s, &c, &p, err, sizeof err) == 0, "plan: %s", err);
    bn_ftpo_train_result res;
    bn_train_mem_peak(true);
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) == 0, "train: %s", err);
    size_t peak = bn_train_mem_peak(true);
    printf("trainer: graph peak %zu B over %lld steps, planned %lld\n", peak, (long long)res.steps,
           (long long)(p.kept + p.layer_ws));
    CHECK(res.steps == 2 && peak > 0 && (int64_t)peak <= p.kept + p.layer_ws, "trainer peak %zu > planned %lld", peak,
          (long long)(p.kept + p.layer_ws));
    bn_train_rows_free(rows);
    bn_model_free(m);
}

static void check_parse(void) {
    int64_t v = 0;
    CHECK(bn_parse_bytes("12G", &v) == 0 && v == 12LL << 30, "12G -> %lld", (long long)v);
    CHECK(bn_parse_bytes("1.5GiB", &v) == 0 && v == 3LL << 29, "1.5GiB -> %lld", (long long)v);
    CHECK(bn_parse_bytes("512m", &v) == 0 && v == 512LL << 20, "512m -> %lld", (long long)v);
    CHECK(bn_parse_bytes("141000000000", &v) == 0 && v == 141000000000LL, "plain bytes");
    CHECK(bn_parse_bytes("12X", &v) != 0 && bn_parse_bytes("", &v) != 0 && bn_parse_bytes("-1G", &v) != 0 &&
          bn_parse_bytes("0", &v) != 0, "malformed values are refused");
}

int main(void) {
    check_parse();
    int64_t q1_b1_16, q1_b1_32, q1_b4_32, f16_b4_32, f16_b1_32; // the table of docs/antidoom.md §19
    check_27b(BN_Q1_0, 18, 1, 2, &q1_b1_16);  // Q1_0: 18 B per 128 weights
    check_27b(BN_Q1_0, 18, 1, 4, &q1_b1_32);
    check_27b(BN_Q1_0, 18, 4, 4, &q1_b4_32);
    check_27b(BN_F16, 256, 4, 4, &f16_b4_32); // F16: 256 B per 128 weights
    check_27b(BN_F16, 256, 1, 4, &f16_b1_32);
    check_27b_tether();
    check_27b_gemm();
    check_27b_span();
    printf("\n27B r 32 q,k,v,o,gate,up,down, 4096 tokens: Q1_0 batch 1 %.2f GB (16-bit activations), %.2f GB (fp32), "
           "batch 4 %.2f GB (fp32); F16 batch 4 %.2f GB, batch 1 %.2f GB (fp32)\n", q1_b1_16 / 1e9, q1_b1_32 / 1e9,
           q1_b4_32 / 1e9, f16_b4_32 / 1e9, f16_b1_32 / 1e9);
    CHECK(q1_b1_16 < 12000000000LL, "27B Q1_0 with 16-bit activations over 12 GB: %lld", (long long)q1_b1_16);
    CHECK(f16_b4_32 < 141000000000LL, "27B F16 over 141 GB: %lld", (long long)f16_b4_32);
    char dir[] = "/tmp/bonsai-memplan-XXXXXX";
    if (!mkdtemp(dir)) return test_skip("cannot create a temp dir");
    check_tiny(dir, "tiny", BN_F32, BN_LORA_ATTN | BN_LORA_FFN, 0, 1, 24);
    check_tiny(dir, "tiny", BN_F16, BN_LORA_ATTN | BN_LORA_FFN, 0, 2, 17); // F16: the dequantized layer copy
    check_tiny(dir, "tiny", BN_F32, BN_LORA_ATTN | BN_LORA_FFN | BN_LORA_GDN | BN_LORA_HEAD, 0.1f, 2, 13);
    check_tiny(dir, "qwen3-tiny", BN_F32, BN_LORA_ATTN | BN_LORA_FFN | BN_LORA_HEAD, 0, 1, 20); // tied: no head pair
    check_trainer(dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
    return test_done("train_memplan");
}
