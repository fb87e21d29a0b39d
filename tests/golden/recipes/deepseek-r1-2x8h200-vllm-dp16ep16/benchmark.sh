#!/usr/bin/env bash
# Benchmark DeepSeek-R1 on 2x8 H200 TP1 DP16 EP16 fp8 (vllm) once /health answers.
set -euo pipefail
until curl -sf http://localhost:8000/health >/dev/null; do sleep 10; done

# one point
servescope run \
  --url http://localhost:8000 \
  --model deepseek-ai/DeepSeek-R1 \
  --input-len 1024 \
  --output-len 256 \
  --concurrency 16 \
  --num-requests 200 \
  --warmup 10 \
  --out results/deepseek-r1-vllm-run

# the curve: throughput and latency per concurrency
servescope sweep \
  --url http://localhost:8000 \
  --model deepseek-ai/DeepSeek-R1 \
  --input-len 1024 \
  --output-len 256 \
  --concurrency 1,2,4,8,16,32,64,128 \
  --out results/deepseek-r1-vllm-sweep
