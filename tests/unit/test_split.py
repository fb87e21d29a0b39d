"""How one run's schedule is dealt over worker processes (client/split.py), and what crosses a process
boundary (client/spec.py pickles; client/host.py's clock offset)."""

from __future__ import annotations

import pickle
import time

import pytest

from servescope.client.host import dumps, wall_minus_perf_ns
from servescope.client.spec import Prepared, ShardResult, ShardSpec
from servescope.client.split import deal_units, global_id, shard_of, split_counts, split_spec
from servescope.results.records import RequestRecord
from servescope.workload.schedule import open_loop_offsets_ns


def _spec(items: list[Prepared], **kw: object) -> ShardSpec:
    return ShardSpec(
        **{"url": "http://127.0.0.1:1/v1/completions", "api": "completions", "headers": {}, "items": items, **kw}
    )


def _items(n: int, offsets: list[int] | None = None) -> list[Prepared]:
    return [
        Prepared(id=i, body=b"{}", input_len=8, output_len=4, offset_ns=None if offsets is None else offsets[i])
        for i in range(n)
    ]


def test_split_counts_first_parts_take_the_extra() -> None:
    assert split_counts(10, 3) == [4, 3, 3]
    assert split_counts(2, 3) == [1, 1, 0]
    assert split_counts(9, 3) == [3, 3, 3]
    assert split_counts(0, 2) == [0, 0]
    with pytest.raises(ValueError):
        split_counts(3, 0)


def test_closed_loop_concurrency_split_and_requests_dealt_round_robin() -> None:
    spec = _spec(_items(20), concurrency=10, num_requests=20, preconnect=10)
    shards = split_spec(spec, 3)
    assert [s.concurrency for s in shards] == [4, 3, 3]
    assert sum(s.concurrency or 0 for s in shards) == 10
    assert [s.preconnect for s in shards] == [4, 3, 3]
    assert [[p.id for p in s.items] for s in shards] == [list(range(k, 20, 3)) for k in range(3)]
    assert [s.num_requests for s in shards] == [7, 7, 6]
    # the shards' local request k, as a run-wide id, gives back the planned ids, each once
    ids = sorted(global_id(k, s, 3) for s, sh in enumerate(shards) for k in range(len(sh.items)))
    assert ids == list(range(20))
    assert all(shard_of(global_id(k, s, 3), 3) == s for s in range(3) for k in range(50))


def test_never_a_shard_without_a_slot_or_a_unit() -> None:
    assert len(split_spec(_spec(_items(20), concurrency=2), 4)) == 2  # 2 slots: 2 shards
    assert len(split_spec(_spec(_items(3)), 8)) == 3  # 3 requests: 3 shards
    assert len(split_spec(_spec(_items(20), concurrency=16), 1)) == 1


def test_fewer_requests_than_items_and_more_with_duration() -> None:
    # --num-requests below the workload: the first N planned requests, dealt as they would be sent
    assert [s.num_requests for s in split_spec(_spec(_items(20), num_requests=7), 2)] == [4, 3]
    # more than the workload (cycled within each shard): every item and a share of the rest
    assert [s.num_requests for s in split_spec(_spec(_items(10), num_requests=15), 2)] == [8, 7]
    assert [s.num_requests for s in split_spec(_spec(_items(10), duration_s=5.0), 2)] == [None, None]


def test_open_loop_merged_stream_is_the_planned_one() -> None:
    offsets = open_loop_offsets_ns(1000, 2000.0, burstiness=1.0, seed=3)
    spec = _spec(_items(1000, offsets), open_loop=True)
    shards = split_spec(spec, 2)
    merged = sorted(p.offset_ns or 0 for s in shards for p in s.items)
    assert merged == sorted(offsets)  # every arrival, at its absolute time from the common start
    for s in shards:  # each shard's own stream is in time order, every 2nd arrival
        own = [p.offset_ns or 0 for p in s.items]
        assert own == sorted(own)
        assert abs(len(own) - 500) <= 1
    # the rate over each shard is half the run's
    span_s = (offsets[-1] - offsets[0]) / 1e9
    for s in shards:
        assert len(s.items) / span_s == pytest.approx(2000 / 2, rel=0.1)


def test_sessions_stay_whole_on_one_shard() -> None:
    items = []
    for sess in range(5):
        for turn in range(3):
            items.append(Prepared(id=len(items), body=b"{}", input_len=8, output_len=4, session=sess, turn=turn))
    hands = deal_units(items, 2)
    for hand in hands:
        by_session: dict[int, list[int]] = {}
        for p in hand:
            by_session.setdefault(p.session or 0, []).append(p.turn or 0)
        assert all(turns == [0, 1, 2] for turns in by_session.values())
    assert sorted(p.session or 0 for p in hands[0]) == [0, 0, 0, 2, 2, 2, 4, 4, 4]


def test_spec_and_result_cross_a_process_boundary() -> None:
    spec = _spec(_items(3, [0, 5, 9]), open_loop=True, concurrency=2, headers={"A": "b"})
    back = pickle.loads(dumps(spec))
    assert back == spec
    rec = RequestRecord(id=4, t_send_ns=3, chunk_ns=[1, 2], chunk_tokens=[1, 1], status="ok")
    res = ShardResult(
        records=[rec],
        t0_ns=7,
        elapsed_s=1.5,
        rx_timestamps="kernel",
        cpu_s=0.1,
        cpu_busy_peak=0.2,
        loop_lag_ms=[0.5],
        pid=123,
        start_late_ms=0.0,
    )
    assert pickle.loads(pickle.dumps(res)) == res


def test_wall_clock_offset_brackets_the_wall_clock() -> None:
    offset, err = wall_minus_perf_ns()
    assert 0 <= err < 1_000_000  # well under a millisecond between two perf_counter reads
    a = time.perf_counter_ns()
    w = time.time_ns()
    assert abs(w - (a + offset)) < err + 5_000_000
