"""Memory model: weights per GPU, engine reserve, KV bytes per token and KV capacity. Pure.

Formulas and sources are written out in docs/plan.md. In short, per GPU:

    usable    = memory_bytes * gpu_memory_utilization          (vLLM, SGLang mem_fraction_static)
    kv_bytes  = usable - weights_per_gpu - reserve              (TensorRT-LLM: util * (memory - weights - reserve))
    kv_tokens = floor(kv_bytes / kv_bytes_per_token_per_gpu / block) * block

`accounting` holds each engine's memory accounting, `weights` the weight bytes, `kvsize` the KV bytes
per token, `activations` the engine reserve and `fit` the fit and KV capacity of a layout.
"""
