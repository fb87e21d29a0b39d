"""The report's "Engine's view" section: the engine's own latency (its request-level histograms over
the run's window, summary `engine_view`) beside the client's, and the phases of a request inside
the engine. Pure string building, deterministic (the summary's figures in its own order)."""

from __future__ import annotations

from servescope.report.layout import esc, fmt, table
from servescope.results.engineschema import SpecDecodeView
from servescope.results.schema import Summary

__all__ = ["engine_view_section"]

_LABELS = {
    "ttft": "TTFT",
    "itl": "ITL",
    "e2e": "E2E",
    "queue": "queue",
    "prefill": "prefill",
    "decode": "decode",
    "inference": "inference (prefill + decode)",
}


def _ms(v: float | None) -> str:
    """A time in ms, two decimals: the engine's and the client's figures line up in one column."""
    return fmt(v, digits=2)


def _estimate(value: float | None, bucket: list[float | None] | None) -> str:
    """An engine percentile estimated from its buckets, with the bucket that holds it."""
    if not isinstance(bucket, list) or len(bucket) != 2:
        return _ms(value)
    upper = "∞" if bucket[1] is None else fmt(bucket[1])
    return f'{_ms(value)} <span class="muted">({fmt(bucket[0])}–{upper})</span>'


def engine_view_section(summary: Summary) -> str:
    """The section's HTML, or "" when the run has no engine view."""
    view = summary.get("engine_view")
    if not view:
        return ""
    rows = [
        [
            esc(_LABELS.get(key, key)),
            _ms(m["client_mean_ms"]),
            _ms(m["mean_ms"]),
            _ms(m["client_minus_engine_ms"]),
            _estimate(m["median_ms"], m["median_bucket_ms"]),
            _estimate(m["p90_ms"], m["p90_bucket_ms"]),
            f"{fmt(m['client_count'])} / {fmt(m['count'])}",
            f"<code>{esc(m['metric'])}</code>",
        ]
        for key, m in view["metrics"].items()
    ]
    out = [
        "<h3>Engine's view of latency</h3>"
        '<p class="muted">The engine\'s own request-level histograms over the same window (after minus before): '
        "its mean is Δsum / Δcount, its median and P90 are estimated within the bucket shown in brackets. "
        f"The engine counted {fmt(view['engine_requests'])} requests; the client completed "
        f"{fmt(view['requests_completed'])} of {fmt(view['requests_sent'])} sent. Times in ms.</p>"
    ]
    if rows:
        head = ["metric", "client mean", "engine mean", "client − engine", "engine median", "engine P90"]
        out.append(table([*head, "count (client / engine)", "engine metric"], rows, txt_cols=1))
    phases = [
        [
            esc(_LABELS.get(key, key)),
            _ms(p["mean_ms"]),
            _estimate(p["median_ms"], p["median_bucket_ms"]),
            _estimate(p["p90_ms"], p["p90_bucket_ms"]),
            fmt(p["count"]),
            f"<code>{esc(p['metric'])}</code>",
        ]
        for key, p in view["phases"].items()
    ]
    if phases:
        out.append(table(["phase", "mean", "median", "P90", "count", "engine metric"], phases, txt_cols=1))
    out.append(_speculative(view.get("speculative")))
    return "".join(out)


def _rate(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}%"


def _speculative(spec: SpecDecodeView | None) -> str:
    """Speculative decoding over the window (the engine's counters' deltas) beside the client's tokens
    per chunk, or "" when the engine ran none."""
    if not spec:
        return ""
    length = spec["mean_acceptance_length"]
    per = ", ".join(f"{p['position']}: {_rate(p['acceptance_rate'])}" for p in spec["per_position"]) or "–"
    rows = [
        ["drafts", fmt(spec["drafts"], digits=0)],
        ["draft tokens", fmt(spec["draft_tokens"], digits=0)],
        ["accepted tokens", fmt(spec["accepted_tokens"], digits=0)],
        ["acceptance rate (accepted / draft tokens)", _rate(spec["acceptance_rate"])],
        ["mean acceptance length (1 + accepted / drafts)", "–" if length is None else f"{length:.3f}"],
        ["acceptance by draft position (accepted / drafts)", esc(per)],
        ["client: output tokens per chunk", fmt(spec["client_tokens_per_chunk"], digits=3)],
    ]
    return (
        "<h3>Speculative decoding</h3>"
        '<p class="muted">The engine\'s speculative-decoding counters over the same window (after minus '
        "before), as vLLM defines its figures, beside the tokens per chunk the client saw.</p>"
        + table(["", "value"], rows, txt_cols=1)
    )
