"""Timed target (run by hand): `servescope plan` what-if simulates 10,000 requests of DeepSeek-R1 on
8xH200 (FP8, TP8, vLLM) on a virtual clock in under 2 s.

    .venv/bin/python benchmarks/plan_speed.py
"""

from __future__ import annotations

import time

from servescope.plan.memfit import PlanArgs, to_deployment
from servescope.plan.whatif import engine_config, simulate_point

TARGET_S = 2.0


def main() -> int:
    # the deployment's own engine: the one the emulator serves for the same flags
    cfg = engine_config(to_deployment(PlanArgs(model="DeepSeek-R1", gpu="h200", gpus=8)))
    rows = []
    for concurrency in (64, 256):
        t0 = time.perf_counter()
        point = simulate_point(cfg, concurrency=concurrency, input_len=1024, output_len=256, num_requests=10_000)
        rows.append((concurrency, time.perf_counter() - t0, point))
    ok = True
    for concurrency, wall_s, p in rows:
        ok &= wall_s < TARGET_S
        print(
            f"10,000 requests, concurrency {concurrency}: {wall_s:.2f} s wall "
            f"({'ok' if wall_s < TARGET_S else 'SLOW'}, target < {TARGET_S} s); simulated "
            f"{p.output_tokens_per_s:,.0f} output tok/s, ITL p50 {p.itl_ms_p50:.1f} ms, "
            f"TTFT p50 {p.ttft_ms_p50:.0f} ms"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
