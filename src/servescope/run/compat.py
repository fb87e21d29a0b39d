"""Foreign command lines: the flags of `vllm bench serve` and SGLang's `bench_serving` on `servescope run`.

A user's script that runs `vllm bench serve ...` or `python -m sglang.bench_serving ...` runs unchanged as
`servescope run ...`: each foreign flag is defined here (`FLAGS`), mapped onto `RunConfig` settings with the
meaning its own tool gives it today (`resolve`), or refused before anything is sent, naming the flag and
what to use instead (`Refusal`, exit 2). Progress-bar flags are accepted quietly. Flags whose names are
servescope's own already (`--model`, `--num-prompts`, `--request-rate`, `--max-concurrency`, `--seed`,
`--random-input-len`, ... see options.py) keep one definition; in a foreign command line they take the
foreign tool's defaults (1000 prompts, all requests at once, its lengths and seed) where the user gave none.

The dialect is read from the flags used: a vLLM-only flag or backend means vLLM, an SGLang-only one SGLang
(`--backend vllm` is valid in both: vLLM unless an SGLang-only flag is present); both at once is refused.
No foreign flag: nothing here changes anything. Facts taken from the tools' current sources
(vllm/benchmarks/serve.py + benchmarks/datasets, sglang/bench_serving.py); docs/compatibility.md has the
table. `CompatCommand` is the click command class of `servescope run`: it prints these flags under their
own "Compatibility" heading and reads their argparse forms (`--goodput ttft:500 tpot:50`, a bare `--profile`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from typing import Any, Literal

import click

from servescope.results.foreign import ForeignOutput
from servescope.run.compat_flags import (
    DATASETS_INSTEAD,
    ENDPOINTS,
    FLAGS,
    MANY_VALUED,
    PERCENTILE_METRICS,
    SGLANG_BACKENDS,
    SGLANG_PORTS,
    VLLM_BACKENDS,
    Flag,
    Refusal,
)

__all__ = ["FLAGS", "CompatCommand", "Flag", "ForeignOutput", "Refusal", "compat_options", "resolve"]


# --------------------------------------------------------------------------- click
def compat_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add every foreign flag to a click command (hidden from the main list; `CompatCommand` shows them)."""
    for flag in reversed(FLAGS):
        if flag.takes is None:
            opt = click.option(flag.name, flag.dest, is_flag=True, default=None, help=flag.help)
        else:
            opt = click.option(flag.name, flag.dest, type=flag.takes, default=None, help=flag.help, multiple=flag.many)
        fn = opt(fn)
    return fn


def _is_value(tok: str) -> bool:
    return not tok.startswith("-") or _is_number(tok)


def _is_number(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True


def normalize_argv(args: list[str]) -> list[str]:
    """argparse forms -> click forms: `--goodput a b` -> `--goodput a --goodput b`, vLLM's `--header K=V`
    -> `--header K:V`, a bare `--profile` (the engines' profiler switch) -> `--x-profiler`."""
    out: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        if tok == "--":
            out += args[i:]
            break
        name = tok.split("=", 1)[0]
        if name in MANY_VALUED and "=" not in tok:
            vals = []
            while i + 1 < len(args) and _is_value(args[i + 1]):
                i += 1
                vals.append(args[i])
            for v in vals or [""]:
                if name == "--header":
                    k, eq, rest = v.partition("=")
                    v = f"{k}:{rest}" if eq and ":" not in k else v
                out += [name, v]
        elif tok == "--profile" and (i + 1 == len(args) or args[i + 1].startswith("-")):
            out.append("--x-profiler")
        else:
            out.append(tok)
        i += 1
    return out


class CompatCommand(click.Command):
    """`servescope run`: foreign flags in their own "Compatibility" help section, argparse forms read."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        args = normalize_argv(list(args))
        ctx.meta["servescope.compat.used"] = [a.split("=", 1)[0] for a in args if a.startswith("--")]
        return super().parse_args(ctx, args)

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        ours: list[tuple[str, str]] = []
        theirs: list[tuple[str, str]] = []
        dests = {f.dest for f in FLAGS if f.name != "--x-profiler"}
        for param in self.get_params(ctx):
            rec = param.get_help_record(ctx)
            if rec is None or param.name == "x_x_profiler":
                continue
            (theirs if param.name in dests else ours).append(rec)
        with formatter.section("Options"):
            formatter.write_dl(ours)
        with formatter.section("Compatibility (vllm bench serve / SGLang bench_serving; docs/compatibility.md)"):
            formatter.write_text(
                "Their command lines run unchanged. Also accepted with their meaning: --model, --tokenizer, "
                "--num-prompts, --request-rate, --max-concurrency, --burstiness, --seed, --random-input-len, "
                "--random-output-len, --random-range-ratio (vLLM's current symmetric meaning; SGLang's "
                "[len*R, len]: 1 only), --ignore-eos, --extra-body, --header K=V, --ramp-up-*. Flags servescope "
                "cannot honour stop the run before anything is sent, naming what to use instead."
            )
            formatter.write_dl(theirs)


# --------------------------------------------------------------------------- resolution
def resolve(options: dict[str, Any], used: list[str] | None = None) -> ForeignOutput | None:
    """Pop the foreign flags from click's `options` and write their meaning into our keys (in place).

    Returns what the foreign result files need, or None when the command line has no foreign flag (then
    `options` is untouched). Raises `Refusal` for a flag servescope cannot honour.
    """
    foreign = {f.dest: options.pop(f.dest, None) for f in FLAGS}
    given = {d: v for d, v in foreign.items() if v is not None and v != ()}
    if not given:
        return None
    used = used or []
    by_dest = {f.dest: f for f in FLAGS}
    for dest in given:
        flag = by_dest[dest]
        if flag.action == "refuse":
            name = "--profile" if flag.name == "--x-profiler" else flag.name
            raise Refusal(name, flag.help.rstrip(".") + " has no servescope counterpart", flag.instead)
    tool = _dialect(given, by_dest)
    x = {d.removeprefix("x_"): v for d, v in given.items()}
    out = ForeignOutput(tool=tool, backend=x.get("backend") or ("openai" if tool == "vllm" else "sglang"))
    _target(options, x, out)
    _workload(options, x, out, used)
    _load(options, x, out, used)
    _results(options, x, out)
    return out


def _dialect(given: dict[str, Any], by_dest: dict[str, Flag]) -> Literal["vllm", "sglang"]:
    vllm = sorted(by_dest[d].name for d in given if by_dest[d].tool == "vllm")
    sglang = sorted(by_dest[d].name for d in given if by_dest[d].tool == "sglang")
    backend = given.get("x_backend")
    if backend in VLLM_BACKENDS and backend not in SGLANG_BACKENDS:
        vllm.append(f"--backend {backend}")
    if backend in SGLANG_BACKENDS and backend not in VLLM_BACKENDS:
        sglang.append(f"--backend {backend}")
    if vllm and sglang:
        raise Refusal(
            vllm[0],
            f"a vllm bench serve flag mixed with SGLang bench_serving's {sglang[0]}",
            "the flags of one tool per command line",
        )
    return "sglang" if sglang else "vllm"


def _target(options: dict[str, Any], x: dict[str, Any], out: ForeignOutput) -> None:
    backends = VLLM_BACKENDS if out.tool == "vllm" else SGLANG_BACKENDS
    if out.backend not in backends:
        raise Refusal(
            "--backend",
            f"{out.backend!r} is not an OpenAI-compatible backend servescope can drive",
            f"one of {', '.join(sorted(backends))}",
        )
    api = backends[out.backend]
    endpoint = x.get("endpoint")
    if endpoint is not None:
        if endpoint not in ENDPOINTS:
            raise Refusal(
                "--endpoint",
                f"{endpoint!r} is not an endpoint servescope measures",
                "--endpoint /v1/completions, /v1/chat/completions or /v1/responses",
            )
        if x.get("backend") and ENDPOINTS[endpoint] != api:
            raise Refusal(
                "--endpoint",
                f"{endpoint} does not match --backend {out.backend}",
                "--backend openai-chat with /v1/chat/completions, openai-responses with /v1/responses, "
                "openai or vllm with /v1/completions",
            )
        api = ENDPOINTS[endpoint]
    _set(options, "api", api, "--api")
    base, host, port = x.get("base_url"), x.get("host"), x.get("port")
    if base and (host or port):
        raise Refusal("--host/--port", "given with --base-url", "one of --base-url or --host/--port")
    if options.get("url") and (base or host or port):
        raise Refusal("--url", "given with --base-url/--host/--port", "one of them")
    if base:
        options["url"] = base
    elif not options.get("url"):  # their tools never start a server: no address means their default one
        if port is None:
            port = 8000 if out.tool == "vllm" else SGLANG_PORTS.get(out.backend, 30000)
        if host in (None, "0.0.0.0", "localhost"):
            host = "127.0.0.1"
        options["url"] = f"http://{host}:{port}"
    mode = x.get("tokenizer_mode")
    if mode is not None and mode not in ("auto", "hf"):
        raise Refusal(
            "--tokenizer-mode",
            f"{mode!r} tokenizers are not loaded by servescope",
            "--tokenizer-mode auto, or --tokenizer PATH to a Hugging Face tokenizer.json",
        )
    if x.get("served_model_name"):
        out.tokenizer = options.get("tokenizer") or options.get("model")
        options["model"] = out.served_model = x["served_model_name"]


def _set(options: dict[str, Any], key: str, value: Any, ours: str) -> None:
    """A foreign flag's value for `key`, unless our own flag said otherwise."""
    if options.get(key) is not None and options[key] != value:
        raise Refusal(ours, f"{ours} {options[key]} contradicts the foreign flags ({value})", "one of the two")
    options[key] = value


def _workload(options: dict[str, Any], x: dict[str, Any], out: ForeignOutput, used: list[str]) -> None:
    vllm = out.tool == "vllm"
    name = x.get("dataset_name") or ("random" if vllm else "sharegpt")
    out.dataset_name = name
    if options.get("dataset") is not None:
        raise Refusal("--dataset", "given with foreign dataset flags", "--dataset-name (theirs) or --dataset (ours)")
    path = x.get("dataset_path")
    default_in, default_out = (1024, 128) if vllm else (1024, 1024)
    options.setdefault("input_len", None)
    options["input_len"] = options["input_len"] if options["input_len"] is not None else default_in
    options["output_len"] = options.get("output_len") if options.get("output_len") is not None else default_out
    out.random_input_len, out.random_output_len = options["input_len"], options["output_len"]
    for flag, ok in (("prefix_len", 0), ("batch_size", 1)):
        v = x.get(f"random_{flag}")
        if v is not None and v != ok:
            raise Refusal(
                f"--random-{flag.replace('_', '-')}",
                f"{v} is not supported",
                "--dataset shared-prefix:groups=1,prompts=N,system=PREFIX,question=LEN (one shared prefix)"
                if flag == "prefix_len"
                else "--random-batch-size 1",
            )
    if name in ("random", "random-ids"):
        if path:
            raise Refusal(
                "--dataset-path",
                f"servescope's {name} prompts are its own text of exact lengths",
                "drop --dataset-path (or --dataset-name sharegpt with it)",
            )
        options["dataset"] = "random"
        _range_ratio(options, x, out, used)
    elif name == "sharegpt":
        if not path:
            raise Refusal(
                "--dataset-name sharegpt",
                "needs a local file (servescope downloads nothing)",
                "--dataset-path ShareGPT_V3_unfiltered_cleaned_split.json, or --dataset-name random",
            )
        fixed = x.get("sharegpt_output_len")
        out.sharegpt_output_len = fixed
        # their ShareGPT benchmark sends each conversation's first user turn, output = its reply's length
        options["dataset"] = f"sharegpt:{path}:multi_turn=false,max_turns=1" + (",output=fixed" if fixed else "")
        if fixed:
            options["output_len"] = fixed
    elif name == "generated-shared-prefix" and not vllm:
        g, p = x.get("gsp_num_groups") or 64, x.get("gsp_prompts_per_group") or 16
        s, q = x.get("gsp_system_prompt_len") or 2048, x.get("gsp_question_len") or 128
        rr = x.get("gsp_range_ratio")
        if rr is not None and rr != 1:
            raise Refusal(
                "--gsp-range-ratio", f"{rr} draws lengths from [len*{rr}, len]", "--gsp-range-ratio 1 (fixed lengths)"
            )
        options["dataset"] = f"shared-prefix:groups={g},prompts={p},system={s},question={q}"
        options["output_len"] = x.get("gsp_output_len") or 256
        options["num_requests"] = g * p  # SGLang sends every generated prompt once
    else:
        twins = "random, sharegpt" + ("" if vllm else ", random-ids, generated-shared-prefix")
        raise Refusal(
            "--dataset-name", f"{name!r} has no servescope twin", f"--dataset-name {twins}, or {DATASETS_INSTEAD}"
        )


def _range_ratio(options: dict[str, Any], x: dict[str, Any], out: ForeignOutput, used: list[str]) -> None:
    """vLLM (current): symmetric [len(1-r), len(1+r)], ours too. SGLang: [max(1, int(len*R)), len], default 0."""
    r = options.get("range_ratio")
    if out.tool == "vllm":
        out.random_range_ratio = r if r is not None else 0.0
        return
    if "--range-ratio" in used:  # servescope's own flag: its own (symmetric) meaning
        out.random_range_ratio = r or 0.0
        return
    given = "--random-range-ratio" in used
    rr = r if given and r is not None else 0.0
    out.random_range_ratio = rr
    if rr != 1:
        lo_in = max(int(out.random_input_len * rr), 1)
        raise Refusal(
            "--random-range-ratio",
            f"SGLang draws lengths uniformly from [max(1, int(len*{rr:g})), len] "
            f"({'its default 0.0' if not given else 'as given'}; inputs {lo_in}..{out.random_input_len}), "
            "which servescope's symmetric spread cannot express for both lengths",
            "--random-range-ratio 1 (fixed lengths), or servescope's --input-len C --range-ratio r "
            "(uniform in [C(1-r), C(1+r)])",
        )
    options["range_ratio"] = 0.0


def _load(options: dict[str, Any], x: dict[str, Any], out: ForeignOutput, used: list[str]) -> None:
    vllm = out.tool == "vllm"
    if options.get("num_requests") is None:
        options["num_requests"] = 1000
    out.num_prompts = options["num_requests"]
    rate = options.get("rate")
    out.request_rate = math.inf if rate is None else rate
    out.max_concurrency = options.get("concurrency")
    out.burstiness = options.get("burstiness") or 1.0
    if options.get("ramp_up_strategy"):
        out.ramp = (
            options["ramp_up_strategy"],
            options.get("ramp_up_start_rps") or 0.0,
            options.get("ramp_up_end_rps") or 0.0,
        )
    if rate is not None and math.isinf(rate) and options.get("concurrency") is not None:
        options["rate"] = None  # all at once, N in flight: our closed loop of N
    elif rate is None and options.get("concurrency") is None and not options.get("ramp_up_strategy"):
        options["rate"] = math.inf  # their default: every request at time 0
    if options.get("seed") is None and not vllm:
        options["seed"] = 1
    warm = x.get("num_warmups") if vllm else x.get("warmup_requests")
    if options.get("warmup") is None:
        options["warmup"] = warm if warm is not None else (0 if vllm else 1)
    if vllm:
        if "--no-stream" in used:
            raise Refusal(
                "--no-stream",
                "vLLM's --no-stream is about loading a dataset; servescope's own "
                "--no-stream would turn off streamed responses and change what is measured",
                "drop it (servescope loads datasets whole)",
            )
        if "ignore_eos" not in options or options["ignore_eos"] is None:
            # vLLM forces ignore_eos on its random datasets; elsewhere only --ignore-eos sets it
            options["ignore_eos"] = out.dataset_name == "random"
    else:
        options["ignore_eos"] = (
            not x.get("disable_ignore_eos") if options.get("ignore_eos") is None else options["ignore_eos"]
        )
        if x.get("disable_stream"):
            _set(options, "stream", False, "--stream")
        if x.get("flush_cache"):
            options["reset_cache"] = True
    for flag, ok in (("ready_check_timeout_sec", 0), ("probe_request_rate", 0)):
        if x.get(flag) not in (None, ok):
            raise Refusal("--" + flag.replace("_", "-"), f"{x[flag]} is not supported", f"{ok} (the default)")
    if x.get("prompt_suffix"):
        raise Refusal("--prompt-suffix", "a suffix changes every prompt", "--dataset jsonl:PATH with your prompts")
    body: dict[str, Any] = {}
    if not vllm:
        body["temperature"] = 0.0  # SGLang's request bodies carry temperature 0
    for p in ("temperature", "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty"):
        if x.get(p) is not None:
            body[p] = x[p]
    extra = options.get("extra_body")
    if x.get("extra_request_body"):
        if extra:
            raise Refusal("--extra-request-body", "given with --extra-body", "one of the two")
        extra = x["extra_request_body"]
    if body:
        from servescope.run.config import parse_extra_body

        merged = {**body, **(parse_extra_body(extra) if isinstance(extra, str) else extra or {})}
        options["extra_body"] = json.dumps(merged)  # the flag's form: options.py parses it
    elif extra is not None:
        options["extra_body"] = extra
    goodput = _goodput(x.get("goodput") or ())
    out.goodput = goodput
    if goodput:
        if options.get("slo"):
            raise Refusal("--goodput", "given with --slo", "one of the two")
        options["slo"] = ",".join(f"{'e2e' if k == 'e2el' else k}_ms={v:g}" for k, v in goodput.items())


def _goodput(pairs: tuple[str, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for pair in pairs:
        key, sep, value = pair.partition(":")
        try:
            limit = float(value)
        except ValueError:
            limit = -1.0
        if not sep or key not in ("ttft", "tpot", "e2el") or limit < 0:
            raise Refusal(
                "--goodput", f"{pair!r} is not KEY:MS with KEY ttft, tpot or e2el", "--goodput ttft:500 tpot:50"
            )
        out[key] = limit
    return out


def _results(options: dict[str, Any], x: dict[str, Any], out: ForeignOutput) -> None:
    if out.tool == "sglang":
        out.path, out.tag = x.get("output_file"), x.get("tag")
        return
    pm = tuple(m.strip() for m in (x.get("percentile_metrics") or "ttft,tpot,itl").split(",") if m.strip())
    for m in pm:
        if m not in PERCENTILE_METRICS:
            raise Refusal(
                "--percentile-metrics",
                f"{m!r} is not measured the way vLLM reports it",
                f"a subset of {','.join(PERCENTILE_METRICS)} (client queueing: summary.client.schedule_lag_ms)",
            )
    out.percentile_metrics = pm
    try:
        ps = tuple(float(p) for p in (x.get("metric_percentiles") or "99").split(","))
    except ValueError:
        ps = (-1.0,)
    if not all(0 <= p <= 100 for p in ps):
        raise Refusal(
            "--metric-percentiles",
            f"{x.get('metric_percentiles')!r} is not a list of percentiles",
            "--metric-percentiles 50,90,99",
        )
    out.percentiles = ps
    for item in x.get("metadata") or ():
        k, eq, v = item.partition("=")
        if not eq:
            raise Refusal("--metadata", f"{item!r} is not KEY=VALUE", "--metadata version=0.3.3 tp=1")
        out.metadata[k.strip()] = v.strip()
    out.label, out.result_dir = x.get("label"), x.get("result_dir")
    out.append = bool(x.get("append_result"))
    if x.get("save_result") or out.append:
        out.path = x.get("result_filename") or ""  # "": vLLM's default name, once the model is known
        if out.result_dir and out.path != "" and os.path.isabs(out.path):
            out.result_dir = None
    elif x.get("result_dir") or x.get("result_filename"):
        raise Refusal(
            "--result-dir/--result-filename", "vLLM writes no file without --save-result", "add --save-result"
        )


# --------------------------------------------------------------------------- result files
def prepare_foreign(options: dict[str, Any], out: ForeignOutput) -> None:
    """Before the run: vLLM's file name (when the model is known) and, unless --out, servescope's result
    directory beside it with the same stem (`out/NAME.json` and `out/NAME/`)."""
    import datetime as _dt

    if (options.get("repeat") or 1) > 1:
        raise Refusal("--repeat", "their result files describe one run", "--repeat without --save-result/--output-file")
    out.date = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    if out.tool != "vllm" or options.get("out") or out.append:
        return
    model = out.served_model or options.get("model")
    if out.path or model:
        from servescope.results.foreign import vllm_filename

        name = vllm_filename(out, model or "", out.date)
        options["out"] = name[:-5] if name.endswith(".json") else name + ".servescope"


def write_foreign(out: ForeignOutput, out_dir: Any) -> str:
    """After the run: write vLLM's JSON or SGLang's JSONL from the result directory; returns the path."""
    from servescope.results.foreign import sglang_result, vllm_filename, vllm_result, write_result
    from servescope.results.store import load_run

    run = load_run(out_dir)
    target = run.summary.get("target")
    model = out.served_model or (target["model"] if target else "")
    if out.tool == "vllm":
        path = vllm_filename(out, model, out.date)
        write_result(
            path,
            vllm_result(run.summary, run.records, out, model_id=model, date=out.date),
            mode="append" if out.append else "write",
        )
    else:
        path = out.path or ""
        write_result(path, sglang_result(run.summary, run.records, out), mode="jsonl")
    click.echo(f"{'vLLM' if out.tool == 'vllm' else 'SGLang'} result: {path}", err=True)
    return path
