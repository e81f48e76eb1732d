"""Off-peak plan: when demand is high, and how much batch work could run in the quiet hours.

The heat map is the mean pooled demand (GPUs in use + pending) per weekday × hour of day (UTC),
over the steps with data. The plan works on that typical week: batch demand (the queues named
batch) in hour h is b_h of a total d_h. Moving batch work out of the busiest hours lowers the
peak to a level L when the batch GPU-hours above L, Σ min(b_h, max(d_h − L, 0)), fit in the room
below L, Σ max(L − d_h, 0); L can go no lower than the work that cannot move, max(d_h − b_h).
The plan takes the lowest such L (a bisection): `peak_freed` = max(d) − L GPUs, and
`movable_gpu_hours` the batch GPU-hours a week that move. The hours below L are where they go.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np

HOUR_S = 3600
WEEK_H = 168
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


@dataclass(frozen=True, slots=True)
class OffPeakPlan:
    """`heat` [7, 24]: mean pooled demand in GPUs (Monday first, UTC; NaN: no data);
    `batch_heat` the batch queues' part. Per typical week: `peak_gpus` (the highest hour),
    `level_gpus` the peak after the move, `peak_freed_gpus`, `movable_gpu_hours`; the
    hours (weekday, hour) the work moves from and to; `batch_queues` as used."""

    heat: np.ndarray
    batch_heat: np.ndarray
    peak_gpus: float
    level_gpus: float
    peak_freed_gpus: float
    movable_gpu_hours: float
    busy_hours: tuple[tuple[int, int], ...]
    quiet_hours: tuple[tuple[int, int], ...]
    batch_queues: tuple[str, ...]
    weeks: float


def _week_profile(values: np.ndarray, start_s: int, step_s: int) -> np.ndarray:
    """Mean per hour of the week (Monday 00:00 UTC first), NaN where no step has data."""
    ts = start_s + np.arange(values.size, dtype=np.int64) * step_s
    # 1970-01-01 was a Thursday: shift so that Monday is 0
    how = ((ts // HOUR_S) + 72) % WEEK_H
    seen = ~np.isnan(values)
    sums = np.bincount(how[seen], weights=values[seen], minlength=WEEK_H)
    counts = np.bincount(how[seen], minlength=WEEK_H)
    out = np.full(WEEK_H, np.nan)
    np.divide(sums, counts, out=out, where=counts > 0)
    return out


def _need(level: float, d: np.ndarray, b: np.ndarray) -> float:
    return float(np.minimum(b, np.maximum(d - level, 0.0)).sum())


def _room(level: float, d: np.ndarray) -> float:
    return float(np.maximum(level - d, 0.0).sum())


def lowest_level(demand: np.ndarray, batch: np.ndarray, iterations: int = 60) -> float:
    """The lowest peak L reachable by moving batch demand into the hours below L. Hours
    without data are no room to move into (unknown, not empty)."""
    known = ~np.isnan(np.asarray(demand, dtype=np.float64))
    if not known.any():
        return float("nan")
    d = np.asarray(demand, dtype=np.float64)[known]
    b = np.minimum(np.nan_to_num(np.asarray(batch, dtype=np.float64)[known]), d)
    lo, hi = float(np.max(d - b)), float(np.max(d))
    if _need(lo, d, b) <= _room(lo, d):
        return lo
    for _ in range(iterations):
        mid = (lo + hi) / 2
        if _need(mid, d, b) <= _room(mid, d):
            hi = mid
        else:
            lo = mid
    return hi


def off_peak_plan(
    demand: Mapping[str, np.ndarray],
    start_s: int,
    step_s: int,
    batch_queues: Collection[str] | None = None,
) -> OffPeakPlan:
    """The heat map and the plan from per-step demand per queue (NaN: no data). Without
    `batch_queues` every queue counts as batch: the plan is then an upper bound."""
    if not demand:
        raise ValueError("no queue has demand data for the off-peak plan")
    unknown = sorted(set(batch_queues or ()) - set(demand))
    if unknown:
        raise ValueError(
            f"batch queue(s) {', '.join(unknown)} not in the sources (queues: "
            f"{', '.join(sorted(demand)[:12])})"
        )
    batch = tuple(sorted(batch_queues)) if batch_queues else tuple(sorted(demand))
    stacked = np.vstack([np.asarray(v, dtype=np.float64) for v in demand.values()])
    known = ~np.isnan(stacked)
    pooled = np.where(known.any(axis=0), np.where(known, stacked, 0.0).sum(axis=0), np.nan)
    rows = [np.asarray(demand[q], dtype=np.float64) for q in batch]
    bstack = np.vstack(rows)
    b_known = ~np.isnan(bstack)
    batch_sum = np.where(b_known, bstack, 0.0).sum(axis=0)
    batch_sum = np.where(np.isnan(pooled), np.nan, batch_sum)
    d = _week_profile(pooled, start_s, step_s)
    b = _week_profile(batch_sum, start_s, step_s)
    level = lowest_level(d, b)
    dd, bb = np.nan_to_num(d), np.nan_to_num(b)
    moved = np.minimum(bb, np.maximum(dd - level, 0.0))
    busy = tuple((int(h) // 24, int(h) % 24) for h in np.flatnonzero(moved > 1e-9))
    quiet = tuple(
        (int(h) // 24, int(h) % 24) for h in np.flatnonzero((level - dd > 1e-9) & ~np.isnan(d))
    )
    peak = float(np.nanmax(d)) if (~np.isnan(d)).any() else float("nan")
    return OffPeakPlan(
        heat=d.reshape(7, 24),
        batch_heat=b.reshape(7, 24),
        peak_gpus=peak,
        level_gpus=level,
        peak_freed_gpus=peak - level,
        movable_gpu_hours=float(moved.sum()),
        busy_hours=busy,
        quiet_hours=quiet,
        batch_queues=batch,
        weeks=float(pooled.size * step_s / (WEEK_H * HOUR_S)),
    )
