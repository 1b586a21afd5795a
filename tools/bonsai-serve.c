// bonsai-serve — llama-server-compatible HTTP server on the bonsai engine (docs/server.md).
#include "serve/request.h"
#include "serve/server.h"
#include "base/util.h"
#include "base/args.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// fa_fn: -fa on|off|auto: accepted (attention is computed exactly either way).
static int fa_fn(void *base, const char *opt, const char *v, char *err, size_t errlen) {
    if (strcmp(v, "on") && strcmp(v, "off") && strcmp(v, "auto"))
        return bn_err(err, errlen, "'%s' is not one of on|off|auto", v);
    return 0;
}

// ngld_fn: -ngld N: accepted; the drafter runs on the target's device.
static int ngld_fn(void *base, const char *opt, const char *v, char *err, size_t errlen) {
    if (strcmp(v, "0") != 0)
        fprintf(stderr, "bonsai-serve: warning: -ngld %s: the drafter runs on the target's device (-ngl)\n", v);
    return 0;
}

// max_body_fn: --max-body BYTES (1..1 GiB).
static int max_body_fn(void *base, const char *opt, const char *v, char *err, size_t errlen) {
    long long n;
    if (bn_args_int(opt, v, 1, 1 << 30, &n, err, errlen) != 0) return -1;
    ((bn_server_params *)base)->max_body = (size_t)n;
    return 0;
}

// chat_template_fn: --chat-template chatml|qwen35|qwen3.
static int chat_template_fn(void *base, const char *opt, const char *v, char *err, size_t errlen) {
    if (bn_chat_format_parse(v) < 0) return bn_err(err, errlen, "'%s' is not one of chatml|qwen35|qwen3", v);
    ((bn_server_params *)base)->chat_template = v;
    return 0;
}

// The server's own options (-m, -t, -c, -ngl: bn_engine_args; the speculative ones: bn_spec_args).
#define O(f) offsetof(bn_server_params, f)
static const bn_arg serve_args[] = {
    BN_STR("-a, --alias", O(alias), "NAME", "model name in responses (default: file name)"),
    BN_STR("--host", O(host), "ADDR", "IPv4 address to bind"),
    BN_INT("--port", O(port), "N", "port (0: any free port)", 0, 65535),
    BN_INT("-np, --parallel", O(n_slots), "N", "number of slots", 1, 64),
    BN_INT("--queue", O(queue_max), "N", "requests that may wait for a slot (more get 503)", 0, 1000000),
    BN_FN("--max-body", max_body_fn, "BYTES", "request body limit (default 4194304; larger get 413)"),
    BN_STRS("--api-key", O(api_keys), O(n_api_keys), BN_SERVE_MAX_KEYS, "KEY",
            "require 'Authorization: Bearer KEY' (repeatable)"),
    BN_INT("--threads-http", O(threads_http), "N", "HTTP poll threads", 1, 256),
    BN_INT("-to, --timeout", O(timeout_s), "N", "read/write timeout in seconds of a connection with a request", 1,
           86400),
    BN_INT("--header-timeout", O(header_timeout_s), "N",
           "seconds a connection may take to send a complete request header", 1, 3600),
    BN_INT("--conn-per-ip", O(conn_per_ip), "N", "connections one client address may hold (0: no limit)", 0, 1 << 20),
    BN_INT("--grace-period", O(grace_s), "N", "seconds running requests may finish after SIGTERM/SIGINT", 0, 86400),
    BN_FN("--chat-template", chat_template_fn, "NAME",
          "chatml (plain, no <think>), qwen35 or qwen3 (default: the model's own template)"),
    BN_TRUE("--metrics", O(metrics), "enable GET /metrics (Prometheus)"),
    BN_FALSE("--no-slots", O(slots_endpoint), "disable GET /slots"),
    BN_FN("-fa, --flash-attn", fa_fn, "on|off|auto", "accepted (attention is computed exactly either way)"),
    BN_STR("--ready-file", O(ready_file), "FILE", "write \"host:port\" there once listening (for scripts/tests)"),
    BN_TRUE("--lora-init-without-apply", O(lora_init_without_apply),
            "load the --lora adapters with global scale 0 (set them later with POST /lora-adapters)"),
    BN_STR(
        "-md, --model-draft, --spec-draft-model", O(draft_path), "FILE",
        "DSpark drafter GGUF (legacy `dspark` or `dflash` convention); with it --spec-type defaults to draft-dspark"),
    BN_FN("-ngld, --spec-draft-ngl, --gpu-layers-draft", ngld_fn, "N",
          "accepted; the drafter runs on the target's device (the GPU with -ngl > 0)"),
    {0}};
#undef O

static const bn_args_tool tool = {
    .name = "bonsai-serve",
    .usage = "usage: bonsai-serve -m MODEL.gguf [options]\n",
    .notes = "-c 0 (the default) takes the context from the model, at most 4096; -ngl also places the speculative\n"
             "target. Adapters (--lora, --lora-scaled) run on the CPU (-ngl 0) or the GPU (every layer), not split.\n"
             "Not implemented (refused): --props, other llama-server options.\n"};

int main(int argc, char **argv) {
    bn_server_params p = {.host = "127.0.0.1", .port = 8080, .n_slots = 1, .n_threads = 0, .queue_max = 64,
                          .max_body = 4u << 20, .slots_endpoint = true, .threads_http = 4, .timeout_s = 600,
                          .header_timeout_s = 10, .conn_per_ip = 256, .grace_s = 20,
                          .spec = {.type = -1, .n_max = 3, .adaptive = true, .cpu_snap_bytes = BN_SPEC_CPU_SNAP_BYTES}};
    bn_engine_opts eng = {0};
    const bn_arg_table tables[] = {BN_TABLE(serve_args, &p), BN_TABLE(bn_engine_args, &eng),
                                   BN_TABLE(bn_spec_args, &p.spec), {0}};
    bn_args_parse(&tool, tables, argc, argv);
    p.model_path = eng.model;
    p.n_threads = eng.n_threads;
    p.n_ctx = eng.n_ctx;
    p.n_gpu_layers = eng.n_gpu_layers;
    p.n_lora = eng.n_lora;
    memcpy(p.lora, eng.lora, sizeof p.lora);
    memcpy(p.lora_scale, eng.lora_scale, sizeof p.lora_scale);
    if (!p.model_path) bn_args_fail(&tool, "-m MODEL.gguf is required");
    char err[256];
    if (bn_engine_opts_f32_activations(&eng, err, sizeof err)) bn_args_fail(&tool, "%s", err);
    if (p.spec.n_max < 1 || p.spec.n_max > 16)
        bn_args_fail(&tool, "--spec-draft-n-max: %d is not in 1..16", p.spec.n_max);
    if (p.spec.n_min > 16) bn_args_fail(&tool, "--spec-draft-n-min: %d is not in 0..16", p.spec.n_min);
    if (p.spec.type < 0) p.spec.type = p.draft_path ? BN_SPEC_DSPARK : BN_SPEC_NONE;
    if (p.spec.type == BN_SPEC_DSPARK && !p.draft_path)
        bn_args_fail(&tool, "--spec-type draft-dspark needs -md DRAFTER.gguf");
    if (p.spec.type == BN_SPEC_NONE) p.draft_path = NULL;
    p.spec.n_threads = p.n_threads;
    return bn_server_run(&p);
}
