// tests/train/test_trainer.c — the FTPO training loop end to end on the tiny qwen35 model:
// pair rows read from JSONL (ids, a string-only row tokenised with the model's vocab, the §7.3
// filters), training raises chosen_win and lowers the loss, early stopping fires, the adapter
// GGUF loads back, and stop-at-step-k + resume from the checkpoint reproduces an uninterrupted
// run bit for bit (with dropout, so the RNG state is carried too).
#include <string.h>
#include <unistd.h>
#include "tests/test.h"
#include "tests/train/fixture.h"
#include "synth/mkmodel.h"
#include "core/model.h"
#include "core/tokenizer.h"
#include "base/util.h"
#include "train/trainer.h"
#include "train/graph.h"
#include "train/lora.h"
#include "train/checkpoint.h"

static char dir[] = "/tmp/bonsai_test_trainer_XXXXXX";

// write_pairs: 8 rows with ids (rejected = the base model's argmax, 2 held out), filtered rows, and
// one held-out row without ids.
static void write_pairs(const bn_model *m, const char *path) {
    FILE *f = fopen(path, "w");
    int V = m->cfg.n_vocab;
    float *z = xmalloc(sizeof(float) * V);
    uint64_t s = 99;
    for (int r = 0; r < 8; r++) {
        int32_t ctx[12];
        int n = 5 + r % 4;
        for (int i = 0; i < n; i++) { s = s * 6364136223846793005ULL + 1442695040888963407ULL; ctx[i] = (int32_t)((s >> 33) % 250); }
        char err[256];
        bn_train_graph *g = bn_train_forward(m, NULL, ctx, n, NULL, z, err, sizeof err);
        bn_train_graph_free(g);
        int rej = 0;
        for (int j = 1; j < V; j++) if (z[j] > z[rej]) rej = j;
        int32_t chosen[3] = {(rej + 3) % V, (rej + 11) % V, rej};
        fx_pair_line(f, "p", r >= 6 ? "heldout" : "train", ctx, n, rej, chosen, 3);
    }
    // filtered: trimmed prompt, no chosen left, too long (max_seq 32 in the test)
    int32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = i;
    fx_pair_line(f, "[TRIMMED_SOURCE_PROMPT]x", NULL, ids + 1, 2, 3, ids + 4, 1);
    fx_pair_line(f, "p", NULL, ids + 1, 2, 3, (int32_t[]){3, 3}, 2);
    fx_pair_line(f, "p", NULL, ids, 40, 3, ids + 4, 1);
    fprintf(f, "\n");
    // antidoom row without ids: tokenised with the model's (synthetic byte-level) vocab
    fprintf(f, "{\"context_before\":\"hello world\",\"rejected_token\":\"a\",\"rejected_decoded\":\"a\","
               "\"multi_chosen_tokens\":[\"b\",\"c\"],\"multi_chosen_decoded\":[\"b\",\"c\"],\"source\":\"test\","
               "\"source_prompt\":\"p\",\"repetition\":{\"start_char\":0,\"repeat_start_char\":0,"
               "\"rejected_token_index\":0,\"period\":1,\"repeats\":1,\"snippet\":\"a\"},\"split\":\"heldout\"}\n");
    fclose(f);
    free(z);
}

static bn_ftpo_train_opts base_opts(void) {
    bn_ftpo_train_opts o = fx_ftpo_opts(BN_LORA_ATTN | BN_LORA_FFN | BN_LORA_GDN | BN_LORA_HEAD, 8, 2e-2f, 2, 2, 6);
    o.eval_each_epoch = false;
    return o;
}

static float *read_params(const char *path, int64_t *n) {
    char err[256];
    bn_lora *l = bn_lora_load_gguf(path, err, sizeof err);
    if (!l) { fprintf(stderr, "%s\n", err); return NULL; }
    float *p = xmalloc(sizeof(float) * l->n_params);
    memcpy(p, l->params, sizeof(float) * l->n_params);
    *n = l->n_params;
    bn_lora_free(l);
    return p;
}

int main(void) {
    if (!mkdtemp(dir)) return test_skip("cannot create a temp dir");
    char path[512], pairs[512], adapter[512], ckpt[512], err[256], logp[512];
    bn_mkmodel_params p;
    bn_mkmodel_defaults(&p, "tiny");
    snprintf(path, sizeof path, "%s/tiny.gguf", dir);
    if (bn_mkmodel_write(&p, path, err, sizeof err)) { CHECK(0, "mkmodel: %s", err); return test_done("train_trainer"); }
    bn_model *m = bn_model_load(path, err, sizeof err);
    if (!m) { CHECK(0, "load: %s", err); return test_done("train_trainer"); }
    bn_tokenizer *tok = bn_tokenizer_from_gguf(m->gguf, err, sizeof err);
    CHECK(tok != NULL, "tokenizer: %s", err);
    snprintf(pairs, sizeof pairs, "%s/pairs.jsonl", dir);
    write_pairs(m, pairs);
    bn_train_rows *rows = bn_train_rows_load(pairs, tok, m->cfg.n_vocab, 32, err, sizeof err);
    CHECK(rows != NULL, "rows: %s", err);
    if (!rows) return test_done("train_trainer");
    CHECK(rows->n_rows == 9, "rows kept %d (expected 9: 8 with ids + 1 tokenised)", rows->n_rows);
    CHECK(rows->n_dropped_trimmed == 1 && rows->n_dropped_no_chosen == 1 && rows->n_dropped_long == 1,
          "filters: trimmed %d, no chosen %d, long %d (expected 1 each)", rows->n_dropped_trimmed, rows->n_dropped_no_chosen,
          rows->n_dropped_long);
    CHECK(rows->rows[0].n_chosen == 2, "rejected id removed from the chosen list (%d left)", rows->rows[0].n_chosen);
    CHECK(rows->rows[6].heldout && !rows->rows[5].heldout, "split heldout parsed");
    const bn_train_row *tr = &rows->rows[8];
    int32_t *ids = NULL;
    int n_ids = bn_tokenize(tok, "hello world", 11, true, true, &ids);
    CHECK(n_ids > 0 && tr->n_ctx == n_ids && memcmp(tr->ctx, ids, sizeof(int32_t) * n_ids) == 0 &&
          tr->rejected == bn_token_lookup(tok, "a") && tr->n_chosen == 2 && tr->chosen[0] == bn_token_lookup(tok, "b"),
          "string row tokenised (n_ctx %d, rejected %d)", tr->n_ctx, tr->rejected);
    free(ids);
    // a bad line names its line number
    snprintf(logp, sizeof logp, "%s/bad.jsonl", dir);
    FILE *bf = fopen(logp, "w");
    fx_pair_line(bf, "p", NULL, (int32_t[]){1}, 1, 3, (int32_t[]){4}, 1);
    fx_pair_line(bf, "p", NULL, (int32_t[]){1}, 1, 99999, (int32_t[]){4}, 1);
    fclose(bf);
    bn_train_rows *bad = bn_train_rows_load(logp, tok, m->cfg.n_vocab, 32, err, sizeof err);
    CHECK(!bad && strstr(err, ":2:") && strstr(err, "rejected_id"), "bad row reported: %s", err);

    // 1. training improves chosen_win and the loss
    bn_ftpo_train_opts o = base_opts();
    snprintf(adapter, sizeof adapter, "%s/a.gguf", dir);
    snprintf(logp, sizeof logp, "%s/log.jsonl", dir);
    o.out_adapter = adapter;
    o.log_jsonl = logp;
    o.eval_each_epoch = true;
    bn_ftpo_train_result res;
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) == 0, "train: %s", err);
    printf("run 1: %lld steps, chosen_win %.3f -> %.3f, loss %.4f -> %.4f\n", (long long)res.steps, res.first_chosen_win,
           res.last_chosen_win, res.first_loss, res.last_loss);
    CHECK(res.total_steps == 12 && res.steps == 12, "S = ceil(6/4)·6 = 12 steps (got %lld/%lld)", (long long)res.steps,
          (long long)res.total_steps);
    CHECK(res.first_chosen_win == 0.0, "chosen_win starts at 0 (rejected = argmax), got %g", res.first_chosen_win);
    CHECK(res.last_chosen_win > 0.5, "chosen_win after training %g (expected > 0.5)", res.last_chosen_win);
    CHECK(res.last_loss < 0.95 * res.first_loss, "loss %g -> %g (expected to fall by > 5%%)", res.first_loss, res.last_loss);
    size_t loglen = 0;
    char *log = bn_read_file(logp, &loglen, err, sizeof err);
    CHECK(log && strstr(log, "\"step\":12,") && strstr(log, "\"epoch_eval\":6"), "JSONL log has every step and epoch evals");
    free(log);
    int64_t n1;
    float *pa = read_params(adapter, &n1);
    CHECK(pa != NULL, "adapter loads back");
    // no-grad evaluation: base vs trained adapter on the training rows
    bn_lora *la = bn_lora_load_gguf(adapter, err, sizeof err);
    bn_ftpo_cfg ec = bn_ftpo_cfg_antidoom();
    bn_ftpo_eval_result eb, ea, all;
    CHECK(la && bn_ftpo_eval(m, rows, NULL, &ec, 0, &eb, err, sizeof err) == 0 &&
          bn_ftpo_eval(m, rows, la, &ec, 0, &ea, err, sizeof err) == 0 && bn_ftpo_eval(m, rows, la, &ec, -1, &all, err, sizeof err) == 0,
          "eval: %s", err);
    printf("eval train rows: base chosen_win %.3f loss %.3f; adapter chosen_win %.3f loss %.3f\n", eb.chosen_win, eb.loss,
           ea.chosen_win, ea.loss);
    CHECK(eb.n_rows == 6 && all.n_rows == 9, "eval row counts %d / %d (expected 6 train, 9 all)", eb.n_rows, all.n_rows);
    CHECK(eb.chosen_win == 0.0 && ea.chosen_win > 0.5 && ea.loss < eb.loss, "adapter beats the base on chosen_win and loss");
    bn_lora_free(la);

    // 2. early stop
    bn_ftpo_train_opts oe = base_opts();
    oe.early_stop = 0.3f;
    oe.log_window = 2;
    CHECK(bn_ftpo_train(m, rows, &oe, &res, err, sizeof err) == 0, "train (early stop): %s", err);
    CHECK(res.early_stopped && res.steps < 12 && res.chosen_win_avg >= 0.3, "early stop after %lld steps (avg %g)",
          (long long)res.steps, res.chosen_win_avg);

    // 3. stop after 5 steps + resume == uninterrupted (dropout on: the RNG is in the checkpoint)
    bn_ftpo_train_opts od = base_opts();
    od.dropout = 0.1f;
    od.epochs = 3;
    snprintf(adapter, sizeof adapter, "%s/full.gguf", dir);
    od.out_adapter = adapter;
    CHECK(bn_ftpo_train(m, rows, &od, &res, err, sizeof err) == 0, "train (full): %s", err);
    int64_t nf;
    float *pf = read_params(adapter, &nf);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt.bin", dir);
    snprintf(adapter, sizeof adapter, "%s/part.gguf", dir);
    od.ckpt_path = ckpt;
    od.max_steps = 5;
    CHECK(bn_ftpo_train(m, rows, &od, &res, err, sizeof err) == 0 && res.steps == 5, "train (first 5 steps): %s", err);
    od.max_steps = 0;
    od.resume_path = ckpt;
    snprintf(adapter, sizeof adapter, "%s/resumed.gguf", dir);
    od.out_adapter = adapter;
    CHECK(bn_ftpo_train(m, rows, &od, &res, err, sizeof err) == 0 && res.steps == 6, "train (resumed): %s (%lld steps)", err,
          (long long)res.steps);
    int64_t nr;
    float *pr = read_params(adapter, &nr);
    CHECK(pf && pr && nf == nr && memcmp(pf, pr, sizeof(float) * nf) == 0, "resumed run is bit-identical to the full run");
    // the same with early stopping on: the running window travels in the checkpoint
    bn_ftpo_train_opts os = base_opts();
    os.early_stop = 0.5f;
    os.log_window = 3;
    snprintf(adapter, sizeof adapter, "%s/es_full.gguf", dir);
    os.out_adapter = adapter;
    bn_ftpo_train_result rfull, rres;
    CHECK(bn_ftpo_train(m, rows, &os, &rfull, err, sizeof err) == 0 && rfull.early_stopped, "early-stopped full run: %s", err);
    int64_t nes;
    float *pes = read_params(adapter, &nes);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt_es.bin", dir);
    os.ckpt_path = ckpt;
    os.max_steps = 2;
    snprintf(adapter, sizeof adapter, "%s/es_part.gguf", dir);
    CHECK(bn_ftpo_train(m, rows, &os, &rres, err, sizeof err) == 0 && rres.steps == 2 && !rres.early_stopped, "2 steps: %s", err);
    os.max_steps = 0;
    os.resume_path = ckpt;
    snprintf(adapter, sizeof adapter, "%s/es_resumed.gguf", dir);
    CHECK(bn_ftpo_train(m, rows, &os, &rres, err, sizeof err) == 0, "resume: %s", err);
    int64_t nes2;
    float *pes2 = read_params(adapter, &nes2);
    CHECK(rres.early_stopped && rres.steps == rfull.steps && pes && pes2 && nes == nes2 && memcmp(pes, pes2, sizeof(float) * nes) == 0,
          "resumed run early-stops at the same step (%lld vs %lld) with the same adapter", (long long)rres.steps,
          (long long)rfull.steps);
    free(pes); free(pes2);
    // a stop request (SIGINT in the tool) ends the run after the current step with a checkpoint
    bn_ftpo_train_opts oi = base_opts();
    snprintf(ckpt, sizeof ckpt, "%s/ckpt_int.bin", dir);
    oi.ckpt_path = ckpt;
    bn_ftpo_train_request_stop();
    CHECK(bn_ftpo_train(m, rows, &oi, &res, err, sizeof err) == 0 && res.interrupted && res.steps == 1,
          "interrupted after step 1 (%lld steps): %s", (long long)res.steps, err);
    bn_lora *li;
    bn_adamw *oa_;
    bn_train_pos pi;
    CHECK(bn_checkpoint_load(ckpt, &li, &oa_, &pi, err, sizeof err) == 0 && pi.step == 1, "interrupt checkpoint at step 1");
    if (li) { bn_lora_free(li); bn_adamw_free(oa_); }
    // a checkpoint from another configuration is refused
    od.rank = 8;
    CHECK(bn_ftpo_train(m, rows, &od, &res, err, sizeof err) == -1 && strstr(err, "does not match"), "mismatch refused: %s", err);
    free(pa); free(pf); free(pr);

    bn_train_rows_free(rows);
    bn_tokenizer_free(tok);
    bn_model_free(m);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    return test_done("train_trainer");
}
