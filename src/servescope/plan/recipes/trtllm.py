"""TensorRT-LLM launch commands and the extra LLM-API options YAML.

Flags from the TensorRT-LLM docs: `trtllm-serve` (https://nvidia.github.io/TensorRT-LLM/commands/trtllm-serve/trtllm-serve.html)
with --backend pytorch, --tp_size, --pp_size, --ep_size, --max_batch_size, --max_num_tokens,
--max_seq_len, --kv_cache_free_gpu_memory_fraction, --trust_remote_code, --extra_llm_api_options;
the YAML keys (kv_cache_config, enable_attention_dp, cuda_graph_config) are LLM API arguments
(https://nvidia.github.io/TensorRT-LLM/llm-api/reference.html); multi-node runs under MPI with
`trtllm-llmapi-launch` (https://nvidia.github.io/TensorRT-LLM/commands/trtllm-serve/run-benchmark-with-trtllm-serve.html).
"""

from __future__ import annotations

from typing import Any

import yaml

from servescope.plan.recipes.spec import RecipeSpec

__all__ = [
    "trtllm_argv",
    "trtllm_extra_options",
    "trtllm_extra_options_yaml",
    "trtllm_commands_for_node",
    "EXTRA_OPTIONS_FILE",
]

EXTRA_OPTIONS_FILE = "extra-llm-api-options.yaml"


def trtllm_extra_options(spec: RecipeSpec) -> dict[str, Any]:
    lay = spec.layout
    kv: dict[str, Any] = {"free_gpu_memory_fraction": spec.gpu_memory_utilization, "enable_block_reuse": True}
    if lay.kv_dtype == "fp8":
        kv["dtype"] = "fp8"
    return {
        "kv_cache_config": kv,
        "enable_attention_dp": lay.dp > 1,
        "cuda_graph_config": {"enable_padding": True, "max_batch_size": min(spec.max_num_seqs, 512)},
        "print_iter_log": False,
    }


def trtllm_extra_options_yaml(spec: RecipeSpec) -> str:
    return yaml.safe_dump(trtllm_extra_options(spec), sort_keys=False)


def trtllm_argv(spec: RecipeSpec, *, options_path: str = EXTRA_OPTIONS_FILE) -> list[str]:
    lay = spec.layout
    argv = [
        "trtllm-serve",
        spec.model_id,
        "--host",
        "0.0.0.0",
        "--port",
        str(spec.port),
        "--backend",
        "pytorch",
        "--tp_size",
        str(lay.tp * lay.dp),
    ]
    if lay.pp > 1:
        argv += ["--pp_size", str(lay.pp)]
    if lay.ep > 1:
        argv += ["--ep_size", str(lay.ep)]
    argv += [
        "--max_batch_size",
        str(spec.max_num_seqs),
        "--max_num_tokens",
        "8192",
        "--max_seq_len",
        str(spec.max_model_len),
        "--kv_cache_free_gpu_memory_fraction",
        f"{spec.gpu_memory_utilization:g}",
        "--trust_remote_code",
        "--extra_llm_api_options",
        options_path,
    ]
    return argv


def trtllm_commands_for_node(
    spec: RecipeSpec, *, rank: int, leader: str, rank_expr: str | None = None, options_path: str = EXTRA_OPTIONS_FILE
) -> list[list[str]]:
    """Single node: trtllm-serve. Multi-node: node 0 starts every rank with mpirun over ssh (same image
    and paths on every node); other nodes only run sshd."""
    lay = spec.layout
    if lay.nodes == 1:
        return [trtllm_argv(spec, options_path=options_path)]
    if rank > 0:
        return []
    hosts = ",".join([f"{leader}:{lay.gpus_per_node}"] + [f"node{r}:{lay.gpus_per_node}" for r in range(1, lay.nodes)])
    mpi = ["mpirun", "--allow-run-as-root", "-H", hosts, "-n", str(lay.gpus), "trtllm-llmapi-launch"]
    return [mpi + trtllm_argv(spec, options_path=options_path)]
