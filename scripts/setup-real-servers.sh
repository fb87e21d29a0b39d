#!/usr/bin/env bash
# Install the real third-party servers for the e2e tier (llama-server, transformers serve, vLLM's CPU
# build), in parallel. Idempotent and cached (see the three scripts it calls); a warm run takes well
# under 2 s. Prints the llama-server binary, the `transformers` executable and the vLLM venv's python
# on the last three lines of stdout.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log_dir="$(mktemp -d)"
trap 'rm -rf "$log_dir"' EXIT

"$here/setup-llama-server.sh" >"$log_dir/llama.out" 2>"$log_dir/llama.err" &
llama_pid=$!
"$here/setup-transformers-serve.sh" >"$log_dir/hf.out" 2>"$log_dir/hf.err" &
hf_pid=$!
"$here/setup-vllm.sh" >"$log_dir/vllm.out" 2>"$log_dir/vllm.err" &
vllm_pid=$!

status=0
wait "$llama_pid" || { status=1; echo "setup-llama-server.sh failed:" >&2; tail -n 40 "$log_dir/llama.err" >&2; }
wait "$hf_pid" || { status=1; echo "setup-transformers-serve.sh failed:" >&2; tail -n 40 "$log_dir/hf.err" >&2; }
wait "$vllm_pid" || { status=1; echo "setup-vllm.sh failed:" >&2; tail -n 40 "$log_dir/vllm.err" >&2; }
[[ $status -eq 0 ]] || exit 1
tail -n1 "$log_dir/llama.out"
tail -n1 "$log_dir/hf.out"
tail -n1 "$log_dir/vllm.out"
