"""A deployment's engine limits and prefix caching by engine and version (deploy/deployment.py)."""

from __future__ import annotations

from servescope.deploy.deployment import Deployment
from tests.support.plan_deployments import llama_8b_h100


def test_deployment_limits_follow_the_engine_version() -> None:
    """`vllm` is current vLLM: 1024 sequences on a GPU of >= 70 GiB other than an A100 (vLLM >= 0.9
    EngineArgs defaults by device), 256 on an A100; `vllm-0.7` (V0) 256 without chunked prefill."""
    from servescope.deploy.deployment import Deployment

    assert Deployment.build(model="Llama-3.1-8B", gpu="h100").limits.max_num_seqs == 1024
    assert Deployment.build(model="Llama-3.1-8B", gpu="a100").limits.max_num_seqs == 256
    v0 = Deployment.build(model="Llama-3.1-8B", gpu="h100", engine="vllm-0.7").limits
    assert v0.max_num_seqs == 256 and not v0.chunked_prefill


def test_engines_prefix_caching_defaults() -> None:
    assert (
        llama_8b_h100().prefix_caching
        and llama_8b_h100(engine="sglang").prefix_caching
        and llama_8b_h100(engine="trtllm").prefix_caching
    )
    assert not llama_8b_h100(enable_prefix_caching=False).prefix_caching
    assert not llama_8b_h100(engine="vllm-0.7").prefix_caching  # V0: --enable-prefix-caching off by default
    assert llama_8b_h100(engine="vllm-0.7", enable_prefix_caching=True).prefix_caching
    mla = Deployment.build(model="DeepSeek-R1", gpu="h200", gpus=8, engine="vllm-0.7", enable_prefix_caching=True)
    assert not mla.prefix_caching  # 0.7 forces it off for MLA
    assert not mla.engine_config().enable_prefix_caching and mla.to_mapping()["enable_prefix_caching"] is False
