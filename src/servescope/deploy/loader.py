"""I/O edge for the performance model: packaged engine profiles (saved deployments) and model configs.

`sim/` is pure; everything that reads a file for it lives here: the YAML profiles in
`deploy/profiles/` (or a path to one, with `extends:` resolved), and a user's Hugging Face
`config.json` for a model that is not in the catalogue.
"""

from __future__ import annotations

import dataclasses
import json
from importlib import resources
from pathlib import Path
from typing import Any

from servescope.errors import ConfigError
from servescope.sim.catalog.hfconfig import parse_hf_config
from servescope.sim.catalog.models import MODELS, ModelSpec, get_model
from servescope.sim.profile import Profile

__all__ = ["list_profiles", "load_profile", "load_raw_profile", "load_hf_config", "resolve_model"]


def resolve_model(name_or_config_path: str) -> ModelSpec:
    """A catalogue name (case-insensitive; HF ids too) or a path to a Hugging Face config.json (or its dir)."""
    try:
        return get_model(name_or_config_path)
    except ConfigError:
        path = Path(name_or_config_path)
        if path.suffix == ".json" or path.is_dir():
            return load_hf_config(path)
        raise ConfigError(
            f"unknown model {name_or_config_path!r}; known: {', '.join(MODELS)} "
            "(or give a path to a Hugging Face config.json)"
        ) from None


def load_hf_config(path: str | Path) -> ModelSpec:
    """I/O edge: read a config.json (or a directory holding one) and parse it."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read model config {p}: {exc}") from exc
    spec = parse_hf_config(cfg, name=p.parent.name or p.stem)
    # the checkpoint directory is what an engine is launched with (`vllm serve /models/foo`)
    return dataclasses.replace(spec, hf_id=str(p.parent))


def list_profiles() -> list[str]:
    """Names of the packaged profiles."""
    root = resources.files("servescope.deploy") / "profiles"
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".yaml"))


def load_profile(name_or_path: str) -> Profile:
    """A packaged profile by name (`tiny`, `deepseek-v3-awq`, ...) or a YAML file path: a saved
    deployment (`deploy.deployment`) or, for test profiles, explicit step-cost coefficients."""
    from servescope.deploy.deployment import profile_from_raw

    return profile_from_raw(_load_raw(name_or_path, depth=0))


def load_raw_profile(name_or_path: str) -> dict[str, Any]:
    """A profile's parsed YAML with `extends:` resolved (what `servescope emulate` flags override)."""
    return _load_raw(name_or_path, depth=0)


def _load_raw(name_or_path: str, depth: int) -> dict[str, Any]:
    """Parsed YAML, with `extends: BASE` resolved (nested mappings merge one level deep)."""
    import yaml

    if depth > 4:
        raise ConfigError(f"profile {name_or_path}: 'extends' nests too deep")
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.exists():
        text = path.read_text()
    else:
        res = resources.files("servescope.deploy") / "profiles" / f"{name_or_path}.yaml"
        if not res.is_file():
            raise ConfigError(f"unknown profile {name_or_path!r}; known: {', '.join(list_profiles())}")
        text = res.read_text()
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ConfigError(f"profile {name_or_path}: not a mapping")
    base_name = data.pop("extends", None)
    if base_name is None:
        return data
    base = _load_raw(str(base_name), depth + 1)
    merged = dict(base)
    for k, v in data.items():
        merged[k] = {**base[k], **v} if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return merged
