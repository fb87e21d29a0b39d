"""Prediction intervals of the what-if: split-conformal quantiles of held-out log residuals, by class.

Every validated corpus point has a held-out residual per metric, r = ln(measured / predicted), its
prediction made with the knobs fitted with its own source left out (plan/knobfit.py `loso`). A what-if
figure x gets the interval [x e^q_lo, x e^q_hi] at level L, where q_lo, q_hi are the (1 - L)/2 and
(1 + L)/2 quantiles (finite-sample conformal ranks) of the residuals of its stratum, in a hierarchy
each level of which is shrunk toward its parent by how many sources it holds (w = s / (s + K)):

    metric -> reach (in / thin) -> kind of load (closed, rate, offline) -> architecture class

A deployment's *reach* says whether the corpus has seen its like: for each class dimension
(architecture, engine and version class, the two together, quantization, hardware generation) the
sources that ran that class. A class no source ran puts it outside the corpus's reach, one source
makes it thin; either way its interval comes from the residuals of the corpus points that were thin
themselves when held out (counted without their own source), which are wider. Coverage is measured
nested (`nested_coverage`): each point's interval is built from the residuals of the other sources
only, with class counts that leave its own source out, so no residual sets its own interval.

Pure: residuals in, tables and intervals out (benchmarks/plan_validate.py stores the table in
deploy/calibration.yaml; plan reads it through plan/band.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from servescope.sim.defaults import patch_version

__all__ = [
    "LEVELS",
    "DIMENSIONS",
    "Residual",
    "classes_of",
    "version_class",
    "quant_class",
    "class_sources",
    "reach_of",
    "quantile_table",
    "interval",
    "nested_coverage",
    "honest_coverage",
    "stretch",
    "scaled",
    "coverage_rows",
]

LEVELS = (0.80, 0.95)
#: class dimensions a deployment is placed in (reach, and the coverage table's rows)
DIMENSIONS = ("arch", "engine", "arch+engine", "quant", "hardware")
MIN_SOURCES = 2  # a class run by fewer sources (its own left out) is thin; by none, outside the reach
SHRINK_SOURCES = 3.0
SOURCE_POWER = 0.5


@dataclass(frozen=True, slots=True)
class Residual:
    """One held-out comparison: r = ln(measured / predicted) of `metric` at a point of `source`."""

    key: str
    source: str
    metric: str
    mode: str
    classes: Mapping[str, str]
    r: float


def version_class(family: str, version: str, date: str = "") -> str:
    """The engine release line a version belongs to, as the defaults and kernels change
    (sim/defaults.py, sim/knobs.py `arch_class`): vLLM V0 (< 0.8), V1 0.8-0.9, V1 >= 0.10; SGLang
    < 0.4.3, 0.4.3-0.4.x, >= 0.5; TensorRT-LLM < 1.0 and >= 1.0. A version not stated is taken from
    the source's date (before 2025-07: the first half's releases)."""
    v = patch_version(version)
    early = bool(date) and date < "2025-07"
    if family == "vllm-v0":
        return "vllm<0.8"
    if family == "vllm-v1":
        if v is None:
            return "vllm-0.8-0.9" if early else "vllm>=0.10"
        return "vllm-0.8-0.9" if v < (0, 10, 0) else "vllm>=0.10"
    if family == "sglang":
        if v is None:
            return "sglang-0.4" if early else "sglang>=0.5"
        return "sglang<0.4.3" if v < (0, 4, 3) else "sglang-0.4" if v < (0, 5, 0) else "sglang>=0.5"
    if family == "trtllm":
        if v is None:
            return "trtllm<1.0" if early else "trtllm>=1.0"
        return "trtllm<1.0" if v < (1, 0, 0) else "trtllm>=1.0"
    return family


def quant_class(quant: str) -> str:
    q = quant.lower()
    if q in ("awq", "int4", "gptq"):
        return "int4"
    if q in ("fp4", "nvfp4", "mxfp4"):
        return "fp4"
    if q in ("", "fp16", "bf16"):
        return "bf16"
    return q


def classes_of(arch: str, family: str, version: str, quant: str, generation: str, date: str = "") -> dict[str, str]:
    """A deployment's class in each dimension (`DIMENSIONS`); the DeepSeek release classes count as one
    architecture (mla-moe) here, their engine line says the rest."""
    a = "mla-moe" if arch.startswith("mla-moe") else arch
    e = version_class(family, version, date)
    return {"arch": a, "engine": e, "arch+engine": f"{a} on {e}", "quant": quant_class(quant), "hardware": generation}


def class_sources(residuals: Iterable[Residual]) -> dict[str, dict[str, set[str]]]:
    """dimension -> class -> the sources with a point of that class."""
    out: dict[str, dict[str, set[str]]] = {d: {} for d in DIMENSIONS}
    for r in residuals:
        for d in DIMENSIONS:
            out[d].setdefault(r.classes[d], set()).add(r.source)
    return out


def reach_of(
    classes: Mapping[str, str], sources: Mapping[str, Mapping[str, set[str]]], without: str = ""
) -> tuple[str, list[str]]:
    """("in" | "thin" | "outside", why): how many sources (other than `without`) ran each of the
    deployment's classes; the reasons name the classes with fewer than `MIN_SOURCES`."""
    status, why = "in", []
    for d in DIMENSIONS:
        n = len(sources.get(d, {}).get(classes[d], set()) - {without})
        if n >= MIN_SOURCES:
            continue
        why.append(f"{d} {classes[d]}: {n} source{'s' if n != 1 else ''}")
        status = "outside" if n == 0 else ("thin" if status == "in" else status)
    return status, why


def _q(values: np.ndarray, weights: np.ndarray, level: float) -> tuple[float, float]:
    """The central `level` interval of weighted residuals at split-conformal ranks: the upper end is
    the smallest value whose cumulative weight reaches (1 + L)/2 of the total plus one more point's
    (the mean weight: the new figure's own, unknown residual), the largest when none does; the lower
    end mirrors it."""
    order = np.argsort(values)
    v, w = values[order], weights[order]
    total = w.sum() + w.mean()
    need = (1 + level) / 2 * total
    up = np.cumsum(w)
    down = np.cumsum(w[::-1])
    hi = v[min(len(v) - 1, int(np.searchsorted(up, need)))]
    lo = v[::-1][min(len(v) - 1, int(np.searchsorted(down, need)))]
    return float(lo), float(hi)


def _node(rs: Sequence[Residual]) -> dict[str, Any]:
    """A stratum's quantiles, each residual weighted by n_s^-SOURCE_POWER for a source with n_s
    residuals in it: a large document's many correlated points count less than as many sources."""
    vals = np.array([r.r for r in rs])
    count: dict[str, int] = {}
    for r in rs:
        count[r.source] = count.get(r.source, 0) + 1
    wts = np.array([count[r.source] ** -SOURCE_POWER for r in rs])
    out: dict[str, Any] = {"n": len(rs), "sources": len(count)}
    for lv in LEVELS:
        out[f"p{round(lv * 100)}"] = _q(vals, wts, lv)
    return out


def _shrunk(own: dict[str, Any], parent: dict[str, Any] | None) -> dict[str, Any]:
    if parent is None:
        return own
    w = own["sources"] / (own["sources"] + SHRINK_SOURCES)
    out = dict(own)
    for lv in LEVELS:
        name = f"p{round(lv * 100)}"
        out[name] = tuple(w * a + (1 - w) * b for a, b in zip(own[name], parent[name]))
    return out


def _reach_group(status: str) -> str:
    return "in" if status == "in" else "thin"


def quantile_table(residuals: Sequence[Residual], reach: Mapping[tuple[str, str], str]) -> dict[str, dict[str, Any]]:
    """Path -> shrunk quantiles, for every stratum the residuals fill: "tok_s", "tok_s/thin",
    "tok_s/thin/closed", "tok_s/thin/closed/mla-moe". `reach[(key, source)]` is each residual's reach
    when its own source was held out."""
    groups: dict[str, list[Residual]] = {}
    for r in residuals:
        g = _reach_group(reach[(r.key, r.source)])
        for path in (
            r.metric,
            f"{r.metric}/{g}",
            f"{r.metric}/{g}/{r.mode}",
            f"{r.metric}/{g}/{r.mode}/{r.classes['arch']}",
        ):
            groups.setdefault(path, []).append(r)
    table: dict[str, dict[str, Any]] = {}
    for path in sorted(groups, key=lambda p: p.count("/")):  # parents first
        parent = table.get(path.rsplit("/", 1)[0]) if "/" in path else None
        table[path] = _shrunk(_node(groups[path]), parent)
    return table


def interval(
    table: Mapping[str, Mapping[str, Any]], metric: str, status: str, mode: str, arch: str, level: float
) -> tuple[float, float] | None:
    """(q_lo, q_hi) of the log ratio measured / predicted for a figure of this metric, reach, kind of
    load and architecture class: the deepest stratum the table holds. None: the table has no residual
    of this metric."""
    a = "mla-moe" if arch.startswith("mla-moe") else arch
    g = _reach_group(status)
    name = f"p{round(level * 100)}"
    for path in (f"{metric}/{g}/{mode}/{a}", f"{metric}/{g}/{mode}", f"{metric}/{g}", metric):
        node = table.get(path)
        if node is not None:
            lo, hi = node[name]
            return float(lo), float(hi)
    return None


@dataclass(frozen=True, slots=True)
class Covered:
    """One residual against the interval built without its source."""

    residual: Residual
    reach: str
    inside: dict[float, bool]  # level -> inside
    width: dict[float, float]  # level -> q_hi - q_lo (log units)
    need: dict[float, float]  # level -> the scale of the interval about its centre that would just hold it


def residual_reach(residuals: Sequence[Residual]) -> dict[tuple[str, str], str]:
    """Each residual's reach with its own source left out of the class counts."""
    srcs = class_sources(residuals)
    return {(r.key, r.source): reach_of(r.classes, srcs, without=r.source)[0] for r in residuals}


def scaled(iv: tuple[float, float], f: float) -> tuple[float, float]:
    """An interval (log units) stretched by f about its centre."""
    c, h = (iv[0] + iv[1]) / 2, (iv[1] - iv[0]) / 2
    return c - f * h, c + f * h


def _against(
    r: Residual, st: str, table: Mapping[str, Mapping[str, Any]], scale: Mapping[tuple[str, float], float]
) -> Covered | None:
    inside, width, need = {}, {}, {}
    for lv in LEVELS:
        raw = interval(table, r.metric, st, r.mode, r.classes["arch"], lv)
        if raw is None:
            continue
        lo, hi = scaled(raw, scale.get((r.metric, lv), 1.0))
        inside[lv] = lo <= r.r <= hi
        width[lv] = hi - lo
        c, h = (raw[0] + raw[1]) / 2, max(1e-9, (raw[1] - raw[0]) / 2)
        need[lv] = abs(r.r - c) / h
    return Covered(r, st, inside, width, need) if inside else None


def nested_coverage(
    residuals: Sequence[Residual], scales: Mapping[str, Mapping[tuple[str, float], float]] | None = None
) -> list[Covered]:
    """Every residual against the intervals built from the other sources' residuals only (the quantile
    table without its source, its reach counted without its source), each stretched by
    `scales[source]` (metric, level) -> factor where given."""
    reach = residual_reach(residuals)
    out: list[Covered] = []
    for src in sorted({r.source for r in residuals}):
        table = quantile_table([r for r in residuals if r.source != src], reach)
        for r in residuals:
            if r.source == src and (c := _against(r, reach[(r.key, r.source)], table, (scales or {}).get(src, {}))):
                out.append(c)
    return out


def stretch(covered: Sequence[Covered]) -> dict[tuple[str, float], float]:
    """(metric, level) -> the factor that makes the stratified intervals hold `level` of the points: the
    conformal rank ceil((n+1)L) of the scales each point needed (`Covered.need`). The strata's
    quantiles weigh a source's many points as few; a new source's points fall outside more often
    than the weighted residuals say, and this puts the share back."""
    out: dict[tuple[str, float], float] = {}
    for m in sorted({c.residual.metric for c in covered}):
        for lv in LEVELS:
            need = sorted(c.need[lv] for c in covered if c.residual.metric == m and lv in c.need)
            if need:
                out[(m, lv)] = need[min(len(need), math.ceil((len(need) + 1) * lv)) - 1]
    return out


def honest_coverage(residuals: Sequence[Residual]) -> list[Covered]:
    """The coverage plan's intervals have on sources they never saw: each source's points against the
    quantile table of the other sources, stretched by the factor `stretch` finds on the other
    sources alone (their own nested coverage, without this source): no residual of a source sets
    any part of its interval."""
    scales: dict[str, dict[tuple[str, float], float]] = {}
    for src in sorted({r.source for r in residuals}):
        rest = [r for r in residuals if r.source != src]
        scales[src] = stretch(nested_coverage(rest))
    return nested_coverage(residuals, scales)


def coverage_rows(covered: Sequence[Covered]) -> list[dict[str, Any]]:
    """Coverage by metric, over all points and by kind of load, reach and each class dimension: rows of
    {metric, group, class, n, sources, p80, p95 (shares inside), width80 (median e^width)}."""
    groups: dict[tuple[str, str, str], list[Covered]] = {}
    for c in covered:
        r = c.residual
        keys = [("all", ""), ("load", r.mode), ("reach", c.reach)] + [(d, r.classes[d]) for d in DIMENSIONS]
        for g, cls in keys:
            groups.setdefault((r.metric, g, cls), []).append(c)
    rows = []
    for (metric, g, cls), cs in groups.items():
        row: dict[str, Any] = {"metric": metric, "group": g, "class": cls, "n": len(cs)}
        row["sources"] = len({c.residual.source for c in cs})
        for lv in LEVELS:
            ins = [c.inside[lv] for c in cs if lv in c.inside]
            row[f"p{round(lv * 100)}"] = sum(ins) / len(ins) if ins else None
        w = sorted(c.width[0.80] for c in cs if 0.80 in c.width)
        row["width80"] = math.exp(w[len(w) // 2]) if w else None
        rows.append(row)
    order = {"all": 0, "load": 1, "reach": 2, **{d: 3 + i for i, d in enumerate(DIMENSIONS)}}
    return sorted(rows, key=lambda x: (x["metric"], order[x["group"]], x["class"]))


def residuals_from(results: Iterable[Any], settings: Mapping[str, Any]) -> list[Residual]:
    """The held-out residuals of validation results (`plan.validate.PointResult` with their
    `plan.setting.Setting` by key): one per point and metric compared."""
    out = []
    for res in results:
        s = settings.get(res.point.key)
        if s is None or not res.predicted:
            continue
        cls = classes_of(s.arch, s.family, s.version, s.quant, s.generation, s.date)
        for m, (_, measured) in res.measured.items():
            got = res.predicted.get(m)
            if got and measured > 0 and got > 0:
                out.append(Residual(res.point.key, s.source, m, s.mode, cls, math.log(measured / got)))
    return out


_BASES = {"vllm-v0": "vllm", "vllm-v1": "vllm"}


def engine_releases(settings: Iterable[Any]) -> dict[str, dict[str, int]]:
    """engine -> release line (MAJOR.MINOR) -> corpus points that ran it (validated settings)."""
    out: dict[str, dict[str, int]] = {}
    for s in settings:
        v = patch_version(s.version)
        line = f"{v[0]}.{v[1]}" if v else "unstated"
        per = out.setdefault(_BASES.get(s.family, s.family), {})
        per[line] = per.get(line, 0) + 1
    return {e: dict(sorted(v.items())) for e, v in sorted(out.items())}


def published(residuals: Sequence[Residual], covered: Sequence[Covered]) -> dict[str, Any]:
    """What plan needs to give any deployment its intervals, from every held-out residual: the quantile
    table, the stretch (from their nested coverage), the sources per class, and the coverage measured
    on held-out sources (`covered`: `honest_coverage`)."""
    reach = residual_reach(residuals)
    table = quantile_table(residuals, reach)
    st = stretch(nested_coverage(residuals))
    srcs = class_sources(residuals)
    cov: dict[str, dict[str, Any]] = {}
    for row in coverage_rows(covered):
        if row["group"] == "all":
            cov[row["metric"]] = {"n": row["n"], "sources": row["sources"], "p80": row["p80"], "p95": row["p95"]}
    return {
        "levels": list(LEVELS),
        "min_sources": MIN_SOURCES,
        "quantiles": {
            k: {"n": v["n"], "sources": v["sources"], "p80": v["p80"], "p95": v["p95"]} for k, v in table.items()
        },
        "stretch": {
            m: {f"p{round(lv * 100)}": f for (mm, lv), f in st.items() if mm == m} for m in sorted({m for m, _ in st})
        },
        "class_sources": {d: {c: len(v) for c, v in sorted(per.items())} for d, per in srcs.items()},
        "coverage": cov,
    }


def deployment_reach(classes: Mapping[str, str], pub: Mapping[str, Any]) -> tuple[str, list[str]]:
    """A deployment's reach from the published source counts per class (`published`)."""
    counts = pub.get("class_sources") or {}
    fake = {d: {c: {f"s{i}" for i in range(int(n))} for c, n in (counts.get(d) or {}).items()} for d in DIMENSIONS}
    return reach_of(classes, fake)


def figure_interval(
    pub: Mapping[str, Any], metric: str, status: str, mode: str, arch: str, level: float
) -> tuple[float, float] | None:
    """(low, high) factors on a predicted figure at `level` (multiply the prediction by them), from the
    published table and stretch; None when the table has none for the metric."""
    raw = interval(pub.get("quantiles") or {}, metric, status, mode, arch, level)
    if raw is None:
        return None
    f = float(((pub.get("stretch") or {}).get(metric) or {}).get(f"p{round(level * 100)}", 1.0))
    lo, hi = scaled(raw, f)
    return math.exp(lo), math.exp(hi)


def release_note(base: str, version: str, stated: bool, releases: Mapping[str, Mapping[str, int]]) -> str:
    """What the corpus holds of this engine's release line: fitted on it, or the nearest line fitted (the
    release's own defaults and kernel class still apply; its fitted terms are its family's)."""
    v = patch_version(version)
    if v is None:
        return f"{base} {version}: release not read; fitted terms of the family"
    line = f"{v[0]}.{v[1]}"
    own = dict(releases.get(base) or {})
    named = f"{base} {version}" if stated else f"{base} (current release, {version})"
    if own.get(line):
        return f"{named}: the corpus holds {own[line]} points of the {line} line (its fitted terms are the family's)"
    lines = {k: pv for k in own if (pv := patch_version(k)) is not None}
    if not lines:
        return f"{named}: no corpus point ran {base}; its knobs are the fitted engines' typical ones"
    near = min(lines, key=lambda k: abs(lines[k][0] * 100 + lines[k][1] - (v[0] * 100 + v[1])))
    return (
        f"{named}: no corpus point ran the {line} line; its defaults and kernel class are {line}'s, its fitted "
        f"terms the family's; the nearest line in the corpus is {near} ({own[near]} points)"
    )
