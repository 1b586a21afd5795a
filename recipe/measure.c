// recipe/measure.c — loop rate, perplexity and chosen_win of a model file, in-process.
#include "recipe/measure.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/lineout.h"
#include "base/progress.h"
#include "base/util.h"
#include "core/adapter.h"
#include "core/engine.h"
#include "core/model.h"
#include "core/tokenizer.h"
#include "eval/perplexity.h"
#include "mine/loop_eval.h"
#include "mine/options.h"
#include "train/trainer.h"

int bn_measure_loops(const char *model, const char *prompts_path, int max_prompts, const bn_measure_gen *g,
                     const char *label, const char *json_out, const char *log_out, bn_loop_stats *st, double *tok_s,
                     char *err, size_t errlen) {
    bn_prompt_opts po = bn_prompt_opts_default();
    po.max_prompts = max_prompts;
    bn_prompt *prompts = NULL;
    int n = bn_prompts_read(prompts_path, &po, &prompts, NULL, err, errlen);
    if (n < 0) return -1;
    bn_model *m = bn_model_load(model, err, errlen);
    bn_tokenizer *tok = m ? bn_tokenizer_from_gguf(m->gguf, err, errlen) : NULL;
    bn_lineout *log = NULL;
    int rc = -1;
    if (tok && (!log_out || (log = bn_lineout_open(log_out, err, errlen)))) {
        bn_mine_opts o = bn_mine_opts_default();
        o.mine.gen.temperature = 0;
        o.mine.gen.n_predict = g->n_predict;
        o.mine.thinking = g->thinking;
        bn_mine_opts_for_model(&o, m); // -2: the model's template decides
        o.eng.n_ctx = g->n_ctx;
        o.eng.n_threads = g->threads;
        o.eng.n_gpu_layers = g->n_gpu_layers;
        if (g->adapter) o.eng.lora[0] = g->adapter, o.eng.lora_scale[0] = 1, o.eng.n_lora = 1;
        o.n_parallel = 1;
        bn_loop_outcomes out;
        rc = bn_loop_eval_run(&o, m, tok, prompts, n, label, "bonsai-antidoom", log, &out, err, errlen);
        if (rc == 0 && log) rc = bn_lineout_commit(log, err, errlen);
        else if (log) bn_lineout_abort(log);
        if (rc == 0) {
            bn_loop_outcomes_stats(&out, false, st);
            if (tok_s) *tok_s = out.seconds > 0 ? out.n_tokens / out.seconds : 0;
            char *js = bn_loop_stats_json(st, label);
            if (json_out) rc = bn_write_file_atomic(json_out, js, strlen(js), err, errlen);
            free(js);
        }
        bn_loop_outcomes_free(&out);
    }
    bn_tokenizer_free(tok);
    bn_model_free(m);
    bn_prompts_free(prompts, n);
    return rc;
}

// Progress of one perplexity run.
typedef struct {
    bn_progress bar;
} ppl_progress;

static void on_chunk(void *ctx, int chunk, double running) {
    ppl_progress *p = ctx;
    char extra[48];
    snprintf(extra, sizeof extra, "ppl %.3f", running);
    bn_progress_update(&p->bar, chunk, extra);
}

double bn_measure_ppl(const char *model, const char *text_path, int n_ctx, const bn_measure_gen *g, char *err,
                      size_t errlen) {
    size_t len = 0;
    char *text = bn_read_file(text_path, &len, err, errlen);
    if (!text) return -1;
    bn_model *m = bn_model_load(model, err, errlen);
    bn_tokenizer *tok = m ? bn_tokenizer_from_gguf(m->gguf, err, errlen) : NULL;
    bn_lora_set *ls = tok && g->adapter ? bn_lora_set_open(m, &g->adapter, NULL, 1, err, errlen) : NULL;
    bn_engine *eng = tok && (ls || !g->adapter) ? bn_engine_open_lora(m, g->n_gpu_layers, g->threads, ls, err, errlen)
                                                : NULL;
    double ppl = -1;
    if (eng) {
        int32_t *tokens = NULL;
        int n_tok = bn_tokenize(tok, text, len, true, false, &tokens);
        int32_t bos = bn_tokenizer_add_bos(tok) ? bn_token_bos(tok) : -1;
        ppl_progress p;
        bn_progress_start(&p.bar, "chunks", n_tok / n_ctx);
        bn_ppl_hooks hooks = {.on_chunk = on_chunk, .ctx = &p};
        bn_ppl_result r;
        if (n_tok < 2 * n_ctx) bn_err(err, errlen, "%s: %d tokens, fewer than 2 x %d", text_path, n_tok, n_ctx);
        else if (bn_perplexity(eng, tokens, n_tok, n_ctx, -1, bos, &hooks, &r, err, errlen) == 0) ppl = r.ppl;
        bn_progress_finish(&p.bar, NULL);
        free(tokens);
    }
    bn_engine_free(eng);
    bn_tokenizer_free(tok);
    bn_model_free(m);
    free(text);
    return ppl;
}

double bn_measure_chosen_win(const char *model, const char *adapter, const char *pairs_path, char *err,
                             size_t errlen) {
    bn_model *m = bn_model_load(model, err, errlen);
    bn_lora *l = m && adapter ? bn_lora_load_gguf(adapter, err, errlen) : NULL;
    bn_tokenizer *tok = m ? bn_tokenizer_from_gguf(m->gguf, err, errlen) : NULL;
    bn_train_rows *rows = tok && (l || !adapter) ? bn_train_rows_load(pairs_path, tok, m->cfg.n_vocab, 6000, err, errlen) : NULL;
    double cw = -1;
    if (rows) {
        bn_ftpo_eval_result r;
        bn_ftpo_cfg cfg = bn_ftpo_cfg_antidoom();
        if (bn_ftpo_eval(m, rows, l, &cfg, 1, &r, err, errlen) == 0) {
            if (r.n_rows == 0) bn_err(err, errlen, "%s: no held-out rows", pairs_path);
            else cw = r.chosen_win;
        }
    }
    bn_train_rows_free(rows);
    bn_lora_free(l);
    bn_tokenizer_free(tok);
    bn_model_free(m);
    return cw;
}
