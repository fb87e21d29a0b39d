"""Deployment recipes: launch commands, docker-compose, Kubernetes manifests and the benchmark commands
for a planned layout. Pure string / YAML generation; `render_all` returns {file name: text}."""

from __future__ import annotations

from servescope.errors import ConfigError
from servescope.plan.recipes.bench import bench_script
from servescope.plan.recipes.compose import compose_yaml
from servescope.plan.recipes.k8s import k8s_yaml
from servescope.plan.recipes.launch import commands_for_node, launch_script
from servescope.plan.recipes.spec import ENGINES, RecipeSpec
from servescope.plan.recipes.trtllm import EXTRA_OPTIONS_FILE, trtllm_extra_options_yaml

__all__ = ["RecipeSpec", "ENGINES", "render_all", "commands_for_node", "launch_script"]


def render_all(spec: RecipeSpec) -> dict[str, str]:
    """Every recipe file for one deployment, keyed by file name, in a stable order."""
    out: dict[str, str] = {f"launch-{spec.engine}.sh": launch_script(spec)}
    if spec.engine == "trtllm":
        out[EXTRA_OPTIONS_FILE] = trtllm_extra_options_yaml(spec)
    if spec.layout.nodes == 1:
        out["docker-compose.yaml"] = compose_yaml(spec)
    else:
        for rank in range(spec.layout.nodes):
            out[f"docker-compose.node{rank}.yaml"] = compose_yaml(spec, rank=rank)
    try:
        out["k8s-leaderworkerset.yaml"] = k8s_yaml(spec)
    except ConfigError as exc:
        out["k8s-README.txt"] = f"No Kubernetes manifest: {exc}\n"
    out["benchmark.sh"] = bench_script(spec)
    return out
