"""Fairness: shares, Jain's index, starvation, monopoly and workload gaps."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulens.analyze import fairness

HOUR = 3_600_000_000_000


def frame(rows: list[dict[str, Any]]) -> pa.Table:
    floats = ("step_s", "useful_ratio", "tokens_per_s", "model_parameters")
    strings = ("gpu_uuid", "gpu_model", "pid", "user", "team", "engine", "process_name", "state")
    data: dict[str, pa.Array] = {"start_ns": pa.array([r["start_ns"] for r in rows], pa.int64())}
    data.update({c: pa.array([r.get(c) for r in rows], pa.float64()) for c in floats})
    data.update({c: pa.array([r.get(c) for r in rows], pa.string()) for c in strings})
    return pa.table(data)


def r(
    hour: int, gpu: str, user: str | None, state: str = "compute_tensor", **kw: Any
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "start_ns": hour * HOUR,
        "step_s": 3600.0,
        "gpu_uuid": gpu,
        "gpu_model": "NVIDIA H100",
        "user": user,
        "state": state,
        "pid": None if user is None else "1",
        "useful_ratio": 0.5,
    }
    if user is None:
        out["state"] = "idle_unallocated"
    out.update(kw)
    return out


def test_jain_known_values() -> None:
    assert fairness.jain_index([1, 1, 1, 1]) == pytest.approx(1.0)
    assert fairness.jain_index([1, 0, 0, 0]) == pytest.approx(0.25)
    # (1 + 3)² / (2 × (1 + 9)) = 16 / 20
    assert fairness.jain_index([1, 3]) == pytest.approx(0.8)
    assert fairness.jain_index([]) is None
    assert fairness.jain_index([0, 0]) is None
    assert fairness.jain_index([float("nan"), 2.0]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match=">= 0"):
        fairness.jain_index([-1.0, 1.0])


@given(st.lists(st.floats(0, 1e6), min_size=1, max_size=50))
@settings(max_examples=100, deadline=None)
def test_jain_is_between_one_over_n_and_one(values: list[float]) -> None:
    j = fairness.jain_index(values)
    if sum(v * v for v in values) == 0:
        assert j is None
    else:
        assert j is not None and 1.0 / len(values) - 1e-9 <= j <= 1.0


def test_shares_against_hand_arithmetic() -> None:
    f = frame(
        [
            r(0, "g0", "ann", useful_ratio=0.9),
            r(1, "g0", "ann", useful_ratio=0.9),
            r(2, "g0", "ann", useful_ratio=0.9),
            r(0, "g1", "bob", useful_ratio=0.3),
            r(1, "g1", None),
        ]
    )
    s = fairness.shares(f, "user", quotas={"ann": 1.0, "bob": 1.0})
    rows = {row["user"]: row for row in s.table.to_pylist()}
    assert set(rows) == {"ann", "bob"}  # unallocated time is nobody's share
    assert rows["ann"]["allocation_share"] == pytest.approx(0.75)
    # useful: ann 2.7 h, bob 0.3 h
    assert rows["ann"]["useful_share"] == pytest.approx(0.9)
    assert rows["bob"]["useful_share"] == pytest.approx(0.1)
    assert rows["ann"]["quota_share"] == pytest.approx(0.5)
    assert rows["ann"]["allocation_over_quota"] == pytest.approx(1.5)
    assert rows["bob"]["useful_over_allocation"] == pytest.approx(0.4)
    assert s.jain_useful == pytest.approx((0.9 + 0.1) ** 2 / (2 * (0.81 + 0.01)))
    assert s.jain_allocation_over_quota == pytest.approx(2.0**2 / (2 * (1.5**2 + 0.5**2)))
    without = fairness.shares(f, "user")
    assert without.jain_allocation_over_quota is None
    assert without.table["quota_share"].null_count == 2


@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.floats(0, 1), st.integers(0, 3)),
        min_size=1,
        max_size=30,
    )
)
@settings(max_examples=50, deadline=None)
def test_shares_sum_to_one(rows: list[tuple[str, float, int]]) -> None:
    f = frame([r(h, f"g{i}", u, useful_ratio=q) for i, (u, q, h) in enumerate(rows)])
    t = fairness.shares(f, "user", quotas={"a": 2.0, "b": 1.0}).table
    assert sum(t["allocation_share"].to_pylist()) == pytest.approx(1.0)
    useful = t["useful_share"].to_pylist()
    if all(v is not None for v in useful):
        assert sum(useful) == pytest.approx(1.0)
    quota = [v for v in t["quota_share"].to_pylist() if v is not None]
    assert not quota or sum(quota) == pytest.approx(1.0)


def test_starvation_without_queue_data_is_unknown_not_zero() -> None:
    s = fairness.starvation(frame([r(0, "g0", "ann")]))
    assert s.status == "unknown" and s.starved_gpu_hours is None and s.table is None


def test_starvation_measured() -> None:
    f = frame(
        [
            r(0, "g0", None),  # idle, unallocated
            r(0, "g1", "ann", state="idle_allocated"),  # idle, held by ann
            r(0, "g2", "ann"),
            r(1, "g0", "bob"),
            r(1, "g1", "ann"),
        ]
    )
    queue = pa.table(
        {
            "start_ns": pa.array([10, 20, 5, HOUR + 5], pa.int64()),
            "user": ["bob", "bob", "cat", "bob"],
            "queued_gpus": [2.0, 4.0, 4.0, 8.0],
        }
    )
    s = fairness.starvation(f, queue)
    rows = {row["user"]: row for row in s.table.to_pylist()} if s.table else {}
    # hour 0: 2 idle GPUs, demand bob 4 (max of 2, 4) + cat 4 → each served 2/8 of its demand
    assert rows["bob"]["starved_gpu_hours"] == pytest.approx(4 * 2 / 8)
    assert rows["cat"]["starved_gpu_hours"] == pytest.approx(4 * 2 / 8)
    assert rows["bob"]["max_queued_gpus"] == 8.0  # hour 1: no idle GPU, nothing starved
    assert rows["bob"]["starved_intervals"] == 1
    assert s.status == "measured" and s.starved_gpu_hours == pytest.approx(2.0)


def test_starvation_queue_needs_its_columns() -> None:
    with pytest.raises(ValueError, match="queued_gpus"):
        fairness.starvation(frame([r(0, "g0", "ann")]), pa.table({"start_ns": [0], "user": ["a"]}))


def test_monopoly_runs() -> None:
    rows = []
    for h in range(30):
        rows.append(r(h, "g0", "ann"))
        rows.append(r(h, "g1", "ann" if h < 26 else "bob"))
        rows.append(r(h, "g2", "bob" if h % 10 else "ann"))
    found = fairness.monopolies(frame(rows), "user", share=0.5, min_hours=24.0)
    assert len(found) == 1
    m = found[0]
    assert (m.group, m.start_ns, m.end_ns, m.hours) == ("ann", 0, 26 * HOUR, 26.0)
    assert m.max_share == pytest.approx(1.0)
    assert m.mean_share == pytest.approx((23 * 2 / 3 + 3 * 1.0) / 26)
    assert fairness.monopolies(frame(rows), "user", share=0.5, min_hours=27.0) == []
    assert fairness.monopolies(frame(rows), "user", share=0.7, min_hours=1.0)[0].hours == 1.0
    with pytest.raises(ValueError, match="fraction"):
        fairness.monopolies(frame(rows), share=50.0)


def test_workload_gaps_flag_the_same_model_at_different_efficiency() -> None:
    llama: dict[str, Any] = {"engine": "vllm", "process_name": "serve", "model_parameters": 8e9}
    rows = [
        r(0, "g0", "ann", team="search", useful_ratio=0.9, **llama),
        r(1, "g0", "ann", team="search", useful_ratio=0.9, **llama),
        r(0, "g1", "bob", team="ads", useful_ratio=0.3, **llama),
        r(1, "g1", "bob", team="ads", useful_ratio=0.3, **llama),
        r(0, "g2", "cat", team="ads", useful_ratio=0.2, engine="torch", process_name="train"),
    ]
    gaps = fairness.workload_gaps(frame(rows), "team", min_gpu_hours=1.0)
    out = {row["team"]: row for row in gaps.to_pylist()}
    assert set(out) == {"search", "ads"}  # the lone torch workload has nothing to compare
    assert out["ads"]["metric"] == "useful_per_gpu_hour"
    assert out["ads"]["ratio_to_best"] == pytest.approx(3.0)
    assert out["ads"]["flagged"] and not out["search"]["flagged"]
    with_tokens = [dict(x, tokens_per_s=1000.0 if x["team"] == "search" else 250.0) for x in rows]
    out = {row["team"]: row for row in fairness.workload_gaps(frame(with_tokens)).to_pylist()}
    assert out["ads"]["metric"] == "tokens_per_gpu_hour"
    assert out["ads"]["ratio_to_best"] == pytest.approx(4.0)


def test_empty_inputs() -> None:
    empty = frame([])
    assert fairness.shares(empty).table.num_rows == 0
    assert fairness.shares(empty).jain_useful is None
    assert fairness.monopolies(empty) == []
    assert fairness.workload_gaps(empty).num_rows == 0
    q = pa.table(
        {
            "start_ns": pa.array([], pa.int64()),
            "user": pa.array([], pa.string()),
            "queued_gpus": pa.array([], pa.float64()),
        }
    )
    assert fairness.starvation(empty, q).starved_gpu_hours == 0.0
