"""`vllm bench serve` / SGLang `bench_serving` flags on `servescope run` (run/compat.py) and their result
files (results/foreign.py): every accepted flag maps to the settings its own tool means, every refused one
stops the run before anything is sent (a real loopback server counts connections), the written files have
the recorded files' keys and our summary's numbers."""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from servescope.results.foreign import ForeignOutput, peaks, sglang_result, vllm_filename, vllm_result
from servescope.run.command import run_command
from servescope.run.compat import FLAGS, Refusal, normalize_argv, resolve
from servescope.run.config import RunConfig
from servescope.run.options import config_from_options
from tests.support.oracle import summarize
from tests.support.synth import synth_records, synth_run_info

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "foreign"
URL = "http://127.0.0.1:9"


def resolved(argv: str | list[str]) -> tuple[RunConfig, ForeignOutput | None]:
    """The RunConfig (and foreign output) `servescope run ARGV` would run, without running it."""
    args = argv.split() if isinstance(argv, str) else argv
    ctx = run_command.make_context("run", list(args))
    opts = dict(ctx.params)
    foreign = resolve(opts, ctx.meta.get("servescope.compat.used"))
    opts.pop("out", None)
    return config_from_options(opts), foreign


VLLM = (
    "--backend vllm --base-url {url} --endpoint /v1/completions --model M --dataset-name random "
    "--random-input-len 128 --random-output-len 16 --num-prompts 20 --max-concurrency 4 --ignore-eos "
    "--percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,99 --save-result --result-dir out"
)
SGLANG = (
    "--backend sglang --host 127.0.0.1 --port {port} --model M --dataset-name random --random-input-len 128 "
    "--random-output-len 16 --random-range-ratio 1 --num-prompts 20 --max-concurrency 4 --request-rate inf "
    "--output-file out.jsonl --disable-tqdm"
)
NATIVE = "--url {url} --api completions --model M --input-len 128 --output-len 16 --num-requests 20 --concurrency 4"


def test_a_vllm_bench_serve_command_resolves_to_our_native_flags() -> None:
    theirs, out = resolved(VLLM.format(url=URL))
    ours, none = resolved(NATIVE.format(url=URL))
    assert theirs == ours and none is None
    assert out is not None and out.tool == "vllm" and out.percentiles == (50.0, 99.0)
    assert out.percentile_metrics == ("ttft", "tpot", "itl", "e2el") and out.result_dir == "out"


def test_an_sglang_command_resolves_to_our_native_flags() -> None:
    theirs, out = resolved(SGLANG.format(port=9))
    ours, _ = resolved(NATIVE.format(url=URL) + ' --seed 1 --warmup 1 --extra-body {"temperature":0.0}')
    assert theirs == ours
    assert out is not None and out.tool == "sglang" and out.path == "out.jsonl" and out.random_range_ratio == 1


def test_no_foreign_flag_changes_nothing() -> None:
    cfg, out = resolved("--num-prompts 5 --max-concurrency 2 --random-input-len 64")
    assert out is None and cfg == RunConfig(num_requests=5, concurrency=2, input_len=64)


def test_their_defaults_apply_in_their_command_lines() -> None:
    v, _ = resolved("--backend openai")  # vLLM: 1000 prompts at once, 1024/128, 127.0.0.1:8000, completions
    assert (
        v.url,
        v.api,
        v.num_requests,
        v.rate,
        v.concurrency,
        v.input_len,
        v.output_len,
        v.seed,
        v.warmup,
        v.ignore_eos,
    ) == ("http://127.0.0.1:8000", "completions", 1000, math.inf, None, 1024, 128, 0, 0, True)
    s, _ = resolved("--backend sglang --dataset-name random --random-range-ratio 1")
    assert (s.url, s.num_requests, s.rate, s.input_len, s.output_len, s.seed, s.warmup, s.ignore_eos, s.extra_body) == (
        "http://127.0.0.1:30000",
        1000,
        math.inf,
        1024,
        1024,
        1,
        1,
        True,
        {"temperature": 0.0},
    )


# One case per accepted foreign flag: (flag, argv, check on the resolved config and foreign output).
Check = Callable[[RunConfig, ForeignOutput], bool]
ACCEPTED: list[tuple[str, str, Check]] = [
    ("--backend", "--backend openai-chat", lambda c, o: c.api == "chat" and o.backend == "openai-chat"),
    ("--base-url", f"--backend vllm --base-url {URL}", lambda c, o: c.url == URL),
    ("--host", "--backend vllm --host localhost", lambda c, o: c.url == "http://127.0.0.1:8000"),
    (
        "--port",
        "--backend lmdeploy-chat --dataset-name random --random-range-ratio 1 --port 7",
        lambda c, o: c.url == "http://127.0.0.1:7" and c.api == "chat",
    ),
    ("--endpoint", "--backend openai --endpoint /v1/completions", lambda c, o: c.api == "completions"),
    (
        "--served-model-name",
        "--backend vllm --model org/m --served-model-name m",
        lambda c, o: c.model == "m" and o.tokenizer == "org/m",
    ),
    ("--tokenizer-mode", "--backend vllm --tokenizer-mode hf", lambda c, o: c.dataset == "random"),
    (
        "--dataset-name",
        "--backend sglang --dataset-name random-ids --random-range-ratio 1",
        lambda c, o: c.dataset == "random" and o.dataset_name == "random-ids",
    ),
    (
        "--dataset-path",
        "--backend vllm --dataset-name sharegpt --dataset-path sg.json",
        lambda c, o: c.dataset == "sharegpt:sg.json:multi_turn=false,max_turns=1" and not c.ignore_eos,
    ),
    (
        "--sharegpt-output-len",
        "--backend vllm --dataset-name sharegpt --dataset-path sg.json --sharegpt-output-len 64",
        lambda c, o: c.dataset.endswith(",output=fixed") and c.output_len == 64 and o.sharegpt_output_len == 64,
    ),
    ("--random-prefix-len", "--backend vllm --random-prefix-len 0", lambda c, o: c.dataset == "random"),
    ("--random-batch-size", "--backend vllm --random-batch-size 1", lambda c, o: c.dataset == "random"),
    (
        "--gsp-num-groups",
        "--backend sglang --dataset-name generated-shared-prefix --gsp-num-groups 4",
        lambda c, o: c.dataset == "shared-prefix:groups=4,prompts=16,system=2048,question=128" and c.num_requests == 64,
    ),
    (
        "--gsp-prompts-per-group",
        "--backend sglang --dataset-name generated-shared-prefix --gsp-prompts-per-group 3",
        lambda c, o: "prompts=3," in c.dataset and c.num_requests == 192,
    ),
    (
        "--gsp-system-prompt-len",
        "--backend sglang --dataset-name generated-shared-prefix --gsp-system-prompt-len 99",
        lambda c, o: "system=99," in c.dataset,
    ),
    (
        "--gsp-question-len",
        "--backend sglang --dataset-name generated-shared-prefix --gsp-question-len 7",
        lambda c, o: c.dataset.endswith("question=7"),
    ),
    (
        "--gsp-output-len",
        "--backend sglang --dataset-name generated-shared-prefix --gsp-output-len 9",
        lambda c, o: c.output_len == 9,
    ),
    (
        "--gsp-range-ratio",
        "--backend sglang --dataset-name generated-shared-prefix --gsp-range-ratio 1",
        lambda c, o: c.output_len == 256 and c.range_ratio == 0,
    ),
    ("--num-warmups", "--backend vllm --num-warmups 3", lambda c, o: c.warmup == 3),
    (
        "--warmup-requests",
        "--output-file f --warmup-requests 0 --dataset-name random --random-range-ratio 1",
        lambda c, o: c.warmup == 0 and o.tool == "sglang",
    ),
    (
        "--goodput",
        "--backend vllm --goodput ttft:500 tpot:50 e2el:9000",
        lambda c, o: (
            c.slo == {"ttft_ms": 500, "tpot_ms": 50, "e2e_ms": 9000}
            and o.goodput == {"ttft": 500, "tpot": 50, "e2el": 9000}
        ),
    ),
    (
        "--disable-stream",
        "--backend sglang --dataset-name random --random-range-ratio 1 --disable-stream",
        lambda c, o: c.stream is False,
    ),
    (
        "--disable-ignore-eos",
        "--backend sglang --dataset-name random --random-range-ratio 1 --disable-ignore-eos",
        lambda c, o: c.ignore_eos is False,
    ),
    (
        "--extra-request-body",
        '--backend sglang --dataset-name random --random-range-ratio 1 --extra-request-body {"top_k":5}',
        lambda c, o: c.extra_body == {"temperature": 0.0, "top_k": 5},
    ),
    (
        "--flush-cache",
        "--backend sglang --dataset-name random --random-range-ratio 1 --flush-cache",
        lambda c, o: c.reset_cache is True,
    ),
    ("--temperature", "--backend vllm --temperature 0", lambda c, o: c.extra_body == {"temperature": 0.0}),
    ("--top-p", "--backend vllm --top-p 0.9", lambda c, o: c.extra_body == {"top_p": 0.9}),
    ("--top-k", "--backend vllm --top-k 5", lambda c, o: c.extra_body == {"top_k": 5}),
    ("--min-p", "--backend vllm --min-p 0.1", lambda c, o: c.extra_body == {"min_p": 0.1}),
    (
        "--frequency-penalty",
        "--backend vllm --frequency-penalty 0.5",
        lambda c, o: c.extra_body == {"frequency_penalty": 0.5},
    ),
    (
        "--presence-penalty",
        "--backend vllm --presence-penalty 0.5",
        lambda c, o: c.extra_body == {"presence_penalty": 0.5},
    ),
    (
        "--repetition-penalty",
        '--backend vllm --repetition-penalty 1.1 --extra-body {"seed":3}',
        lambda c, o: c.extra_body == {"repetition_penalty": 1.1, "seed": 3},
    ),
    ("--ready-check-timeout-sec", "--backend vllm --ready-check-timeout-sec 0", lambda c, o: c.url is not None),
    ("--probe-request-rate", "--backend vllm --probe-request-rate 0", lambda c, o: c.url is not None),
    (
        "--prompt-suffix",
        "--backend sglang --dataset-name random --random-range-ratio 1 --prompt-suffix=",
        lambda c, o: c.dataset == "random",
    ),
    ("--save-result", "--backend vllm --save-result", lambda c, o: o.path == "" and not o.append),
    ("--append-result", "--backend vllm --append-result", lambda c, o: o.path == "" and o.append),
    ("--result-dir", "--backend vllm --save-result --result-dir d", lambda c, o: o.result_dir == "d"),
    ("--result-filename", "--backend vllm --save-result --result-filename r.json", lambda c, o: o.path == "r.json"),
    ("--label", "--backend vllm --save-result --label L", lambda c, o: o.label == "L"),
    (
        "--metadata",
        "--backend vllm --save-result --metadata tp=1 version=0.9",
        lambda c, o: o.metadata == {"tp": "1", "version": "0.9"},
    ),
    (
        "--percentile-metrics",
        "--backend vllm --percentile-metrics e2el",
        lambda c, o: o.percentile_metrics == ("e2el",),
    ),
    ("--metric-percentiles", "--backend vllm --metric-percentiles 25,99.9", lambda c, o: o.percentiles == (25.0, 99.9)),
    (
        "--output-file",
        "--backend sglang --dataset-name random --random-range-ratio 1 --output-file x.jsonl",
        lambda c, o: o.path == "x.jsonl",
    ),
    ("--tag", "--backend sglang --dataset-name random --random-range-ratio 1 --tag T", lambda c, o: o.tag == "T"),
    ("--disable-tqdm", "--backend vllm --disable-tqdm", lambda c, o: c.quiet is False),
    ("--trust-remote-code", "--backend vllm --trust-remote-code", lambda c, o: c.model is None),
    ("--request-id-prefix", "--backend vllm --request-id-prefix bench-", lambda c, o: c.headers == []),
    (
        "--print-requests",
        "--backend sglang --dataset-name random --random-range-ratio 1 --print-requests",
        lambda c, o: o.tool == "sglang",
    ),
    (
        "--plot-throughput",
        "--backend sglang --dataset-name random --random-range-ratio 1 --plot-throughput",
        lambda c, o: o.tool == "sglang",
    ),
]


@pytest.mark.parametrize(("flag", "argv", "check"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_an_accepted_flag_means_what_its_tool_means(flag: str, argv: str, check: Check) -> None:
    assert flag in argv
    cfg, out = resolved(argv)
    assert out is not None and check(cfg, out), (cfg, out)


def test_every_accepted_flag_has_a_case() -> None:
    accepted = {f.name for f in FLAGS if f.action != "refuse"}
    assert accepted == {a[0] for a in ACCEPTED}


def test_shared_flags_take_their_meaning() -> None:
    """Flags servescope had already: rate inf + a cap is our closed loop; a finite rate keeps the cap;
    vLLM's --header KEY=VALUE list; --random-range-ratio is vLLM's current symmetric one."""
    c, o = resolved(
        "--backend vllm --request-rate 5 --max-concurrency 8 --burstiness 2 --seed 4 "
        "--random-range-ratio 0.25 --header x-a=1 x-b=2 --input-len 64 --output-len 8"
    )
    assert (c.rate, c.concurrency, c.burstiness, c.seed, c.range_ratio, c.headers, c.input_len, c.output_len) == (
        5.0,
        8,
        2.0,
        4,
        0.25,
        ["x-a:1", "x-b:2"],
        64,
        8,
    )
    assert o is not None and o.request_rate == 5 and o.max_concurrency == 8 and o.random_range_ratio == 0.25
    c, _ = resolved("--backend vllm --ramp-up-strategy linear --ramp-up-start-rps 1 --ramp-up-end-rps 4")
    assert c.load_mode == "ramp" and c.rate is None


def test_argparse_forms_become_click_forms() -> None:
    assert normalize_argv(["--goodput", "ttft:5", "tpot:1", "--x"]) == [
        "--goodput",
        "ttft:5",
        "--goodput",
        "tpot:1",
        "--x",
    ]
    assert normalize_argv(["--profile"]) == ["--x-profiler"]
    assert normalize_argv(["--profile", "tiny"]) == ["--profile", "tiny"]
    assert normalize_argv(["--header", "Authorization=Bearer a:b"]) == ["--header", "Authorization:Bearer a:b"]


# --------------------------------------------------------------------------- refusals
def _argv_for(flag: str) -> list[str]:
    f = next(x for x in FLAGS if x.name == flag)
    name = "--profile" if flag == "--x-profiler" else flag
    if f.takes is None:
        return [name]
    return [name, "1" if f.takes in (int, float) else "v"]


REFUSED = [f.name for f in FLAGS if f.action == "refuse"]
REFUSED_VALUES: list[tuple[str, str]] = [
    ("--backend", "--backend trt"),
    ("--backend", "--backend openai-embeddings"),
    ("--endpoint", "--backend vllm --endpoint /generate"),
    ("--endpoint", "--backend openai-chat --endpoint /v1/completions"),
    ("--dataset-name", "--backend vllm --dataset-name hf"),
    ("--dataset-name sharegpt", "--backend vllm --dataset-name sharegpt"),
    ("--dataset-path", "--backend vllm --dataset-name random --dataset-path x.json"),
    ("--random-range-ratio", "--backend sglang --dataset-name random"),
    ("--random-range-ratio", "--backend sglang --dataset-name random --random-range-ratio 0.5"),
    ("--random-prefix-len", "--backend vllm --random-prefix-len 32"),
    ("--random-batch-size", "--backend vllm --random-batch-size 4"),
    ("--gsp-range-ratio", "--backend sglang --dataset-name generated-shared-prefix --gsp-range-ratio 0.5"),
    ("--tokenizer-mode", "--backend vllm --tokenizer-mode mistral"),
    ("--percentile-metrics", "--backend vllm --percentile-metrics ttft,client_queue_time"),
    ("--metric-percentiles", "--backend vllm --metric-percentiles 50,x"),
    ("--goodput", "--backend vllm --goodput itl:5"),
    ("--ready-check-timeout-sec", "--backend vllm --ready-check-timeout-sec 60"),
    ("--probe-request-rate", "--backend vllm --probe-request-rate 2"),
    ("--prompt-suffix", "--backend sglang --dataset-name random --random-range-ratio 1 --prompt-suffix hi"),
    ("--no-stream", "--backend vllm --no-stream"),
    ("--save-result", "--backend vllm --output-file x.jsonl --save-result"),
    ("--result-dir/--result-filename", "--backend vllm --result-dir d"),
    ("--metadata", "--backend vllm --save-result --metadata novalue"),
    ("--host/--port", "--backend vllm --base-url http://127.0.0.1:9 --port 8"),
    ("--api", "--backend openai --api chat"),
]


@pytest.mark.parametrize("flag", REFUSED)
def test_a_refused_flag_is_named_with_an_alternative(flag: str) -> None:
    argv = [
        "--backend",
        "sglang" if next(f for f in FLAGS if f.name == flag).tool == "sglang" else "vllm",
        *_argv_for(flag),
    ]
    with pytest.raises(Refusal) as e:
        resolved(argv)
    name = "--profile" if flag == "--x-profiler" else flag
    assert e.value.flag == name and str(e.value).startswith(name + ":") and "instead: " in str(e.value)


@pytest.mark.parametrize(("flag", "argv"), REFUSED_VALUES, ids=[a[1] for a in REFUSED_VALUES])
def test_a_value_servescope_cannot_honour_is_refused(flag: str, argv: str) -> None:
    with pytest.raises(Refusal) as e:
        resolved(argv)
    assert e.value.flag == flag and "instead: " in str(e.value)


@pytest.fixture()
def counting_server() -> Iterator[tuple[int, list[int]]]:
    """A loopback TCP server that counts every connection made to it (any request needs one)."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    seen = [0]
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            seen[0] += 1
            conn.close()

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield srv.getsockname()[1], seen
    stop.set()
    t.join()
    srv.close()


def test_every_refusal_exits_2_before_anything_is_sent(counting_server: tuple[int, list[int]]) -> None:
    port, seen = counting_server
    runner = CliRunner()
    cases = [["--backend", "vllm", "--port", str(port), *_argv_for(f)] for f in REFUSED]
    cases += [["--port", str(port), *a.split()] for _, a in REFUSED_VALUES if "--base-url" not in a]
    for argv in cases:
        res = runner.invoke(run_command, argv)
        assert res.exit_code == 2, (argv, res.output)
        assert "instead" in " ".join(res.output.split()) or "mixed" in res.output, (argv, res.output)
    assert seen[0] == 0
    # the control: a command line that is not refused does reach the port
    res = runner.invoke(run_command, ["--backend", "vllm", "--port", str(port), "--num-prompts", "1", "--no-report"])
    assert res.exit_code != 0 and seen[0] > 0


# --------------------------------------------------------------------------- result files
def _synth(concurrency: int = 4) -> tuple[Any, list[Any]]:
    records = synth_records(40, seed=3, concurrency=concurrency)
    return summarize(
        records, run=synth_run_info("r", records, concurrency=concurrency), slo={"ttft_ms": 200.0}
    ), records


def test_vllm_json_has_the_recorded_files_keys_and_our_numbers() -> None:
    recorded = json.loads((FIXTURES / "vllm_result.json").read_text())
    summary, records = _synth()
    out = ForeignOutput(
        tool="vllm",
        backend="vllm",
        path="",
        num_prompts=40,
        max_concurrency=4,
        percentile_metrics=("ttft", "tpot", "itl", "e2el"),
        percentiles=(50.0, 99.0),
    )
    doc = vllm_result(summary, records, out, model_id="meta-llama/Llama-3.1-8B-Instruct", date="20250611-142233")
    assert list(doc) == list(recorded)  # the same keys, in vLLM's order
    for k, v in recorded.items():
        assert isinstance(doc[k], type(v)) or v is None or doc[k] is None, k
    lat, tp = summary["latency_ms"], summary["throughput"]
    assert doc["duration"] == summary["duration_s"] and doc["completed"] == summary["requests"]["completed"]
    assert doc["request_throughput"] == tp["requests_per_s"] and doc["output_throughput"] == tp["output_tokens_per_s"]
    assert doc["total_token_throughput"] == tp["total_tokens_per_s"]
    assert doc["total_input_tokens"] == summary["tokens"]["input_total"]
    assert doc["total_output_tokens"] == summary["tokens"]["output_total"]
    for theirs, ours in (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2el", "e2e")):
        d = lat[ours]  # type: ignore[literal-required]
        assert (
            doc[f"mean_{theirs}_ms"],
            doc[f"median_{theirs}_ms"],
            doc[f"std_{theirs}_ms"],
            doc[f"p50_{theirs}_ms"],
            doc[f"p99_{theirs}_ms"],
        ) == (d["mean"], d["median"], d["std"], d["median"], d["p99"])
    assert len(doc["latencies"]) == summary["requests"]["total"]
    assert doc["max_concurrent_requests"] <= 4 < doc["max_output_tokens_per_s"]


def test_vllm_percentiles_the_summary_lacks_come_from_the_records() -> None:
    summary, records = _synth()
    out = ForeignOutput(
        tool="vllm", backend="openai", percentile_metrics=("ttft",), percentiles=(25.0, 99.9), goodput={"ttft": 200.0}
    )
    doc = vllm_result(summary, records, out, model_id="m", date="d")
    ttfts = [(r.t_first_ns - r.t_send_ns) / 1e6 for r in records if r.status == "ok" and not r.warmup]
    assert doc["p25_ttft_ms"] == pytest.approx(np.percentile(ttfts, 25))
    assert doc["p99.9_ttft_ms"] == pytest.approx(np.percentile(ttfts, 99.9))
    assert doc["request_goodput"] == summary["goodput"]["requests_per_s"]  # type: ignore[index]
    assert "mean_tpot_ms" not in doc


def test_vllm_file_names_follow_vllm() -> None:
    out = ForeignOutput(tool="vllm", backend="vllm", path="", max_concurrency=4, result_dir="out")
    assert (
        vllm_filename(out, "org/Model-8B", "20250101-000000")
        == "out/vllm-infqps-concurrency4-Model-8B-20250101-000000.json"
    )
    out = ForeignOutput(tool="vllm", backend="vllm", path="", label="L", request_rate=4.0)
    assert vllm_filename(out, "m", "D") == "L-4.0qps-m-D.json"
    out.ramp = ("linear", 1.0, 8.0)
    assert vllm_filename(out, "m", "D") == "L-ramp-up-linear-1qps-8qps-m-D.json"
    out.path = "mine.json"
    assert vllm_filename(out, "m", "D") == "mine.json"


def test_sglang_line_has_the_recorded_keys_and_our_numbers() -> None:
    recorded = json.loads((FIXTURES / "sglang_result.jsonl").read_text().splitlines()[0])
    summary, records = _synth()
    out = ForeignOutput(tool="sglang", backend="sglang", path="x.jsonl", max_concurrency=4, random_range_ratio=1.0)
    doc = sglang_result(summary, records, out)
    assert list(doc) == list(recorded)
    lat, tp = summary["latency_ms"], summary["throughput"]
    assert (doc["mean_e2e_latency_ms"], doc["p99_e2e_latency_ms"]) == (lat["e2e"]["mean"], lat["e2e"]["p99"])
    assert (doc["median_ttft_ms"], doc["p95_itl_ms"], doc["std_tpot_ms"]) == (
        lat["ttft"]["median"],
        lat["itl"]["p95"],
        lat["tpot"]["std"],
    )
    assert (doc["input_throughput"], doc["total_throughput"]) == (tp["input_tokens_per_s"], tp["total_tokens_per_s"])
    assert 0 < doc["concurrency"] <= 4
    assert json.loads(json.dumps(doc))["request_rate"] == math.inf  # written as Infinity, as SGLang does


def test_peaks_count_tokens_per_second_and_requests_in_flight() -> None:
    _, records = _synth(concurrency=3)
    tokens, conc = peaks(records)
    assert conc == 3 and tokens > 0


# --------------------------------------------------------------------------- help
def test_run_help_has_a_compatibility_section() -> None:
    res = CliRunner().invoke(run_command, ["--help"], terminal_width=120)
    assert res.exit_code == 0
    head, _, compat = res.output.partition("Compatibility")
    assert "--backend" in compat and "--save-result" in compat and "--goodput" in compat
    assert "--backend" not in head and "--x-profiler" not in res.output
    assert "symmetric" in compat  # --random-range-ratio: which meaning is followed


def test_servescope_help_does_not_import_the_compat_module() -> None:
    code = (
        "import sys; from servescope.cli import cli\n"
        "try:\n    cli(['--help'])\nexcept SystemExit:\n    pass\n"
        "assert 'servescope.run.compat' not in sys.modules and 'servescope.results.foreign' not in sys.modules"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr


def test_vllm_bench_serves_openai_responses_backend_is_the_responses_api() -> None:
    """vllm bench serve 0.32's `--backend openai-responses` posts to /v1/responses (its
    benchmarks/lib/endpoint_request_func.py); it has no Messages backend."""
    cfg, out = resolved("--backend openai-responses")
    assert out is not None and cfg.api == "responses" and out.backend == "openai-responses"
    cfg, _ = resolved("--backend openai-responses --endpoint /v1/responses")
    assert cfg.api == "responses"
    with pytest.raises(Exception, match="does not match"):
        resolved("--backend openai-responses --endpoint /v1/completions")
