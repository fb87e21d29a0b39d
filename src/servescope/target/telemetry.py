"""GPU telemetry during the measured window: power, energy, utilisation, memory used, SM clock.

Two sources, one shape (`results.energy.GpuReading` per GPU per sample):

- a **DCGM exporter** (`--gpu-metrics-url http://host:9400/metrics`, or any Prometheus page carrying
  DCGM's metric names), read by the one Prometheus reader (prometheus.py), one series per GPU told
  apart by its `UUID` label (else `gpu`, else `device`):

  | DCGM field | kind | unit | here |
  |---|---|---|---|
  | DCGM_FI_DEV_POWER_USAGE | gauge | W | power_w |
  | DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION | counter | mJ since boot | energy_j (/ 1000) |
  | DCGM_FI_DEV_GPU_UTIL | gauge | % | util_pct |
  | DCGM_FI_DEV_FB_USED | gauge | MiB | mem_used_mib |
  | DCGM_FI_DEV_SM_CLOCK | gauge | MHz | sm_clock_mhz |

  The exporter refreshes its values every collection interval (`dcgm-exporter -c MS`, 30 s by
  default): run it with `-c 500` or so for a run of a minute; the energy counter still gives the
  right energy between two refreshes that bracket the window, the time series are coarser.
- **NVML** (`--gpu-metrics-url nvml`; the default with `--serve`, whose server runs on this host):
  every GPU NVML sees, through `nvidia-ml-py` (the optional extra `gpu`). Energy is
  `nvmlDeviceGetTotalEnergyConsumption` (mJ since the driver loaded, Volta and later).

Sampling runs in a background thread with its own HTTP client (urllib), every `interval_s` (0.5 s),
from just before the clock to just after it: the hot path's event loop never waits on it. Each sample
is stamped with `perf_counter_ns`, the records' clock, so it lines up with the request timeline.
`Telemetry.finish` writes the samples to `gpu-telemetry.json` in the run directory and returns the
summary's `energy` block (results/energy.py); without a source it says why nothing was measured.
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Protocol

from servescope.results.energy import GpuReading, energy_block, not_available
from servescope.results.schema import Energy
from servescope.results.store import write_json
from servescope.target.prometheus import labelled_samples

__all__ = ["DCGM_FIELDS", "TELEMETRY_FILE", "Telemetry", "parse_dcgm", "start"]

TELEMETRY_FILE = "gpu-telemetry.json"
INTERVAL_S = 0.5
NVML = "nvml"
#: DCGM field -> (reading attribute, factor to its unit)
DCGM_FIELDS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_j", 1e-3),
    "DCGM_FI_DEV_GPU_UTIL": ("util_pct", 1.0),
    "DCGM_FI_DEV_FB_USED": ("mem_used_mib", 1.0),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
}
_FIELDS = ("power_w", "energy_j", "util_pct", "mem_used_mib", "sm_clock_mhz")


def parse_dcgm(text: str) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, str]]]:
    """A DCGM exporter page -> per GPU its fields (in our units), and per GPU its identity labels
    (gpu index, model name, host). GPUs are keyed by UUID, else index, else device."""
    values: dict[str, dict[str, float]] = {}
    info: dict[str, dict[str, str]] = {}
    for name, labels, text_value in labelled_samples(text):
        field = DCGM_FIELDS.get(name)
        if field is None:
            continue
        key = labels.get("UUID") or labels.get("gpu") or labels.get("device") or "0"
        if "UUID" not in labels and labels.get("Hostname"):  # an index is unique on its host only
            key = f"{labels['Hostname']}:{key}"
        try:
            v = float(text_value)
        except ValueError:
            continue
        if v != v:  # NaN: the exporter has no value yet
            continue
        values.setdefault(key, {})[field[0]] = v * field[1]
        if key not in info:
            info[key] = {k: labels[k] for k in ("gpu", "UUID", "device", "modelName", "Hostname") if k in labels}
    return values, info


class _Source(Protocol):
    name: str

    def read(self) -> dict[str, dict[str, float]]: ...

    def info(self) -> dict[str, dict[str, str]]: ...


class _Dcgm:
    """GET the exporter's page with urllib (this thread's own client)."""

    name = "dcgm"

    def __init__(self, url: str, timeout_s: float = 2.0) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self._info: dict[str, dict[str, str]] = {}

    def read(self) -> dict[str, dict[str, float]]:
        with urllib.request.urlopen(self.url, timeout=self.timeout_s) as r:
            text = r.read().decode("utf-8", errors="replace")
        values, info = parse_dcgm(text)
        self._info.update(info)
        return values

    def info(self) -> dict[str, dict[str, str]]:
        return self._info


class _Nvml:
    """Every GPU NVML sees (nvidia-ml-py)."""

    name = NVML

    def __init__(self) -> None:
        pynvml: Any = importlib.import_module("pynvml")  # the optional extra `gpu`; no type stubs
        self.nv = pynvml
        pynvml.nvmlInit()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        self._info: dict[str, dict[str, str]] = {}
        for i, h in enumerate(self.handles):
            uuid = _text(pynvml.nvmlDeviceGetUUID(h))
            self._info[uuid] = {"gpu": str(i), "UUID": uuid, "modelName": _text(pynvml.nvmlDeviceGetName(h))}
        self.uuids = list(self._info)

    def read(self) -> dict[str, dict[str, float]]:
        nv = self.nv
        out: dict[str, dict[str, float]] = {}
        for uuid, h in zip(self.uuids, self.handles):
            d: dict[str, float] = {}
            for key, call in (
                ("power_w", lambda h=h: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
                ("energy_j", lambda h=h: nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0),
                ("util_pct", lambda h=h: float(nv.nvmlDeviceGetUtilizationRates(h).gpu)),
                ("mem_used_mib", lambda h=h: nv.nvmlDeviceGetMemoryInfo(h).used / 2**20),
                ("sm_clock_mhz", lambda h=h: float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))),
            ):
                try:
                    d[key] = float(call())
                except nv.NVMLError:  # not supported on this GPU: the field stays absent
                    continue
            out[uuid] = d
        return out

    def info(self) -> dict[str, dict[str, str]]:
        return self._info


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _open_source(spec: str) -> _Source:
    """The source a --gpu-metrics-url names; raises RuntimeError saying why it cannot be read."""
    if spec.strip().lower() == NVML:
        if importlib.util.find_spec("pynvml") is None:
            raise RuntimeError("nvml: nvidia-ml-py is not installed (pip install 'servescope[gpu]')")
        try:
            src = _Nvml()
        except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...: no GPU here
            raise RuntimeError(f"nvml: no GPU found ({type(e).__name__}: {e})") from None
        if not src.handles:
            raise RuntimeError("nvml: no GPU found")
        return src
    if not spec.startswith(("http://", "https://")):
        raise RuntimeError(f"--gpu-metrics-url {spec!r}: expected http(s)://HOST:PORT/metrics or 'nvml'")
    return _Dcgm(spec)


class Telemetry:
    """A sampling thread over one source; inert (it only says why) when there is none."""

    def __init__(self, spec: str | None, interval_s: float = INTERVAL_S) -> None:
        self.spec = spec
        self.interval_s = interval_s
        self.why: str | None = None
        self.source: _Source | None = None
        self.samples: list[tuple[int, dict[str, dict[str, float]]]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if spec is None:
            self.why = "no GPU telemetry source (--gpu-metrics-url URL of a DCGM exporter, or nvml)"
            return
        try:
            self.source = _open_source(spec)
        except RuntimeError as e:
            self.why = str(e)

    def start(self) -> Telemetry:
        """The first sample now (before the clock), then one every interval in a daemon thread."""
        if self.source is None:
            return self
        self._sample()
        if not self.samples:
            self.why = f"{self.source.name}: {self.errors[-1] if self.errors else 'nothing read'}"
            self.source = None
            return self
        self._thread = threading.Thread(target=self._loop, name="servescope-gpu-telemetry", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        next_t = time.monotonic() + self.interval_s
        while not self._stop.wait(max(0.0, next_t - time.monotonic())):
            self._sample()
            next_t += self.interval_s

    def _sample(self) -> None:
        assert self.source is not None
        try:
            values = self.source.read()
        except (urllib.error.URLError, OSError, ValueError) as e:
            self.errors.append(f"{type(e).__name__}: {e}")
            return
        except Exception as e:  # NVML errors: recorded, sampling goes on
            self.errors.append(f"{type(e).__name__}: {e}")
            return
        if values:
            self.samples.append((time.perf_counter_ns(), values))
        else:
            self.errors.append("the page carries no DCGM field")

    def stop(self) -> None:
        """End sampling with one last sample (after the clock)."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._sample()

    def readings(self, origin_ns: int) -> list[GpuReading]:
        """Every sample as one reading per GPU, on the run's clock (seconds from `origin_ns`)."""
        out = []
        for t_ns, by_gpu in self.samples:
            t_s = (t_ns - origin_ns) / 1e9
            for gpu, d in by_gpu.items():
                out.append(GpuReading(t_s, gpu, **{k: d.get(k) for k in _FIELDS}))
        return out

    def finish(self, out_dir: Path, origin_ns: int, win: tuple[int, int] | None, output_tokens: int) -> Energy:
        """Stop sampling, write gpu-telemetry.json, and return the summary's `energy` block over the
        measured window `win` (ns from the origin: the measured requests' first send to last end)."""
        self.stop()
        if self.source is None:
            return not_available(self.why or "no GPU telemetry")
        readings = self.readings(origin_ns)
        window = (win[0] / 1e9, win[1] / 1e9) if win else None
        doc = {
            "schema": "servescope.gpu_telemetry/1",
            "source": self.source.name,
            "url": self.spec,
            "interval_s": self.interval_s,
            "clock": {"kind": "perf_counter_ns", "origin_ns": origin_ns},
            "window_s": list(window) if window else None,
            "gpus": self.source.info(),
            "errors": self.errors[-20:],
            "samples": [
                {"t_s": round(r.t_s, 6), "gpu": r.gpu, **{k: getattr(r, k) for k in _FIELDS}} for r in readings
            ],
        }
        write_json(out_dir / TELEMETRY_FILE, doc)
        return energy_block(readings, window, output_tokens=output_tokens, source=self.source.name)


def start(spec: str | None) -> Telemetry:
    """Telemetry from `spec` (--gpu-metrics-url), sampling from now on; inert without a source."""
    return Telemetry(spec).start()
