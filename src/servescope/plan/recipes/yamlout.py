"""Deterministic YAML output: key order kept, multi-line strings as literal blocks."""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["dump_yaml", "dump_yaml_all"]


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:  # no &id001 anchors: manifests are read by people
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_yaml(doc: Any) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)


def dump_yaml_all(docs: list[Any]) -> str:
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)
