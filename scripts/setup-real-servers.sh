#!/usr/bin/env bash
# Install both real third-party servers for the e2e tier (llama-server, transformers serve), in parallel.
# Idempotent and cached (see the two scripts it calls); a warm run takes well under 2 s.
# Prints the two binaries' paths on the last two lines of stdout.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log_dir="$(mktemp -d)"
trap 'rm -rf "$log_dir"' EXIT

"$here/setup-llama-server.sh" >"$log_dir/llama.out" 2>"$log_dir/llama.err" &
llama_pid=$!
"$here/setup-transformers-serve.sh" >"$log_dir/hf.out" 2>"$log_dir/hf.err" &
hf_pid=$!

status=0
wait "$llama_pid" || { status=1; echo "setup-llama-server.sh failed:" >&2; tail -n 40 "$log_dir/llama.err" >&2; }
wait "$hf_pid" || { status=1; echo "setup-transformers-serve.sh failed:" >&2; tail -n 40 "$log_dir/hf.err" >&2; }
[[ $status -eq 0 ]] || exit 1
tail -n1 "$log_dir/llama.out"
tail -n1 "$log_dir/hf.out"
