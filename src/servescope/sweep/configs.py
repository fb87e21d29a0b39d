"""Server configurations of `sweep --serve` (pure): `--serve-param` values, their cross product, names.

    --serve-param p=2,4                      p = 2, then 4
    --serve-param tp,dp=(1,4),(2,2)          tied lists: (tp, dp) = (1, 4), then (2, 2)
    --serve-param p=2,4 --serve-param t=1,2  the cross product: four configurations

A configuration's name is its values, `p2`, `tp1-dp4` (its directory in the sweep), unique or an error.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from servescope.errors import ConfigError

__all__ = ["ServeConfig", "expand", "parse_param"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TUPLE = re.compile(r"\(([^()]*)\)")
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")
RESERVED = ("port", "host")


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """One server configuration: its placeholder values, in the order the flags named them."""

    values: tuple[tuple[str, str], ...]

    @property
    def name(self) -> str:
        if not self.values:
            return "server"
        return "-".join(_UNSAFE.sub("_", f"{k}{v}") for k, v in self.values)

    def as_dict(self) -> dict[str, str]:
        return dict(self.values)


def parse_param(text: str) -> list[tuple[tuple[str, str], ...]]:
    """One `--serve-param`: `NAME=V1,V2` or `N1,N2=(a1,a2),(b1,b2)`; each value set as (name, value) pairs."""
    names_text, sep, values_text = text.partition("=")
    names = [n.strip() for n in names_text.split(",")]
    if not sep or not values_text.strip() or not all(_NAME.fullmatch(n) for n in names):
        raise ConfigError(f"--serve-param {text!r}: expected NAME=V1,V2 or N1,N2=(a1,a2),(b1,b2)")
    for n in names:
        if n in RESERVED:
            raise ConfigError(f"--serve-param {text!r}: {{{n}}} is servescope's own placeholder")
    if len(set(names)) != len(names):
        raise ConfigError(f"--serve-param {text!r}: a name appears twice")
    if len(names) == 1:
        values = [v.strip() for v in values_text.split(",")]
        if any(v == "" for v in values):
            raise ConfigError(f"--serve-param {text!r}: an empty value")
        return [((names[0], v),) for v in values]
    groups = _TUPLE.findall(values_text)
    rest = _TUPLE.sub("", values_text).replace(",", "").strip()
    if not groups or rest:
        raise ConfigError(f"--serve-param {text!r}: tied names take tuples, e.g. {','.join(names)}=(1,4),(2,2)")
    out = []
    for g in groups:
        vals = [v.strip() for v in g.split(",")]
        if len(vals) != len(names) or any(v == "" for v in vals):
            raise ConfigError(f"--serve-param {text!r}: ({g}) gives {len(vals)} values for {len(names)} names")
        out.append(tuple(zip(names, vals)))
    return out


def expand(params: Sequence[str]) -> list[ServeConfig]:
    """Every configuration: the cross product of the `--serve-param` flags, in flag order."""
    axes = [parse_param(p) for p in params]
    seen: set[str] = set()
    for axis in axes:
        for n, _ in axis[0]:
            if n in seen:
                raise ConfigError(f"--serve-param: {n} is given twice")
            seen.add(n)
    configs = [ServeConfig(tuple(itertools.chain.from_iterable(combo))) for combo in itertools.product(*axes)]
    names = [c.name for c in configs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"--serve-param: configurations {', '.join(dup)} would share a directory")
    return configs
