"""Recipes: golden files, YAML that parses, LeaderWorkerSet structure, engine flags per layout.

Regenerate the golden files after an intended change with:
    SERVESCOPE_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_recipes.py
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest
import yaml

from servescope.errors import ConfigError
from servescope.plan.recipes import RecipeSpec, render_all
from servescope.plan.recipes.k8s import k8s_docs
from servescope.sim.catalog.gpus import get_gpu
from servescope.sim.catalog.models import get_model
from servescope.sim.placement import Layout

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "recipes"
H100, H200 = get_gpu("h100"), get_gpu("h200")

CASES = {
    "deepseek-r1-8xh200-vllm": RecipeSpec(
        model=get_model("DeepSeek-R1"), layout=Layout(gpu=H200, tp=8, quant="fp8"), engine="vllm"
    ),
    "deepseek-r1-2x8h100-vllm-tp8pp2": RecipeSpec(
        model=get_model("DeepSeek-R1"), layout=Layout(gpu=H100, nodes=2, tp=8, pp=2, quant="fp8"), engine="vllm"
    ),
    "deepseek-r1-2x8h200-vllm-dp16ep16": RecipeSpec(
        model=get_model("DeepSeek-R1"),
        layout=Layout(gpu=H200, nodes=2, tp=1, dp=16, ep=16, quant="fp8"),
        engine="vllm",
        max_model_len=16384,
    ),
    "deepseek-r1-2x8h100-sglang-tp16": RecipeSpec(
        model=get_model("DeepSeek-R1"), layout=Layout(gpu=H100, nodes=2, tp=16, quant="fp8"), engine="sglang"
    ),
    "deepseek-v3-awq-8xh100-sglang": RecipeSpec(
        model=get_model("DeepSeek-V3-AWQ"),
        layout=Layout(gpu=H100, tp=8, quant="awq"),
        engine="sglang",
        max_model_len=8000,
        gpu_memory_utilization=0.95,
        max_num_seqs=128,
    ),
    "llama-3.1-70b-4xh100-trtllm-fp8": RecipeSpec(
        model=get_model("Llama-3.1-70B"),
        layout=Layout(gpu=H100, gpus_per_node=4, tp=4, quant="fp8", kv_dtype="fp8"),
        engine="trtllm",
    ),
    "llama-3.1-405b-2x8h100-trtllm": RecipeSpec(
        model=get_model("Llama-3.1-405B"), layout=Layout(gpu=H100, nodes=2, tp=8, pp=2), engine="trtllm"
    ),
    "qwen3-8b-1xmi300x-vllm": RecipeSpec(
        model=get_model("Qwen3-8B"), layout=Layout(gpu=get_gpu("mi300x"), gpus_per_node=1, tp=1), engine="vllm"
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_recipes_match_golden(case: str) -> None:
    files = render_all(CASES[case])
    folder = GOLDEN / case
    if os.environ.get("SERVESCOPE_UPDATE_GOLDEN"):
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
        for name, text in files.items():
            (folder / name).write_text(text, encoding="utf-8")
    expected = {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.iterdir())}
    assert sorted(files) == sorted(expected)
    for name, text in files.items():
        assert text == expected[name], f"{case}/{name} differs from the golden file"


@pytest.mark.parametrize("case", sorted(CASES))
def test_yaml_outputs_parse(case: str) -> None:
    for name, text in render_all(CASES[case]).items():
        if name.endswith(".yaml"):
            docs = [d for d in yaml.safe_load_all(text) if d is not None]
            assert docs, name
        if name.endswith(".sh"):
            # every command line is valid shell quoting
            for line in text.splitlines():
                if line and not line.startswith("#"):
                    shlex.split(line.rstrip("\\"))


@pytest.mark.parametrize("case", [c for c in sorted(CASES) if c != "llama-3.1-405b-2x8h100-trtllm"])
def test_k8s_manifest_structure(case: str) -> None:
    spec = CASES[case]
    docs = list(yaml.safe_load_all(render_all(spec)["k8s-leaderworkerset.yaml"]))
    lws = next(d for d in docs if d["kind"] == "LeaderWorkerSet")
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    tmpl = lws["spec"]["leaderWorkerTemplate"]
    assert tmpl["size"] == spec.layout.nodes
    key = "amd.com/gpu" if spec.layout.gpu.vendor == "amd" else "nvidia.com/gpu"
    for role in ("leaderTemplate", "workerTemplate"):
        pod = tmpl[role]["spec"]
        (c,) = pod["containers"]
        assert c["resources"]["limits"][key] == str(spec.layout.gpus_per_node)
        assert c["resources"]["requests"][key] == str(spec.layout.gpus_per_node)
        shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
        assert shm["emptyDir"]["medium"] == "Memory"
        assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]
    leader = tmpl["leaderTemplate"]["spec"]["containers"][0]
    for probe in ("readinessProbe", "livenessProbe"):
        assert leader[probe]["httpGet"] == {"path": "/health", "port": spec.port}
    svc = next(d for d in docs if d["kind"] == "Service")
    assert svc["spec"]["ports"][0]["port"] == spec.port


def test_compose_structure() -> None:
    doc = yaml.safe_load(render_all(CASES["deepseek-r1-8xh200-vllm"])["docker-compose.yaml"])
    (svc,) = doc["services"].values()
    assert svc["ipc"] == "host" and svc["shm_size"]
    dev = svc["deploy"]["resources"]["reservations"]["devices"][0]
    assert dev == {"driver": "nvidia", "count": 8, "capabilities": ["gpu"]}
    assert "/health" in " ".join(svc["healthcheck"]["test"])
    assert svc["entrypoint"] == ["vllm"] and svc["command"][:2] == ["serve", "deepseek-ai/DeepSeek-R1"]
    amd = yaml.safe_load(render_all(CASES["qwen3-8b-1xmi300x-vllm"])["docker-compose.yaml"])
    (a,) = amd["services"].values()
    assert a["devices"] == ["/dev/kfd", "/dev/dri"] and "deploy" not in a


def _flags(text: str) -> str:
    """A script as one line: continuations joined, whitespace collapsed."""
    return " ".join(text.replace("\\\n", " ").split())


def test_vllm_flags_follow_the_layout() -> None:
    single = _flags(render_all(CASES["deepseek-r1-8xh200-vllm"])["launch-vllm.sh"])
    assert "--tensor-parallel-size 8" in single and "--pipeline-parallel-size" not in single
    ray = _flags(render_all(CASES["deepseek-r1-2x8h100-vllm-tp8pp2"])["launch-vllm.sh"])
    assert "--pipeline-parallel-size 2" in ray and "--distributed-executor-backend ray" in ray
    assert "ray start --head" in ray and "ray start --address=10.0.0.1:6379 --block" in ray
    dp = render_all(CASES["deepseek-r1-2x8h200-vllm-dp16ep16"])["launch-vllm.sh"]
    node0, node1 = (_flags(x) for x in dp.split("# --- node 1"))
    for f in (
        "--enable-expert-parallel",
        "--data-parallel-size 16",
        "--data-parallel-size-local 8",
        "--data-parallel-address 10.0.0.1",
        "--data-parallel-rpc-port 13345",
    ):
        assert f in node0 and f in node1
    assert "--headless" in node1 and "--data-parallel-start-rank 8" in node1 and "--headless" not in node0
    k8s = render_all(CASES["deepseek-r1-2x8h200-vllm-dp16ep16"])["k8s-leaderworkerset.yaml"]
    assert "$((LWS_WORKER_INDEX * 8))" in k8s and "--data-parallel-address $LWS_LEADER_ADDRESS" in k8s


def test_sglang_and_trtllm_flags() -> None:
    sg = render_all(CASES["deepseek-r1-2x8h100-sglang-tp16"])["launch-sglang.sh"]
    n0, n1 = (_flags(x) for x in sg.split("# --- node 1"))
    assert "python3 -m sglang.launch_server" in n0
    for f in ("--tp 16", "--nnodes 2", "--dist-init-addr 10.0.0.1:20000", "--trust-remote-code"):
        assert f in n0 and f in n1
    assert "--node-rank 0" in n0 and "--node-rank 1" in n1
    files = render_all(CASES["llama-3.1-70b-4xh100-trtllm-fp8"])
    tr = _flags(files["launch-trtllm.sh"])
    assert "trtllm-serve meta-llama/Llama-3.1-70B-Instruct" in tr and "--tp_size 4" in tr
    assert "--extra_llm_api_options extra-llm-api-options.yaml" in tr
    opts = yaml.safe_load(files["extra-llm-api-options.yaml"])
    assert opts["kv_cache_config"]["dtype"] == "fp8" and opts["kv_cache_config"]["free_gpu_memory_fraction"] == 0.9
    dpa = RecipeSpec(
        model=get_model("DeepSeek-R1"),
        layout=Layout(gpu=H200, tp=1, dp=8, ep=8, quant="fp8"),
        engine="sglang",
        max_num_seqs=256,
    )
    flags = _flags(render_all(dpa)["launch-sglang.sh"])
    # SGLang divides --max-running-requests among the DP-attention ranks: 8 x 256 gives each rank 256
    assert "--tp 8" in flags and "--dp 8" in flags and "--enable-dp-attention" in flags
    assert "--max-running-requests 2048" in flags
    multi = render_all(CASES["llama-3.1-405b-2x8h100-trtllm"])
    assert "k8s-leaderworkerset.yaml" not in multi and "mpirun" in multi["launch-trtllm.sh"]
    assert "trtllm-llmapi-launch" in multi["launch-trtllm.sh"]


def test_benchmark_script_uses_servescope() -> None:
    b = _flags(render_all(CASES["deepseek-v3-awq-8xh100-sglang"])["benchmark.sh"])
    assert "servescope run --url http://localhost:8000 --model cognitivecomputations/DeepSeek-V3-AWQ" in b
    assert "servescope sweep" in b and "--concurrency 1,2,4,8,16,32,64,128" in b


def test_bad_specs_raise() -> None:
    with pytest.raises(ConfigError):
        RecipeSpec(model=get_model("Qwen3-8B"), layout=Layout(gpu=get_gpu("mi300x"), gpus_per_node=1), engine="trtllm")
    with pytest.raises(ConfigError):
        RecipeSpec(model=get_model("Qwen3-8B"), layout=Layout(gpu=H100, gpus_per_node=1), engine="tgi")
    with pytest.raises(ConfigError):
        k8s_docs(CASES["llama-3.1-405b-2x8h100-trtllm"])
