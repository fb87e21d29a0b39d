"""GPU telemetry end to end: a DCGM exporter page (tests/fixtures/dcgm/h100x2.prom) served over real
loopback HTTP, its energy counters advancing at each GPU's power draw, sampled during a real run against
the emulator; the energy figures agree with a hand computation. Without a source: nothing changes but
the summary saying telemetry was not available."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from servescope.run.command import run_command
from servescope.target.telemetry import DCGM_FIELDS, TELEMETRY_FILE, parse_dcgm

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm" / "h100x2.prom"
POWER_W = {"0": 412.375, "1": 287.125}  # the fixture's DCGM_FI_DEV_POWER_USAGE per GPU
_ENERGY = re.compile(r'^(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION\{gpu="(\d)"[^}]*\}) (\d+)$', re.M)


class FakeExporter:
    """The fixture's page at /metrics, each energy counter (mJ) growing at its GPU's power draw."""

    def __init__(self, *, with_counter: bool = True) -> None:
        text = FIXTURE.read_text()
        if not with_counter:
            text = "\n".join(ln for ln in text.splitlines() if "TOTAL_ENERGY" not in ln) + "\n"
        self.text = text
        self.t0 = time.perf_counter()
        self.hits = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.hits += 1
                body = outer.page().encode()
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def page(self) -> str:
        dt = time.perf_counter() - self.t0
        return _ENERGY.sub(
            lambda m: f"{m.group(1)} {int(m.group(3)) + round(POWER_W[m.group(2)] * dt * 1000)}", self.text
        )

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def exporter() -> Iterator[FakeExporter]:
    srv = FakeExporter()
    yield srv
    srv.close()


def load(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


def run(tmp_path: Path, *extra: str) -> dict[str, Any]:
    res = CliRunner().invoke(
        run_command,
        [
            "--profile",
            "tiny",
            "--concurrency",
            "4",
            "--num-requests",
            "48",
            "--input-len",
            "32",
            "--output-len",
            "64",
            "--no-probe",
            "--quiet",
            "--no-report",
            "--out",
            str(tmp_path / "run"),
            *extra,
        ],
        catch_exceptions=False,
    )
    assert res.exit_code == 0, res.output
    return dict(load(tmp_path / "run" / "summary.json"))


def test_the_fixture_parses_as_prometheus_client_reads_it() -> None:
    text = FIXTURE.read_text()
    values, info = parse_dcgm(text)
    oracle: dict[str, dict[str, float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            field = DCGM_FIELDS.get(s.name) or DCGM_FIELDS.get(s.name.removesuffix("_total"))
            if field:
                oracle.setdefault(s.labels["UUID"], {})[field[0]] = s.value * field[1]
    assert values == oracle and len(values) == 2
    gpu0 = values["GPU-5e6b2a1c-8f3d-4c77-9a0e-1b2c3d4e5f60"]
    assert gpu0 == {
        "power_w": 412.375,
        "energy_j": 3519874215.046,
        "util_pct": 97,
        "mem_used_mib": 75895,
        "sm_clock_mhz": 1980,
    }
    assert {i["modelName"] for i in info.values()} == {"NVIDIA H100 80GB HBM3"}


@pytest.mark.parametrize("with_counter", [True, False], ids=["energy-counter", "power-integral"])
def test_energy_per_token_from_a_dcgm_exporter_agrees_with_a_hand_computation(
    tmp_path: Path, with_counter: bool
) -> None:
    srv = FakeExporter(with_counter=with_counter)
    try:
        s = run(tmp_path, "--gpu-metrics-url", srv.url)
    finally:
        srv.close()
    e = s["energy"]
    assert e["available"] is True and e["source"] == "dcgm" and e["gpus"] == 2
    assert e["method"] == ("energy counter" if with_counter else "power integral")
    # by hand: both GPUs draw 412.375 + 287.125 = 699.5 W through the measured window
    window = s["duration_s"]
    tokens = s["tokens"]["output_total"]
    assert e["window_s"] == pytest.approx(window, rel=1e-9)
    assert e["energy_j"] == pytest.approx(699.5 * window, rel=0.02)
    assert e["mean_power_w"] == pytest.approx(699.5, rel=0.02)
    assert tokens == 48 * 64
    assert e["joules_per_output_token"] == pytest.approx(699.5 * window / tokens, rel=0.02)
    assert e["joules_per_1m_output_tokens"] == pytest.approx(699.5 * window / tokens * 1e6, rel=0.02)
    assert e["output_tokens_per_s_per_kw"] == pytest.approx(tokens / window / 0.6995, rel=0.02)
    assert e["gpu_util_pct_mean"] == pytest.approx((97 + 64) / 2)
    assert e["sm_clock_mhz_mean"] == pytest.approx((1980 + 1755) / 2)
    assert e["mem_used_mib_max"] == 75895
    assert e["coverage"] == 1.0  # a sample before the clock, one after
    # the time series beside the records, on the records' clock
    doc = load(tmp_path / "run" / TELEMETRY_FILE)
    manifest = load(tmp_path / "run" / "manifest.json")
    assert doc["clock"]["origin_ns"] == manifest["clock"]["origin_ns"]
    ts = sorted({x["t_s"] for x in doc["samples"]})
    assert ts[0] <= doc["window_s"][0] and ts[-1] >= doc["window_s"][1]
    assert len(ts) >= 2 and srv.hits >= len(ts)
    assert all(x["power_w"] in (412.375, 287.125) for x in doc["samples"])
    # the report: the energy cards and the GPU time series beside the request timeline
    from servescope.report.html import write_report

    html = write_report(tmp_path / "run").read_text()
    assert "Energy per output token" in html and "GPU power" in html
    power_svg = (tmp_path / "run" / "charts" / "gpu_power.svg").read_text()
    assert "GPU 0" in power_svg and "GPU 1" in power_svg


def test_without_a_telemetry_source_the_summary_says_so(tmp_path: Path) -> None:
    s = run(tmp_path)
    assert s["energy"] == {
        "available": False,
        "why": "no GPU telemetry source (--gpu-metrics-url URL of a DCGM exporter, or nvml)",
    }
    assert not (tmp_path / "run" / TELEMETRY_FILE).exists()
    assert s["requests"]["completed"] == 48


def test_an_exporter_that_does_not_answer_is_not_available_and_the_run_goes_on(tmp_path: Path) -> None:
    srv = FakeExporter()
    url = srv.url
    srv.close()  # nothing listens there now
    s = run(tmp_path, "--gpu-metrics-url", url)
    assert s["energy"]["available"] is False and s["energy"]["why"].startswith("dcgm: URLError")
    assert s["requests"]["completed"] == 48


def test_nvml_without_the_library_or_a_gpu_says_why(tmp_path: Path) -> None:
    s = run(tmp_path, "--gpu-metrics-url", "nvml")
    e = s["energy"]
    if e["available"]:  # pragma: no cover - a host with nvidia-ml-py and a GPU
        assert e["source"] == "nvml" and e["gpus"] >= 1
    else:
        assert e["why"].startswith("nvml: ")
