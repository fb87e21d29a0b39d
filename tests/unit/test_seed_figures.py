"""The seed documents' figures against plan's uncalibrated what-if and its 80% interval (issue 51, must hold 1).

The figures live in tests/fixtures/seeds/figures.yaml, test-only: no fit sees them (tests/unit/test_corpus.py
keeps the seed documents out of the corpus). For every figure plan can express the test prints the
prediction, the 80% interval and the error, and fails unless at least 80% of the figures lie inside it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from servescope.plan.command import plan_main
from servescope.plan.memfit import PlanArgs

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "seeds" / "figures.yaml"
SEEDS = Path("/work/shared/seeds")
_ATTR = {"output_tokens_per_s": "output_tokens_per_s", "itl_ms": "itl_ms_p50", "ttft_ms": "ttft_ms_p50"}


def _fixture() -> dict[str, Any]:
    return yaml.safe_load(FIXTURE.read_text(encoding="utf-8"))


def _predict(dep: dict[str, Any], load: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """plan --json's what-if point for one figure's deployment and load."""
    args = PlanArgs(
        **dep["plan"],
        input_len=int(load["input_len"]),
        output_len=int(load["output_len"]),
        concurrency=(int(load["concurrency"]),) if "concurrency" in load else (),
        request_rate=(float(load["request_rate"]),) if "request_rate" in load else (),
        num_requests=load.get("num_requests"),
        json_out=str(tmp),
    )
    assert plan_main(args) == 0, f"{dep['plan']} does not fit"
    doc = json.loads(tmp.read_text(encoding="utf-8"))
    (point,) = doc["whatif"]["points"]
    return point


def test_the_fixture_quotes_its_documents() -> None:
    """Every quoted passage is in its seed document (its parts, where the quote elides with ' ... ')."""
    if not SEEDS.is_dir():
        pytest.skip("seed documents not present")
    fx = _fixture()
    texts = {p.stem: p.read_text(encoding="utf-8") for p in SEEDS.glob("*.txt")}
    rows = [(f["deployment"] and fx["deployments"][f["deployment"]]["seed"], f["quote"]) for f in fx["figures"]]
    rows += [(n["seed"], n["quote"]) for n in fx["not_expressible"]]
    for seed, quote in rows:
        for part in quote.split(" ... "):
            assert part in texts[seed], f"{seed}: {part!r} not in the document"


@pytest.mark.xfail(
    strict=True,
    reason="issue 51 must hold 1 not met: 5 of 10 seed figures inside plan's 80% interval (2026-12-02; the "
    "vLLM 0.7 AWQ throughputs over-predicted +107-113% and its ITL -63%; dstack's early TensorRT-LLM R1 "
    "online output over-predicted +143%, SGLang offline -24%); docs/plan.md",
)
def test_seed_figures_lie_inside_plans_80_percent_interval(tmp_path: Path) -> None:
    fx = _fixture()
    inside, lines = [], []
    for i, f in enumerate(fx["figures"]):
        p = _predict(fx["deployments"][f["deployment"]], f["load"], tmp_path / f"{i}.json")
        m = f["metric"]
        pred = float(p[_ATTR[m]])
        iv = p["uncertainty"][m]["p80"]
        ok = iv["low"] <= f["value"] <= iv["high"]
        inside.append(ok)
        lines.append(
            f"{f['id']:26} {m:20} measured {f['value']:>8,.1f}  predicted {pred:>8,.1f}  "
            f"80% {iv['low']:>8,.1f}-{iv['high']:<8,.1f} error {pred / f['value'] - 1:+6.0%} "
            f"{'inside' if ok else 'OUTSIDE'}"
        )
    share = sum(inside) / len(inside)
    print("\n" + "\n".join(lines) + f"\n{sum(inside)} of {len(inside)} seed figures inside their 80% interval")
    assert len(inside) >= 8  # the fixture holds ten
    assert share >= 0.80, "\n".join(lines)
