#!/usr/bin/env bash
# bench/serve-load.sh [BUILD_DIR] — throughput of bonsai-serve under a concurrent load, side by side in one run with
# llama-server (built from the npm llama.cpp bundle) and, with BEFORE=<build dir of another bonsai checkout>, an
# earlier bonsai-serve: CLIENTS concurrent clients each send REQS completions of NPRED tokens (greedy, ignore_eos)
# to a server with -np 4; total generated tokens / wall time. The servers take turns for ROUNDS rounds and the table
# gives the median and the range of each, and the ratios of the medians. llama-server runs with
# OMP_WAIT_POLICY=passive unless set: its spinning threads collapse when the cores are shared (notes/cpu-types.md).
# Env: PRESET (small), TYPE (Q1_0), THREADS (2), CLIENTS (16), REQS (4), NPRED (64), ROUNDS (3), BEFORE (unset).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
PRESET=${PRESET:-small}
TYPE=${TYPE:-Q1_0}
THREADS=${THREADS:-2}
CLIENTS=${CLIENTS:-16}
REQS=${REQS:-4}
NPRED=${NPRED:-64}
ROUNDS=${ROUNDS:-3}
command -v curl >/dev/null && command -v jq >/dev/null || { echo "bench/serve-load.sh needs curl and jq"; exit 1; }
[ -z "${BEFORE:-}" ] || [ -x "$BEFORE/tools/bonsai-serve" ] || { echo "BEFORE=$BEFORE: no tools/bonsai-serve there"; exit 1; }
./scripts/build-llamacpp.sh llama-server >/dev/null
LS=third_party/llama.cpp/build/bin/llama-server
dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT

"$B/tools/bonsai-mkmodel" "$dir/f16.gguf" --preset "$PRESET" --type f16 --seed 1 >/dev/null
"$B/tools/bonsai-quantize" "$dir/f16.gguf" "$dir/m.gguf" "$TYPE" --threads "$THREADS" >/dev/null

. bench/serve-lib.sh

start() { # name → starts that server on $port with 4 slots
    port=$(free_port)
    case $1 in
    now) "$B/tools/bonsai-serve" -m "$dir/m.gguf" --port "$port" -t "$THREADS" -c 1024 -np 4 2>"$dir/$1.log" & ;;
    before) "$BEFORE/tools/bonsai-serve" -m "$dir/m.gguf" --port "$port" -t "$THREADS" -c 1024 -np 4 2>"$dir/$1.log" & ;;
    llama) OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} "$LS" -m "$dir/m.gguf" --port "$port" -t "$THREADS" -c 4096 -np 4 --no-webui >/dev/null 2>"$dir/$1.log" & ;;
    esac
    pid=$!
    wait_up "$port" || { echo "$1 did not start"; tail -5 "$dir/$1.log"; exit 1; }
}
stop() { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; pid=; }

client() { # port client-id → sends REQS requests one after another; prints the tokens it got
    local n=0 k got
    for k in $(seq "$REQS"); do
        got=$(curl -s -m 120 "http://127.0.0.1:$1/completion" -d "{\"prompt\":\"Client $2 request $k: once upon a time\",\
\"n_predict\":$NPRED,\"temperature\":0,\"ignore_eos\":true,\"cache_prompt\":false}" | jq -r '.tokens_predicted // 0')
        n=$((n + got))
    done
    echo "$n"
}
load() { # port → total tok/s of CLIENTS clients at once
    local t0 t1 c total=0
    t0=$(date +%s.%N)
    for c in $(seq "$CLIENTS"); do client "$1" "$c" >"$dir/c$c" & done
    wait
    t1=$(date +%s.%N)
    for c in $(seq "$CLIENTS"); do total=$((total + $(cat "$dir/c$c"))); done
    [ "$total" -eq $((CLIENTS * REQS * NPRED)) ] || echo "warning: $total of $((CLIENTS * REQS * NPRED)) tokens" >&2
    echo "$total / ($t1 - $t0)" | bc -l
}

names=(now llama)
[ -n "${BEFORE:-}" ] && names=(now before llama)
declare -A runs
for r in $(seq "$ROUNDS"); do
    for s in "${names[@]}"; do
        start "$s"
        v=$(load "$port")
        stop
        runs[$s]="${runs[$s]:-} $v"
        printf 'round %d %-6s %8.1f tok/s\n' "$r" "$s" "$v"
    done
done

median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
range() { tr ' ' '\n' | grep . | sort -g | awk 'NR==1 {lo=$1} {hi=$1} END {printf "%.1f-%.1f", lo, hi}'; }
declare -A med
printf '\nmodel: %s preset, %s, %s threads; %d clients x %d requests x %d tokens, -np 4; %d rounds\n' \
    "$PRESET" "$TYPE" "$THREADS" "$CLIENTS" "$REQS" "$NPRED" "$ROUNDS"
printf 'load average at the end: %s\n\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '| server | total tok/s (median) | range | this build / it |\n|---|---:|---:|---:|\n'
for s in "${names[@]}"; do med[$s]=$(echo "${runs[$s]}" | median); done
for s in "${names[@]}"; do
    printf '| %s | %.1f | %s | %.2fx |\n' "$s" "${med[$s]}" "$(echo "${runs[$s]}" | range)" \
        "$(echo "${med[now]} / ${med[$s]}" | bc -l)"
done
