"""Production traces in their published CSV columns, as trace rows (`trace.read_trace`'s shape).

- **BurstGPT** (HPMLL/BurstGPT, `BurstGPT_*.csv`): `Timestamp` (seconds from the trace's start),
  `Model`, `Request tokens`, `Response tokens`, `Total tokens`, `Log Type`; newer releases add
  `Session ID` and `Elapsed time`, which are read past. A row with `Response tokens` 0 is a request
  that failed in the trace (the README says so of `BurstGPT_1.csv`): it is skipped and counted.
- **Azure LLM inference traces** (Azure/AzurePublicDataset, `AzureLLMInferenceTrace_{code,conv}.csv`
  of 2023 and the 2024 week-long files): `TIMESTAMP` (a wall-clock time, `2023-11-16 18:15:46.6805900`:
  up to 7 fraction digits, 100 ns ticks), `ContextTokens`, `GeneratedTokens`.

The header decides the format; another header is an error naming both. Lengths are taken as given:
the prompt is an exact-length random prompt of `input_len` tokens, `output_len` goes as max_tokens.
"""

from __future__ import annotations

import csv
import datetime as _dt
import gzip
import io
from pathlib import Path
from typing import Any

from servescope.errors import ConfigError

__all__ = ["AZURE_COLUMNS", "BURSTGPT_COLUMNS", "parse_azure_time", "read_csv_trace"]

BURSTGPT_COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type")
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def parse_azure_time(text: str) -> tuple[int, int]:
    """An Azure trace time as (whole seconds since the epoch, read as UTC; fraction in 100 ns ticks)."""
    base, _, frac = text.strip().partition(".")
    try:
        whole = _dt.datetime.strptime(base, "%Y-%m-%d %H:%M:%S").replace(tzinfo=_dt.UTC)
    except ValueError:
        raise ValueError(f"TIMESTAMP {text!r} is not YYYY-MM-DD HH:MM:SS[.fraction]") from None
    digits = frac.strip()
    if digits and not digits.isdigit():
        raise ValueError(f"TIMESTAMP {text!r}: the fraction must be digits")
    ticks = int((digits + "0000000")[:7]) if digits else 0
    return int(whole.timestamp()), ticks


def _int(v: str, col: str, where: str) -> int:
    try:
        return int(float(v))
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: {col} {v!r} is not a number") from None


def _open_text(p: Path) -> io.TextIOBase:
    if p.name.lower().endswith(".gz"):
        return io.TextIOWrapper(gzip.open(p, "rb"), encoding="utf-8", newline="")
    return open(p, encoding="utf-8", newline="")  # closed by the caller's with


def read_csv_trace(p: Path) -> list[dict[str, Any]]:
    with _open_text(p) as f:
        reader = csv.DictReader(f)
        head = [h.strip() for h in (reader.fieldnames or [])]
        reader.fieldnames = head
        skipped = 0
        if all(c in head for c in ("Timestamp", "Request tokens", "Response tokens")):
            rows, skipped = _burstgpt(reader, p)
        elif all(c in head for c in AZURE_COLUMNS):
            rows = _azure(reader, p)
        else:
            raise ConfigError(
                f"{p}: unknown CSV trace columns {head}; expected BurstGPT's ({', '.join(BURSTGPT_COLUMNS)}) "
                f"or the Azure LLM inference trace's ({', '.join(AZURE_COLUMNS)})"
            )
    if not rows:
        raise ConfigError(f"{p}: no request in the trace")
    rows.sort(key=lambda r: r["t_s"])
    if skipped:
        rows[0]["skipped_failed"] = skipped
    return rows


def _row(t_s: float, in_len: int, out_len: int, fmt: str) -> dict[str, Any]:
    return {"t_s": t_s, "input_len": in_len, "messages": None, "hash_ids": None, "output_len": out_len, "format": fmt}


def _burstgpt(reader: csv.DictReader[str], p: Path) -> tuple[list[dict[str, Any]], int]:
    rows = []
    skipped = 0
    for i, rec in enumerate(reader):
        where = f"{p} line {i + 2}"
        try:
            t_s = float(rec["Timestamp"])
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: Timestamp {rec.get('Timestamp')!r} is not a number of seconds") from None
        in_len = _int(rec["Request tokens"], "Request tokens", where)
        out_len = _int(rec["Response tokens"], "Response tokens", where)
        if out_len < 1:
            skipped += 1  # failed in the trace
            continue
        if in_len < 1:
            raise ConfigError(f"{where}: Request tokens must be >= 1")
        rows.append(_row(t_s, in_len, out_len, "burstgpt"))
    return rows, skipped


def _azure(reader: csv.DictReader[str], p: Path) -> list[dict[str, Any]]:
    stamps = []
    for i, rec in enumerate(reader):
        where = f"{p} line {i + 2}"
        try:
            secs, ticks = parse_azure_time(rec["TIMESTAMP"] or "")
        except ValueError as e:
            raise ConfigError(f"{where}: {e}") from None
        in_len = _int(rec["ContextTokens"], "ContextTokens", where)
        out_len = _int(rec["GeneratedTokens"], "GeneratedTokens", where)
        if in_len < 1 or out_len < 1:
            raise ConfigError(f"{where}: ContextTokens and GeneratedTokens must be >= 1")
        stamps.append((secs, ticks, in_len, out_len))
    if not stamps:
        return []
    s0 = min(s for s, *_ in stamps)
    # seconds from the earliest whole second: exact in ticks, then one division (no epoch-sized float)
    return [_row(((s - s0) * 10_000_000 + t) / 1e7, i, o, "azure") for s, t, i, o in stamps]
