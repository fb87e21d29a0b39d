"""docker-compose file for one node. Compose spec: GPU access via deploy.resources.reservations.devices
(https://docs.docker.com/compose/how-tos/gpu-support/); ipc, shm_size, healthcheck
(https://docs.docker.com/reference/compose-file/services/). AMD GPUs: /dev/kfd and /dev/dri devices
and the video group (https://rocm.docs.amd.com/projects/install-on-linux/en/latest/how-to/docker.html)."""

from __future__ import annotations

from typing import Any

from servescope.plan.recipes.launch import commands_for_node, node_script
from servescope.plan.recipes.spec import RecipeSpec
from servescope.plan.recipes.trtllm import EXTRA_OPTIONS_FILE
from servescope.plan.recipes.yamlout import dump_yaml

__all__ = ["compose_doc", "compose_yaml"]

_CONTAINER_OPTIONS = f"/config/{EXTRA_OPTIONS_FILE}"


def _healthcheck(port: int) -> dict[str, Any]:
    # python3 is in every engine image; curl is not guaranteed.
    probe = f"import urllib.request; urllib.request.urlopen('http://localhost:{port}/health', timeout=5)"
    return {
        "test": ["CMD", "python3", "-c", probe],
        "interval": "30s",
        "timeout": "10s",
        "retries": 3,
        "start_period": "1800s",
    }  # loading hundreds of GB of weights takes minutes


def compose_doc(spec: RecipeSpec, *, rank: int = 0) -> dict[str, Any]:
    lay = spec.layout
    opts = _CONTAINER_OPTIONS if spec.engine == "trtllm" else None
    cmds = commands_for_node(spec, rank=rank, leader=spec.leader_address, options_path=opts)
    svc: dict[str, Any] = {"image": spec.container_image}
    if len(cmds) == 1:
        svc["entrypoint"] = [cmds[0][0]]
        svc["command"] = cmds[0][1:]
    else:
        svc["entrypoint"] = ["/bin/sh", "-c"]
        svc["command"] = [
            node_script(spec, rank=rank, leader=spec.leader_address, options_path=opts) if cmds else "sleep infinity"
        ]
    svc["ipc"] = "host"
    svc["shm_size"] = "16gb"
    if lay.nodes > 1:
        svc["network_mode"] = "host"  # NCCL, Ray and the DP RPC port need the node's own addresses
    else:
        svc["ports"] = [f"{spec.port}:{spec.port}"]
    vols = ["${HF_HOME:-~/.cache/huggingface}:/root/.cache/huggingface"]
    if spec.engine == "trtllm":
        vols.append(f"./{EXTRA_OPTIONS_FILE}:{_CONTAINER_OPTIONS}:ro")
    svc["volumes"] = vols
    svc["environment"] = {"HF_TOKEN": "${HF_TOKEN:-}"}
    if lay.gpu.vendor == "amd":
        svc["devices"] = ["/dev/kfd", "/dev/dri"]
        svc["group_add"] = ["video"]
        svc["security_opt"] = ["seccomp=unconfined"]
    else:
        svc["deploy"] = {
            "resources": {
                "reservations": {"devices": [{"driver": "nvidia", "count": lay.gpus_per_node, "capabilities": ["gpu"]}]}
            }
        }
    if rank == 0:
        svc["healthcheck"] = _healthcheck(spec.port)
    return {"services": {f"{spec.engine}-node{rank}" if lay.nodes > 1 else spec.engine: svc}}


def compose_yaml(spec: RecipeSpec, *, rank: int = 0) -> str:
    head = (
        f"# {spec.model.name} on {spec.layout.describe()} with {spec.engine}, node {rank} of {spec.layout.nodes}\n"
        "# docker compose up -d   (HF_TOKEN in the environment or an .env file)\n"
    )
    return head + dump_yaml(compose_doc(spec, rank=rank))
