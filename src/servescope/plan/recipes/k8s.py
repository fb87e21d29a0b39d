"""Kubernetes manifests: a LeaderWorkerSet (one group = one model replica over `nodes` pods) and a
Service in front of the leader. API: leaderworkerset.x-k8s.io/v1 with spec.leaderWorkerTemplate
{size, restartPolicy, leaderTemplate, workerTemplate}; LWS injects LWS_LEADER_ADDRESS and
LWS_WORKER_INDEX into every pod (https://lws.sigs.k8s.io/docs/reference/leaderworkerset.v1/,
https://github.com/kubernetes-sigs/lws/tree/main/docs/examples/vllm). GPUs are requested with the
device-plugin resources nvidia.com/gpu / amd.com/gpu; /dev/shm is a memory-backed emptyDir."""

from __future__ import annotations

from typing import Any

from servescope.errors import ConfigError
from servescope.plan.recipes.launch import node_script
from servescope.plan.recipes.spec import RecipeSpec, slug
from servescope.plan.recipes.yamlout import dump_yaml_all

__all__ = ["k8s_docs", "k8s_yaml"]


def _container(spec: RecipeSpec, *, leader: bool) -> dict[str, Any]:
    lay = spec.layout
    gpu_key = "amd.com/gpu" if lay.gpu.vendor == "amd" else "nvidia.com/gpu"
    n = str(lay.gpus_per_node)
    script = node_script(
        spec,
        rank=0 if leader else 1,
        leader="$LWS_LEADER_ADDRESS",
        rank_expr="LWS_WORKER_INDEX" if spec.engine == "vllm" else "$LWS_WORKER_INDEX",
    )
    c: dict[str, Any] = {
        "name": "leader" if leader else "worker",
        "image": spec.container_image,
        "command": ["/bin/sh", "-c"],
        "args": [script],
        "env": [
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token", "optional": True}}}
        ],
        "resources": {"requests": {gpu_key: n}, "limits": {gpu_key: n}},
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "hf-cache", "mountPath": "/root/.cache/huggingface"},
        ],
    }
    if leader:
        c["ports"] = [{"name": "http", "containerPort": spec.port}]
        probe = {"httpGet": {"path": "/health", "port": spec.port}}
        c["readinessProbe"] = {**probe, "initialDelaySeconds": 60, "periodSeconds": 10, "failureThreshold": 3}
        # weights take many minutes to load: liveness waits for the startup probe
        c["startupProbe"] = {**probe, "periodSeconds": 30, "failureThreshold": 120}
        c["livenessProbe"] = {**probe, "periodSeconds": 30, "failureThreshold": 5}
    return c


def _pod(spec: RecipeSpec, *, leader: bool, name: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": name, "role": "leader" if leader else "worker"}},
        "spec": {
            "containers": [_container(spec, leader=leader)],
            "volumes": [
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
                # replace with a PersistentVolumeClaim holding the weights to skip the download
                {"name": "hf-cache", "emptyDir": {}},
            ],
        },
    }


def k8s_docs(spec: RecipeSpec) -> list[dict[str, Any]]:
    lay = spec.layout
    if spec.engine == "trtllm" and lay.nodes > 1:
        raise ConfigError("multi-node TensorRT-LLM on Kubernetes needs an MPI launcher; use the launch script")
    name = slug(spec.name)
    tmpl: dict[str, Any] = {
        "size": lay.nodes,
        "restartPolicy": "RecreateGroupOnPodRestart",
        "leaderTemplate": _pod(spec, leader=True, name=name),
    }
    tmpl["workerTemplate"] = _pod(spec, leader=False, name=name)  # required; unused when size is 1
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {"replicas": 1, "leaderWorkerTemplate": tmpl},
    }
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "selector": {"leaderworkerset.sigs.k8s.io/name": name, "role": "leader"},
            "ports": [{"name": "http", "port": spec.port, "targetPort": spec.port}],
        },
    }
    return [lws, svc]


def k8s_yaml(spec: RecipeSpec) -> str:
    head = (
        f"# {spec.model.name} on {spec.layout.describe()} with {spec.engine}: LeaderWorkerSet + Service.\n"
        "# Needs the LWS controller (https://lws.sigs.k8s.io) and a Secret hf-token/token for gated models.\n"
    )
    return head + dump_yaml_all(k8s_docs(spec))
