"""Generates docs/summary.schema.json from `results.schema.Summary` (the I/O edge of the schema).

Needs pydantic (test extra); nothing on a run's path imports this module:

    python -m servescope.results.schemagen --write     # regenerate docs/summary.schema.json
    python -m servescope.results.schemagen --check     # exit 1 when the committed file is stale
"""

import json
import sys
from pathlib import Path

from servescope.results.schema import Summary

__all__ = ["SCHEMA_FILE", "json_schema", "render", "main"]

SCHEMA_FILE = Path(__file__).resolve().parents[3] / "docs" / "summary.schema.json"


def json_schema() -> dict[str, object]:
    """The JSON Schema (draft 2020-12) of summary.json, from `Summary`. Needs pydantic (test extra)."""
    from pydantic import TypeAdapter  # only the generator needs pydantic (test extra)

    doc: dict[str, object] = {"$schema": "https://json-schema.org/draft/2020-12/schema"}
    doc.update(TypeAdapter(Summary).json_schema(mode="serialization"))
    _drop_field_titles(doc)
    return doc


def _drop_field_titles(node: object) -> None:
    """pydantic titles every field after its name ("Limit Ms"): noise; the blocks keep theirs."""
    if isinstance(node, dict):
        for sub in (node.get("properties") or {}).values():
            if isinstance(sub, dict):
                sub.pop("title", None)
        for value in node.values():
            _drop_field_titles(value)
    elif isinstance(node, list):
        for value in node:
            _drop_field_titles(value)


def render() -> str:
    """The schema file's text: stable key order, two-space indent, trailing newline."""
    return json.dumps(json_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """`--write` regenerates docs/summary.schema.json; `--check` exits 1 when it is stale; else print."""
    args = sys.argv[1:] if argv is None else argv
    text = render()
    if "--write" in args:
        SCHEMA_FILE.write_text(text, encoding="utf-8")
        print(f"wrote {SCHEMA_FILE}")
        return 0
    if "--check" in args:
        current = SCHEMA_FILE.read_text(encoding="utf-8") if SCHEMA_FILE.is_file() else ""
        if current != text:
            print(f"{SCHEMA_FILE} is stale: run python -m servescope.results.schemagen --write", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
