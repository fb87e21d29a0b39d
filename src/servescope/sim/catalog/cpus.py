"""CPU catalogue: `CPUSpec` (cores, matrix throughput at the ISA vLLM's CPU backend uses, memory bandwidth,
host memory) for vLLM's CPU backend, and each one's stand-in as a `GPUSpec` so `plan --gpu` can price it.
Pure.

vLLM's CPU backend runs one engine per socket (NUMA node), its OpenMP threads bound to that socket's cores
(`VLLM_CPU_OMP_THREADS_BIND`), its KV cache a fixed slice of host memory (`VLLM_CPU_KVCACHE_SPACE` GiB),
tensor parallelism across sockets. A CPU is named `NAME` (all its cores) or `NAME:N` (the N cores a VM or
a thread binding gives the engine): FLOPs scale with the cores, bandwidth with the cores up to what the
socket's memory channels deliver (`core_mem_bytes_per_s` each, `mem_bytes_per_s` at most).

Figures per socket:

- `xeon-8480`, Intel Xeon Platinum 8480+ (Sapphire Rapids, AMX): 56 cores at a 2.0 GHz base, AMX's TMUL
  1,024 BF16 FLOPs per cycle per core (Intel's 4th Gen Xeon AMX figures: 2,048 INT8 or 1,024 BF16 ops a
  cycle), so 56 x 1,024 x 2.0e9 = 114.7 TFLOPS; 8 channels of DDR5-4800, 8 x 38.4 = 307.2 GB/s.
- `epyc-9654`, AMD EPYC 9654 (Genoa, Zen 4, AVX-512 with BF16 on 256-bit datapaths): 96 cores at a 2.4 GHz
  base, two 256-bit FMA pipes, VDPBF16PS 2 x 16 BF16 pairs a cycle = 64 FLOPs per cycle per core:
  96 x 64 x 2.4e9 = 14.7 TFLOPS; 12 channels of DDR5-4800, 460.8 GB/s.
- `epyc-milan-kvm`, this project's 2-vCPU KVM guest (AMD EPYC, family 25 model 1: Milan, Zen 3, AVX2, no
  AVX-512 or AMX): measured here, one core, torch 2.13's CPU build and numpy, under the shared lock. An
  FP32 GEMM of 1,024-square runs at 53.1 GFLOP/s (the FMA peak is 2 x 8 x 2 x 2.445 GHz = 78.2); a BF16
  one at 0.9 GFLOP/s (no AVX512_BF16: a reference path), while vLLM's BF16 steps on this host imply
  ~10 GFLOP/s for the tiny Llama's small GEMMs (oneDNN refuses them, "fallback to torch linear"). The
  entry carries the FP32 figure, what a GEMM without native BF16 can reach. A 512 MB copy: 15.9 GB/s
  (numpy; torch 11.0), read + write.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from servescope.errors import ConfigError
from servescope.sim.catalog.gpus import GPUSpec

__all__ = ["CPUSpec", "CPUS", "get_cpu", "cpu_as_gpu", "is_cpu_name"]

_GIB = 1 << 30


@dataclass(frozen=True, slots=True, kw_only=True)
class CPUSpec:
    """One socket. FLOPs are dense, at the matrix ISA vLLM's CPU kernels use (AMX, AVX-512 BF16, AVX2)."""

    name: str
    cores: int
    bf16_flops: float  # all cores
    mem_bytes_per_s: float  # the socket's memory channels
    core_mem_bytes_per_s: float  # what one core streams alone
    memory_bytes: int  # host memory of a typical server of the kind (the KV cache is a slice of it)
    isa: str  # "amx", "avx512-bf16", "avx2"
    measured: bool = False  # measured on a host, not a datasheet's

    def with_cores(self, n: int) -> tuple[float, float]:
        """(BF16 FLOP/s, memory bytes/s) of `n` of its cores."""
        if not 1 <= n <= self.cores:
            raise ConfigError(f"{self.name} has {self.cores} cores; {n} asked for (NAME:N takes 1..{self.cores})")
        return self.bf16_flops * n / self.cores, min(self.mem_bytes_per_s, self.core_mem_bytes_per_s * n)


_CPU_LIST = (
    CPUSpec(
        name="xeon-8480",
        cores=56,
        bf16_flops=56 * 1024 * 2.0e9,
        mem_bytes_per_s=307.2e9,
        core_mem_bytes_per_s=12e9,
        memory_bytes=512 * _GIB,
        isa="amx",
    ),
    CPUSpec(
        name="epyc-9654",
        cores=96,
        bf16_flops=96 * 64 * 2.4e9,
        mem_bytes_per_s=460.8e9,
        core_mem_bytes_per_s=12e9,
        memory_bytes=768 * _GIB,
        isa="avx512-bf16",
    ),
    CPUSpec(
        name="epyc-milan-kvm",
        cores=2,
        bf16_flops=2 * 53.1e9,
        mem_bytes_per_s=2 * 15.9e9,
        core_mem_bytes_per_s=15.9e9,
        memory_bytes=24 * _GIB,
        isa="avx2",
        measured=True,
    ),
)

CPUS: Mapping[str, CPUSpec] = MappingProxyType({c.name: c for c in _CPU_LIST})


def _split(name: str) -> tuple[str, int | None]:
    key = name.lower().replace("_", "-").replace(" ", "")
    base, sep, n = key.partition(":")
    if not sep:
        return base, None
    if not n.isdigit():
        raise ConfigError(f"CPU {name!r}: after ':' comes the number of cores the engine gets, e.g. {base}:16")
    return base, int(n)


def is_cpu_name(name: str) -> bool:
    """Whether `name` (`NAME` or `NAME:N`) names a catalogued CPU."""
    return name.lower().replace("_", "-").replace(" ", "").partition(":")[0] in CPUS


def get_cpu(name: str) -> tuple[CPUSpec, int]:
    """The CPU `NAME` or `NAME:N` names and the cores the engine gets."""
    base, n = _split(name)
    if base not in CPUS:
        raise ConfigError(f"unknown CPU {name!r}; known: {', '.join(CPUS)} (NAME:N for N of its cores)")
    cpu = CPUS[base]
    cores = cpu.cores if n is None else n
    cpu.with_cores(cores)  # validates
    return cpu, cores


def cpu_as_gpu(name: str) -> GPUSpec:
    """A CPU socket (or N of its cores) as the `GPUSpec` the planner prices: memory bandwidth for HBM, the
    matrix ISA's BF16 rate for every precision (vLLM's CPU backend has no FP8 or FP4 GEMMs: weights of
    those dequantize to BF16), host memory for device memory, no scale-up fabric (sockets talk over the
    host's inter-socket link; tensor parallelism across them is priced as without NVLink)."""
    cpu, cores = get_cpu(name)
    flops, bw = cpu.with_cores(cores)
    label = cpu.name if cores == cpu.cores else f"{cpu.name}:{cores}"
    return GPUSpec(
        name=label,
        memory_bytes=cpu.memory_bytes,
        hbm_bytes_per_s=bw,
        bf16_flops=flops,
        fp8_flops=flops,
        int4_flops=flops,
        interconnect_bytes_per_s=50e9,
        fp8_native=False,
        vendor="cpu",
    )
