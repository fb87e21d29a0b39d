"""The flags of one run, shared by `servescope run` and `servescope sweep` (and the scenario file).

Flag names follow `vllm bench serve` where the concept is the same; vLLM's names are accepted as
aliases (`--num-prompts`, `--request-rate`, `--max-concurrency`, `--random-input-len`,
`--random-output-len`, `--random-range-ratio`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from servescope.results.slo import parse_slo_spec
from servescope.run.config import RunConfig, load_scenario, parse_extra_body

__all__ = ["config_from_options", "run_options", "settings_from_options"]

_Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def run_options(fn: Callable[..., Any] | None = None, *, lists: bool = False) -> Any:
    """The flags of one run, shared by `run` and `sweep`.

    `lists=True` (`@run_options(lists=True)`, for `sweep`): --concurrency, --rate, --input-len and
    --output-len take comma-separated lists and arrive as strings for the caller to parse.
    """
    if fn is None:
        return functools.partial(run_options, lists=lists)
    groups = (
        _target_options(),
        _workload_options(lists),
        _load_options(lists),
        _client_options(),
        _measure_options(),
        _serve_options(),
        _scale_options(),
    )
    return _apply(fn, [opt for group in groups for opt in group])


def _apply(fn: Callable[..., Any], opts: list[_Decorator]) -> Callable[..., Any]:
    """Decorate `fn` with `opts` as if stacked above it in this order (so --help lists them so)."""
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _target_options() -> list[_Decorator]:
    """Where to send and how: the scenario file, the server, the model, the endpoint."""
    return [
        click.option(
            "-f", "--scenario", type=click.Path(dir_okay=False), help="YAML file with the same settings as the flags."
        ),
        click.option(
            "--url",
            help="Base URL of an OpenAI-compatible server, with or without /v1. Default: start the built-in emulator.",
        ),
        click.option("--model", help="Model name. Default: the first of the server's /v1/models."),
        click.option(
            "--api",
            type=click.Choice(["chat", "completions", "responses", "messages"]),
            help="Endpoint: /v1/chat/completions, /v1/completions, /v1/responses (OpenAI Responses) or "
            "/v1/messages (Anthropic Messages). [default: chat]",
        ),
        click.option("--stream/--no-stream", default=None, help="Stream tokens (SSE). [default: stream]"),
    ]


def _workload_options(lists: bool) -> list[_Decorator]:
    """How many requests and what they ask: counts, seed, dataset, lengths."""
    num = str if lists else int
    return [
        click.option(
            "--num-requests",
            "--num-prompts",
            "num_requests",
            type=int,
            help="Measured requests to send. [default: 200 unless --duration]",
        ),
        click.option("--duration", type=float, help="Stop sending after this many seconds."),
        click.option("--warmup", type=int, help="Extra requests sent first and excluded from every metric."),
        click.option("--seed", type=int, help="Seed for prompts, lengths and arrivals. [default: 0]"),
        click.option(
            "--dataset",
            help="Workload: random, random:IN:OUT@W%,..., "
            "shared-prefix[:groups=G,prompts=P,system=S,question=Q], jsonl:PATH, "
            "sharegpt:PATH (all turns), hf:PATH[:prompt=COL], trace:PATH[:speedup=X]. "
            "See docs/workloads.md. [default: random]",
        ),
        click.option(
            "--tokenizer",
            help="Local Hugging Face tokenizer (tokenizer.json or a model folder) for exact prompt lengths. "
            "Default: the server's /tokenize.",
        ),
        click.option(
            "--input-len", "--random-input-len", "input_len", type=num, help="Prompt tokens per request. [default: 512]"
        ),
        click.option(
            "--output-len",
            "--random-output-len",
            "output_len",
            type=num,
            help="Output tokens per request (max_tokens). [default: 128]",
        ),
        click.option(
            "--range-ratio",
            "--random-range-ratio",
            "range_ratio",
            type=float,
            help="Uniform spread of lengths: [len·(1−r), len·(1+r)]. [default: 0]",
        ),
        click.option(
            "--ignore-eos/--no-ignore-eos",
            default=None,
            help="Ask for exact output lengths (ignore_eos + min_tokens). [default: on]",
        ),
    ]


def _load_options(lists: bool) -> list[_Decorator]:
    """How they arrive: a closed loop's concurrency, an open loop's rate, a ramp."""
    num = str if lists else int
    return [
        click.option(
            "--concurrency",
            "--max-concurrency",
            "concurrency",
            type=num,
            help="Closed loop: N requests in flight. With --rate: a cap. [default: 16 when no --rate]",
        ),
        click.option(
            "--rate",
            "--request-rate",
            "rate",
            type=str if lists else float,
            help="Open loop: requests per second; 'inf' sends every request at once.",
        ),
        click.option(
            "--burstiness",
            type=float,
            help="Gamma shape of arrivals: 1 = Poisson, inf = constant spacing. [default: 1]",
        ),
        click.option(
            "--ramp-up-strategy",
            type=click.Choice(["linear", "exponential"]),
            help="Raise the request rate over the run.",
        ),
        click.option("--ramp-up-start-rps", type=float, help="Ramp-up: rate of the first request."),
        click.option("--ramp-up-end-rps", type=float, help="Ramp-up: rate of the last request."),
    ]


def _client_options() -> list[_Decorator]:
    """How the client sends and reads: timeouts, receive stamps, headers, extra body fields."""
    return [
        click.option(
            "--timeout", type=float, help="Seconds before a request counts as failed (timeout). [default: 600]"
        ),
        click.option(
            "--rx-timestamps",
            type=click.Choice(["kernel", "read"]),
            help="When a token arrived: 'kernel' = the kernel's receive timestamp of its bytes "
            "(Linux, plain HTTP), 'read' = when the client got to read them. [default: kernel]",
        ),
        click.option(
            "--read-coalescing/--no-read-coalescing",
            default=None,
            help="With kernel timestamps: while streams deliver faster than a chunk a millisecond "
            "(20,000 such reads/s), pause ~0.1 ms between polls so each read carries several "
            "chunks (arrival times stay the kernel's). [default: on]",
        ),
        click.option(
            "--header",
            "headers",
            multiple=True,
            help="Extra HTTP header KEY:VALUE (repeatable). Values are never written to results.",
        ),
        click.option("--extra-body", help="JSON object merged into every request body."),
        click.option(
            "--api-key-env", help="Name of the environment variable holding the API key (sent as a Bearer token)."
        ),
    ]


def _measure_options() -> list[_Decorator]:
    """What the run measures and leaves: SLO, GPUs, probe, precision, repeats, report, cache."""
    return [
        click.option(
            "--slo",
            help="SLO: per-request limits for goodput (ttft_ms=2000,tpot_ms=80), run limits "
            "(ttft_p99_ms=2000,itl_p99_ms=50) or mlperf:<benchmark>.",
        ),
        click.option("--profile", help="Emulator profile when no --url is given. [default: llama-3.1-8b]"),
        click.option(
            "--gpus",
            type=int,
            help="GPUs serving the target: throughput per GPU (sweep: also multiplies the GPU-hour "
            "price). [default: the built-in emulator's deployment; with --url unknown]",
        ),
        click.option(
            "--no-probe", "no_probe", is_flag=True, default=None, help="Skip the capability probe before the clock."
        ),
        click.option(
            "--target-precision",
            help="Stop once the median and P99 of TTFT and TPOT are known to ±this at 95% "
            "confidence (e.g. 5%), checked every few seconds; within --num-requests/--duration.",
        ),
        click.option(
            "--repeat", type=int, help="Run the same configuration N times (DIR/repeat-1..N) and report the spread."
        ),
        click.option("--report/--no-report", default=None, help="Write report.html beside the results. [default: on]"),
        click.option(
            "--same-prompts",
            is_flag=True,
            default=None,
            help="Send the same prompts at every sweep point and repeat (--seed as given). By default each "
            "gets its own (a seed derived from --seed), so a prefix cache cannot serve later ones warm.",
        ),
        click.option(
            "--reset-cache",
            is_flag=True,
            default=None,
            help="Before each run (each sweep point, each repeat) empty the server's prefix cache: vLLM's "
            "POST /reset_prefix_cache (needs VLLM_SERVER_DEV_MODE=1), SGLang's POST /flush_cache, the "
            "built-in emulator's; the reply is kept in the manifest.",
        ),
        click.option(
            "--gpu-metrics-url",
            help="GPU telemetry during the measured window (power, energy, utilisation, memory, SM clock): "
            "a DCGM exporter's /metrics URL, or 'nvml' for this host's GPUs (extra 'gpu'). Energy "
            "per token lands in summary.energy. [default: nvml with --serve, else none]",
        ),
    ]


def _serve_options() -> list[_Decorator]:
    """A server started by the run itself (--serve)."""
    return [
        click.option(
            "--serve",
            help="Start the server too: a command with {port} (a free loopback port servescope "
            "targets) and {NAME} placeholders for --serve-param; stopped after the run (process group).",
        ),
        click.option(
            "--serve-param",
            "serve_param",
            multiple=True,
            help="Values of a --serve placeholder: NAME=V1,V2 or tied N1,N2=(a1,a2),(b1,b2); several "
            "flags multiply (sweep: one series per server configuration).",
        ),
        click.option(
            "--serve-timeout",
            type=float,
            help="Seconds for a --serve server to answer /health (or /v1/models). [default: 600]",
        ),
    ]


def _scale_options() -> list[_Decorator]:
    """The client spread over processes or Ray actors, and the terminal."""
    return [
        click.option(
            "--workers",
            type=int,
            help="Client processes on this host, each sending its share of the load (a closed loop's "
            "concurrency split, an open loop's arrivals dealt in turn) from one common start. "
            "[default: 1]",
        ),
        click.option(
            "--ray",
            is_flag=False,
            flag_value="local",
            default=None,
            metavar="[ADDRESS]",
            help="Run the shards as Ray actors, one per node of a Ray cluster (extra 'ray'): ADDRESS is "
            "the cluster's (HOST:PORT, ray://…, auto); alone, the cluster Ray finds (RAY_ADDRESS, the "
            "latest `ray start` here) or a new local one. With --workers N > 1: N shards over the "
            "nodes in turn.",
        ),
        click.option(
            "--ray-resource",
            metavar="NAME",
            help="With --ray: place shards only on the nodes offering this custom resource "
            "(ray start --resources '{\"NAME\": 1}'), e.g. to keep them off the head node.",
        ),
        click.option("--quiet", "-q", is_flag=True, default=None, help="No progress display and no summary table."),
    ]


def config_from_options(options: dict[str, Any]) -> RunConfig:
    """Scenario file first, then every flag the user gave on top of it; validated."""
    return RunConfig(**settings_from_options(options)).validate()


def settings_from_options(options: dict[str, Any]) -> dict[str, Any]:
    """RunConfig keyword arguments from click options (unset flags left out)."""
    settings: dict[str, Any] = {}
    scenario = options.pop("scenario", None)
    if scenario:
        settings.update(load_scenario(scenario))
    for key, value in options.items():
        if value is None or value == ():
            continue
        if key in ("headers", "serve_param"):
            settings[key] = list(value)
        elif key == "extra_body":
            settings["extra_body"] = parse_extra_body(value)
        elif key == "slo":
            settings["slo"] = value
        elif key == "no_probe":
            settings["probe"] = not value
        else:
            settings[key] = value
    if isinstance(settings.get("slo"), str):  # flag or scenario file: every kind of limit, one parser
        text = settings["slo"]
        settings["slo"] = dict(parse_slo_spec(text).per_request)
        settings["slo_text"] = text
    if isinstance(settings.get("extra_body"), str):
        settings["extra_body"] = parse_extra_body(settings["extra_body"])
    return settings
