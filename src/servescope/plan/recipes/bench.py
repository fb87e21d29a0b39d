"""The servescope commands that benchmark a deployment. Pure."""

from __future__ import annotations

from servescope.plan.recipes.spec import RecipeSpec, join_command

__all__ = ["bench_script"]


def bench_script(
    spec: RecipeSpec,
    *,
    host: str = "localhost",
    input_len: int = 1024,
    output_len: int = 256,
    concurrencies: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128),
) -> str:
    url = f"http://{host}:{spec.port}"
    cap = [c for c in concurrencies if c <= spec.max_num_seqs] or [1]
    common = ["--url", url, "--model", spec.model_id, "--input-len", str(input_len), "--output-len", str(output_len)]
    run = [
        "servescope",
        "run",
        *common,
        "--concurrency",
        str(cap[len(cap) // 2]),
        "--num-requests",
        "200",
        "--warmup",
        "10",
        "--out",
        f"results/{spec.name}-run",
    ]
    sweep = [
        "servescope",
        "sweep",
        *common,
        "--concurrency",
        ",".join(str(c) for c in cap),
        "--out",
        f"results/{spec.name}-sweep",
    ]
    return "\n".join(
        [
            "#!/usr/bin/env bash",
            f"# Benchmark {spec.model.name} on {spec.layout.describe()} ({spec.engine}) once /health answers.",
            "set -euo pipefail",
            f"until curl -sf {url}/health >/dev/null; do sleep 10; done",
            "",
            "# one point",
            join_command(run),
            "",
            "# the curve: throughput and latency per concurrency",
            join_command(sweep),
            "",
        ]
    )
