"""Corpus points made by hand for the plan validation's tests, and the held-out errors of the
committed calibration on the committed corpus."""

from __future__ import annotations

import dataclasses

from servescope.deploy.calibration import Calibration
from servescope.plan.corpus import CorpusPoint, Source
from servescope.plan.knobfit import median_abs_error
from servescope.plan.validate import METRICS, Predictor

__all__ = ["SRC", "corpus_point", "held_out_errors", "vars_of"]

SRC = Source(
    id="hand", title="hand-made", url="https://example.org/x", publisher="test", date="2025-01-01", kind="test"
)


def corpus_point(**kw: object) -> CorpusPoint:
    """A closed-loop Llama-3.1-8B point on one H100 (vLLM 0.10), with `kw` replacing any field."""
    base: dict[str, object] = {
        "source": SRC,
        "id": "p",
        "engine": "vllm",
        "engine_version": "0.10.0",
        "gpu": "h100",
        "gpus": 1,
        "model": "Llama-3.1-8B",
        "quant": "bf16",
        "kv_quant": "",
        "tp": 1,
        "pp": 1,
        "dp": 1,
        "ep": 1,
        "mode": "closed",
        "concurrency": 1,
        "request_rate": None,
        "num_prompts": 8,
        "input_len": 128,
        "output_len": 128,
        "dataset": "random",
        "speculative": "",
        "measured": {"output_tok_s": 100.0, "itl_ms_median": 10.0, "ttft_ms_mean": 20.0},
        "notes": "n",
    }
    base.update(kw)
    return CorpusPoint(**base)  # type: ignore[arg-type]


def vars_of(obj: CorpusPoint | Source) -> dict[str, object]:
    """A point's or source's fields as a corpus YAML row states them (a point without its source)."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.name != "source"}


def held_out_errors(validation: tuple[Predictor, Calibration]) -> dict[str, float]:
    """Per metric, the held-out median |error| of the committed calibration over the corpus."""
    pred, cal = validation
    by_key = {p.key: p for p in pred.points}
    results = [pred.result(by_key[k], cal.held_out[s.source]) for k, s in sorted(pred.settings.items())]
    out = {}
    for m in METRICS:
        med, n = median_abs_error(results, m)
        assert n > 20 and med is not None, m
        out[m] = med
    return out
