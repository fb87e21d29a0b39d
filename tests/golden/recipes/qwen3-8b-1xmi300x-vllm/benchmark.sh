#!/usr/bin/env bash
# Benchmark Qwen3-8B on 1xMI300X TP1 bf16 (vllm) once /health answers.
set -euo pipefail
until curl -sf http://localhost:8000/health >/dev/null; do sleep 10; done

# one point
servescope run \
  --url http://localhost:8000 \
  --model Qwen/Qwen3-8B \
  --input-len 1024 \
  --output-len 256 \
  --concurrency 16 \
  --num-requests 200 \
  --warmup 10 \
  --out results/qwen3-8b-vllm-run

# the curve: throughput and latency per concurrency
servescope sweep \
  --url http://localhost:8000 \
  --model Qwen/Qwen3-8B \
  --input-len 1024 \
  --output-len 256 \
  --concurrency 1,2,4,8,16,32,64,128 \
  --out results/qwen3-8b-vllm-sweep
