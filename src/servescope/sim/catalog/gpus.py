"""GPU catalogue: `GPUSpec` (datasheet figures: memory, HBM bandwidth, dense FLOPS per precision,
scale-up bandwidth) and the GPUs servescope knows by name. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from servescope.errors import ConfigError

__all__ = ["GPUSpec", "GPUS", "get_gpu"]

_GIB = 1 << 30
_MIB = 1 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class GPUSpec:
    """Datasheet figures (dense, no sparsity). `memory_bytes` is what the driver reports as total."""

    name: str
    memory_bytes: int
    hbm_bytes_per_s: float
    bf16_flops: float
    fp8_flops: float  # where FP8 is not native (A100) this is the BF16 figure: W8A16 kernels
    int4_flops: float  # W4A16 (AWQ/GPTQ Marlin) dequantizes to BF16: the BF16 figure
    fp4_flops: float = 0.0  # FP4 tensor cores (Blackwell), dense; 0: FP4 weights dequantize to BF16
    interconnect_bytes_per_s: float  # per-GPU scale-up bandwidth (NVLink / Infinity Fabric)
    fp8_native: bool = True
    vendor: str = "nvidia"
    # GPUs one NVLink fabric joins across hosts (a rack-scale system: GB200 NVL72's 72 over trays of 4);
    # 0: the node's GPUs (an HGX or OAM board), the usual case
    nvlink_domain: int = 0

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / _GIB


# --- GPU datasheets ---------------------------------------------------------------------------
# H100 SXM5 80GB: NVIDIA H100 datasheet (nvidia.com/en-us/data-center/h100): 3.35 TB/s HBM3,
#   BF16 1,979 TFLOPS with sparsity -> 989.5 dense, FP8 3,958 sparse -> 1,979 dense, NVLink 900 GB/s.
#   nvidia-smi reports 81,559 MiB total.
# H200 SXM 141GB: NVIDIA H200 datasheet (nvidia.com/en-us/data-center/h200): 4.8 TB/s HBM3e, same
#   compute as H100 SXM, NVLink 900 GB/s. nvidia-smi reports 143,771 MiB.
# B200 (HGX B200, per GPU): NVIDIA Blackwell datasheet / HGX B200 spec (nvidia.com/en-us/data-center/hgx):
#   180 GB HBM3e (1.44 TB per 8 GPUs), 8 TB/s, FP8 9 PFLOPS sparse -> 4.5 dense, FP4 18 sparse -> 9
#   dense, BF16 2.25 PFLOPS dense, NVLink 5 1.8 TB/s. nvidia-smi reports 183,359 MiB.
# GB200 (NVL72, per GPU): NVIDIA GB200 NVL72 datasheet (nvidia.com/en-us/data-center/gb200-nvl72), the
#   rack's figures / 72: 186 GB HBM3e (13.4 TB), 8 TB/s (576 TB/s), FP4 1,440 PFLOPS sparse -> 10 dense,
#   FP8 720 sparse -> 5 dense, BF16 360 sparse -> 2.5 dense, NVLink 5 1.8 TB/s (130 TB/s) joining all
#   72 GPUs, four to a compute tray (host). nvidia-smi reports 189,471 MiB.
# MI300X: AMD Instinct MI300X datasheet (amd.com/en/products/accelerators/instinct/mi300/mi300x.html):
#   192 GB HBM3, 5.3 TB/s, BF16 1,307.4 TFLOPS dense, FP8 2,614.9 TFLOPS dense, Infinity Fabric 896 GB/s.
# A100 SXM4 80GB: NVIDIA A100 datasheet (nvidia.com/en-us/data-center/a100): 2,039 GB/s HBM2e,
#   BF16 312 TFLOPS dense, no FP8 tensor cores, NVLink 600 GB/s. nvidia-smi reports 81,920 MiB.
_GPU_LIST = (
    GPUSpec(
        name="h100",
        memory_bytes=81_559 * _MIB,
        hbm_bytes_per_s=3.35e12,
        bf16_flops=989.5e12,
        fp8_flops=1979e12,
        int4_flops=989.5e12,
        interconnect_bytes_per_s=900e9,
    ),
    GPUSpec(
        name="h200",
        memory_bytes=143_771 * _MIB,
        hbm_bytes_per_s=4.8e12,
        bf16_flops=989.5e12,
        fp8_flops=1979e12,
        int4_flops=989.5e12,
        interconnect_bytes_per_s=900e9,
    ),
    GPUSpec(
        name="b200",
        memory_bytes=183_359 * _MIB,
        hbm_bytes_per_s=8.0e12,
        bf16_flops=2250e12,
        fp8_flops=4500e12,
        int4_flops=2250e12,
        fp4_flops=9000e12,
        interconnect_bytes_per_s=1800e9,
    ),
    GPUSpec(
        name="gb200",
        memory_bytes=189_471 * _MIB,
        hbm_bytes_per_s=8.0e12,
        bf16_flops=2500e12,
        fp8_flops=5000e12,
        int4_flops=2500e12,
        fp4_flops=10000e12,
        interconnect_bytes_per_s=1800e9,
        nvlink_domain=72,
    ),
    GPUSpec(
        name="mi300x",
        memory_bytes=192 * _GIB,
        hbm_bytes_per_s=5.3e12,
        bf16_flops=1307.4e12,
        fp8_flops=2614.9e12,
        int4_flops=1307.4e12,
        interconnect_bytes_per_s=896e9,
        vendor="amd",
    ),
    GPUSpec(
        name="a100",
        memory_bytes=81_920 * _MIB,
        hbm_bytes_per_s=2.039e12,
        bf16_flops=312e12,
        fp8_flops=312e12,
        int4_flops=312e12,
        interconnect_bytes_per_s=600e9,
        fp8_native=False,
    ),
)
_GPU_ALIASES = {
    "h100-sxm": "h100",
    "h100-80gb": "h100",
    "h200-sxm": "h200",
    "a100-80gb": "a100",
    "a100-sxm": "a100",
    "mi300": "mi300x",
}


GPUS: Mapping[str, GPUSpec] = MappingProxyType({g.name: g for g in _GPU_LIST})


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(" ", "")


def get_gpu(name: str) -> GPUSpec:
    """The GPU `name` names, or a catalogued CPU (`sim.catalog.cpus`: `NAME` or `NAME:N` cores) as the
    `GPUSpec` the planner prices it by."""
    from servescope.sim.catalog import cpus  # it builds GPUSpecs: imported here, not at the top

    key = _norm(name)
    key = _GPU_ALIASES.get(key, key)
    if key in GPUS:
        return GPUS[key]
    if cpus.is_cpu_name(name):
        return cpus.cpu_as_gpu(name)
    raise ConfigError(
        f"unknown GPU or CPU {name!r}; GPUs: {', '.join(GPUS)}; CPUs: {', '.join(cpus.CPUS)} (NAME:N cores)"
    )
