"""Rollups: hand-built frames with known answers, and totals that always add up."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulens.analyze import rollups, waste
from gpulens.analyze.prices import Prices

PRICES = Prices(gpu_hour={"H100": 4.0}, unknown_gpu_hour=1.0, pue=1.0)
HOUR = 3_600_000_000_000


def frame(rows: list[dict[str, Any]]) -> pa.Table:
    floats = (
        "step_s",
        "useful_ratio",
        "duty",
        "sm_active",
        "tensor_active",
        "energy_j",
        "tokens_per_s",
    )
    strings = ("host", "gpu_uuid", "gpu_model", "pid", "user", "team", "job_id", "state")
    data: dict[str, pa.Array] = {"start_ns": pa.array([r["start_ns"] for r in rows], pa.int64())}
    data.update({c: pa.array([r.get(c) for r in rows], pa.float64()) for c in floats})
    data.update({c: pa.array([r.get(c) for r in rows], pa.string()) for c in strings})
    return pa.table(data)


def r(hour: int, gpu: str, user: str | None, state: str, **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "start_ns": hour * HOUR,
        "step_s": 3600.0,
        "host": "h1",
        "gpu_uuid": gpu,
        "gpu_model": "NVIDIA H100 80GB HBM3",
        "user": user,
        "pid": None if user is None else f"{gpu}-p",
        "team": None if user is None else f"team-{user}",
        "state": state,
    }
    out.update(kw)
    return out


FLEET = frame(
    [
        r(
            0,
            "g0",
            "ann",
            "compute_tensor",
            useful_ratio=0.8,
            duty=1.0,
            sm_active=0.8,
            tensor_active=0.5,
            energy_j=3.6e6,
            tokens_per_s=100.0,
        ),
        r(1, "g0", "ann", "idle_allocated", duty=0.0, sm_active=0.0, energy_j=3.6e5),
        r(0, "g1", "bob", "hollow_busy", useful_ratio=0.2, duty=0.9, sm_active=0.2),
        r(1, "g1", None, "idle_unallocated", duty=0.0),
        r(0, "g2", "bob", "memory_bound", useful_ratio=0.4, duty=0.8),
        r(1, "g2", "bob", "warmup", duty=0.5),
    ]
)


def by_key(t: pa.Table, key: str) -> dict[Any, dict[str, Any]]:
    return {row[key]: row for row in t.to_pylist()}


def test_rollup_by_user_matches_hand_arithmetic() -> None:
    out = by_key(rollups.rollup(FLEET, "user", PRICES), "user")
    ann, bob, nobody = out["ann"], out["bob"], out[None]
    assert ann["gpus"] == 1 and bob["gpus"] == 2 and nobody["gpus"] == 1
    assert ann["allocated_gpu_hours"] == pytest.approx(2.0)
    assert ann["useful_gpu_hours"] == pytest.approx(0.8)
    # the compute_tensor hour's not-useful 0.2 h is headroom (healthy work), not waste
    assert ann["wasted_gpu_hours"] == pytest.approx(1.0)
    assert ann["wasted_gpu_hours_idle_allocated"] == pytest.approx(1.0)
    assert "wasted_gpu_hours_compute_tensor" not in ann
    assert ann["headroom_gpu_hours"] == pytest.approx(0.2)
    assert ann["headroom_cost"] == pytest.approx(4.0 * 0.2)
    assert bob["headroom_gpu_hours"] == pytest.approx(0.0)
    assert ann["mean_duty"] == pytest.approx(0.5)
    assert ann["mean_tensor_active"] == pytest.approx(0.5)  # only the hour that has it
    assert ann["energy_kwh"] == pytest.approx(1.1)
    assert ann["cost"] == pytest.approx(8.0)
    assert ann["wasted_cost"] == pytest.approx(4.0)
    assert ann["co2e_kg"] == pytest.approx(1.1 * 0.475)
    assert ann["useful_per_gpu_hour"] == pytest.approx(0.4)
    assert ann["tokens_per_gpu_hour"] == pytest.approx(100.0 * 3600 / 2.0)
    assert ann["mean_gpus"] == pytest.approx(1.0)  # 2 GPU-hours over a 2-hour span
    assert (ann["start_ns"], ann["end_ns"]) == (0, 2 * HOUR)
    assert bob["allocated_gpu_hours"] == pytest.approx(3.0)
    assert bob["useful_gpu_hours"] == pytest.approx(0.6)
    assert bob["warmup_gpu_hours"] == pytest.approx(1.0)
    assert bob["wasted_gpu_hours_hollow_busy"] == pytest.approx(0.8)
    assert bob["wasted_gpu_hours_memory_bound"] == pytest.approx(0.6)
    assert bob["energy_kwh"] is None  # never measured: unknown, not 0
    assert bob["tokens_per_gpu_hour"] is None
    assert nobody["idle_unallocated_gpu_hours"] == pytest.approx(1.0)
    assert list(out) == ["bob", "ann", None]  # largest allocation first


def test_named_groupings() -> None:
    cluster = rollups.rollup(FLEET, "cluster", PRICES).to_pylist()
    assert len(cluster) == 1 and cluster[0]["gpus"] == 3
    assert cluster[0]["gpu_hours"] == pytest.approx(6.0)
    assert cluster[0]["allocated_gpu_hours"] == pytest.approx(5.0)
    procs = rollups.rollup(FLEET, "process", PRICES)
    assert procs.column_names[:2] == ["host", "pid"]
    assert procs.num_rows == 4  # three processes and the unallocated hour
    teams = by_key(rollups.rollup(FLEET, "team", PRICES), "team")
    assert teams["team-bob"]["allocated_gpu_hours"] == pytest.approx(3.0)


def test_missing_label_column_is_one_null_group() -> None:
    out = rollups.rollup(FLEET, "project", PRICES).to_pylist()
    assert len(out) == 1 and out[0]["project"] is None


def test_empty_frame_gives_empty_table_with_schema() -> None:
    out = rollups.rollup(FLEET.slice(0, 0), "user")
    assert out.num_rows == 0
    assert out.column_names == ["user", *rollups.METRIC_COLUMNS]


def test_accepts_an_annotated_frame() -> None:
    annotated = waste.annotate(FLEET, PRICES)
    assert rollups.rollup(annotated, "user").equals(rollups.rollup(FLEET, "user", PRICES))


ROWS = st.lists(
    st.tuples(
        st.integers(0, 5),
        st.sampled_from(["g0", "g1", "g2"]),
        st.sampled_from(["ann", "bob", None]),
        st.sampled_from(["compute_tensor", "idle_allocated", "warmup", "busy", "hollow_busy"]),
        st.one_of(st.none(), st.floats(0, 1)),
        st.one_of(st.none(), st.floats(0, 1e6)),
    ),
    min_size=1,
    max_size=30,
)


@given(ROWS, st.sampled_from(["user", "team", "process", "cluster", "gpu"]))
@settings(max_examples=60, deadline=None)
def test_rollup_totals_equal_frame_totals(rows: list[tuple[Any, ...]], by: str) -> None:
    f = frame([r(h, g, u, s, useful_ratio=q, energy_j=e) for h, g, u, s, q, e in rows])
    t = waste.annotate(f, PRICES)
    out = rollups.rollup(t, by)
    sums = {
        "gpu_hours": "gpu_s",
        "allocated_gpu_hours": "allocated_s",
        "useful_gpu_hours": "useful_s",
        "wasted_gpu_hours": "wasted_s",
        "headroom_gpu_hours": "headroom_s",
    }
    for rcol, fcol in sums.items():
        expected = sum(v for v in t[fcol].to_pylist() if v is not None) / 3600.0
        assert sum(v or 0.0 for v in out[rcol].to_pylist()) == pytest.approx(expected)
    assert sum(out["cost"].to_pylist()) == pytest.approx(sum(t["cost"].to_pylist()))
    causes = sum(sum(v or 0.0 for v in out[c].to_pylist()) for c in rollups.CAUSE_COLUMNS)
    wasted = sum(v for v in t["wasted_s"].to_pylist() if v is not None) / 3600.0
    assert causes == pytest.approx(wasted)
    for g in out.to_pylist():  # allocated = useful + wasted + headroom + warm-up + unmeasured
        parts = ("useful", "wasted", "headroom", "warmup", "unmeasured")
        split = sum(g[f"{p}_gpu_hours"] or 0.0 for p in parts)
        assert split == pytest.approx(g["allocated_gpu_hours"], rel=1e-6, abs=1e-9)
        assert g["allocated_gpu_hours"] + g["idle_unallocated_gpu_hours"] == pytest.approx(
            g["gpu_hours"], rel=1e-6, abs=1e-9
        )
