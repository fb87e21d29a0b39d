"""Engine default limits by family, release, device and harness (sim/defaults.py)."""

from __future__ import annotations


def test_vllm_v1_batch_budget_by_device_and_harness() -> None:
    """vLLM V1's EngineArgs defaults: behind the OpenAI server 2048 batched tokens and 256 sequences,
    8192 for the LLM class, but 8192 / 16384 on an H100 or H200 already in 0.8 (vllm PR #12369); from
    0.9 a >= 70 GiB GPU other than an A100 gets 1024 sequences and 8192 / 16384. An A100 keeps the
    small budget whatever the version."""
    from servescope.sim.defaults import engine_defaults

    def d(version: str, gpu: str, gib: float, offline: bool) -> tuple[int, int]:
        e = engine_defaults(
            "vllm-v1", max_model_len=8192, version=version, gpu=gpu, gpu_memory_gib=gib, offline=offline
        )
        return e.max_num_seqs, e.max_num_batched_tokens

    assert d("0.10.2", "h100", 79.6, False) == (1024, 8192)
    assert d("0.10.2", "h100", 79.6, True) == (1024, 16384)
    assert d("0.10.2", "a100", 80.0, False) == (256, 2048)
    assert d("0.10.2", "a100", 80.0, True) == (256, 8192)
    assert d("0.8.4", "h200", 140.4, False) == (256, 8192)
    assert d("0.8.5", "h100", 79.6, False) == (256, 8192)
    assert d("0.8.5", "h100", 79.6, True) == (256, 16384)
    assert d("0.8.5", "mi300x", 192.0, False) == (256, 2048)  # 0.8 chose by device name, not memory
    assert d("0.8.5", "a100", 80.0, False) == (256, 2048)


def test_vllm_v0_chunked_budget_for_long_contexts_by_release() -> None:
    """vLLM V0 switches chunked prefill on for contexts over 32K, with 512 batched tokens before 0.6.5
    and 2048 from 0.6.5 (vllm PR #10544); up to 32K it stays off and the budget covers a whole prompt."""
    from servescope.sim.defaults import engine_defaults

    def d(version: str, max_len: int) -> tuple[bool, int]:
        e = engine_defaults("vllm-v0", max_model_len=max_len, version=version, gpu="h100", gpu_memory_gib=79.6)
        return e.chunked_prefill, e.max_num_batched_tokens

    assert d("0.6.3.post2.dev308", 91680) == (True, 512)
    assert d("0.6.4.post1", 131072) == (True, 512)
    assert d("0.6.5", 131072) == (True, 2048)
    assert d("0.7.3", 131072) == (True, 2048)
    assert d("", 131072) == (True, 512)
    assert d("0.7.3", 16384) == (False, 16384)
