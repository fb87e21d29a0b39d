"""Trace replay: requests sent at the times a trace says, optionally sped up and cut to a window.

CSV traces in their published columns are read by `tracecsv` (BurstGPT, the Azure LLM inference
traces); the rest of this docstring is the JSONL form.

One JSON object per line. Time (one of): `t_s` (seconds), `timestamp_ms`, or `timestamp`
(milliseconds, as in Mooncake's traces). Lengths: `input_length` / `input_len` and
`output_length` / `output_len`; or the request itself as `prompt` / `messages`. Lines are sorted by
time; send offsets are measured from the first request and divided by `speedup`
(`trace:PATH:speedup=2` replays twice as fast). `start=S,end=E` keep the requests from S to E
seconds of trace time after the trace's first request; offsets then count from the window's first.
Each item carries `meta["t_s"]`, its send offset; the runner sends at those absolute offsets.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from servescope.errors import ConfigError
from servescope.workload import WorkItem
from servescope.workload.exact.builder import PromptBuilder
from servescope.workload.exact.units import ANCHOR
from servescope.workload.files import _file, _messages, _read_json_any
from servescope.workload.sessions import flatten

if TYPE_CHECKING:
    from servescope.run.config import RunConfig

__all__ = ["trace_items", "read_trace"]


def _time_s(obj: dict[str, Any], where: str) -> float:
    if "t_s" in obj:
        v, scale = obj["t_s"], 1.0
    elif "timestamp_ms" in obj:
        v, scale = obj["timestamp_ms"], 1e-3
    elif "timestamp" in obj:
        v, scale = obj["timestamp"], 1e-3
    else:
        raise ConfigError(f"{where}: needs a time: t_s (seconds), timestamp_ms or timestamp (ms)")
    if not isinstance(v, (int, float)) or math.isnan(v):
        raise ConfigError(f"{where}: the time must be a number")
    return float(v) * scale


def _first_int(obj: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    for k in keys:
        v = obj.get(k)
        if isinstance(v, (int, float)) and v >= 1:
            return int(v)
    return None


def read_trace(path: str) -> list[dict[str, Any]]:
    """Rows sorted by time: {"t_s", "input_len", "output_len", "messages"} (messages may be None)."""
    p = _file(path)
    if p.suffix.lower() == ".csv" or p.name.lower().endswith(".csv.gz"):
        from servescope.workload.tracecsv import read_csv_trace

        return read_csv_trace(p)
    rows = []
    for i, obj in enumerate(_read_json_any(p)):
        where = f"{p} line {i + 1}"
        if not isinstance(obj, dict):
            raise ConfigError(f"{where}: expected a JSON object")
        msgs = None
        if isinstance(obj.get("prompt"), str):
            msgs = [{"role": "user", "content": obj["prompt"]}]
        elif "messages" in obj:
            msgs = _messages(obj["messages"], where)
        in_len = _first_int(obj, ("input_length", "input_len", "input_tokens"))
        if msgs is None and in_len is None:
            raise ConfigError(f"{where}: needs input_length (or a prompt / messages)")
        hashes = obj.get("hash_ids")
        if hashes is not None and not (isinstance(hashes, list) and all(isinstance(h, (int, str)) for h in hashes)):
            raise ConfigError(f"{where}: hash_ids must be a list of block ids")
        rows.append(
            {
                "t_s": _time_s(obj, where),
                "input_len": in_len,
                "messages": msgs,
                "hash_ids": hashes,
                "output_len": _first_int(obj, ("output_length", "output_len", "output_tokens", "max_tokens")),
            }
        )
    if not rows:
        raise ConfigError(f"{p}: an empty trace")
    rows.sort(key=lambda r: cast(float, r["t_s"]))  # _time_s always sets a float
    return rows


def _hashed_prompts(
    rows: list[dict[str, Any]],
    gen: list[int],
    hashed: list[int],
    content: np.ndarray,
    pool: Any,
    block_tokens: int,
    texts: dict[int, str],
) -> float:
    """Mooncake-style `hash_ids`: requests naming the same block id share that block's text, so the
    server's prefix cache sees the trace's sharing. Block b is `block_tokens` unit tokens from its own
    pool offset; a request's last block is cut to what its length leaves (a prefix of the block, as
    cuts from one offset are prefixes of each other up to the final top-up word). Returns the hit rate
    an ideal cache would reach (blocks of a prefix seen before, over all prompt tokens)."""
    ids = list(dict.fromkeys(h for k in hashed for h in rows[gen[k]]["hash_ids"]))
    starts = dict(zip(ids, pool.starts(len(ids)).tolist()))
    full = dict(zip(ids, pool.texts([block_tokens] * len(ids), np.array([starts[h] for h in ids]), anchor=False)))
    seen: set[tuple[Any, ...]] = set()
    hits = total = 0
    for k in hashed:
        i = gen[k]
        want = int(content[k])
        parts = []
        left = want
        chain = rows[i]["hash_ids"]
        for j, h in enumerate(chain):
            if left <= 0:
                break
            take = min(block_tokens, left) if j < len(chain) - 1 else left
            if take == block_tokens:
                parts.append(full[h])
            else:
                parts.append(pool.texts([take], np.array([starts[h]]), anchor=False)[0])
            left -= take
            if take == block_tokens and tuple(chain[: j + 1]) in seen:
                hits += block_tokens
        seen.update(tuple(chain[: j + 1]) for j in range(len(chain)))
        total += int(rows[i]["input_len"])
        texts[i] = ANCHOR + "".join(parts)
    return hits / total if total else 0.0


def window(rows: list[dict[str, Any]], start_s: float | None, end_s: float | None) -> list[dict[str, Any]]:
    """The rows whose time, in trace seconds from the trace's first request, is in [start_s, end_s)."""
    if not rows or (start_s is None and end_s is None):
        return rows
    first = rows[0]["t_s"]
    lo = -math.inf if start_s is None else start_s
    hi = math.inf if end_s is None else end_s
    if hi <= lo:
        raise ConfigError(f"--dataset trace: end={end_s} must be after start={start_s}")
    kept = [r for r in rows if lo <= r["t_s"] - first < hi]
    if not kept:
        raise ConfigError(
            f"--dataset trace: no request in the window [{start_s}, {end_s}) s; the trace spans "
            f"{rows[-1]['t_s'] - first:.3f} s from its first request"
        )
    return kept


async def trace_items(
    path: str,
    cfg: RunConfig,
    n: int,
    builder: PromptBuilder,
    speedup: float,
    block_tokens: int = 512,
    start_s: float | None = None,
    end_s: float | None = None,
) -> tuple[list[WorkItem], dict[str, Any]]:
    if not speedup > 0:
        raise ConfigError("--dataset trace: speedup must be > 0")
    all_rows = read_trace(path)
    rows = window(all_rows, start_s, end_s)[:n]
    t0 = rows[0]["t_s"]
    chat = builder.target.api == "chat"
    # requests without text: exact-length random prompts, like --dataset random
    gen = [i for i, r in enumerate(rows) if r["messages"] is None]
    texts: dict[int, str] = {}
    overhead = 0
    intended = None
    if gen:
        overhead = await builder.overhead("single")
        totals = np.array([rows[i]["input_len"] for i in gen], dtype=np.int64)
        content = builder.content_targets(totals, overhead)
        hashed = [k for k, i in enumerate(gen) if rows[i]["hash_ids"]]
        pool = builder.pool(
            len(gen) + sum(len(rows[gen[k]]["hash_ids"]) for k in hashed),
            max(int(content.max()), block_tokens),
            cfg.seed,
        )
        texts = dict(zip(gen, pool.texts(content)))
        if hashed:
            intended = _hashed_prompts(rows, gen, hashed, content, pool, block_tokens, texts)
    given = [i for i, r in enumerate(rows) if r["messages"] is not None and r["input_len"] is None]
    exact = await builder.count_chats([rows[i]["messages"] for i in given]) if given and chat else None
    if exact is not None:
        for i, n_tok in zip(given, exact):
            rows[i]["input_len"] = n_tok
    elif given:
        first, further = await builder.message_overheads()
        contents = [m["content"] for i in given for m in rows[i]["messages"]]
        counts = dict(zip(contents, await builder.count_texts(contents)))
        for i in given:
            msgs = rows[i]["messages"]
            rows[i]["input_len"] = sum(counts[m["content"]] for m in msgs) + first + further * (len(msgs) - 1)
    items = []
    for i, r in enumerate(rows):
        msgs = r["messages"]
        prompt: Any = texts[i] if msgs is None else ([dict(m) for m in msgs] if chat else flatten(msgs))
        items.append(
            WorkItem(
                prompt=prompt,
                input_len=int(r["input_len"]),
                output_len=r["output_len"] or cfg.output_len,
                meta={"t_s": (r["t_s"] - t0) / speedup},
            )
        )
    span = items[-1].meta["t_s"] if items else 0.0
    info: dict[str, Any] = {
        "trace": {
            "requests": len(items),
            "speedup": speedup,
            "span_s": round(span, 3),
            "mean_rate_rps": round((len(items) - 1) / span, 3) if span > 0 else None,
        }
    }
    if intended is not None:
        info["trace"]["block_tokens"] = block_tokens
        info["intended_prefix_hit_rate"] = round(intended, 4)
    if start_s is not None or end_s is not None:
        info["trace"]["window_s"] = [start_s, end_s]
        info["trace"]["window_offset_s"] = round(rows[0]["t_s"] - all_rows[0]["t_s"], 6)
    fmt = all_rows[0].get("format")
    if fmt:
        info["trace"]["format"] = fmt
    if all_rows[0].get("skipped_failed"):
        info["trace"]["skipped_failed"] = all_rows[0]["skipped_failed"]  # BurstGPT rows with 0 response tokens
    if n > len(rows):
        info["trace"]["note"] = f"the trace holds {len(rows)} requests; {n} were asked for"
    return items, info
