"""The client verdict's bias bounds (results.trust): each cause provoked is named, removed is not."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from servescope.results.colsummary import setup_block, summarize_columns
from servescope.results.columns import RecordColumns
from servescope.results.metrics import LOAD_DEFICIT_MAX, assess_client, unvouched
from servescope.results.records import RequestRecord
from servescope.results.trust import (
    TOLERANCE_MS,
    biases,
    late_share,
    load_deficit,
    quantile,
    shift_bound,
    stall_share,
    tolerance_ms,
)
from tests.support.synth import synth_records


def test_shift_bound_reads_the_move_off_the_observed_quantiles() -> None:
    v = np.arange(1000, dtype=float)  # quantile q is 999·q
    assert quantile(v, 0.99) == pytest.approx(989.01)
    # 1% put off late by any amount: the true P99 is at least the observed P98
    assert shift_bound(v, 0.99, 0.01, np.inf) == pytest.approx(9.99)
    assert shift_bound(v, 0.99, 0.01, 2.0) == 2.0  # never more than the bias itself
    assert shift_bound(v, 0.5, 0.0, np.inf) == 0.0
    flat = np.full(1000, 100.0)  # a flat distribution: a share moved late cannot move a percentile
    assert shift_bound(flat, 0.99, 0.3, np.inf) == 0.0
    assert shift_bound(v, 0.995, 0.01, np.inf, both=True) == pytest.approx(9.99)


def test_tolerance_is_1_ms_or_1_percent() -> None:
    assert tolerance_ms(20.0) == TOLERANCE_MS == 1.0
    assert tolerance_ms(500.0) == 5.0


def test_stall_and_lateness_shares() -> None:
    # samples of 0 ms, and one of 60 ms with 40 ms more than a 20 ms gap: 40 / (3·20 + 60)
    assert stall_share([0.0, 0.0, 60.0], 20.0) == pytest.approx(40 / 120)
    assert stall_share([5.0] * 10, 20.0) == 0.0
    counts = [6, 2, 2]  # buckets of 1 ms: 6 under 1 ms, 2 in 1-2 ms, 2 later than 2 ms
    assert late_share(counts, 1.0, 1.5) == pytest.approx((1 + 2) / 10)
    assert late_share(counts, 1.0, 5.0) == pytest.approx(2 / 10)  # the open bucket counts whole
    assert late_share([0, 0, 0], 1.0, 1.0) == 0.0


def _cols(setup_every: int = 0, setup_ns: int = 1_500_000_000, ttft_spread: bool = True) -> RecordColumns:
    recs = synth_records(400, seed=5, concurrency=16)
    if ttft_spread:  # a TTFT tail, so that late requests can move a percentile
        for r in recs[::7]:
            shift = 40_000_000
            r.t_first_ns = (r.t_first_ns or 0) + shift
            r.t_first_answer_ns = r.t_first_ns
            r.chunk_ns = [t + shift for t in r.chunk_ns]
            r.t_last_ns = (r.t_last_ns or 0) + shift
            r.t_end_ns = (r.t_end_ns or 0) + shift
    if setup_every:
        for r in recs[::setup_every]:
            r.setup_ns = setup_ns
    return RecordColumns.from_records(recs)


def _judge(cols: RecordColumns, *, open_loop: bool = False, **kw: Any) -> tuple[bool, list[str], dict]:
    s = summarize_columns(cols)
    client = s["client"]
    args: dict[str, Any] = {
        "shard_lags_ms": [(1.0, [0.2] * 100)],
        "gap_ms": s["latency_ms"]["tpot"]["median"],
        "tokens_read_together": None,
        "rx_timestamps": "kernel",
        "read_pauses": 0,
        "read_pause_ms": 0.0,
        "elapsed_s": 10.0,
    }
    args.update(kw)
    found, stalls = biases(cols, **args)
    client.update({"biases": found, "loop_stall_share": stalls, "setup": setup_block(cols)})
    saturated, reasons, advice = assess_client(s, open_loop=open_loop, rx_timestamps=args["rx_timestamps"])
    return (
        saturated,
        reasons,
        {"biases": found, "advice": advice, "unvouched": unvouched(client, args["rx_timestamps"])},
    )


def test_late_connections_are_named_where_they_can_move_ttft() -> None:
    saturated, reasons, doc = _judge(_cols(setup_every=5))
    assert saturated and any("connections opened inside the window" in r for r in reasons), reasons
    assert "accept backlog" in doc["advice"]
    (late,) = [b for b in doc["biases"] if b["cause"] == "late_connections"]
    assert late["affected_share"] == pytest.approx(80 / 400)
    # removed: no request waited for a connection, no such bias
    saturated, reasons, doc = _judge(_cols())
    assert not saturated and reasons == [] and doc["biases"] == []


def test_setup_block_counts_the_late_requests_and_their_share() -> None:
    cols = _cols(setup_every=10, setup_ns=2_000_000)
    block = setup_block(cols)
    assert block["requests"] == 40 and block["ms"]["median"] == pytest.approx(2.0)
    share = block["share_of_time_to_first_token"]
    assert share is not None and 0 < share < 0.05  # 2 ms against TTFTs of ~120 ms
    assert setup_block(_cols())["requests"] == 0 and setup_block(_cols())["share_of_time_to_first_token"] is None


def _stall_bias(doc: dict) -> dict:
    (b,) = [b for b in doc["biases"] if b["cause"] == "loop_stalls"]
    return b


def test_loop_stalls_are_bounded_from_the_reads_lateness_and_reported() -> None:
    cols = _cols()
    gap = summarize_columns(cols)["latency_ms"]["tpot"]["median"]
    late = [0] * 1025
    late[0] = 900
    late[-1] = 100  # 10% of reads ran more than ~134 ms after their bytes: later than the gap
    saturated, reasons, doc = _judge(cols, read_lateness=late, lateness_bucket_ms=0.131072, tokens_read_together=0.2)
    b = _stall_bias(doc)
    assert b["affected_share"] == pytest.approx(0.1) and b["bound_ms"] > b["tolerance_ms"], b
    # with kernel stamps it is reported, not counted: the read-together rule judges stalls (no lag here);
    # the figure it could move is named as not vouched for, with its bound
    assert not saturated and reasons == []
    (what,) = doc["unvouched"]
    assert what.startswith(f"{b['figure']} could be off by up to {b['bound_ms']:.1f} ms"), what
    # capped by the share of gaps read together, and none where every read ran within a bucket of its bytes
    _, _, doc = _judge(cols, read_lateness=late, lateness_bucket_ms=0.131072, tokens_read_together=0.01)
    assert _stall_bias(doc)["affected_share"] == pytest.approx(0.01)
    prompt = [1000] + [0] * 1024
    _, _, doc = _judge(cols, read_lateness=prompt)
    assert [b for b in doc["biases"] if b["cause"] == "loop_stalls"] == [] and doc["unvouched"] == []
    # stamps taken at read time: the same cause is counted, so it is a reason, not a caveat
    saturated, reasons, doc = _judge(cols, rx_timestamps="read", shard_lags_ms=[(1.0, [4 * gap] * 100)])
    assert saturated and any("not trustworthy" in r for r in reasons) and doc["unvouched"] == []
    # the lag samples give the share where no read was stamped
    _, _, doc = _judge(cols, shard_lags_ms=[(1.0, [4 * gap] * 100)])
    assert _stall_bias(doc)["affected_share"] == pytest.approx(stall_share([4 * gap] * 100, gap))


def test_a_stalled_shard_weighs_by_its_share_of_the_requests() -> None:
    cols = _cols()
    one_stalled = [(0.5, [30.0] * 50), (0.5, [0.1] * 50)]
    _, _, doc = _judge(cols, rx_timestamps="read", shard_lags_ms=one_stalled)
    b = _stall_bias(doc)
    assert b["affected_share"] == pytest.approx(0.5 * stall_share([30.0] * 50, tolerance_ms(120.0)), rel=0.05)
    assert _judge(cols, rx_timestamps="read", shard_lags_ms=one_stalled)[0] is True
    assert _judge(cols, rx_timestamps="read", shard_lags_ms=[(0.5, [0.1] * 50), (0.5, [0.1] * 50)])[0] is False


def test_read_stamps_make_every_stall_a_bias() -> None:
    cols = _cols()
    assert _judge(cols, rx_timestamps="read", shard_lags_ms=[(1.0, [30.0] * 100)])[0] is True
    assert _judge(cols, rx_timestamps="read", shard_lags_ms=[(1.0, [0.3] * 100)])[0] is False


def test_read_pauses_are_named_only_when_they_could_move_a_figure() -> None:
    cols = _cols()
    # 100 pauses of 30 ms each, longer than the streams' 20 ms gap (not what coalescing does: ~0.1 ms):
    # named, with what to do
    saturated, reasons, doc = _judge(cols, read_pauses=100, read_pause_ms=3000.0)
    assert saturated and any("read coalescing" in r for r in reasons) and "--no-read-coalescing" in doc["advice"]
    # coalescing's own pauses (0.1 ms), and pauses a busy host stretched but still shorter than the gap
    assert _judge(cols, read_pauses=2000, read_pause_ms=200.0)[0] is False
    assert _judge(cols, read_pauses=2000, read_pause_ms=5600.0)[0] is False  # 2.8 ms each


def _lagged(recs: list[RequestRecord], lag_ns: int) -> RecordColumns:
    for r in recs:
        assert r.t_send_ns is not None
        r.t_send_ns += lag_ns
        r.t_first_ns = (r.t_first_ns or 0) + lag_ns
        r.t_first_answer_ns = r.t_first_ns
        r.t_last_ns = (r.t_last_ns or 0) + lag_ns
        r.t_end_ns = (r.t_end_ns or 0) + lag_ns
        r.chunk_ns = [t + lag_ns for t in r.chunk_ns]
    return RecordColumns.from_records(recs)


def test_a_closed_loop_that_leaves_slots_empty_is_named() -> None:
    lagged = _lagged(synth_records(400, seed=5, concurrency=16), 50_000_000)  # every slot refilled 50 ms late
    s = summarize_columns(lagged)
    deficit = load_deficit(lagged, 16, s["duration_s"])
    assert deficit is not None and deficit > LOAD_DEFICIT_MAX
    s["client"]["load_deficit"] = deficit
    saturated, reasons, _ = assess_client(s, open_loop=False)
    assert saturated and reasons[0].startswith("sends lag: the client left")
    prompt = RecordColumns.from_records(synth_records(400, seed=5, concurrency=16))  # 0.02-0.2 ms to refill
    s = summarize_columns(prompt)
    s["client"]["load_deficit"] = load_deficit(prompt, 16, s["duration_s"])
    assert assess_client(s, open_loop=False) == (False, [], "")


def test_cpu_at_its_ceiling_is_named_per_process() -> None:
    base: dict[str, Any] = {"schedule_lag_ms": {"p99": 1.0}, "elapsed_s": 10.0, "load_deficit": 0.0}
    assert "ceiling" in assess_client({"client": {**base, "cpu_s": 9.5}}, open_loop=False)[1][0]  # type: ignore[typeddict-item]
    assert assess_client({"client": {**base, "cpu_s": 3.0}}, open_loop=False)[0] is False  # type: ignore[typeddict-item]


def _two_shards(*, stalled: int, together: int, on_nodes: bool) -> tuple[dict, list[str]]:
    """A closed loop over two shards (even ids shard 0, odd ids shard 1, as `split.shard_of` deals them):
    shard `stalled`'s loop lags 15 ms (p99) against a ~20 ms TPOT, the other's 0.2 ms; half the token gaps
    of shard `together`'s requests are 0 (read together). As worker processes here, or (`on_nodes`) as Ray
    actors on two nodes. Returns the summary's client block and the reasons as assess_shards words them."""
    from servescope.client.spec import Prepared, ShardResult, ShardSpec
    from servescope.results.colsummary import tokens_read_together
    from servescope.run.assemble import _biases, assess_shards

    recs = synth_records(400, seed=5, concurrency=16)
    for r in recs[together::2]:
        c = r.chunk_ns
        for k in range(1, len(c) - 1, 2):  # every other chunk read with the next one
            c[k] = c[k + 1]
    cols = RecordColumns.from_records(recs)
    s = summarize_columns(cols)
    lags = [[15.0 if i == stalled else 0.2] * 100 for i in range(2)]
    parts = [
        ShardResult(
            records=[],
            t0_ns=0,
            elapsed_s=10.0,
            rx_timestamps="kernel",
            cpu_s=2.0,
            cpu_busy_peak=0.3,
            loop_lag_ms=lags[i],
            index=i,
            pid=100 + i,
            start_late_ms=0.0,
            host=f"10.203.0.{i + 2}" if on_nodes else None,
            clock_offset_ns=(50_000 * (i + 1)) if on_nodes else None,
            clock_error_ns=800_000 if on_nodes else None,
        )
        for i in range(2)
    ]
    merged = ShardResult(
        records=[],
        t0_ns=0,
        elapsed_s=10.0,
        rx_timestamps="kernel",
        cpu_s=5.0,
        cpu_busy_peak=0.3,
        loop_lag_ms=lags[0] + lags[1],
        parts=parts,
        parent_cpu_s=1.0,
    )
    spec = ShardSpec(
        url="http://10.203.0.1:8000/v1/completions",
        api="completions",
        headers={},
        items=[Prepared(id=i, body=b"{}", input_len=256, output_len=64) for i in range(400)],
        concurrency=16,
    )
    client = s["client"]
    client.update(
        {
            "tokens_read_together": tokens_read_together(cols),
            "setup": setup_block(cols),
            "loop_lag_ms_p99": float(np.percentile(merged.loop_lag_ms, 99)),
            "elapsed_s": 10.0,
        }
    )
    _biases(s, spec, merged, cols, open_loop=False)  # the merged view's bounds, as run.assemble adds them
    assess_shards(s, merged, spec, cols, open_loop=False, rx_timestamps="kernel")
    return dict(client), list(client["reasons"])


def test_each_shard_is_judged_on_its_own_stalls_and_reads_the_same_over_ray_as_over_workers() -> None:
    client, reasons = _two_shards(stalled=1, together=1, on_nodes=False)
    shards = client["workers"]["shards"]
    # the stalling shard whose own gaps were read together is named, with the cause; the other is not
    assert shards[1]["saturated"] and "stalls about as long as the gap" in shards[1]["reasons"][0], shards[1]
    assert not shards[0]["saturated"] and shards[0]["reasons"] == []
    assert client["workers"]["saturated_shard"] == 1 and client["saturated"]
    assert any(r.startswith("shard 1 (pid 101): the event loop stalls") for r in reasons), reasons
    # a shard that stalls while its own streams read nothing together is not that shard's fault (its stalls
    # merged no token); the run's merged view still judges the run as a whole
    client, reasons = _two_shards(stalled=1, together=0, on_nodes=False)
    assert [f["saturated"] for f in client["workers"]["shards"]] == [False, False]
    assert client["workers"]["saturated_shard"] is None
    assert all(not r.startswith("shard ") for r in reasons)

    # over Ray actors on two nodes: the same verdict, rule for rule; the reasons name the node
    for stalled, together in ((1, 1), (1, 0), (0, 1)):
        here, here_reasons = _two_shards(stalled=stalled, together=together, on_nodes=False)
        ray, ray_reasons = _two_shards(stalled=stalled, together=together, on_nodes=True)
        assert ray["saturated"] == here["saturated"] and ray["biases"] == here["biases"]
        assert ray["loop_stall_share"] == here["loop_stall_share"]
        assert ray["workers"]["saturated_shard"] == here["workers"]["saturated_shard"]
        for a, b in zip(here["workers"]["shards"], ray["workers"]["shards"], strict=True):
            assert (a["saturated"], a["reasons"], a["cpu_share"]) == (b["saturated"], b["reasons"], b["cpu_share"])
            assert b["host"] == f"10.203.0.{b['index'] + 2}" and "host" not in a
        assert [r.replace(" on 10.203.0.2", "").replace(" on 10.203.0.3", "") for r in ray_reasons] == here_reasons
    ray, ray_reasons = _two_shards(stalled=1, together=1, on_nodes=True)
    assert any(r.startswith("shard 1 (pid 101 on 10.203.0.3): ") for r in ray_reasons), ray_reasons
    assert "more nodes (--ray" in ray["advice"] and "--workers (each a process" not in ray["advice"]


def test_figures_not_vouched_for_are_shown_in_the_terminal_and_the_report() -> None:
    """A kernel-stamped run whose loop-stall bound is over its tolerance: not saturated, but the terminal
    and the HTML report name the figure the client cannot vouch for; with none, both say it kept up."""
    import io

    from rich.console import Console

    from servescope.report.console import print_summary
    from servescope.report.html import _client_verdict

    cols = _cols()
    late = [0] * 1025
    late[0], late[-1] = 900, 100
    _, _, doc = _judge(cols, read_lateness=late, lateness_bucket_ms=0.131072, tokens_read_together=0.2)
    s = summarize_columns(cols)
    for what, shown in ((doc["unvouched"], True), ([], False)):
        s["client"].update({"saturated": False, "reasons": [], "unvouched": what, "schedule_lag_ms": {"p99": 1.0}})
        out = io.StringIO()
        print_summary(s, Console(file=out, width=400, color_system=None))
        kind, text = _client_verdict(s)
        assert ("not vouched for" in out.getvalue()) is shown, out.getvalue()
        assert (kind, "cannot vouch" in text) == (("warn", True) if shown else ("good", False)), text
        if shown:
            assert what[0][:80] in out.getvalue() and what[0] in text  # (the terminal wraps long lines)
