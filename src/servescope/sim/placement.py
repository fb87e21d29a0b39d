"""`Layout`: where one deployment places a model (which GPU, how many per node and how many nodes, the
TP x PP x DP x EP split) and in which precisions (weights, KV cache). Pure."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from servescope.errors import ConfigError
from servescope.sim.catalog.gpus import GPUSpec

__all__ = ["Layout", "QUANTS"]

QUANTS = ("bf16", "fp8", "fp8-ffn", "awq", "int4", "mxfp4", "nvfp4")
_KV_DTYPE_BYTES = MappingProxyType({"bf16": 2.0, "fp16": 2.0, "auto": 2.0, "fp8": 1.0})


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """How one deployment spreads a model: tp x pp x dp GPUs over `nodes` nodes of `gpus_per_node`.

    Routed experts are always split over all tp x dp GPUs of a pipeline stage: `ep` of those ranks
    each hold whole experts (n_experts / ep of them) and each expert is sliced over the remaining
    moe_tp = tp * dp / ep ranks (TensorRT-LLM's MoE TP x EP, e.g. attention TP8 = MoE TP2 x EP4).
    `ep` = 1 slices every expert over tp * dp: with data-parallel attention (dp > 1) the MoE layers
    still span every rank (vLLM and SGLang run the experts over the tp x dp group), so experts are
    never replicated per DP rank. vLLM --enable-expert-parallel is ep = tp * dp.
    """

    gpu: GPUSpec
    gpus_per_node: int = 8
    nodes: int = 1
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    quant: str = "bf16"
    kv_dtype: str = "bf16"
    load_mtp: bool = False  # DeepSeek MTP weights load only when MTP speculative decoding is on

    def __post_init__(self) -> None:
        for k in ("gpus_per_node", "nodes", "tp", "pp", "dp", "ep"):
            if getattr(self, k) < 1:
                raise ConfigError(f"{k} must be >= 1")
        if self.quant not in QUANTS:
            raise ConfigError(f"quant must be one of {', '.join(QUANTS)}, not {self.quant!r}")
        if self.kv_dtype not in _KV_DTYPE_BYTES:
            raise ConfigError(f"kv_dtype must be one of {', '.join(_KV_DTYPE_BYTES)}, not {self.kv_dtype!r}")
        if self.tp * self.pp * self.dp != self.gpus_per_node * self.nodes:
            raise ConfigError(
                f"tp*pp*dp = {self.tp}*{self.pp}*{self.dp} = {self.tp * self.pp * self.dp} "
                f"but the layout has {self.nodes}x{self.gpus_per_node} = "
                f"{self.nodes * self.gpus_per_node} GPUs"
            )
        if self.ep > 1 and self.ep > self.tp * self.dp:
            raise ConfigError(f"ep={self.ep} exceeds tp*dp={self.tp * self.dp}")
        if (self.tp * self.dp) % self.ep:
            raise ConfigError(f"ep={self.ep} must divide tp*dp={self.tp * self.dp} (MoE TP x EP = tp*dp ranks)")

    @property
    def moe_tp(self) -> int:
        """Ranks each routed expert is sliced over: tp * dp / ep."""
        return self.tp * self.dp // self.ep

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def kv_dtype_bytes(self) -> float:
        return _KV_DTYPE_BYTES[self.kv_dtype]

    def describe(self) -> str:
        parts = [
            f"{self.nodes}x{self.gpus_per_node} {self.gpu.name.upper()}"
            if self.nodes > 1
            else f"{self.gpus}x{self.gpu.name.upper()}",
            f"TP{self.tp}",
        ]
        if self.pp > 1:
            parts.append(f"PP{self.pp}")
        if self.dp > 1:
            parts.append(f"DP{self.dp}")
        if self.ep > 1:
            parts.append(f"EP{self.ep}" + (f" (MoE TP{self.moe_tp})" if self.moe_tp > 1 else ""))
        parts.append(self.quant)
        return " ".join(parts)
