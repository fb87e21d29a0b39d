"""SGLang launch commands.

Flags from the SGLang docs: server arguments
(https://docs.sglang.io/advanced_features/server_arguments.html) and multi-node deployment with
--nnodes / --node-rank / --dist-init-addr (https://docs.sglang.io/references/multi_node_deployment/multi_node.html);
DP attention for DeepSeek with --enable-dp-attention (https://docs.sglang.io/basic_usage/deepseek_v3.html).
"""

from __future__ import annotations

from servescope.plan.recipes.spec import RecipeSpec

__all__ = ["sglang_argv", "sglang_commands_for_node", "DIST_INIT_PORT"]

DIST_INIT_PORT = 20000


def sglang_argv(spec: RecipeSpec, *, node_rank: str = "0", leader: str | None = None) -> list[str]:
    lay = spec.layout
    # SGLang's --tp counts every GPU of the group across nodes; DP attention splits it into --dp groups.
    argv = [
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        spec.model_id,
        "--host",
        "0.0.0.0",
        "--port",
        str(spec.port),
        "--tp",
        str(lay.tp * lay.dp),
    ]
    if lay.pp > 1:
        argv += ["--pp-size", str(lay.pp)]
    if lay.dp > 1:
        argv += ["--dp", str(lay.dp), "--enable-dp-attention"]
    if lay.ep > 1:
        argv += ["--ep-size", str(lay.ep)]
    # under DP attention SGLang divides both --max-running-requests and --chunked-prefill-size by
    # --dp (model_runner; ServerArgs._handle_data_parallelism): spec.max_num_seqs is one rank's
    argv += [
        "--context-length",
        str(spec.max_model_len),
        "--mem-fraction-static",
        f"{spec.gpu_memory_utilization:g}",
        "--max-running-requests",
        str(spec.max_num_seqs * lay.dp),
    ]
    if spec.needs_online_quant and lay.quant == "fp8":
        argv += ["--quantization", "fp8"]
    if lay.kv_dtype == "fp8":
        argv += ["--kv-cache-dtype", "fp8_e4m3"]
    if lay.nodes > 1:
        argv += [
            "--nnodes",
            str(lay.nodes),
            "--node-rank",
            node_rank,
            "--dist-init-addr",
            f"{leader or spec.leader_address}:{DIST_INIT_PORT}",
        ]
    argv += ["--trust-remote-code"]
    return argv


def sglang_commands_for_node(
    spec: RecipeSpec, *, rank: int, leader: str, rank_expr: str | None = None
) -> list[list[str]]:
    return [sglang_argv(spec, node_rank=rank_expr if rank_expr and rank > 0 else str(rank), leader=leader)]
