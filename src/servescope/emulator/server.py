"""The built-in emulator: an OpenAI-compatible server running `sim.engine` on the wall clock.

Subprocess contract (what `servescope emulate` and `servescope run` without `--url` rely on)::

    python -m servescope.emulator [--profile NAME|FILE] [--host 127.0.0.1] [--port 0] [--seed 0]
        [--model M --gpu G --gpus N --nodes N --engine E --tp N --pp N --dp N --ep N --quant Q
         --kv-dtype D --max-model-len L --max-num-seqs N --max-num-batched-tokens N
         --gpu-memory-utilization U]
        [--served-model-name NAME] [--kv-tokens N]
        [--fault-500 F] [--fault-429 F] [--fault-drop F] [--fault-stall F] [--fault-seed N]
        [--realtime-priority N]

The deployment flags are `servescope plan`'s: with `--model` they describe the deployment to serve
(its engine configuration is the one plan's what-if simulates); with `--profile` (a saved deployment)
they override its fields. Without either, the default profile (`deploy.DEFAULT_PROFILE`, llama-3.1-8b: the
same one `servescope run` serves without --url).

prints exactly one line ``READY http://HOST:PORT`` on stdout (flushed) once it is listening (port 0
picks a free port; the line carries the real one), logs nothing else to stdout, and runs until
SIGTERM/SIGINT (exit 0). Errors in the flags or profile print one line to stderr and exit 2.

Endpoints: `GET /v1/models`, `POST /v1/completions`, `POST /v1/chat/completions` (SSE streaming with
`data: [DONE]`, or one JSON body; `usage`; `stream_options.include_usage` adds a final chunk with
`choices: []`; `max_tokens`, `min_tokens`, `ignore_eos`; without `ignore_eos` the length ends at a
seeded EOS), `POST /tokenize` and `/detokenize` (vLLM shapes), `GET /health`, `GET /version`,
`GET /metrics` (Prometheus text, vLLM names), `POST /reset_prefix_cache` (vLLM's: forgets every
cached prefix block; 200 with an empty body, 409 while requests run or wait). Reasoning profiles
stream the chain of thought on `delta.reasoning_content` first, then `content`, and report
`usage.completion_tokens_details.reasoning_tokens`.

Ground truth, for checking a client's measurements: `GET /_servescope/truth` returns
``{"clock": "perf_counter_ns", "requests": [{"id", "arrival_ns", "token_ns": [...], "status",
"prompt_tokens", "completion_tokens", "reasoning_tokens"}, ...]}`` for the last 50,000 requests.
Times are `time.perf_counter_ns()` (CLOCK_MONOTONIC: comparable across processes on one Linux
host): `arrival_ns` when the request was read (headers and body), `token_ns[i]` just before token
i's bytes went to the socket (so a client on the same host always sees it later; for a
non-streaming request, when the token was generated — the body leaves with the last one). `id` is the `x-request-id`
response header (the client's own `x-request-id` if it sent one). `status` is one of `running`,
`ok`, `error_500`, `error_429`, `dropped`, `stalled`, `aborted` (client went away), `rejected`.
`?id=X` selects one request; `?clear=1` forgets the finished ones after answering.
`GET /_servescope/pacing` gives the emission error |actual write - engine emission time|.

Faults (fractions of requests, drawn from `--fault-seed` in arrival order): answered 500, answered
429, dropped (connection closed after a seeded number of tokens), stalled (no more bytes after a
seeded number of tokens; the connection stays open).

Output: `ignore_eos` gives exactly `max_tokens` (or the profile's `default_max_tokens` when none is
set); otherwise the length is a seeded draw (geometric, profile `eos_mean_tokens`, at least
`min_tokens`) capped by `max_tokens` or the context left, with `finish_reason` "stop" or "length".
Token text is whole words of the built-in tokenizer (`servescope.emulator.tokenizer`), so the output text
re-tokenizes (`/tokenize`) to exactly `usage.completion_tokens`. Prompts are counted with the same
tokenizer; chat messages go through `chat_prompt`'s template first.

Pacing: each engine step has an absolute deadline (its start + step time, perf_counter based);
the next step starts at the previous deadline, so there is no drift. Requests are admitted
(parsed, tokenized, queued) at step boundaries. The loop waits on the event loop until ~2 ms
before the step's burst, then with `time.sleep`; the burst writes every token of the step (one
send per stream, bytes prepared in advance) and is centred on the deadline, using a running
estimate of its own length. A late step is caught up (the next one is not pushed back); if the
loop falls more than 25 ms behind it restarts the clock at "now" (the host is then the
bottleneck; `/_servescope/pacing` shows it). The burst itself is prepared before the wait (each
stream's bytes and its transport's write), so it holds nothing but the sends and their timestamps.
On a host shared with a busy client a waking loop can wait a scheduler slice (ms) for its core;
`--realtime-priority N` runs it under SCHED_FIFO so it preempts (pacing reports `scheduling`).
Requests answered
500/429 by a fault never reach the engine; dropped and disconnected ones are aborted in it.

Library use: `serve(profile, host, port, faults=Faults(...))` blocks;
`start_server(...)` starts on a running loop; `EmulatorThread("tiny")` runs one in a thread.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from servescope.deploy import DEFAULT_PROFILE
from servescope.deploy.loader import load_profile
from servescope.emulator.app import Emulator, chat_prompt
from servescope.emulator.faults import Faults
from servescope.emulator.http import HttpConn
from servescope.errors import ConfigError
from servescope.sim.profile import Profile

__all__ = ["Faults", "Emulator", "EmulatorThread", "start_server", "serve", "main", "chat_prompt"]


# ---------------------------------------------------------------------- running it
async def start_server(
    profile: Profile | str,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    faults: Faults | None = None,
    seed: int = 0,
    served_model_name: str | None = None,
) -> tuple[asyncio.AbstractServer, Emulator, int]:
    """Start listening on the running loop; returns (server, app, port)."""
    prof = load_profile(profile) if isinstance(profile, str) else profile
    app = Emulator(prof, faults=faults, seed=seed, served_model_name=served_model_name)
    app.start()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: HttpConn(app), host, port, backlog=4096, reuse_address=True)
    real_port = server.sockets[0].getsockname()[1]
    return server, app, real_port


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux/macOS
        return asyncio.new_event_loop()


def serve(
    profile: Profile | str,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    faults: Faults | None = None,
    seed: int = 0,
    served_model_name: str | None = None,
    ready: Callable[[str], None] | None = None,
    scheduling: str = "normal",
) -> None:
    """Run the emulator until SIGINT/SIGTERM. `ready(url)` is called once listening. `scheduling`:
    what the loop runs under, in words (reported by /_servescope/pacing)."""

    async def main_() -> None:
        server, app, real_port = await start_server(
            profile, host, port, faults=faults, seed=seed, served_model_name=served_model_name
        )
        app.pacer.scheduling = scheduling
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
                loop.add_signal_handler(sig, stop.set)
        if ready is not None:
            ready(f"http://{host}:{real_port}")
        await stop.wait()
        server.close()
        await app.stop()

    with asyncio.Runner(loop_factory=_new_loop) as runner:
        runner.run(main_())


class EmulatorThread:
    """The emulator in a background thread (tests, notebooks): `with EmulatorThread("tiny") as emu: emu.url`."""

    def __init__(
        self,
        profile: Profile | str = DEFAULT_PROFILE,
        *,
        faults: Faults | None = None,
        seed: int = 0,
        host: str = "127.0.0.1",
    ) -> None:
        self._args = (profile, host, faults, seed)
        self.url = ""
        self.app: Emulator | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, daemon=True, name="servescope-emulator")
        self._error: BaseException | None = None

    def _main(self) -> None:
        profile, host, faults, seed = self._args

        async def run() -> None:
            server, app, port = await start_server(profile, host, 0, faults=faults, seed=seed)
            self.app = app
            self._stop = asyncio.Event()
            self.url = f"http://{host}:{port}"
            self._loop = asyncio.get_running_loop()
            self._ready.set()
            await self._stop.wait()
            server.close()
            await app.stop()

        try:
            with asyncio.Runner(loop_factory=_new_loop) as runner:
                runner.run(run())
        except BaseException as e:  # surfaced by __enter__
            self._error = e
            self._ready.set()

    def __enter__(self) -> EmulatorThread:
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m servescope.emulator", description="Emulated OpenAI-compatible LLM server (servescope)."
    )
    ap.add_argument(
        "--profile",
        default=None,
        help=f"profile name or YAML path: a saved deployment (default: {DEFAULT_PROFILE}, or the deployment flags)",
    )
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port (default)")
    ap.add_argument("--seed", type=int, default=0, help="seed for output lengths and text")
    ap.add_argument("--served-model-name", default=None)
    dep = ap.add_argument_group("deployment (the same flags as servescope plan)")
    dep.add_argument("--model", default=None, help="catalogue name or a path to a HF config.json")
    dep.add_argument("--gpu", default=None)
    dep.add_argument("--gpus", type=int, default=None, help="GPUs per node")
    dep.add_argument("--nodes", type=int, default=None)
    dep.add_argument("--engine", default=None, help="vllm, vllm-0.7, sglang, trtllm")
    for k in ("tp", "pp", "dp", "ep"):
        dep.add_argument(f"--{k}", type=int, default=None)
    dep.add_argument("--quant", default=None)
    dep.add_argument("--kv-dtype", default=None)
    dep.add_argument("--max-model-len", type=int, default=None)
    dep.add_argument("--max-num-seqs", type=int, default=None)
    dep.add_argument("--max-num-batched-tokens", type=int, default=None)
    dep.add_argument("--gpu-memory-utilization", type=float, default=None)
    ap.add_argument("--kv-tokens", type=int, default=None, help="override the KV cache capacity (tokens)")
    ap.add_argument("--fault-500", type=float, default=0.0, help="fraction of requests answered 500")
    ap.add_argument("--fault-429", type=float, default=0.0, help="fraction of requests answered 429")
    ap.add_argument("--fault-drop", type=float, default=0.0, help="fraction closed mid-stream")
    ap.add_argument("--fault-stall", type=float, default=0.0, help="fraction that stop sending mid-stream")
    ap.add_argument("--fault-seed", type=int, default=0)
    ap.add_argument(
        "--realtime-priority",
        type=int,
        default=None,
        metavar="N",
        help="pace under SCHED_FIFO priority N (1-99; Linux, root or CAP_SYS_NICE): on a host "
        "shared with a busy client, steps then start on time (see Pacing)",
    )
    return ap.parse_args(argv)


def _realtime(priority: int) -> str:
    """Put this thread (the one that runs the loop) under SCHED_FIFO; what it runs under, in words."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except (AttributeError, OSError) as e:  # not Linux, or not permitted: pace as before, and say so
        reason = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        print(
            f"servescope.emulator.server: --realtime-priority {priority} refused ({reason}); pacing at normal priority",
            file=sys.stderr,
        )
        return f"normal (SCHED_FIFO {priority} refused: {reason})"
    return f"SCHED_FIFO {priority}"


def _raise_fd_limit() -> None:
    """Allow as many connections as the hard limit permits (the soft default is often 1024)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):  # pragma: no cover - not POSIX, or not permitted
        pass


_DEPLOYMENT_FLAGS = (
    "model",
    "gpu",
    "gpus",
    "nodes",
    "engine",
    "tp",
    "pp",
    "dp",
    "ep",
    "quant",
    "kv_dtype",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
)


def _profile(args: argparse.Namespace) -> Profile:
    """The profile to serve: a saved deployment (--profile) with the deployment flags over its fields,
    a deployment from the flags alone (--model), or the default profile with the flags over its fields."""
    from servescope.deploy.deployment import profile_from_raw
    from servescope.deploy.loader import load_raw_profile, resolve_model

    flags = {k: getattr(args, k) for k in _DEPLOYMENT_FLAGS if getattr(args, k) is not None}
    if args.profile is None and "model" not in flags:
        raw: dict[str, Any] = load_raw_profile(DEFAULT_PROFILE)
    elif args.profile is None:
        spec = resolve_model(str(flags["model"]))
        raw = {"name": spec.name, "served_model_name": spec.hf_id or spec.name}
    else:
        raw = load_raw_profile(args.profile)
    if "model" not in raw and "model" not in flags:  # a cost-only profile: only the batch limit applies
        if set(flags) - {"max_num_seqs"}:
            raise ConfigError(f"profile {args.profile} is not a deployment; deployment flags need --model")
        prof = profile_from_raw(raw)
        if "max_num_seqs" in flags:
            import dataclasses

            prof = dataclasses.replace(
                prof, engine=dataclasses.replace(prof.engine, max_num_seqs=int(flags["max_num_seqs"]))
            )
        return prof
    raw = {**raw, **flags}
    if int(raw.get("dp") or 1) > 1:
        raise ConfigError(
            "the emulator serves one model replica: run one per DP rank (--dp 1), or use "
            "servescope plan for data-parallel what-if"
        )
    return profile_from_raw(raw)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m servescope.emulator` (see the module docstring for the contract)."""
    import dataclasses

    args = _parse_args(argv)
    try:
        prof = _profile(args)
        eng = prof.engine
        if args.kv_tokens is not None:
            eng = dataclasses.replace(eng, kv_blocks=max(1, args.kv_tokens // eng.block_size))
        prof = dataclasses.replace(prof, engine=eng)
        faults = Faults(args.fault_500, args.fault_429, args.fault_drop, args.fault_stall, args.fault_seed)
        if args.realtime_priority is not None and not 1 <= args.realtime_priority <= 99:
            raise ConfigError(f"--realtime-priority must be 1-99, not {args.realtime_priority}")
    except (ConfigError, ValueError) as e:
        print(f"servescope.emulator.server: {e}", file=sys.stderr)
        return 2

    _raise_fd_limit()
    scheduling = _realtime(args.realtime_priority) if args.realtime_priority is not None else "normal"

    def ready(url: str) -> None:
        sys.stdout.write(f"READY {url}\n")
        sys.stdout.flush()

    try:
        serve(
            prof,
            args.host,
            args.port,
            faults=faults,
            seed=args.seed,
            served_model_name=args.served_model_name,
            ready=ready,
            scheduling=scheduling,
        )
    except OSError as e:
        print(f"servescope.emulator.server: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
