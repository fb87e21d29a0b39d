"""`--api responses` and `--api messages` against the built-in emulator, streamed and not (issue 53): each
request's token counts are the emulator's truth (what it generated and put in usage), TTFT and ITL follow
docs/metrics.md from the records, and every token the emulator wrote reached the client as one chunk."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servescope.emulator.server import EmulatorThread
from servescope.results.store import load_run
from tests.e2e.vllm.test_real_vllm_apis import _itl_by_definition
from tests.support.procs import servescope

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def emu() -> Iterator[EmulatorThread]:
    with EmulatorThread("tiny") as e:
        yield e


def _truth(url: str) -> dict[str, dict[str, Any]]:
    with urllib.request.urlopen(url + "/_servescope/truth?clear=1", timeout=5) as r:
        return {t["id"]: t for t in json.loads(r.read())["requests"]}


@pytest.mark.parametrize("api", ["responses", "messages"])
@pytest.mark.parametrize("stream", [True, False])
def test_counts_are_the_truth_and_timings_follow_the_definitions(
    emu: EmulatorThread, tmp_path: Path, api: str, stream: bool
) -> None:
    _truth(emu.url)  # forget what came before
    n_req = 24
    args = ["--api", api, "--concurrency", "4", "--num-requests", str(n_req), "--input-len", "40"]
    args += ["--output-len", "16", "--seed", "9", "--no-probe", *([] if stream else ["--no-stream"])]
    proc = servescope("run", "--url", emu.url, "--out", str(tmp_path), "--quiet", *args, timeout_s=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = json.loads((tmp_path / "summary.json").read_text())
    truth = _truth(emu.url)
    records = load_run(tmp_path).records
    assert s["requests"]["completed"] == n_req == len(records)
    assert s["tokens"]["output_source"] == "usage"
    for r in records:
        t = truth[r.response_id]
        assert r.ok and r.output_tokens == t["completion_tokens"] and r.input_tokens == t["prompt_tokens"], r
        if api == "responses":
            assert r.output_tokens == 16  # ignore_eos honoured
        else:
            assert 1 <= r.output_tokens <= 16  # no length field on Messages: EOS may come first
        if stream:
            assert r.chunks == r.output_tokens and r.chunk_tokens == [1] * r.chunks  # one token per delta
    lat = s["latency_ms"]
    ttft = [(r.t_first_ns - r.t_send_ns) / 1e6 for r in records]
    assert min(ttft) > 0 and lat["ttft"]["mean"] == pytest.approx(np.mean(ttft), rel=1e-6)
    if stream:
        itl = _itl_by_definition(records)
        assert lat["itl"]["count"] == itl.size == sum(r.output_tokens - 1 for r in records)
        assert lat["itl"]["mean"] == pytest.approx(float(itl.mean()), rel=1e-6, abs=1e-6)
        # the emulator wrote each token once, and the client saw each write as one chunk
        assert all(len(truth[r.response_id]["token_ns"]) == r.chunks for r in records)
    else:
        assert lat["itl"]["count"] == 0 and all(r.chunks == 1 for r in records)
