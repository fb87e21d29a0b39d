"""The CPU catalogue: per-socket figures from their datasheet arithmetic, NAME:N core slices, and plan's
`--gpu` taking a CPU name with a clear error for an unknown one."""

from __future__ import annotations

import pytest

from servescope.errors import ConfigError
from servescope.sim.catalog.cpus import CPUS, cpu_as_gpu, get_cpu, is_cpu_name
from servescope.sim.catalog.gpus import GPUS, get_gpu


def test_datasheet_arithmetic() -> None:
    spr = CPUS["xeon-8480"]
    assert spr.bf16_flops == pytest.approx(114.7e12, rel=1e-3)  # 56 cores x 1,024 AMX BF16 FLOP/cycle x 2.0 GHz
    assert spr.mem_bytes_per_s == pytest.approx(8 * 4800e6 * 8)  # 8 channels of DDR5-4800
    genoa = CPUS["epyc-9654"]
    assert genoa.bf16_flops == pytest.approx(14.75e12, rel=1e-3)
    assert genoa.mem_bytes_per_s == pytest.approx(12 * 4800e6 * 8)


def test_core_slice_scales_flops_and_caps_bandwidth() -> None:
    full = cpu_as_gpu("xeon-8480")
    quarter = cpu_as_gpu("xeon-8480:14")
    assert quarter.bf16_flops == pytest.approx(full.bf16_flops / 4)
    assert quarter.hbm_bytes_per_s == pytest.approx(14 * 12e9)  # 14 cores stream less than 8 channels give
    assert cpu_as_gpu("xeon-8480:40").hbm_bytes_per_s == pytest.approx(307.2e9)  # the channels' cap
    assert quarter.name == "xeon-8480:14" and quarter.vendor == "cpu" and not quarter.fp8_native
    assert get_cpu("EPYC_9654:8") == (CPUS["epyc-9654"], 8)


def test_get_gpu_takes_cpu_names_and_rejects_unknown_ones() -> None:
    assert get_gpu("epyc-milan-kvm:1").hbm_bytes_per_s == pytest.approx(CPUS["epyc-milan-kvm"].core_mem_bytes_per_s)
    assert get_gpu("h100") is GPUS["h100"]
    assert is_cpu_name("xeon-8480:4") and not is_cpu_name("h100")
    with pytest.raises(ConfigError, match=r"unknown GPU or CPU 'tpu-v9'.*xeon-8480"):
        get_gpu("tpu-v9")
    with pytest.raises(ConfigError, match="has 56 cores"):
        get_gpu("xeon-8480:57")
    with pytest.raises(ConfigError, match="number of cores"):
        get_cpu("xeon-8480:many")
