"""What a recipe is generated from: one deployment (model, layout, engine, limits). Pure."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from servescope.errors import ConfigError
from servescope.sim.catalog.models import ModelSpec
from servescope.sim.placement import Layout

__all__ = ["RecipeSpec", "ENGINES", "join_command", "slug"]

ENGINES = ("vllm", "sglang", "trtllm")

# Container images each engine publishes (pin a tag in production).
_IMAGES = {
    ("vllm", "nvidia"): "vllm/vllm-openai:latest",
    ("vllm", "amd"): "rocm/vllm:latest",
    ("vllm", "cpu"): "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:latest",  # vLLM's x86 CPU image
    ("sglang", "nvidia"): "lmsysorg/sglang:latest",
    ("sglang", "amd"): "lmsysorg/sglang:latest-rocm",
    ("trtllm", "nvidia"): "nvcr.io/nvidia/tensorrt-llm/release:latest",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class RecipeSpec:
    model: ModelSpec
    layout: Layout
    engine: str = "vllm"
    max_model_len: int = 8192
    gpu_memory_utilization: float = 0.9
    max_num_seqs: int = 256
    port: int = 8000
    leader_address: str = "10.0.0.1"  # node 0 address for bare-metal multi-node commands
    image: str = ""

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ConfigError(f"recipes exist for {', '.join(ENGINES)}, not {self.engine!r}")
        if self.engine == "trtllm" and self.layout.gpu.vendor != "nvidia":
            raise ConfigError("TensorRT-LLM runs on NVIDIA GPUs only")
        if self.layout.nodes > 1 and self.layout.tp > self.layout.gpus_per_node and self.layout.dp > 1:
            raise ConfigError("data parallel across nodes needs tp <= gpus per node")

    @property
    def model_id(self) -> str:
        return self.model.hf_id or self.model.name

    @property
    def container_image(self) -> str:
        return self.image or _IMAGES[(self.engine, self.layout.gpu.vendor)]

    @property
    def name(self) -> str:
        return slug(f"{self.model.name}-{self.engine}")

    @property
    def needs_online_quant(self) -> bool:
        """Quantize at load time: only FP8 can be made from a BF16 checkpoint by the engine."""
        return self.layout.quant != self.model.default_quant


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:50]


def join_command(argv: list[str], *, indent: str = "  ") -> str:
    """argv as one shell command, one flag (with its value) per continued line."""
    lines: list[str] = []
    for tok in argv:
        q = _expansion(tok) or shlex.quote(tok)
        keep = lines == ["python3"] and tok in ("-m", "-c")  # "python3 -m module" reads as one unit
        if (tok.startswith("-") and not keep) or not lines:
            lines.append(q)
        else:
            lines[-1] += " " + q
    return (" \\\n" + indent).join(lines)


def _expansion(tok: str) -> str:
    """Tokens with shell expansions ($LWS_LEADER_ADDRESS:20000, $((LWS_WORKER_INDEX * 8))) stay
    expandable: bare, or in double quotes when they hold a space. Empty string: quote normally."""
    if "$" not in tok or re.fullmatch(r"[$A-Za-z0-9_:(){}* +\-./=]+", tok) is None:
        return ""
    return f'"{tok}"' if " " in tok else tok
