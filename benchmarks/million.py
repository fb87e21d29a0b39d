"""A million-request result: summary + report time and peak memory, export time (issue 15, must-hold 1).

    .venv/bin/python benchmarks/million.py [--requests 1000000] [--tokens 128] [--dir /tmp/sb-million]

Writes a synthetic result directory (requests.parquet in the form a run writes it: row groups of
2,048 requests, one chunk per token, lognormal TTFT and gaps; a manifest; no summary.json), then in
fresh processes, one after the other:

1. `load_run` (the summary recomputed from the columns, as for a killed run); then `write_report`
   (which loads the run, recomputes the summary and renders);
2. `servebench export DIR --format csv`, then `--format parquet`, then `--format jsonl`.

Each reports its wall time and peak resident memory (the child's ru_maxrss). Targets: (1) under 5 s
and 1 GB; CSV export under 10 s.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from servebench.results.columnar import PARQUET_OPTIONS, RECORDS  # noqa: E402
from servebench.results.columns import SCHEMA  # noqa: E402

_GROUP = 2048


def synthesize(out: Path, n: int, tokens: int, concurrency: int = 512, seed: int = 0) -> None:
    """requests.parquet of n completed requests of `tokens` chunks each, closed loop on `concurrency` slots."""
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    slot_free = np.zeros(concurrency, dtype=np.int64)
    with pq.ParquetWriter(out / RECORDS, SCHEMA, **PARQUET_OPTIONS) as writer:
        for start in range(0, n, _GROUP):
            m = min(_GROUP, n - start)
            slots = np.arange(start, start + m) % concurrency
            sched = slot_free[slots]
            send = sched + rng.integers(20_000, 200_000, m)
            ttft = rng.lognormal(np.log(150e6), 0.4, m).astype(np.int64)
            gaps = rng.lognormal(np.log(20e6), 0.3, (m, tokens - 1)).astype(np.int64)
            offs = np.concatenate([ttft[:, None], ttft[:, None] + np.cumsum(gaps, axis=1)], axis=1)
            last = send + offs[:, -1]
            end = last + 100_000
            slot_free[slots] = end  # (one request per slot per group: m <= concurrency*4 keeps it a loop)
            list_offsets = pa.array(np.arange(0, (m + 1) * tokens, tokens, dtype=np.int32))
            cols = {
                "id": pa.array(np.arange(start, start + m)), "warmup": pa.array(np.zeros(m, bool)),
                "t_sched_ns": pa.array(sched), "t_send_ns": pa.array(send), "t_first_ns": pa.array(send + ttft),
                "t_first_answer_ns": pa.array(send + ttft), "t_last_ns": pa.array(last), "t_end_ns": pa.array(end),
                "status": pa.array(["ok"] * m), "error_kind": pa.nulls(m, pa.string()),
                "error_detail": pa.nulls(m, pa.string()), "http_status": pa.array(np.full(m, 200)),
                "input_len": pa.array(np.full(m, 1024)), "output_len": pa.array(np.full(m, tokens)),
                "input_tokens": pa.array(np.full(m, 1024)), "output_tokens": pa.array(np.full(m, tokens)),
                "output_tokens_source": pa.array(["usage"] * m), "reasoning_tokens": pa.array(np.zeros(m, np.int64)),
                "chunks": pa.array(np.full(m, tokens)),
                "chunk_offsets_ns": pa.ListArray.from_arrays(list_offsets, pa.array(offs.ravel())),
                "chunk_tokens": pa.nulls(m, pa.list_(pa.int32())),
                "response_id": pa.array([f"cmpl-{i}" for i in range(start, start + m)]),
                "session": pa.nulls(m, pa.int64()), "turn": pa.nulls(m, pa.int64()),
            }
            writer.write_table(pa.Table.from_pydict(cols, schema=SCHEMA))
    (out / "manifest.json").write_text(json.dumps({
        "run_id": "million",
        "config": {"model": "synthetic", "url": "http://127.0.0.1:1/v1", "concurrency": concurrency,
                   "input_len": 1024, "output_len": tokens},
        "target": {"base_url": "http://127.0.0.1:1/v1", "model": "synthetic"}}))


_SUMMARY_AND_REPORT = """
import resource, sys, time
t = time.perf_counter()
from servebench.results.store import load_run
from servebench.report.html import write_report
if sys.argv[2] == "summary":
    run = load_run(sys.argv[1])  # no summary.json: recomputed from the columns
    s = run.summary
else:
    write_report(sys.argv[1])  # loads the run (summary recomputed) and renders
print(f"{time.perf_counter() - t:.2f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f}")
"""


def _child(args: list[str]) -> tuple[float, float]:
    """Wall time and peak RSS (MB) of a child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t
    if proc.returncode:
        raise SystemExit(proc.stderr[-2000:])
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, max(peak, before) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/sb-million"))
    args = ap.parse_args()
    d = args.dir
    if not (d / RECORDS).is_file():
        t = time.perf_counter()
        synthesize(d, args.requests, args.tokens)
        print(f"synthesized {args.requests:,} requests x {args.tokens} tokens in {time.perf_counter() - t:.1f} s "
              f"({(d / RECORDS).stat().st_size / 1e6:.0f} MB)")
    (d / "summary.json").unlink(missing_ok=True)
    for what in ("summary", "summary+report"):
        proc = subprocess.run([sys.executable, "-c", _SUMMARY_AND_REPORT, str(d), what], capture_output=True,
                              text=True, check=False, env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
        if proc.returncode:
            raise SystemExit(proc.stderr[-3000:])
        wall, rss = proc.stdout.split()
        print(f"{what} (recomputed from requests.parquet, in a fresh process): {wall} s, peak RSS {rss} MB")
    for fmt in ("csv", "parquet", "jsonl"):
        out = d / f"export.{fmt}"
        wall, _ = _child(["-m", "servebench.cli", "export", str(d), "--format", fmt, "--out", str(out)])
        print(f"export --format {fmt}: {wall:.2f} s ({out.stat().st_size / 1e6:.0f} MB)")
        out.unlink()


if __name__ == "__main__":
    main()
