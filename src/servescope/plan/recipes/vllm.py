"""vLLM launch commands.

Flags from the vLLM docs: `vllm serve` engine arguments
(https://docs.vllm.ai/en/latest/configuration/engine_args.html), distributed serving with Ray for
multi-node TP/PP (https://docs.vllm.ai/en/latest/serving/distributed_serving.html), and multi-node
data parallel + expert parallel with --data-parallel-size-local / --data-parallel-address /
--data-parallel-rpc-port / --data-parallel-start-rank / --headless
(https://docs.vllm.ai/en/latest/serving/data_parallel_deployment.html,
https://docs.vllm.ai/en/latest/serving/expert_parallel_deployment.html).
"""

from __future__ import annotations

from servescope.plan.recipes.spec import RecipeSpec

__all__ = ["vllm_argv", "vllm_commands_for_node", "ray_wait_argv", "RAY_PORT", "DP_RPC_PORT"]

RAY_PORT = 6379
DP_RPC_PORT = 13345


def _base(spec: RecipeSpec) -> list[str]:
    lay = spec.layout
    argv = [
        "vllm",
        "serve",
        spec.model_id,
        "--host",
        "0.0.0.0",
        "--port",
        str(spec.port),
        "--tensor-parallel-size",
        str(lay.tp),
    ]
    if lay.pp > 1:
        argv += ["--pipeline-parallel-size", str(lay.pp)]
    argv += [
        "--max-model-len",
        str(spec.max_model_len),
        "--gpu-memory-utilization",
        f"{spec.gpu_memory_utilization:g}",
        "--max-num-seqs",
        str(spec.max_num_seqs),
    ]
    if spec.needs_online_quant and lay.quant == "fp8":
        argv += ["--quantization", "fp8"]  # online dynamic FP8 from a BF16 checkpoint
    if lay.kv_dtype == "fp8":
        argv += ["--kv-cache-dtype", "fp8"]
    if lay.ep > 1:
        argv += ["--enable-expert-parallel"]
    if spec.model.attention == "mla" or spec.model.is_moe:
        argv += ["--trust-remote-code"]
    return argv


def vllm_argv(
    spec: RecipeSpec, *, node_rank: int = 0, leader: str | None = None, worker_start_rank: str | None = None
) -> list[str]:
    """argv of `vllm serve` on one node. Single node, or multi-node DP (leader/headless workers).
    Multi-node without DP uses Ray (see `vllm_node_commands`) and runs this argv on the head only."""
    lay = spec.layout
    argv = _base(spec)
    if lay.dp > 1:
        argv += ["--data-parallel-size", str(lay.dp)]
        if lay.nodes > 1:
            local = lay.dp // lay.nodes
            addr = leader or spec.leader_address
            argv += [
                "--data-parallel-size-local",
                str(local),
                "--data-parallel-address",
                addr,
                "--data-parallel-rpc-port",
                str(DP_RPC_PORT),
            ]
            if node_rank > 0 or worker_start_rank is not None:
                argv += ["--data-parallel-start-rank", worker_start_rank or str(node_rank * local), "--headless"]
    elif lay.nodes > 1:
        argv += ["--distributed-executor-backend", "ray"]
    return argv


def ray_wait_argv(spec: RecipeSpec) -> list[str]:
    """Block until the Ray cluster has every GPU of the layout (vLLM needs them at start)."""
    code = (
        'import ray, time; ray.init(address="auto"); '
        f'[time.sleep(5) for _ in iter(lambda: ray.cluster_resources().get("GPU", 0) < {spec.layout.gpus}, False)]'
    )
    return ["python3", "-c", code]


def vllm_commands_for_node(
    spec: RecipeSpec, *, rank: int, leader: str, rank_expr: str | None = None
) -> list[list[str]]:
    """The commands node `rank` runs (0 = leader, serves the API). `rank_expr` replaces the literal
    rank in flags (e.g. "$LWS_WORKER_INDEX" in Kubernetes)."""
    lay = spec.layout
    if lay.nodes == 1:
        return [vllm_argv(spec)]
    if lay.dp > 1:
        start = None
        if rank > 0:
            local = lay.dp // lay.nodes
            start = f"$(({rank_expr} * {local}))" if rank_expr else str(rank * local)
        return [vllm_argv(spec, node_rank=rank, leader=leader, worker_start_rank=start)]
    if rank == 0:
        return [["ray", "start", "--head", f"--port={RAY_PORT}"], ray_wait_argv(spec), vllm_argv(spec)]
    return [["ray", "start", f"--address={leader}:{RAY_PORT}", "--block"]]
