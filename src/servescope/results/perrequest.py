"""Each request's figures, over columns: the one place each per-request formula is written. Pure.

The summary, the self-checks, the precision block, the stop rule and the foreign result files all
read a request's latencies, token counts and the measured window from here (docs/metrics.md has
the definitions). Times are float64 ns from the run origin (exact: < 2**53), NaN where a record
has no stamp, so a difference of two stamps is exact and every figure is the float operation the
definition writes, in its order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from servescope.results.columns import RecordColumns

__all__ = ["input_counts", "request_latencies_ms", "since_send_ms", "tpot_ms", "window_columns"]


def since_send_ms(send: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per request, the time from its send to the stamp `t`, in ms (TTFT, TTFAT, E2E); NaN where either is."""
    return (t - send) / 1e6


def tpot_ms(first: np.ndarray, last: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Per request (last − first token) / (n − 1) in ms where n > 1 and both exist, else NaN."""
    has = (out > 1) & ~np.isnan(last) & ~np.isnan(first)
    tpot = np.full(out.shape, np.nan)
    tpot[has] = (last[has] - first[has]) / 1e6 / (out[has] - 1)
    return tpot


def request_latencies_ms(cols: RecordColumns, rows: Any) -> dict[str, np.ndarray]:
    """TTFT, TTFAT, E2E and TPOT (ms, NaN where undefined) of the rows `rows` (a boolean mask or
    indices), in that order."""
    send, first, last = cols.t_send[rows], cols.t_first[rows], cols.t_last[rows]
    return {
        "ttft": since_send_ms(send, first),
        "ttfat": since_send_ms(send, cols.t_first_answer[rows]),
        "e2e": since_send_ms(send, last),
        "tpot": tpot_ms(first, last, np.nan_to_num(cols.output_tokens[rows])),
    }


def input_counts(cols: RecordColumns) -> np.ndarray:
    """Each request's input tokens: the server's usage where it reported one, else the length asked for."""
    return np.where(np.isnan(cols.input_tokens), cols.input_len, cols.input_tokens)


def window_columns(cols: RecordColumns) -> tuple[int, int] | None:
    """The measured window in ns: the first send of a measured request to the last end of one."""
    m = cols.measured
    sends, ends = cols.t_send[m], cols.t_end[m]
    ends = ends[~np.isnan(ends)]
    if not sends.size or not ends.size:
        return None
    return int(sends.min()), int(ends.max())
