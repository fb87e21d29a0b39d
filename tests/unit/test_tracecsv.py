"""BurstGPT and Azure LLM inference traces read in their published CSV columns; the trace window."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from servescope.errors import ConfigError
from servescope.workload.trace import read_trace, window
from servescope.workload.tracecsv import parse_azure_time

BURST = """Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
45,ChatGPT,1087,230,1317,Conversation log
5,ChatGPT,472,18,490,Conversation log
20,GPT-4,300,0,300,API log
118,GPT-4,417,276,693,Conversation log
"""
AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:16:00,4808,10
2023-11-16 18:15:46.6805901,20,2
"""


def test_burstgpt_columns_lengths_as_given_failed_rows_skipped(tmp_path: Path) -> None:
    p = tmp_path / "BurstGPT_1.csv"
    p.write_text(BURST)
    rows = read_trace(str(p))
    assert [(r["t_s"], r["input_len"], r["output_len"]) for r in rows] == [
        (5.0, 472, 18),
        (45.0, 1087, 230),
        (118.0, 417, 276),
    ]
    assert rows[0]["skipped_failed"] == 1 and rows[0]["format"] == "burstgpt"


def test_azure_columns_times_to_the_tick(tmp_path: Path) -> None:
    p = tmp_path / "AzureLLMInferenceTrace_conv.csv.gz"
    p.write_bytes(gzip.compress(AZURE.encode()))
    rows = read_trace(str(p))
    base = rows[0]["t_s"]
    assert [round(r["t_s"] - base, 7) for r in rows] == [0.0, 0.0000001, 4.314579, 13.31941]
    assert [(r["input_len"], r["output_len"]) for r in rows] == [(374, 44), (20, 2), (396, 109), (4808, 10)]
    assert parse_azure_time("2023-11-16 18:15:46.68") == (1700158546, 6_800_000)


@pytest.mark.parametrize(
    ("text", "word"),
    [
        ("a,b,c\n1,2,3\n", "unknown CSV trace columns"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n", "TIMESTAMP"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,0,1\n", ">= 1"),
        ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\nx,m,1,1,2,l\n", "Timestamp"),
        ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n", "no request"),
    ],
)
def test_bad_csv_traces_are_named(tmp_path: Path, text: str, word: str) -> None:
    p = tmp_path / "t.csv"
    p.write_text(text)
    with pytest.raises(ConfigError, match=word):
        read_trace(str(p))


def test_window_keeps_trace_seconds_from_the_first_request(tmp_path: Path) -> None:
    p = tmp_path / "b.csv"
    p.write_text(BURST)
    rows = read_trace(str(p))
    assert [r["t_s"] for r in window(rows, 10, 120)] == [45.0, 118.0]  # 40 s and 113 s after the first
    assert [r["t_s"] for r in window(rows, None, 40)] == [5.0]
    assert window(rows, None, None) == rows
    with pytest.raises(ConfigError, match="no request in the window"):
        window(rows, 200, 300)
    with pytest.raises(ConfigError, match="must be after"):
        window(rows, 10, 5)
