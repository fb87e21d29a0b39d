"""The `--dataset` string: what kind of workload, from where, with which options.

Forms (docs/workloads.md):

    random                                   --input-len / --output-len / --range-ratio
    random:IN:OUT                            one fixed pair, e.g. random:1024:256
    random:IN:OUT@W%,IN:OUT@W%,...           a length mixture, e.g. random:128:64@25%,512:128@75%
    shared-prefix                            the seeds' preset: 10 groups x 50 prompts, 2000-token system
                                             prompt + 1200-token question (62.5% shared)
    shared-prefix:groups=G,prompts=P,system=S,question=Q
    jsonl:PATH[:OPTIONS]                     one JSON object per line: prompt or messages, optional output_len
    sharegpt:PATH[:OPTIONS]                  ShareGPT conversations, every turn (multi-turn sessions)
    hf:PATH[:OPTIONS]                        a local Parquet / JSON(L) / Arrow dataset, a folder of them, or a
                                             Hugging Face hub-cache name (hf:AI-MO/aimo-validation-aime)
    trace:PATH[:OPTIONS]                     JSONL timestamps (+ lengths) replayed at those times; BurstGPT
                                             and Azure LLM inference CSV files in their published columns
    agent[:OPTIONS]                          generated agent sessions: growing context, tool waits, sub-agents
    sessions:PATH[:OPTIONS]                  a session trace (JSONL, as a run's sessions.jsonl) replayed

OPTIONS are `key=value` pairs separated by commas after the last colon, e.g.
`hf:aime.parquet:prompt=problem,output=answer`, `sharegpt:chats.json:think=2,max_turns=4`,
`trace:mooncake.jsonl:speedup=2`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servescope.errors import ConfigError

__all__ = ["DatasetSpec", "LengthMix", "parse_dataset", "session_workload", "SHARED_PREFIX_PRESET"]

KINDS = ("random", "shared-prefix", "jsonl", "sharegpt", "hf", "trace", "agent", "sessions")
SHARED_PREFIX_PRESET = {"groups": 10, "prompts": 50, "system": 2000, "question": 1200}


@dataclass(slots=True)
class LengthMix:
    input_len: int
    output_len: int | None
    weight: float  # fraction of requests, 0..1


@dataclass(slots=True)
class DatasetSpec:
    kind: str
    path: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    mix: list[LengthMix] = field(default_factory=list)  # random:...

    def opt_int(self, key: str, default: int | None = None) -> int | None:
        v = self.options.get(key)
        if v is None:
            return default
        try:
            return int(v)
        except ValueError:
            raise ConfigError(f"--dataset {self.kind}: {key}={v!r} is not an integer") from None

    def opt_float(self, key: str, default: float | None = None) -> float | None:
        v = self.options.get(key)
        if v is None:
            return default
        try:
            return float(v)
        except ValueError:
            raise ConfigError(f"--dataset {self.kind}: {key}={v!r} is not a number") from None


def _options(text: str, kind: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        k, sep, v = part.partition("=")
        if not sep or not k.strip():
            raise ConfigError(f"--dataset {kind}: option {part!r} should be key=value")
        out[k.strip().replace("-", "_")] = v.strip()
    return out


def _mix(text: str) -> list[LengthMix]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    out: list[LengthMix] = []
    for p in parts:
        lens, _, w = p.partition("@")
        fields = lens.split(":")
        try:
            i_len = int(fields[0])
            o_len = int(fields[1]) if len(fields) > 1 and fields[1] else None
            weight = float(w.rstrip("%")) / (100.0 if w.endswith("%") else 1.0) if w else None
            if weight is not None and weight < 0:
                raise ValueError
        except ValueError:
            raise ConfigError(
                f"--dataset random:{text}: expected IN:OUT@W%, e.g. random:128:64@25%,512:128@75%"
            ) from None
        if len(fields) > 2 or i_len < 1 or (o_len is not None and o_len < 1):
            raise ConfigError(f"--dataset random: {p!r}: lengths must be IN[:OUT], both >= 1")
        out.append(LengthMix(i_len, o_len, -1.0 if weight is None else weight))
    unset = [m for m in out if m.weight < 0]
    given = sum(m.weight for m in out if m.weight >= 0)
    if given > 1 + 1e-9:
        raise ConfigError(f"--dataset random:{text}: weights add up to more than 100%")
    for m in unset:
        m.weight = (1 - given) / len(unset)
    total = sum(m.weight for m in out)
    if not out or total <= 0:
        raise ConfigError(f"--dataset random:{text}: no lengths with a positive weight")
    for m in out:
        m.weight /= total
    return out


def parse_dataset(text: str) -> DatasetSpec:
    text = (text or "random").strip()
    kind, sep, rest = text.partition(":")
    kind = kind.strip().lower().replace("_", "-")
    if kind not in KINDS:
        raise ConfigError(f"--dataset {text!r}: unknown kind {kind!r} (one of {', '.join(KINDS)})")
    if kind == "random":
        return DatasetSpec("random", mix=_mix(rest) if rest else [])
    if kind == "shared-prefix":
        opts = _options(rest, kind) if rest else {}
        unknown = set(opts) - set(SHARED_PREFIX_PRESET)
        if unknown:
            raise ConfigError(
                f"--dataset shared-prefix: unknown option(s) {sorted(unknown)} "
                f"(known: {', '.join(SHARED_PREFIX_PRESET)})"
            )
        spec = DatasetSpec("shared-prefix", options=opts)
        for k in SHARED_PREFIX_PRESET:
            v = spec.opt_int(k)
            if v is not None and v < 1:
                raise ConfigError(f"--dataset shared-prefix: {k} must be >= 1")
        return spec
    if kind == "agent":
        return DatasetSpec("agent", options=_options(rest, kind) if rest else {})
    if not sep or not rest:
        raise ConfigError(f"--dataset {kind}:PATH needs a path, e.g. {kind}:data.jsonl")
    path, options = rest, {}
    head, colon, tail = rest.rpartition(":")
    if colon and "=" in tail and "/" not in tail:
        path, options = head, _options(tail, kind)
    return DatasetSpec(kind, path=path, options=options)


def session_workload(dataset: object) -> bool:
    """Whether `--dataset` is agent sessions (`agent`, `sessions:PATH`): a closed loop's concurrency is
    then a count of concurrent sessions, each slot running one session's turns."""
    kind = str(dataset or "").partition(":")[0].strip().lower()
    return kind in ("agent", "sessions")
