"""The measurement corpus: published serving-performance points with provenance (I/O edge + schema check).

`plan/corpus/*.yaml` holds one file per public source: a `source:` header (id, title, url, publisher,
date, kind, notes, `harness:` where the tool is known, and `group:` where documents of one publisher share
a harness, so that validation holds them out together) and a `points:` list. Each point records
the deployment (engine and version, GPU, count, model, quantization, parallelism), the workload (mode
offline / closed / rate, concurrency or request rate, number of prompts, input and output lengths,
dataset, speculative decoding) and the figures measured (`measured:` output_tok_s, total_tok_s,
req_s, ttft/itl/tpot/e2e in ms, mean or median) and, for prefill/decode-disaggregated serving,
`disaggregated: {prefill_gpus, decode_gpus}`.
Facts only, copied from the source; `README.md` there says how each was read and its caveats.

`load_corpus()` reads the packaged files (or a directory) and checks the schema; `plan/validate.py`
predicts every point. Nothing here is fitted: the corpus is data.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from servescope.errors import ConfigError

__all__ = [
    "Source",
    "CorpusPoint",
    "load_corpus",
    "corpus_files",
    "parse_source",
    "MODES",
    "MEASURED_KEYS",
    "LENGTH_DISTS",
    "HARNESSES",
    "ITL_COUNTS",
]

MODES = ("offline", "closed", "rate")
LENGTH_DISTS = ("", "fixed", "uniform", "lognormal", "range-0.8", "pm-0.15")
# How the source's tool reached the engine: "server" = requests over HTTP to the engine's API server
# (vllm bench serve, SGLang bench_serving, even at request rate inf), "inprocess" = the engine's own
# offline benchmark (vLLM benchmark_throughput / the LLM class, trtllm-bench, MLPerf's harness).
# Empty: offline points in process, closed-loop and rate points over HTTP.
HARNESSES = ("", "server", "inprocess")
# How the source's client counted ITL over a chunk that carries several tokens (MTP drafts, a stream
# interval): "chunk" = one gap per streamed chunk (vLLM's benchmark_serving / vllm bench serve, SGLang
# bench_serving's OpenAI backends); "token" = the chunk's gap split evenly over its tokens (SGLang
# bench_serving's native `sglang` backend, its default). Empty: chunk.
ITL_COUNTS = ("", "chunk", "token")
MEASURED_KEYS = frozenset(
    {
        "output_tok_s",
        "total_tok_s",
        "req_s",
        "ttft_ms_mean",
        "ttft_ms_median",
        "itl_ms_mean",
        "itl_ms_median",
        "tpot_ms_mean",
        "tpot_ms_median",
        "e2e_ms_mean",
        "e2e_ms_median",
    }
)
_SOURCE_KEYS = ("id", "title", "url", "publisher", "date", "kind")
_POINT_KEYS = (
    "id",
    "engine",
    "engine_version",
    "gpu",
    "gpus",
    "model",
    "quant",
    "mode",
    "input_len",
    "output_len",
    "dataset",
    "measured",
    "notes",
)


@dataclass(frozen=True, slots=True)
class Source:
    """One public document the points were copied from."""

    id: str
    title: str
    url: str
    publisher: str
    date: str
    kind: str
    notes: str = ""
    harness: str = ""
    group: str = ""
    itl: str = ""  # ITL_COUNTS: how the client counted a multi-token chunk's gap ("": chunk)

    @property
    def fold(self) -> str:
        """The leave-one-out unit: the `group` shared with documents of the same publisher and harness,
        else the source's own id. A group is held out as a whole."""
        return self.group or self.id


@dataclass(frozen=True, slots=True)
class CorpusPoint:
    """One measured setting. Lengths may be means (ShareGPT / sonnet runs); None where the source omits it."""

    source: Source
    id: str
    engine: str
    engine_version: str
    gpu: str
    gpus: int
    model: str
    quant: str
    kv_quant: str
    tp: int | None
    pp: int | None
    dp: int | None
    ep: int | None
    mode: str
    concurrency: int | None
    request_rate: float | None
    num_prompts: int | None
    input_len: float | None
    output_len: float | None
    dataset: str
    speculative: str
    measured: Mapping[str, float] = field(default_factory=dict)
    notes: str = ""
    # prefill/decode disaggregation: (GPUs running prefill workers, GPUs running decode workers), each
    # worker `tp` GPUs wide; None when prefill and decode share the engine (the usual case).
    disaggregated: tuple[int, int] | None = None
    # engine settings the source states it launched with (ENGINE_ARGS keys), where they differ from the
    # engine's defaults; the validation runs the engine with these (compare like with like).
    engine_args: Mapping[str, int | bool] = field(default_factory=dict)
    # how the requests' lengths varied around the stated means, where the source's tool says so
    # (`length_dist:` fixed, uniform or lognormal; empty: inferred from the dataset, plan/lengths.py).
    # SGLang's bench_serving random dataset with its default --random-range-ratio 0 draws every input
    # and output length uniformly in [1, L]: `uniform`. InferenceX's benchmark_serving draws them
    # uniformly in [0.8 L, L] (--random-range-ratio 0.8 in its workflow): `range-0.8`, whose stated
    # length is the nominal L, not the mean (0.9 L). A source stating "+/-15%" around its lengths:
    # `pm-0.15`, uniform in [0.85 L, 1.15 L].
    length_dist: str = ""

    @property
    def key(self) -> str:
        """`source-id/point-id`, unique over the corpus."""
        return f"{self.source.id}/{self.id}"

    @property
    def served(self) -> bool:
        """Requests went over HTTP to the engine's API server (its server defaults apply), per the
        source's `harness:`; without it, everything but offline points."""
        if self.source.harness:
            return self.source.harness == "server"
        return self.mode != "offline"


def _opt_int(v: Any) -> int | None:
    return None if v is None or v == "" else int(v)


def _opt_float(v: Any) -> float | None:
    return None if v is None or v == "" else float(v)


def _disaggregated(raw: Any, gpus: int, where: str) -> tuple[int, int] | None:
    """`disaggregated: {prefill_gpus: P, decode_gpus: D}` -> (P, D), checked to add up to the point's GPUs."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or set(raw) != {"prefill_gpus", "decode_gpus"}:
        raise ConfigError(f"{where}: disaggregated must be {{prefill_gpus: P, decode_gpus: D}}")
    pg, dg = int(raw["prefill_gpus"]), int(raw["decode_gpus"])
    if pg < 1 or dg < 1 or pg + dg != gpus:
        raise ConfigError(f"{where}: disaggregated prefill_gpus + decode_gpus must be the point's {gpus} GPUs")
    return pg, dg


# Launch settings a point may state (`engine_args:`): vLLM's --max-model-len, --max-num-seqs,
# --max-num-batched-tokens, --enable-chunked-prefill (and the equivalents of other engines), and
# SGLang's --cuda-graph-max-bs (the largest batch that runs from a CUDA graph), and prefix caching switched
# off at launch (vLLM --no-enable-prefix-caching, SGLang --disable-radix-cache: `prefix_caching: false`), and
# SGLang's --stream-interval (`stream_interval`: the server sends a chunk every that many tokens, so a
# client's ITL is the gap between chunks; the validation predicts it as such).
ENGINE_ARGS = {
    "max_model_len": int,
    "max_num_seqs": int,
    "max_num_batched_tokens": int,
    "chunked_prefill": bool,
    "cuda_graph_max_bs": int,
    "prefix_caching": bool,
    "stream_interval": int,
}


def _engine_args(raw: Any, where: str) -> dict[str, int | bool]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: engine_args must be a mapping")
    unknown = set(raw) - set(ENGINE_ARGS)
    if unknown:
        raise ConfigError(f"{where}: unknown engine_args {sorted(unknown)} (known: {', '.join(ENGINE_ARGS)})")
    out: dict[str, int | bool] = {}
    for k, v in raw.items():
        if ENGINE_ARGS[k] is bool:
            if not isinstance(v, bool):
                raise ConfigError(f"{where}: engine_args.{k} must be true or false")
            out[k] = v
        else:
            if isinstance(v, bool) or int(v) < 1:
                raise ConfigError(f"{where}: engine_args.{k} must be a positive integer")
            out[k] = int(v)
    return out


def parse_source(data: Mapping[str, Any], *, origin: str = "corpus") -> tuple[Source, list[CorpusPoint]]:
    """Pure: one parsed YAML document -> its source and points; ConfigError naming what is wrong."""
    source = _parse_source_meta(data.get("source"), origin)
    rows = data.get("points")
    if not isinstance(rows, list) or not rows:
        raise ConfigError(f"{origin}: no points")
    points: list[CorpusPoint] = []
    seen: set[str] = set()
    for i, r in enumerate(rows):
        where = f"{origin}: point {r.get('id', i) if isinstance(r, Mapping) else i}"
        if not isinstance(r, Mapping):
            raise ConfigError(f"{where}: not a mapping")
        missing = [k for k in _POINT_KEYS if k not in r]
        if missing:
            raise ConfigError(f"{where}: lacks {', '.join(missing)}")
        if r["id"] in seen:
            raise ConfigError(f"{where}: duplicate id")
        seen.add(str(r["id"]))
        points.append(_parse_point(r, source, where))
    return source, points


def _parse_source_meta(src: Any, origin: str) -> Source:
    """The document's `source:` mapping, checked."""
    if not isinstance(src, Mapping):
        raise ConfigError(f"{origin}: no 'source:' mapping")
    missing = [k for k in _SOURCE_KEYS if not src.get(k)]
    if missing:
        raise ConfigError(f"{origin}: source lacks {', '.join(missing)}")
    if not str(src["url"]).startswith("https://"):
        raise ConfigError(f"{origin}: source url must be https://, not {src['url']!r}")
    harness = str(src.get("harness") or "")
    if harness not in HARNESSES:
        raise ConfigError(f"{origin}: source harness must be server or inprocess, not {harness!r}")
    itl = str(src.get("itl") or "")
    if itl not in ITL_COUNTS:
        raise ConfigError(f"{origin}: source itl must be chunk or token, not {itl!r}")
    group = str(src.get("group") or "")
    if group and not re.fullmatch(r"[a-z0-9][a-z0-9.-]*", group):
        raise ConfigError(
            f"{origin}: source group must be a lower-case slug (letters, digits, '-', '.'), not {group!r}"
        )
    return Source(
        id=str(src["id"]),
        title=str(src["title"]),
        url=str(src["url"]),
        publisher=str(src["publisher"]),
        date=str(src["date"]),
        kind=str(src["kind"]),
        notes=str(src.get("notes") or ""),
        harness=harness,
        group=group,
        itl=itl,
    )


def _measured(r: Mapping[str, Any], where: str) -> dict[str, float]:
    """A point's `measured:` figures (each > 0; a null one is left out)."""
    measured = r["measured"]
    if not isinstance(measured, Mapping) or not measured:
        raise ConfigError(f"{where}: 'measured' must be a non-empty mapping")
    unknown = set(measured) - MEASURED_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown measured keys {sorted(unknown)}")
    vals = {str(k): float(v) for k, v in measured.items() if v is not None}
    if any(v <= 0 for v in vals.values()):
        raise ConfigError(f"{where}: measured figures must be > 0")
    return vals


def _parse_point(r: Mapping[str, Any], source: Source, where: str) -> CorpusPoint:
    """One row of `points:` (its keys present and its id unique, checked by the caller)."""
    if r["mode"] not in MODES:
        raise ConfigError(f"{where}: mode must be one of {', '.join(MODES)}, not {r['mode']!r}")
    vals = _measured(r, where)
    if r["mode"] == "closed" and not r.get("concurrency"):
        raise ConfigError(f"{where}: a closed-loop point needs its concurrency")
    if r["mode"] == "rate" and not r.get("request_rate"):
        raise ConfigError(f"{where}: a rate point needs its request_rate")
    length_dist = str(r.get("length_dist") or "")
    if length_dist not in LENGTH_DISTS:
        raise ConfigError(f"{where}: length_dist must be one of {', '.join(LENGTH_DISTS)}, not {length_dist!r}")
    try:
        return CorpusPoint(
            source=source,
            id=str(r["id"]),
            engine=str(r["engine"]),
            engine_version=str(r["engine_version"] or ""),
            gpu=str(r["gpu"]),
            gpus=int(r["gpus"]),
            model=str(r["model"]),
            quant=str(r["quant"] or ""),
            kv_quant=str(r.get("kv_quant") or ""),
            tp=_opt_int(r.get("tp")),
            pp=_opt_int(r.get("pp")),
            dp=_opt_int(r.get("dp")),
            ep=_opt_int(r.get("ep")),
            mode=str(r["mode"]),
            concurrency=_opt_int(r.get("concurrency")),
            request_rate=_opt_float(r.get("request_rate")),
            num_prompts=_opt_int(r.get("num_prompts")),
            input_len=_opt_float(r["input_len"]),
            output_len=_opt_float(r["output_len"]),
            dataset=str(r["dataset"] or ""),
            speculative=str(r.get("speculative") or ""),
            measured=vals,
            notes=str(r["notes"] or ""),
            disaggregated=_disaggregated(r.get("disaggregated"), int(r["gpus"]), where),
            engine_args=_engine_args(r.get("engine_args"), where),
            length_dist=length_dist,
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def corpus_files(path: str | Path | None = None) -> list[tuple[str, str]]:
    """I/O edge: (file name, text) of every `*.yaml` in `path` (default: the packaged corpus), by name."""
    if path is None:
        root = resources.files("servescope.plan") / "corpus"
        return sorted((p.name, p.read_text(encoding="utf-8")) for p in root.iterdir() if p.name.endswith(".yaml"))
    return sorted((p.name, p.read_text(encoding="utf-8")) for p in Path(path).glob("*.yaml"))


def load_corpus(path: str | Path | None = None) -> list[CorpusPoint]:
    """I/O edge: every point of every `*.yaml` in `path` (default: the packaged corpus), sorted by source id."""
    import yaml

    files = corpus_files(path)
    if not files:
        raise ConfigError(f"no corpus files in {path or 'the package'}")
    out: list[CorpusPoint] = []
    ids: set[str] = set()
    for name, text in files:
        data = yaml.safe_load(text)
        if not isinstance(data, Mapping):
            raise ConfigError(f"{name}: not a mapping")
        source, points = parse_source(data, origin=name)
        if source.id in ids:
            raise ConfigError(f"{name}: source id {source.id!r} used twice")
        if name != f"{source.id}.yaml":
            raise ConfigError(f"{name}: file name must be the source id ({source.id}.yaml)")
        ids.add(source.id)
        out.extend(points)
    return out
