"""Datasets from local files, read into one plain shape before the clock: `Record`s.

- `jsonl:PATH`: one JSON object per line with `prompt` (text) or `messages` (chat), optional
  `output_len` (also `max_tokens`, `output_tokens`).
- `sharegpt:PATH`: a JSON array (or JSONL) of conversations, `{"conversations": [{"from": "human" |
  "gpt" | "system", "value": ...}]}` or `{"messages": [{"role", "content"}]}`; EVERY turn is kept
  (vLLM's loader keeps only the first: vllm-project/vllm#54783).
- `hf:PATH`: Parquet (pyarrow), JSON / JSONL, or Arrow (a `datasets.save_to_disk` folder), a folder of
  such files, or a Hugging Face hub-cache name (`hf:AI-MO/aimo-validation-aime`, looked up under
  $HF_HUB_CACHE / $HF_HOME/hub / ~/.cache/huggingface/hub). Columns: `prompt=COL` (default: the first
  of prompt, problem, question, instruction, input, text), or a list column of chat messages
  (messages, conversations); `output_len=COL` an integer column; `split=NAME` picks files whose name
  holds it (default: test, then validation, then train, then all).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servescope.errors import ConfigError

__all__ = ["Record", "load_hf", "load_jsonl", "load_sharegpt", "resolve_hf_path"]

_PROMPT_COLUMNS = ("prompt", "problem", "question", "instruction", "input", "text", "query")
_CHAT_COLUMNS = ("messages", "conversations", "conversation")
_OUTPUT_KEYS = ("output_len", "max_tokens", "output_tokens")
_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "bard": "assistant",
    "model": "assistant",
    "system": "system",
}


@dataclass(slots=True)
class Record:
    """One conversation (or a single prompt): messages in order; the last may be the assistant's."""

    messages: list[dict[str, str]]
    output_len: int | None = None  # from the file, for single prompts
    extra: dict[str, Any] = field(default_factory=dict)


def _read_json_any(path: Path) -> list[Any]:
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}: not valid JSON: {e}") from None
        return list(doc)
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}:{n}: not valid JSON: {e}") from None
    return out


def _file(path: str) -> Path:
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"--dataset: file {path} not found")
    return p


def _out_len(obj: dict[str, Any]) -> int | None:
    for k in _OUTPUT_KEYS:
        v = obj.get(k)
        if isinstance(v, int) and v > 0:
            return v
    return None


def _messages(raw: Any, where: str) -> list[dict[str, str]]:
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: messages must be a list")
    out = []
    for m in raw:
        if not isinstance(m, dict):
            raise ConfigError(f"{where}: each message must be an object")
        role = m.get("role", m.get("from"))
        content = m.get("content", m.get("value"))
        if isinstance(content, list):  # OpenAI content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        mapped = _ROLES.get(str(role).lower())
        if mapped is None or not isinstance(content, str):
            raise ConfigError(f"{where}: a message needs a known role (user/assistant/system, human/gpt) and text")
        out.append({"role": mapped, "content": content})
    return out


def load_jsonl(path: str) -> list[Record]:
    p = _file(path)
    out = []
    for i, obj in enumerate(_read_json_any(p)):
        where = f"{p} record {i + 1}"
        if not isinstance(obj, dict):
            raise ConfigError(f"{where}: expected a JSON object")
        if isinstance(obj.get("prompt"), str):
            msgs = [{"role": "user", "content": obj["prompt"]}]
            out.append(Record(msgs, _out_len(obj), {"plain": True}))
        elif "messages" in obj:
            out.append(Record(_messages(obj["messages"], where), _out_len(obj)))
        else:
            raise ConfigError(f"{where}: needs a 'prompt' string or a 'messages' list")
    if not out:
        raise ConfigError(f"{p}: no records")
    return out


def load_sharegpt(path: str) -> list[Record]:
    p = _file(path)
    out = []
    for i, obj in enumerate(_read_json_any(p)):
        where = f"{p} conversation {i + 1}"
        raw = None
        if isinstance(obj, dict):
            raw = next((obj[k] for k in _CHAT_COLUMNS if k in obj), None)
        elif isinstance(obj, list):
            raw = obj
        if raw is None:
            raise ConfigError(f"{where}: expected 'conversations' or 'messages'")
        msgs = _messages(raw, where)
        if any(m["role"] == "user" for m in msgs):
            out.append(Record(msgs))
    if not out:
        raise ConfigError(f"{p}: no conversations with a user turn")
    return out


def resolve_hf_path(path: str) -> Path:
    """A local file or folder, or a hub-cache dataset name -> a local path (its newest snapshot)."""
    p = Path(path).expanduser()
    if p.exists():
        return p
    if path.count("/") == 1 and not path.startswith((".", "/")):
        roots = [
            os.environ.get("HF_HUB_CACHE"),
            os.environ.get("HF_HOME") and str(Path(os.environ["HF_HOME"]) / "hub"),
            str(Path.home() / ".cache" / "huggingface" / "hub"),
        ]
        name = "datasets--" + path.replace("/", "--")
        for r in filter(None, roots):
            snaps = Path(r) / name / "snapshots"
            if snaps.is_dir():
                cands = sorted(snaps.iterdir(), key=lambda s: s.stat().st_mtime, reverse=True)
                if cands:
                    return cands[0]
    raise ConfigError(
        f"--dataset hf:{path}: no such file or folder, and no hub-cache copy of that dataset "
        "(this tool never downloads; fetch it first, "
        "e.g. `huggingface-cli download --repo-type dataset`)"
    )


_TABLE_EXT = (".parquet", ".jsonl", ".json", ".arrow")


def _table_files(root: Path, split: str | None) -> list[Path]:
    if root.is_file():
        return [root]
    files = sorted(
        f
        for f in root.rglob("*")
        if f.is_file() and f.suffix in _TABLE_EXT and not f.name.startswith(("dataset_info", "state", "dataset_dict"))
    )
    if not files:
        raise ConfigError(f"--dataset hf:{root}: no .parquet/.json/.jsonl/.arrow files there")
    for s in [split] if split else ["test", "validation", "train"]:
        picked = [f for f in files if s in str(f.relative_to(root))]
        if picked:
            return picked
    if split:
        raise ConfigError(f"--dataset hf:{root}: no files for split {split!r}")
    return files


def _read_table(f: Path) -> list[dict[str, Any]]:
    import pyarrow as pa

    if f.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(f).to_pylist()
    if f.suffix == ".arrow":  # datasets' save_to_disk writes the IPC stream format
        with pa.memory_map(str(f)) as src:
            try:
                return pa.ipc.open_stream(src).read_all().to_pylist()
            except pa.ArrowInvalid:
                return pa.ipc.open_file(src).read_all().to_pylist()
    rows = _read_json_any(f)
    return [r for r in rows if isinstance(r, dict)]


def load_hf(path: str, options: dict[str, str]) -> list[Record]:
    root = resolve_hf_path(path)
    rows: list[dict[str, Any]] = []
    for f in _table_files(root, options.get("split")):
        rows.extend(_read_table(f))
    if not rows:
        raise ConfigError(f"--dataset hf:{path}: the dataset has no rows")
    cols = set(rows[0])
    col = options.get("prompt")
    chat_col = None
    if col is None:
        col = next((c for c in _PROMPT_COLUMNS if c in cols), None)
        if col is None:
            chat_col = next((c for c in _CHAT_COLUMNS if c in cols), None)
    elif col not in cols:
        raise ConfigError(f"--dataset hf:{path}: no column {col!r} (columns: {', '.join(sorted(cols))})")
    if col is None and chat_col is None:
        raise ConfigError(
            f"--dataset hf:{path}: say which column holds the prompt, e.g. hf:{path}:prompt=COLUMN "
            f"(columns: {', '.join(sorted(cols))})"
        )
    out_col = options.get("output_len")
    if out_col is not None and out_col not in cols:
        raise ConfigError(f"--dataset hf:{path}: no column {out_col!r} for output_len")
    out = []
    for i, row in enumerate(rows):
        o = row.get(out_col) if out_col else None
        o = int(o) if isinstance(o, (int, float)) and o > 0 else None
        if chat_col is not None:
            out.append(Record(_messages(row.get(chat_col), f"{root} row {i}"), o))
        elif col is not None:
            v = row.get(col)
            if isinstance(v, str) and v:
                out.append(Record([{"role": "user", "content": v}], o, {"plain": True}))
    if not out:
        raise ConfigError(f"--dataset hf:{path}: column {col or chat_col!r} holds no text")
    return out
