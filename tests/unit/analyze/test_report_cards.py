"""Report cards' arithmetic: per-period sums of an annotated frame, baselines that skip the
periods a subject held nothing, teams from members before labels."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from gpulens.analyze import report_cards as rc

H = 3600.0
DAY_NS = 86_400 * 1_000_000_000


def _row(period: int, name: str, held_h: float, useful_h: float, idle_h: float) -> dict[str, Any]:
    return {
        rc.PERIOD: period, "user": name, "gpu_s": held_h * H, "allocated_s": held_h * H,
        "useful_s": useful_h * H, "wasted_s": idle_h * H, "idle_s": idle_h * H,
        "idle_cost": idle_h * 2.0, "wasted_cost": idle_h * 2.0,
        "mean_sm_active": 0.5, "mean_tensor_active": 0.25,
    }  # fmt: skip


def test_baseline_skips_periods_without_gpus_and_compares_with_the_fleet() -> None:
    rows = [
        _row(0, "ann", 10, 5, 2),
        _row(1, "ann", 0, 0, 0),  # seen, but held nothing: not part of the baseline
        _row(2, "ann", 20, 5, 6),
        _row(3, "ann", 10, 2, 8),
        _row(3, "ben", 10, 8, 0),
        _row(2, "gone", 5, 5, 0),  # held GPUs before, none in the graded period: no card
    ]
    fleet = [
        {**_row(3, "fleet", 20, 10, 8), rc.PERIOD: 3},
        {**_row(2, "fleet", 25, 10, 6), rc.PERIOD: 2},
    ]
    cards = rc.build_cards("user", rows, "user", fleet, 3, "day", 0, "USD")
    assert [c.name for c in cards] == ["ann", "ben"]  # largest idle price first
    ann = cards[0]
    assert ann.baseline_periods == 2
    assert ann.baseline is not None
    assert ann.baseline.allocated_gpu_hours == pytest.approx(15.0)  # (10 + 20) / 2
    assert ann.baseline.idle_allocated_gpu_hours == pytest.approx(4.0)
    assert ann.baseline.useful_share == pytest.approx(10 / 30)
    assert ann.current.useful_share == pytest.approx(0.2)
    assert ann.fleet.useful_share == pytest.approx(0.5)
    assert (ann.start_ns, ann.end_ns) == (3 * DAY_NS, 4 * DAY_NS)
    assert ann.verdicts[0] == (
        "Useful work: 20% of the 10.0 GPU-hours held: down 13 points on its baseline (33%); "
        "30 points below the fleet (50%)."
    )
    ben = cards[1]
    assert ben.baseline is None and "no baseline yet" in ben.verdicts[0]


def test_figures_and_teams_from_a_frame() -> None:
    frame = pa.table(
        {
            "start_ns": pa.array([0, 60, DAY_NS, DAY_NS + 60], pa.int64()),
            "user": ["ann", "ann", "ben", "cy"],
            "team": [None, "x", "x", None],
            "namespace": ["ns-a", None, None, None],
            "gpu_s": [60.0, 60.0, 60.0, 60.0],
            "allocated_s": [60.0, 60.0, 60.0, 0.0],
            "useful_s": [30.0, 0.0, 60.0, 0.0],
            "wasted_s": [0.0, 60.0, 0.0, 0.0],
            "waste_cause": [None, "idle_allocated", None, None],
            "price_per_gpu_hour": [4.0, 4.0, 4.0, 4.0],
            "sm_active": [0.5, 0.0, 1.0, None],
            "tensor_active": [None, None, None, None],
        }
    )
    framed = rc.with_team(rc.with_period(frame, 0, 86_400), {"ben": "y"})
    assert framed[rc.PERIOD].to_pylist() == [0, 0, 1, 1]
    assert framed[rc.TEAM].to_pylist() == ["ns-a", "x", "y", None]
    got = {r["user"]: r for r in rc.figures(framed, ("user",))}
    assert got["ann"]["idle_s"] == 60.0 and got["ann"]["idle_cost"] == pytest.approx(60 / H * 4)
    assert got["ann"]["mean_sm_active"] == pytest.approx(0.25)
    assert got["ann"]["mean_tensor_active"] is None  # never measured: unknown, not 0
    assert got["cy"]["mean_sm_active"] is None
