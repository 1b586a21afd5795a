# bench/serve-lib.sh — sourced by the server benchmarks (run from the repository root):
#   free_port        prints a free TCP port on 127.0.0.1
#   wait_up PORT     waits up to 60 s for GET /health on PORT to answer 200; returns 1 if it never does
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_up() { for _ in $(seq 600); do curl -sf "http://127.0.0.1:$1/health" >/dev/null && return 0; sleep 0.1; done; return 1; }
