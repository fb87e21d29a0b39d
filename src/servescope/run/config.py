"""Validated run settings: scenario file + flags. Every error here stops the run before the clock.

`RunConfig` is the one description of a run: the CLI builds it from flags (and `-f scenario.yaml`),
`sweep` copies it per point, and the manifest records it as run (secrets never included: only the
*name* of the API-key variable and header names are kept).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from servescope.errors import ConfigError

__all__ = [
    "RunConfig",
    "load_scenario",
    "parse_headers",
    "DEFAULT_CONCURRENCY",
]

DEFAULT_CONCURRENCY = 16
_SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie"})


@dataclass
class RunConfig:
    url: str | None = None  # None: start the built-in emulator
    model: str | None = None  # None: the first of /v1/models
    api: str = "chat"
    stream: bool = True
    concurrency: int | None = None
    rate: float | None = None  # requests/s; math.inf = all at once
    burstiness: float = 1.0
    ramp_up_strategy: str | None = None
    ramp_up_start_rps: float | None = None
    ramp_up_end_rps: float | None = None
    num_requests: int | None = None
    duration: float | None = None
    warmup: int = 0  # extra requests sent first and excluded from every metric
    seed: int = 0
    dataset: str = "random"
    input_len: int = 512
    output_len: int | None = 128
    range_ratio: float = 0.0
    ignore_eos: bool = True
    timeout: float = 600.0
    rx_timestamps: str = "kernel"  # "kernel": kernel receive timestamps where the OS gives them; "read"
    read_coalescing: bool = True  # with kernel stamps: pause briefly when reads come very fast
    headers: list[str] = field(default_factory=list)  # "Key: Value"
    extra_body: dict[str, Any] = field(default_factory=dict)
    api_key_env: str | None = None
    slo: dict[str, float] = field(default_factory=dict)  # per-request limits (goodput)
    slo_text: str | None = None  # the --slo value as given (run-level limits are checked from it)
    out: str | None = None
    quiet: bool = False
    profile: str | None = None  # emulator profile when url is None
    gpus: int | None = None  # GPUs serving the target, for throughput per GPU; None: unknown (emulator: its own)
    tokenizer: str | None = None
    probe: bool = True
    repeat: int = 1  # run the same configuration N times (DIR/repeat-k) and report the spread
    report: bool = True  # write report.html (and charts/) beside the results
    # stop once the median and P99 of TTFT and TPOT are known to ±this % at 95% (results.precision)
    target_precision: float | None = None
    # Sweep points and repeats each get their own prompts (a seed derived from `seed`) unless same_prompts
    same_prompts: bool = False
    reset_cache: bool = False  # empty the target's prefix cache before the run (target/cachereset.py)
    workers: int = 1  # client processes on this host, each a shard of the schedule (run/workers.py)
    # shards as Ray actors, one per node (run/ray_run.py): the cluster's address, "local" for the one Ray finds
    ray: str | None = None
    ray_resource: str | None = None  # with ray: only nodes offering this custom resource host shards
    # GPU telemetry during the measured window: a DCGM exporter's /metrics URL, or "nvml" (target/telemetry.py)
    gpu_metrics_url: str | None = None
    # start the server too (target/launch.py, sweep/serve.py): a command template, its {placeholders}' values
    serve: str | None = None
    serve_param: list[str] = field(default_factory=list)
    serve_timeout: float = 600.0  # seconds for the launched server to become ready

    # ------------------------------------------------------------------ derived
    @property
    def load_mode(self) -> str:
        if self.ramp_up_strategy:
            return "ramp"
        if self.rate is not None:
            return "offline" if math.isinf(self.rate) else "rate"
        return "concurrency"

    @property
    def effective_concurrency(self) -> int | None:
        if self.load_mode == "concurrency":
            return self.concurrency or DEFAULT_CONCURRENCY
        return self.concurrency

    @property
    def effective_num_requests(self) -> int | None:
        if self.num_requests is not None:
            return self.num_requests
        return None if self.duration is not None else 200

    def validate(self) -> RunConfig:
        if self.api not in ("chat", "completions", "responses", "messages"):
            raise ConfigError(f"--api must be chat, completions, responses or messages, not {self.api!r}")
        if self.concurrency is not None and self.concurrency < 1:
            raise ConfigError("--concurrency must be at least 1")
        if self.gpus is not None and self.gpus < 1:
            raise ConfigError("--gpus must be at least 1")
        if self.rate is not None and not self.rate > 0:
            raise ConfigError("--rate must be > 0 (use inf to send every request at once)")
        if not self.burstiness > 0:
            raise ConfigError("--burstiness must be > 0 (1 = Poisson, inf = constant spacing)")
        if self.ramp_up_strategy is not None:
            if self.ramp_up_strategy not in ("linear", "exponential"):
                raise ConfigError("--ramp-up-strategy must be linear or exponential")
            if self.rate is not None:
                raise ConfigError("--ramp-up-strategy sets the request rate itself; drop --rate")
            if self.ramp_up_start_rps is None or self.ramp_up_end_rps is None:
                raise ConfigError("--ramp-up-strategy needs --ramp-up-start-rps and --ramp-up-end-rps")
            if self.ramp_up_end_rps <= 0 or self.ramp_up_start_rps < 0:
                raise ConfigError("ramp-up rates must be >= 0 (start) and > 0 (end)")
            if self.ramp_up_strategy == "exponential" and self.ramp_up_start_rps <= 0:
                raise ConfigError("an exponential ramp-up needs --ramp-up-start-rps > 0")
            if self.effective_num_requests is None:
                raise ConfigError("--ramp-up-strategy needs --num-requests (the ramp spans them)")
        elif self.ramp_up_start_rps is not None or self.ramp_up_end_rps is not None:
            raise ConfigError("--ramp-up-start-rps/--ramp-up-end-rps need --ramp-up-strategy")
        if self.num_requests is not None and self.num_requests < 1:
            raise ConfigError("--num-requests must be at least 1")
        if self.duration is not None and not self.duration > 0:
            raise ConfigError("--duration must be > 0 seconds")
        if self.duration is not None and self.load_mode == "offline":
            raise ConfigError("--rate inf sends every request at once; give --num-requests, not --duration")
        if self.target_precision is not None:
            self.target_precision = parse_percent(self.target_precision, "--target-precision")
            if self.num_requests is None and self.duration is None:
                raise ConfigError(
                    "--target-precision needs a limit: --num-requests N or --duration S (the run "
                    "stops at whichever comes first, the precision or the limit)"
                )
        if not self.serve_timeout > 0:
            raise ConfigError("--serve-timeout must be > 0 seconds")
        if self.repeat < 1:
            raise ConfigError("--repeat must be at least 1")
        if self.workers < 1:
            raise ConfigError("--workers must be at least 1")
        if self.ray_resource is not None and self.ray is None:
            raise ConfigError("--ray-resource places --ray shards: give --ray too")
        if self.ray is not None and importlib.util.find_spec("ray") is None:
            raise ConfigError("--ray needs Ray: pip install 'servescope[ray]'")
        if self.warmup < 0:
            raise ConfigError("--warmup must be >= 0")
        if self.input_len < 1:
            raise ConfigError("--input-len must be at least 1")
        if self.output_len is not None and self.output_len < 1:
            raise ConfigError("--output-len must be at least 1")
        if not 0 <= self.range_ratio < 1:
            raise ConfigError("--range-ratio must be in [0, 1)")
        if not self.timeout > 0:
            raise ConfigError("--timeout must be > 0 seconds")
        if self.rx_timestamps not in ("kernel", "read"):
            raise ConfigError(f"--rx-timestamps must be 'kernel' or 'read', not {self.rx_timestamps!r}")
        if self.api_key_env and self.api_key_env not in os.environ:
            raise ConfigError(f"--api-key-env {self.api_key_env}: that environment variable is not set")
        parse_headers(self.headers)
        return self

    # --------------------------------------------------------------- rendering
    def request_headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key_env:
            headers["Authorization"] = f"Bearer {os.environ[self.api_key_env]}"
        headers.update(parse_headers(self.headers))
        return headers

    def as_manifest(self) -> dict[str, Any]:
        """The config as run, with every header value that could be a secret masked."""
        doc = dataclasses.asdict(self)
        masked = []
        for k, v in parse_headers(self.headers).items():
            secret = k.lower() in _SECRET_HEADERS or "key" in k.lower() or "token" in k.lower()
            masked.append(f"{k}: {'***' if secret else v}")
        doc["headers"] = masked
        if doc.get("rate") is not None and math.isinf(doc["rate"]):
            doc["rate"] = "inf"
        return doc

    def slug(self, model: str | None = None) -> str:
        mode = self.load_mode
        if mode == "concurrency":
            load = f"c{self.effective_concurrency}"
        elif mode == "rate":
            load = f"r{self.rate:g}"
        elif mode == "ramp":
            load = f"ramp{self.ramp_up_start_rps:g}-{self.ramp_up_end_rps:g}"
        else:
            load = "offline"
        return f"{model or self.model or self.profile or 'target'}-{load}-in{self.input_len}-out{self.output_len}"


def parse_headers(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition(":")
        if not sep or not key.strip():
            raise ConfigError(f"--header {item!r}: expected KEY:VALUE")
        out[key.strip()] = value.strip()
    return out


def parse_percent(value: float | str, flag: str) -> float:
    """A percentage in (0, 100): `5%`, `5` or 5.0 all mean 5 %."""
    try:
        pct = float(str(value).strip().removesuffix("%"))
    except ValueError:
        raise ConfigError(f"{flag} {value!r}: expected a percentage such as 5%") from None
    if not 0 < pct < 100:
        raise ConfigError(f"{flag} must be between 0% and 100%, not {value!r}")
    return pct


def parse_extra_body(text: str) -> dict[str, Any]:
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise ConfigError(f"--extra-body is not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ConfigError("--extra-body must be a JSON object, e.g. '{\"temperature\": 0}'")
    return doc


def load_scenario(path: str | Path) -> dict[str, Any]:
    """A YAML scenario file with the same keys as the flags (dashes or underscores)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"scenario file {p} not found")
    try:
        doc = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"scenario file {p} is not valid YAML: {e}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"scenario file {p} must be a mapping of settings")
    known = {f.name for f in dataclasses.fields(RunConfig)}
    out = {}
    for key, value in doc.items():
        name = str(key).replace("-", "_")
        if name == "header":
            name = "headers"
        if name not in known:
            raise ConfigError(f"scenario file {p}: unknown setting {key!r}")
        out[name] = value
    return out
