"""Cluster figures of a small hand-made sequence against ground truth computed here, step by
step in plain Python (a brute-force max flow for pending-while-idle), not by the code under
test."""

from __future__ import annotations

import itertools
import math
import statistics

import numpy as np
import pyarrow as pa
import pytest

from gpulens.analyze.cluster.grid import to_grid
from gpulens.analyze.cluster.queues import summarise
from gpulens.cluster_schema import SEQUENCE_SCHEMA

T0 = 1_764_374_400
# queue → per minute (total, in use, pending); None: no data that minute
SEQ = {
    "a": [(8, 8, 2), (8, 8, 0), (8, 4, 0), (8, 4, 0), (8, 6, 1), (8, 8, 3)],
    "b": [(4, 0, 0), (4, 4, 0), (4, 4, 3), (4, 2, 0), None, (4, 1, 5)],
    "c": [(2, 2, 1), (2, 1, 0), (2, 2, 0), (2, 2, 2), (2, 0, 0), (2, 2, 0)],
}


def _table() -> pa.Table:
    rows = [
        {"ts_s": T0 + 60 * i, "queue": q, "total_gpus": v[0], "in_use_gpus": v[1],
         "pending_gpus": v[2]}
        for q, values in SEQ.items()
        for i, v in enumerate(values)
        if v is not None
    ]  # fmt: skip
    return pa.Table.from_pylist(rows, schema=SEQUENCE_SCHEMA)


def _max_flow(pending: dict[str, int], idle: dict[str, int]) -> int:
    """Brute force: the most GPUs moved from pending of a to idle of b != a, unit by unit,
    trying every order of the queues' requests (tiny inputs only)."""
    best = 0
    units = [q for q, n in pending.items() for _ in range(n)]
    for order in set(itertools.permutations(units)):
        free = dict(idle)
        moved = 0
        for q in order:
            donor = max((b for b in free if b != q and free[b] > 0), key=free.get, default=None)
            if donor is not None:
                free[donor] -= 1
                moved += 1
        best = max(best, moved)
    return best


def _truth() -> dict[str, object]:
    steps = len(SEQ["a"])
    movable, use, total = [], 0, 0
    for i in range(steps):
        now = {q: v[i] for q, v in SEQ.items() if v[i] is not None}
        pending = {q: v[2] for q, v in now.items()}
        idle = {q: max(v[0] - v[1], 0) for q, v in now.items()}
        movable.append(_max_flow(pending, idle))
        use += sum(v[1] for v in now.values())
        total += sum(v[0] for v in now.values())
    return {"movable": movable, "pooled": use / total}


def test_pooled_allocation_and_pending_while_idle() -> None:
    truth = _truth()
    s = summarise(to_grid(_table()))
    assert s.step_s == 60 and s.steps == 6
    assert s.pooled_allocation == pytest.approx(truth["pooled"])
    movable = truth["movable"]
    assert list(s.movable) == movable
    assert s.pending_while_idle_share == pytest.approx(sum(m > 0 for m in movable) / 6)
    assert s.pending_while_idle_gpu_hours == pytest.approx(sum(movable) / 60)


@pytest.mark.parametrize("name", sorted(SEQ))
def test_per_queue(name: str) -> None:
    values = [v for v in SEQ[name] if v is not None]
    ratios = sorted(u / t for t, u, _ in values)
    q = {x.name: x for x in summarise(to_grid(_table())).queues}[name]
    assert q.gpus == max(t for t, _, _ in values)
    assert q.allocation == pytest.approx(
        sum(u for _, u, _ in values) / sum(t for t, _, _ in values)
    )
    # numpy's default percentile is the "inclusive" linear method of statistics.quantiles
    expected = statistics.quantiles(ratios, n=4, method="inclusive")
    assert q.allocation_quartiles == pytest.approx(tuple(expected))
    assert q.pending_gpu_hours == pytest.approx(sum(p for _, _, p in values) / 60)
    assert q.steps == len(values)


def test_a_missing_minute_is_not_zero() -> None:
    """b has no row in minute 4: its allocation is over 5 minutes, not 6 with a zero."""
    q = {x.name: x for x in summarise(to_grid(_table())).queues}["b"]
    assert q.gpu_hours == pytest.approx(5 * 4 / 60)


def test_unknown_totals_give_unknown_allocation() -> None:
    table = _table().set_column(2, "total_gpus", pa.nulls(_table().num_rows, pa.float64()))
    s = summarise(to_grid(table))
    assert math.isnan(s.pooled_allocation)
    assert all(math.isnan(q.allocation) for q in s.queues)
    # idle GPUs unknown: whether jobs waited while GPUs idled is unknown too, not "never"
    assert math.isnan(s.pending_while_idle_share)
    assert math.isnan(s.pending_while_idle_gpu_hours)


def test_sources_far_apart_are_refused_not_allocated() -> None:
    """Two rows ten years apart at 1 s steps would be 630 M cells: a clear error instead."""
    far = pa.Table.from_pylist(
        [
            {"ts_s": T0, "queue": "a", "total_gpus": 8.0},
            {"ts_s": T0 + 10 * 365 * 86400, "queue": "b", "total_gpus": 8.0},
        ],
        schema=SEQUENCE_SCHEMA,
    )
    with pytest.raises(ValueError, match=r"over 3,650 days at 1 s steps .* longer step"):
        to_grid(far, step_s=1)


def test_busiest_window() -> None:
    from gpulens.analyze.cluster.queues import busiest_window

    movable = np.array([0.0, 1.0, 2.0, np.nan, 5.0])
    # two-step windows: 1, 3, 2, 5 GPU-minutes → the last, from step 3
    assert busiest_window(movable, 60, window_s=120) == (3, pytest.approx(5 / 60))
    # a window longer than the data: all of it
    assert busiest_window(movable, 60) == (0, pytest.approx(8 / 60))


def _without_pending(queues: set[str]) -> pa.Table:
    """The sequence with the pending demand of `queues` unknown (null), as Kueue's workload
    counts or the GPU series alone give it."""
    rows = _table().to_pylist()
    for row in rows:
        if row["queue"] in queues:
            row["pending_gpus"] = None
    return pa.Table.from_pylist(rows, schema=SEQUENCE_SCHEMA)


def test_unknown_pending_is_unknown_not_zero() -> None:
    s = summarise(to_grid(_without_pending({"a", "b", "c"})))
    assert not s.pending_known
    assert math.isnan(s.pending_gpu_hours)
    assert math.isnan(s.pending_while_idle_share)
    assert math.isnan(s.pending_while_idle_gpu_hours)
    assert math.isnan(s.peak_gpu_hours)
    assert np.isnan(s.movable).all()
    for q in s.queues:
        assert not q.pending_known
        assert math.isnan(q.pending_gpu_hours) and math.isnan(q.pending_steps_share)
        assert math.isnan(q.pending_while_idle_share)
        assert math.isnan(q.waited_while_idle_gpu_hours)
        assert math.isnan(q.idle_while_others_waited_gpu_hours)
    # what is known stays known: allocation does not depend on pending demand
    truth = _truth()
    assert s.pooled_allocation == pytest.approx(truth["pooled"])


def test_pending_known_for_some_queues_counts_those() -> None:
    """Pending of `c` unknown: the movable GPUs are those of a's and b's pending (c's counted
    as 0: a lower bound), and c's own pending figures are unknown."""
    s = summarise(to_grid(_without_pending({"c"})))
    assert s.pending_known
    movable = []
    for i in range(len(SEQ["a"])):
        now = {q: v[i] for q, v in SEQ.items() if v[i] is not None}
        pending = {q: (v[2] if q != "c" else 0) for q, v in now.items()}
        idle = {q: max(v[0] - v[1], 0) for q, v in now.items()}
        movable.append(_max_flow(pending, idle))
    assert list(s.movable) == movable
    assert s.pending_gpu_hours == pytest.approx(
        sum(v[2] for q in ("a", "b") for v in SEQ[q] if v is not None) / 60
    )
    c = next(q for q in s.queues if q.name == "c")
    assert math.isnan(c.pending_gpu_hours) and math.isnan(c.waited_while_idle_gpu_hours)
    assert not math.isnan(c.idle_while_others_waited_gpu_hours)
