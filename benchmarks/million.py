"""A million-request result: summary + report time and peak memory, export time, against the limits in `TARGETS`.

    .venv/bin/python benchmarks/million.py [--requests 1000000] [--tokens 128] [--dir /tmp/sb-million]

Writes a synthetic result directory (requests.parquet in the form a run writes it: parts of 2,048
requests joined into row groups of 16,384, one chunk per token, lognormal TTFT and gaps; a manifest;
no summary.json), then in fresh processes, one after the other:

1. `load_run` (the summary recomputed from the columns, as for a killed run); then `write_report`
   (which loads the run, recomputes the summary once and renders report.html and its charts); then
   the post-run checks (`checks`: the columns and the summary as a run ends, then `validate_columns`
   and `precision_block_columns`, timed alone);
2. `servescope export DIR --format csv`, then `--format parquet`, then `--format jsonl`.

Each reports its wall time (from before its imports), its CPU time (user + system: the machine has 2
cores shared with others, so the wall time of a busy machine says more about the others) and its
peak resident memory (its own ru_maxrss, MB of 10**6 bytes), `--repeat` times (min and median
shown), with the load average, and a PASS/FAIL line per target: (1) summary + report under 5 s
and 1 GB; (2) CSV export under 10 s; (3) the post-run checks of a run (`checks`: run/assemble.py's
validation and precision over the columns, after the summary) under 1 GB, the process's peak.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from servescope.results.columns import SCHEMA  # noqa: E402
from servescope.results.parquet import JOIN_ROWS, PARQUET_OPTIONS, RECORDS  # noqa: E402

_GROUP = 2048  # records per part file of a run; joined into row groups of JOIN_ROWS


def synthesize(out: Path, n: int, tokens: int, concurrency: int = 512, seed: int = 0) -> None:
    """requests.parquet of n completed requests of `tokens` chunks each, closed loop on `concurrency` slots."""
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    slot_free = np.zeros(concurrency, dtype=np.int64)
    with pq.ParquetWriter(out / RECORDS, SCHEMA, **PARQUET_OPTIONS) as writer:
        pending: list[pa.Table] = []
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
                "id": pa.array(np.arange(start, start + m)),
                "warmup": pa.array(np.zeros(m, bool)),
                "t_sched_ns": pa.array(sched),
                "t_send_ns": pa.array(send),
                "t_first_ns": pa.array(send + ttft),
                "t_first_answer_ns": pa.array(send + ttft),
                "t_last_ns": pa.array(last),
                "t_end_ns": pa.array(end),
                "status": pa.array(["ok"] * m),
                "error_kind": pa.nulls(m, pa.string()),
                "error_detail": pa.nulls(m, pa.string()),
                "http_status": pa.array(np.full(m, 200)),
                "input_len": pa.array(np.full(m, 1024)),
                "output_len": pa.array(np.full(m, tokens)),
                "input_tokens": pa.array(np.full(m, 1024)),
                "output_tokens": pa.array(np.full(m, tokens)),
                "output_tokens_source": pa.array(["usage"] * m),
                "reasoning_tokens": pa.array(np.zeros(m, np.int64)),
                "chunks": pa.array(np.full(m, tokens)),
                "chunk_offsets_ns": pa.ListArray.from_arrays(list_offsets, pa.array(offs.ravel())),
                "chunk_tokens": pa.nulls(m, pa.list_(pa.int32())),
                "response_id": pa.array([f"cmpl-{i}" for i in range(start, start + m)]),
                "session": pa.nulls(m, pa.int64()),
                "turn": pa.nulls(m, pa.int64()),
            }
            pending.append(pa.Table.from_pydict(cols, schema=SCHEMA))
            if len(pending) * _GROUP >= JOIN_ROWS or start + m >= n:  # as columnar.join_parts joins them
                writer.write_table(pa.concat_tables(pending), row_group_size=JOIN_ROWS * 2)
                pending = []
    (out / "manifest.json").write_text(
        json.dumps(
            {
                "run_id": "million",
                "config": {
                    "model": "synthetic",
                    "url": "http://127.0.0.1:1/v1",
                    "concurrency": concurrency,
                    "input_len": 1024,
                    "output_len": tokens,
                },
                "target": {"base_url": "http://127.0.0.1:1/v1", "model": "synthetic"},
            }
        )
    )


_CHILD = """
import os, resource, sys, time
t, cpu0 = time.perf_counter(), 0.0
what, d = sys.argv[1], sys.argv[2]
if what == "summary":
    from servescope.results.store import load_run
    load_run(d).summary  # no summary.json: recomputed from the columns
elif what == "checks":
    from servescope.results import precision
    from servescope.results.colsummary import summarize_columns
    from servescope.results.parquet import load_columns
    from servescope.results.selfcheck import validate_columns
    cols = load_columns(d)  # as run/assemble.py after a run: the columns, the summary, then the checks
    summary = summarize_columns(cols)
    r = resource.getrusage(resource.RUSAGE_SELF)
    print(f"peak RSS before the checks: {r.ru_maxrss * 1024 / 1e6:.0f} MB")
    t, cpu0 = time.perf_counter(), r.ru_utime + r.ru_stime  # (the checks' own time)
    validate_columns(cols, summary)
    precision.precision_block_columns(cols)
elif what == "summary+report":
    from servescope.report.html import write_report
    write_report(d)  # loads the run (the summary recomputed, once) and renders report.html + charts
else:
    from servescope.results.export import export_records
    export_records(d, what, sys.argv[3])
r = resource.getrusage(resource.RUSAGE_SELF)
print(f"{time.perf_counter() - t:.3f} {r.ru_utime + r.ru_stime - cpu0:.3f} {r.ru_maxrss * 1024 / 1e6:.0f}")
"""

#: (what, wall-time limit s, peak-RSS limit MB) a million-request result must stay within; None: no limit.
#: "checks": the post-run checks of run/assemble.py (validation, precision) after the summary, timed alone
#: (wall and CPU); the peak RSS is the process's, the columns and the summary before them included.
TARGETS = {
    "summary": (None, None),
    "summary+report": (5.0, 1000.0),
    "checks": (None, 1000.0),
    "csv": (10.0, None),
    "parquet": (None, None),
    "jsonl": (None, None),
}


def _run(what: str, d: Path, src: Path) -> tuple[float, float, float, int, str]:
    """One fresh process: wall s (from before the imports), CPU s (user + system), peak RSS MB, the
    size of what it wrote, and what else it printed."""
    out = d / f"export.{what}"
    env = {"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, what, str(d), str(out)], capture_output=True, text=True, check=False, env=env
    )
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    wall, cpu, rss = (float(x) for x in proc.stdout.split()[-3:])
    size = out.stat().st_size if out.is_file() else 0
    out.unlink(missing_ok=True)
    (d / "summary.json").unlink(missing_ok=True)
    return wall, cpu, rss, size, "; ".join(proc.stdout.splitlines()[:-1])


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").is_file() else "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/sb-million"))
    ap.add_argument("--repeat", type=int, default=3, help="fresh processes per measurement (min and median shown)")
    ap.add_argument("--only", nargs="*", choices=list(TARGETS), help="measure only these")
    ap.add_argument(
        "--src",
        type=Path,
        default=ROOT / "src",
        help="the servescope source tree to measure (e.g. a worktree of an older commit, for before/after)",
    )
    args = ap.parse_args()
    d = args.dir
    if not (d / RECORDS).is_file():
        t = time.perf_counter()
        synthesize(d, args.requests, args.tokens)
        print(
            f"synthesized {args.requests:,} requests x {args.tokens} tokens in {time.perf_counter() - t:.1f} s "
            f"({(d / RECORDS).stat().st_size / 1e6:.0f} MB)"
        )
    (d / "summary.json").unlink(missing_ok=True)
    print(f"{os.cpu_count()} CPUs; load average before: {_load()}")
    verdicts = []
    for what in args.only or list(TARGETS):
        runs = [_run(what, d, args.src) for _ in range(args.repeat)]
        walls, cpus, rsss = ([r[i] for r in runs] for i in range(3))
        size = f", {runs[-1][3] / 1e6:.0f} MB written" if runs[-1][3] else ""
        size += f" ({runs[-1][4]})" if runs[-1][4] else ""
        label = (
            what if what.startswith("summary") else "post-run checks" if what == "checks" else f"export --format {what}"
        )
        print(
            f"{label}: wall {' '.join(f'{w:.2f}' for w in walls)} s (min {min(walls):.2f}, median "
            f"{statistics.median(walls):.2f}); CPU median {statistics.median(cpus):.2f} s; peak RSS max "
            f"{max(rsss):.0f} MB{size}; load average {_load()}"
        )
        wall_limit, rss_limit = TARGETS[what]
        if wall_limit is not None:
            ok = statistics.median(walls) < wall_limit
            verdicts.append(
                f"{'PASS' if ok else 'FAIL'} {label}: median wall {statistics.median(walls):.2f} s < {wall_limit:g} s"
            )
        if rss_limit is not None:
            ok = max(rsss) < rss_limit
            verdicts.append(f"{'PASS' if ok else 'FAIL'} {label}: peak RSS {max(rsss):.0f} MB < {rss_limit:g} MB")
    print("\n".join(verdicts))


if __name__ == "__main__":
    main()
