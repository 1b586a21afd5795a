// bonsai-serve — llama-server-compatible HTTP server on the bonsai engine (docs/server.md).
#include "serve/server.h"
#include "base/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: bonsai-serve -m MODEL.gguf [options]\n"
            "  -m, --model FILE        model GGUF (required)\n"
            "  -a, --alias NAME        model name in responses (default: file name)\n"
            "  --host ADDR             IPv4 address to bind (default 127.0.0.1)\n"
            "  --port N                port (default 8080; 0 = any free port)\n"
            "  -c, --ctx-size N        context per slot (default 0 = from the model, at most 4096)\n"
            "  -np, --parallel N       number of slots (default 1)\n"
            "  -t, --threads N         CPU threads (default: all cores)\n"
            "  --queue N               requests that may wait for a slot (default 64; more get 503)\n"
            "  --max-body BYTES        request body limit (default 4194304; larger get 413)\n"
            "  --api-key KEY           require 'Authorization: Bearer KEY' (repeatable)\n"
            "  --threads-http N        HTTP poll threads (default 4)\n"
            "  --timeout N             read/write timeout in seconds of a connection with a request (default 600)\n"
            "  --header-timeout N      seconds a connection may take to send a complete request header (default 10)\n"
            "  --conn-per-ip N         connections one client address may hold (default 256; 0 = no limit)\n"
            "  --grace-period N        seconds running requests may finish after SIGTERM/SIGINT (default 20)\n"
            "  --chat-template NAME    chatml (plain, no <think>), qwen35 or qwen3 (default: the model's own)\n"
            "  --metrics               enable GET /metrics (Prometheus)\n"
            "  --no-slots              disable GET /slots\n"
            "  -ngl, --gpu-layers N    layers on the GPU (CUDA builds; also the speculative target): 0 all on the CPU\n"
            "                          (default), >= the model's layer count all on the GPU, in between the last N\n"
            "                          layers + the output head on the GPU, the first layers on the CPU\n"
            "  -fa, --flash-attn on|off|auto  accepted (attention is computed exactly either way)\n"
            "  --ready-file FILE       write \"host:port\" there once listening (for scripts/tests)\n"
            "Speculative decoding (DSpark, docs/dspark.md):\n"
            "  -md, --model-draft FILE DSpark drafter GGUF (legacy `dspark` or `dflash` convention)\n"
            "  --spec-type T           draft-dspark (default with -md) | none | draft-oracle (a measurement\n"
            "                          aid: drafts the target's own greedy continuation; not for real use)\n"
            "  --spec-draft-n-max N    drafts per round (default 3; the Bonsai drafters use 4)\n"
            "  --spec-draft-n-min N    shorter drafts are not verified (default 0)\n"
            "  --spec-draft-p-min P    confidence-head truncation (default 0 = off)\n"
            "  --no-spec-adaptive      keep drafting even when the online cost model says it does not pay\n"
            "  --spec-snap-mem MIB     CPU target: roll rejected drafts back to a snapshot kept after every verified\n"
            "                          token while n-max + 1 snapshots fit in MIB MiB per slot (default 256); beyond,\n"
            "                          or 0: restore the state before the verify and re-run the accepted tokens\n"
            "  -ngld N                 accepted; the drafter runs on the target's device (the GPU with -ngl > 0)\n"
            "Not implemented (refused): --lora, --props, other llama-server options.\n");
}

static const char *need(int argc, char **argv, int *i) { return bn_arg_next("bonsai-serve", argc, argv, i); }

// to_int: an integer option value in lo..hi (exit 1 with a message otherwise).
static int to_int(const char *flag, const char *v, int lo, int hi) { return (int)bn_arg_int("bonsai-serve", flag, v, lo, hi); }

int main(int argc, char **argv) {
    bn_server_params p = {.host = "127.0.0.1", .port = 8080, .n_slots = 1, .n_threads = 0, .queue_max = 64,
                          .max_body = 4u << 20, .slots_endpoint = true, .threads_http = 4, .timeout_s = 600,
                          .header_timeout_s = 10, .conn_per_ip = 256, .grace_s = 20,
                          .spec = {.type = -1, .n_max = 3, .adaptive = true, .cpu_snap_bytes = BN_SPEC_CPU_SNAP_BYTES}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) p.model_path = need(argc, argv, &i);
        else if (!strcmp(a, "-a") || !strcmp(a, "--alias")) p.alias = need(argc, argv, &i);
        else if (!strcmp(a, "--host")) p.host = need(argc, argv, &i);
        else if (!strcmp(a, "--port")) p.port = to_int(a, need(argc, argv, &i), 0, 65535);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) p.n_ctx = to_int(a, need(argc, argv, &i), 0, INT32_MAX);
        else if (!strcmp(a, "-np") || !strcmp(a, "--parallel")) p.n_slots = to_int(a, need(argc, argv, &i), 1, 64);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) p.n_threads = to_int(a, need(argc, argv, &i), 0, 4096);
        else if (!strcmp(a, "--queue")) p.queue_max = to_int(a, need(argc, argv, &i), 0, 1000000);
        else if (!strcmp(a, "--max-body")) p.max_body = (size_t)to_int(a, need(argc, argv, &i), 1, 1 << 30);
        else if (!strcmp(a, "--metrics")) p.metrics = true;
        else if (!strcmp(a, "--no-slots")) p.slots_endpoint = false;
        else if (!strcmp(a, "--ready-file")) p.ready_file = need(argc, argv, &i);
        else if (!strcmp(a, "--threads-http")) p.threads_http = to_int(a, need(argc, argv, &i), 1, 256);
        else if (!strcmp(a, "--timeout") || !strcmp(a, "-to")) p.timeout_s = to_int(a, need(argc, argv, &i), 1, 86400);
        else if (!strcmp(a, "--header-timeout")) p.header_timeout_s = to_int(a, need(argc, argv, &i), 1, 3600);
        else if (!strcmp(a, "--conn-per-ip")) p.conn_per_ip = to_int(a, need(argc, argv, &i), 0, 1 << 20);
        else if (!strcmp(a, "--grace-period")) p.grace_s = to_int(a, need(argc, argv, &i), 0, 86400);
        else if (!strcmp(a, "--chat-template")) {
            p.chat_template = need(argc, argv, &i);
            if (bn_chat_format_parse(p.chat_template) < 0) {
                fprintf(stderr, "bonsai-serve: --chat-template %s: use chatml, qwen35 or qwen3\n", p.chat_template);
                return 1;
            }
        }
        else if (!strcmp(a, "--api-key")) {
            if (p.n_api_keys == BN_SERVE_MAX_KEYS) {
                fprintf(stderr, "bonsai-serve: at most %d API keys\n", BN_SERVE_MAX_KEYS);
                return 1;
            }
            p.api_keys[p.n_api_keys++] = need(argc, argv, &i);
        } else if (!strcmp(a, "-ngl") || !strcmp(a, "--gpu-layers") || !strcmp(a, "--n-gpu-layers")) {
            p.n_gpu_layers = to_int(a, need(argc, argv, &i), 0, INT32_MAX);
        } else if (!strcmp(a, "-fa") || !strcmp(a, "--flash-attn")) {
            const char *v = need(argc, argv, &i);
            if (strcmp(v, "on") && strcmp(v, "off") && strcmp(v, "auto")) {
                fprintf(stderr, "bonsai-serve: -fa takes on, off or auto\n");
                return 1;
            }
        } else if (!strcmp(a, "-md") || !strcmp(a, "--model-draft") || !strcmp(a, "--spec-draft-model")) {
            p.draft_path = need(argc, argv, &i);
        } else if (!strcmp(a, "--spec-type")) {
            const char *v = need(argc, argv, &i);
            p.spec.type = bn_spec_type_from_name(v);
            if (p.spec.type < 0) {
                fprintf(stderr, "bonsai-serve: --spec-type %s is not supported (draft-dspark, draft-oracle, none)\n", v);
                return 1;
            }
        } else if (!strcmp(a, "--spec-draft-n-max") || !strcmp(a, "--draft-max")) {
            p.spec.n_max = to_int(a, need(argc, argv, &i), 1, 16);
        } else if (!strcmp(a, "--spec-draft-n-min") || !strcmp(a, "--draft-min")) {
            p.spec.n_min = to_int(a, need(argc, argv, &i), 0, 16);
        } else if (!strcmp(a, "--spec-draft-p-min") || !strcmp(a, "--draft-p-min")) {
            p.spec.p_min = (float)bn_arg_float("bonsai-serve", a, need(argc, argv, &i), 0, 1);
        } else if (!strcmp(a, "--spec-snap-mem")) {
            p.spec.cpu_snap_bytes = (size_t)to_int(a, need(argc, argv, &i), 0, 1 << 20) << 20;
        } else if (!strcmp(a, "--no-spec-adaptive")) {
            p.spec.adaptive = false;
        } else if (!strcmp(a, "-ngld") || !strcmp(a, "--spec-draft-ngl") || !strcmp(a, "--gpu-layers-draft")) {
            const char *v = need(argc, argv, &i);
            if (strcmp(v, "0") != 0)
                fprintf(stderr, "bonsai-serve: warning: -ngld %s: the drafter runs on the target's device (-ngl)\n", v);
        } else {
            bn_arg_unknown("bonsai-serve", a);
        }
    }
    if (p.spec.type < 0) p.spec.type = p.draft_path ? BN_SPEC_DSPARK : BN_SPEC_NONE;
    if (p.spec.type == BN_SPEC_DSPARK && !p.draft_path) {
        fprintf(stderr, "bonsai-serve: --spec-type draft-dspark needs -md DRAFTER.gguf\n");
        return 1;
    }
    if (p.spec.type == BN_SPEC_NONE) p.draft_path = NULL;
    p.spec.n_threads = p.n_threads;
    if (!p.model_path) {
        usage(stderr);
        return 1;
    }
    return bn_server_run(&p);
}
