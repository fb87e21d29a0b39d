#!/usr/bin/env bash
# Benchmark Llama-3.1-70B on 4xH100 TP4 fp8 (trtllm) once /health answers.
set -euo pipefail
until curl -sf http://localhost:8000/health >/dev/null; do sleep 10; done

# one point
servescope run \
  --url http://localhost:8000 \
  --model meta-llama/Llama-3.1-70B-Instruct \
  --input-len 1024 \
  --output-len 256 \
  --concurrency 16 \
  --num-requests 200 \
  --warmup 10 \
  --out results/llama-3-1-70b-trtllm-run

# the curve: throughput and latency per concurrency
servescope sweep \
  --url http://localhost:8000 \
  --model meta-llama/Llama-3.1-70B-Instruct \
  --input-len 1024 \
  --output-len 256 \
  --concurrency 1,2,4,8,16,32,64,128 \
  --out results/llama-3-1-70b-trtllm-sweep
