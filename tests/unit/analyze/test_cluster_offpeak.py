"""The off-peak plan on a history whose movable batch hours are known."""

from __future__ import annotations

import numpy as np
import pytest

from gpulens.analyze.cluster.offpeak import lowest_level, off_peak_plan

MONDAY = 1_700_438_400  # 2023-11-20 00:00 UTC, a Monday


def office(steps: int, step_s: int, gpus: float) -> np.ndarray:
    """`gpus` on weekdays from 09:00 to 18:00 UTC, 0 otherwise."""
    t = MONDAY + np.arange(steps) * step_s
    hod, dow = (t // 3600) % 24, ((t - MONDAY) // 86400) % 7
    return np.where((dow < 5) & (hod >= 9) & (hod < 18), gpus, 0.0)


def test_batch_hours_move_out_of_office_hours() -> None:
    steps = 14 * 96  # two weeks at 15 min
    demand = {"interactive": office(steps, 900, 60.0), "train": office(steps, 900, 20.0)}
    plan = off_peak_plan(demand, MONDAY, 900, batch_queues=["train"])
    assert plan.heat.shape == (7, 24)
    assert plan.heat[0, 10] == 80.0 and plan.heat[5, 10] == 0.0 and plan.heat[0, 3] == 0.0
    assert plan.peak_gpus == 80.0
    assert plan.level_gpus == pytest.approx(60.0)  # interactive work cannot move
    assert plan.peak_freed_gpus == pytest.approx(20.0)
    assert plan.movable_gpu_hours == pytest.approx(5 * 9 * 20.0)  # per week
    assert len(plan.busy_hours) == 45 and (0, 9) in plan.busy_hours
    assert (5, 12) in plan.quiet_hours and plan.weeks == pytest.approx(2.0)


def test_without_batch_queues_everything_may_move() -> None:
    steps = 7 * 24
    demand = {"a": office(steps, 3600, 10.0), "b": np.full(steps, 2.0)}
    plan = off_peak_plan(demand, MONDAY, 3600)
    assert plan.batch_queues == ("a", "b")
    # 450 GPU-h of office work a week + 2 GPUs always: flat at 2 + 450 / 168
    assert plan.level_gpus == pytest.approx(2 + 450 / 168, rel=1e-6)


def test_level_bisection_balances_need_and_room() -> None:
    d = np.array([10.0, 0.0])
    assert lowest_level(d, d) == pytest.approx(5.0)
    assert lowest_level(d, np.zeros(2)) == 10.0


def test_unknown_batch_queue_is_named() -> None:
    with pytest.raises(ValueError, match="nightly"):
        off_peak_plan({"a": np.ones(10)}, MONDAY, 3600, batch_queues=["nightly"])


def test_hours_without_data_are_no_room() -> None:
    """Two hours of data (8 then 6 GPUs, all batch): the work can only move within those two
    hours, to a level of 7 GPUs, not into the 166 hours nobody saw."""
    start = 1_764_374_400  # a Saturday 00:00 UTC
    plan = off_peak_plan({"train": np.array([8.0, 6.0])}, start, 3600)
    assert plan.level_gpus == pytest.approx(7.0, abs=1e-6)
    assert plan.peak_freed_gpus == pytest.approx(1.0, abs=1e-6)
    assert plan.movable_gpu_hours == pytest.approx(1.0, abs=1e-6)
    assert plan.quiet_hours == ((5, 1),)
