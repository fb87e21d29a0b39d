"""The foreign flags themselves: every flag of `vllm bench serve` and SGLang's `bench_serving` that
`servescope run` knows, as data (`FLAGS`): mapped, output, cosmetic or refused with an alternative, plus
the backends, endpoints and default ports of each tool. How they resolve onto `RunConfig` is
`run/compat.py`. Facts from the tools' current sources (vllm/benchmarks/serve.py + benchmarks/datasets,
sglang/bench_serving.py); docs/compatibility.md has the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from servescope.errors import ConfigError

__all__ = [
    "BY_NAME",
    "DATASETS_INSTEAD",
    "ENDPOINTS",
    "FLAGS",
    "MANY_VALUED",
    "PERCENTILE_METRICS",
    "SGLANG_BACKENDS",
    "SGLANG_PORTS",
    "VLLM_BACKENDS",
    "Action",
    "Flag",
    "Refusal",
    "Tool",
]

Tool = Literal["vllm", "sglang", "both"]
Action = Literal["map", "output", "cosmetic", "refuse"]


class Refusal(ConfigError):
    """A foreign flag servescope cannot honour, or whose mapping would change the measurement (exit 2)."""

    def __init__(self, flag: str, why: str, instead: str) -> None:
        super().__init__(f"{flag}: {why}; instead: {instead}. Nothing was sent.")
        self.flag = flag


@dataclass(frozen=True)
class Flag:
    """One foreign flag: `takes` None is a switch, `many` an argparse nargs '+'/'*' list."""

    name: str
    tool: Tool
    action: Action
    help: str
    takes: type | None = str
    many: bool = False
    instead: str = ""  # refusals: what to use instead

    @property
    def dest(self) -> str:
        return "x_" + self.name[2:].replace("-", "_")


DATASETS_INSTEAD = "--dataset jsonl:PATH, hf:PATH or trace:PATH (docs/workloads.md)"
_REPORT = "report.html and requests.jsonl in servescope's result directory"


def _refuse(name: str, tool: Tool, help: str, instead: str, takes: type | None = str, many: bool = False) -> Flag:
    return Flag(name, tool, "refuse", help, takes, many, instead)


FLAGS: tuple[Flag, ...] = (
    # ---- target and API
    Flag(
        "--backend",
        "both",
        "map",
        "vLLM: openai, vllm, openai-chat; SGLang: sglang, sglang-oai, sglang-oai-chat, "
        "vllm, vllm-chat, lmdeploy(-chat). Picks the API (completions or chat) and, for SGLang, the default port.",
    ),
    Flag("--base-url", "both", "map", "Server root, as --url (the endpoint path comes from --endpoint/--backend)."),
    Flag("--host", "both", "map", "Server host with --port (default 127.0.0.1; SGLang's 0.0.0.0 means loopback)."),
    Flag("--port", "both", "map", "Server port (vLLM default 8000; SGLang: by backend, 30000 for sglang).", int),
    Flag("--endpoint", "vllm", "map", "/v1/completions or /v1/chat/completions (= --api)."),
    Flag("--served-model-name", "both", "map", "Model name sent in requests (= --model)."),
    Flag("--tokenizer-mode", "vllm", "map", "auto or hf: accepted (lengths come from the server's /tokenize)."),
    # ---- workload
    Flag(
        "--dataset-name",
        "both",
        "map",
        "random, random-ids, sharegpt (with --dataset-path), generated-shared-prefix (= --dataset).",
    ),
    Flag("--dataset-path", "both", "map", "ShareGPT JSON file for --dataset-name sharegpt."),
    Flag("--sharegpt-output-len", "both", "map", "Fixed output length for ShareGPT prompts.", int),
    Flag("--random-prefix-len", "vllm", "map", "0 only (a shared prefix: --dataset shared-prefix:...).", int),
    Flag("--random-batch-size", "vllm", "map", "1 only (embeddings batches are not benchmarked).", int),
    Flag("--gsp-num-groups", "sglang", "map", "generated-shared-prefix: groups (= shared-prefix groups=).", int),
    Flag("--gsp-prompts-per-group", "sglang", "map", "generated-shared-prefix: prompts per group.", int),
    Flag("--gsp-system-prompt-len", "sglang", "map", "generated-shared-prefix: shared system prompt tokens.", int),
    Flag("--gsp-question-len", "sglang", "map", "generated-shared-prefix: question tokens.", int),
    Flag("--gsp-output-len", "sglang", "map", "generated-shared-prefix: output tokens (= --output-len).", int),
    Flag("--gsp-range-ratio", "sglang", "map", "1 only (fixed lengths).", float),
    # ---- load and requests
    Flag("--num-warmups", "vllm", "map", "Warm-up requests (= --warmup).", int),
    Flag("--warmup-requests", "sglang", "map", "Warm-up requests (= --warmup; SGLang's default 1).", int),
    Flag(
        "--goodput",
        "vllm",
        "map",
        "Per-request SLOs KEY:MS (ttft, tpot, e2el) for goodput (= --slo ttft_ms=...).",
        many=True,
    ),
    Flag("--disable-stream", "sglang", "map", "Non-streamed responses (= --no-stream).", None),
    Flag("--disable-ignore-eos", "sglang", "map", "Let requests stop at EOS (= --no-ignore-eos).", None),
    Flag("--extra-request-body", "sglang", "map", "JSON merged into every request body (= --extra-body)."),
    Flag("--flush-cache", "sglang", "map", "Empty the prefix cache before the run (= --reset-cache).", None),
    *(
        Flag(f"--{p}", "vllm", "map", f"Sampling parameter sent as {p.replace('-', '_')} (= --extra-body).", t)
        for p, t in (
            ("temperature", float),
            ("top-p", float),
            ("top-k", int),
            ("min-p", float),
            ("frequency-penalty", float),
            ("presence-penalty", float),
            ("repetition-penalty", float),
        )
    ),
    Flag("--ready-check-timeout-sec", "vllm", "map", "0 only (servescope checks /v1/models once).", int),
    Flag("--probe-request-rate", "vllm", "map", "0 only (no probe requests beside the load).", float),
    Flag("--prompt-suffix", "sglang", "map", "Empty only."),
    # ---- results
    Flag(
        "--save-result", "vllm", "output", "Also write vLLM's result JSON (beside servescope's result directory).", None
    ),
    Flag("--append-result", "vllm", "output", "Append vLLM's result JSON to the file (a line per run).", None),
    Flag("--result-dir", "vllm", "output", "Directory of vLLM's result JSON (default: the current directory)."),
    Flag(
        "--result-filename",
        "vllm",
        "output",
        "File name of vLLM's result JSON (default {label}-{rate}qps[-concurrency{C}]-{model}-{date}.json).",
    ),
    Flag("--label", "vllm", "output", "Label in vLLM's result JSON and its file name (default: --backend)."),
    Flag("--metadata", "vllm", "output", "KEY=VALUE pairs added to vLLM's result JSON.", many=True),
    Flag(
        "--percentile-metrics",
        "vllm",
        "output",
        "Metrics with percentiles in vLLM's JSON: ttft,tpot,itl,e2el (default ttft,tpot,itl).",
    ),
    Flag("--metric-percentiles", "vllm", "output", "Percentiles in vLLM's JSON (default 99), e.g. 50,90,99."),
    Flag("--output-file", "sglang", "output", "Append SGLang's result line (JSONL) to this file."),
    Flag("--tag", "sglang", "output", "Tag written in SGLang's result line."),
    # ---- cosmetic
    Flag("--disable-tqdm", "both", "cosmetic", "Accepted (servescope's progress display: --quiet).", None),
    Flag("--trust-remote-code", "vllm", "cosmetic", "Accepted (no tokenizer code is loaded).", None),
    Flag("--request-id-prefix", "vllm", "cosmetic", "Accepted (request ids are not part of the measurement)."),
    Flag("--print-requests", "sglang", "cosmetic", "Accepted (no request printing).", None),
    Flag("--plot-throughput", "sglang", "cosmetic", "Accepted (report.html has the throughput chart).", None),
    # ---- refused
    _refuse("--save-detailed", "vllm", "Per-request arrays in vLLM's JSON.", _REPORT, None),
    _refuse("--output-details", "sglang", "Per-request arrays in SGLang's JSONL.", _REPORT, None),
    _refuse("--plot-timeline", "vllm", "HTML timeline.", _REPORT, None),
    _refuse("--plot-dataset-stats", "vllm", "Dataset statistics figure.", _REPORT, None),
    _refuse("--timeline-itl-thresholds", "vllm", "Timeline colours.", _REPORT),
    _refuse(
        "--logprobs",
        "vllm",
        "Logprobs per token (changes response size).",
        "--extra-body '{\"logprobs\": N}' to send the field yourself",
        int,
    ),
    _refuse(
        "--return-logprob",
        "sglang",
        "Logprobs per token (changes response size).",
        "--extra-body '{\"logprobs\": 1}' to send the field yourself",
        None,
    ),
    _refuse("--use-beam-search", "vllm", "Beam search.", "a single-sequence benchmark without it", None),
    _refuse("--lora-modules", "vllm", "LoRA adapters per request.", "--model ADAPTER, one run per adapter", many=True),
    _refuse("--lora-assignment", "vllm", "LoRA assignment.", "--model ADAPTER, one run per adapter"),
    _refuse("--lora-name", "sglang", "LoRA adapters per request.", "--model ADAPTER, one run per adapter", many=True),
    _refuse("--lora-request-distribution", "sglang", "LoRA distribution.", "--model ADAPTER, one run per adapter"),
    _refuse("--lora-zipf-alpha", "sglang", "LoRA distribution.", "--model ADAPTER, one run per adapter", float),
    _refuse("--self-timed", "vllm", "Trace timestamps.", "--dataset trace:PATH (replays its own send times)", None),
    _refuse("--use-trace-timestamps", "sglang", "Trace timestamps.", "--dataset trace:PATH", None),
    _refuse(
        "--chat-template-kwargs",
        "vllm",
        "Client-side chat template arguments.",
        "--extra-body '{\"chat_template_kwargs\": {...}}' (the server applies the template)",
    ),
    _refuse(
        "--apply-chat-template",
        "sglang",
        "Client-side chat template.",
        "--backend sglang-oai-chat (or --api chat): the server applies its template",
        None,
    ),
    _refuse(
        "--skip-tokenizer-init",
        "vllm",
        "No tokenizer: vLLM then reports E2E only.",
        "servescope always reports TTFT/TPOT/ITL; drop the flag",
        None,
    ),
    _refuse("--insecure", "vllm", "Skip TLS certificate checks.", "plain http:// or a trusted certificate", None),
    _refuse("--tokenize-prompt", "sglang", "Token ids as prompts.", "text prompts of exact length (the default)", None),
    _refuse("--pd-separated", "sglang", "PD-disaggregated router protocol.", "--url of the router's OpenAI API", None),
    _refuse("--sharegpt-context-len", "sglang", "Drops long ShareGPT prompts.", "a pre-filtered --dataset-path", int),
    _refuse("--no-oversample", "vllm", "Dataset oversampling.", "--num-prompts no larger than the dataset", None),
    _refuse("--skip-chat-template", "vllm", "Client-side chat templates.", "--api completions", None),
    _refuse("--disable-shuffle", "vllm", "Dataset order.", "--dataset sharegpt:PATH:shuffle=false", None),
    _refuse(
        "--x-profiler",
        "both",
        "The engines' torch profiler (--profile as a switch).",
        "start the server's profiler yourself; servescope's --profile NAME picks an emulator profile",
        None,
    ),
    *(
        _refuse(f"--{n}", "vllm", "Dataset options servescope has no twin for.", DATASETS_INSTEAD, t)
        for n, t in (
            ("custom-output-len", int),
            ("hf-subset", str),
            ("hf-split", str),
            ("hf-name", str),
            ("hf-output-len", int),
            ("sonnet-input-len", int),
            ("sonnet-output-len", int),
            ("sonnet-prefix-len", int),
            ("spec-bench-output-len", int),
            ("spec-bench-category", str),
            ("prefix-repetition-prefix-len", int),
            ("prefix-repetition-suffix-len", int),
            ("prefix-repetition-num-prefixes", int),
            ("prefix-repetition-output-len", int),
        )
    ),
    *(
        _refuse(f"--{n}", "sglang", "Dataset options servescope has no twin for.", DATASETS_INSTEAD, t)
        for n, t in (
            ("image-count", int),
            ("image-resolution", str),
            ("image-format", str),
            ("image-content", str),
            ("mooncake-slowdown-factor", float),
            ("mooncake-num-rounds", int),
            ("mooncake-workload", str),
        )
    ),
)
BY_NAME = {f.name: f for f in FLAGS}
MANY_VALUED = frozenset(f.name for f in FLAGS if f.many) | {"--header"}

VLLM_BACKENDS = {"openai": "completions", "vllm": "completions", "openai-chat": "chat", "openai-responses": "responses"}
SGLANG_BACKENDS = {
    "sglang": "completions",
    "sglang-native": "completions",
    "sglang-oai": "completions",
    "vllm": "completions",
    "lmdeploy": "completions",
    "sglang-oai-chat": "chat",
    "vllm-chat": "chat",
    "lmdeploy-chat": "chat",
}
SGLANG_PORTS = {"lmdeploy": 23333, "lmdeploy-chat": 23333, "vllm": 8000, "vllm-chat": 8000}
ENDPOINTS = {"/v1/completions": "completions", "/v1/chat/completions": "chat", "/v1/responses": "responses"}
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")
