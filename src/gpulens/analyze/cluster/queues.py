"""Allocation per queue and pooled, and pending-while-idle (Helios's consolidation signal).

**Allocation** is in-use GPU-time ÷ total GPU-time (a job holds the GPU; not duty cycle, not
useful work). **Pending-while-idle**: in a step, GPUs sit idle in one queue while jobs of
another queue wait. The GPU-time that could have moved is the largest flow from pending
demand p_a to idle GPUs i_b of the *other* queues (b ≠ a), which is
min(P, I, min_a(P + I − p_a − i_a)) with P = Σp, I = Σi (the min-cut of that bipartite graph).
A step counts when that flow is above 0. Steps where a queue has no data leave that queue out.

**Pending demand can be unknown**: Kueue counts pending *workloads*, not GPUs, and the GPU
series alone carry no queue. Unknown is NaN and stays NaN, never 0: a queue whose pending
demand is never known has unknown pending GPU-hours and pending-while-idle figures, and a
step where no queue's pending demand is known has unknown movable GPUs, so the cluster's
pending-while-idle share is unknown when no step knows it. A step where some queues' pending
is known and others' is not counts the known ones (a lower bound).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from gpulens.analyze.cluster.grid import Grid


@dataclass(frozen=True, slots=True)
class QueueSummary:
    """One queue over the window. `gpus` is its largest total in any step; `allocation` is
    in-use ÷ total GPU-time; `allocation_quartiles` are of the per-step ratio. NaN: unknown."""

    name: str
    gpus: float
    allocation: float
    allocation_quartiles: tuple[float, float, float]
    gpu_hours: float
    in_use_gpu_hours: float
    idle_gpu_hours: float
    pending_gpu_hours: float
    pending_steps_share: float  # steps with pending demand ÷ steps with data
    steps: int  # steps with data
    pending_while_idle_share: float = float("nan")  # steps its pending could have moved
    waited_while_idle_gpu_hours: float = float("nan")  # its pending others' idle could take
    idle_while_others_waited_gpu_hours: float = float("nan")  # its idle others' pending took

    @property
    def pending_known(self) -> bool:
        """Whether the sources ever gave this queue's pending demand (in GPUs)."""
        return not np.isnan(self.pending_gpu_hours)


@dataclass(frozen=True, slots=True)
class ClusterSummary:
    """The pooled figures and the queues, over `steps` steps of `step_s` seconds from
    `start_s`. `movable` is the per-step pending-while-idle GPUs; `step_*` the per-step sums
    over the queues (NaN where no queue has data)."""

    start_s: int
    step_s: int
    steps: int
    pooled_allocation: float
    gpus: float
    gpu_hours: float
    in_use_gpu_hours: float
    pending_gpu_hours: float
    pending_while_idle_share: float
    pending_while_idle_gpu_hours: float
    queues: tuple[QueueSummary, ...]
    movable: np.ndarray
    peak_start_s: int  # the hour (or step, if longer) with the most movable GPU-time
    peak_gpu_hours: float
    step_total: np.ndarray  # per step, GPUs of the queues with data (NaN: none)
    step_in_use: np.ndarray
    step_pending: np.ndarray

    @property
    def end_s(self) -> int:
        return self.start_s + self.steps * self.step_s

    @property
    def pending_known(self) -> bool:
        """Whether any source gave pending demand in GPUs (Kueue's pending workloads and the
        GPU series alone do not): without it pending-while-idle is unknown, not 0."""
        return not np.isnan(self.pending_gpu_hours)


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else float("nan")


def idle_and_pending(grid: Grid) -> tuple[np.ndarray, np.ndarray]:
    """Idle (total − in use, floored at 0) and pending GPUs per queue and step, 0 where
    unknown (callers mask the steps where nothing is known: `movable_gpus`)."""
    known = ~np.isnan(grid.total) & ~np.isnan(grid.in_use)
    idle = np.where(known, np.maximum(grid.total - grid.in_use, 0.0), 0.0)
    pending = np.where(np.isnan(grid.pending), 0.0, np.maximum(grid.pending, 0.0))
    return idle, pending


def movable_gpus(grid: Grid) -> np.ndarray:
    """Per step: the GPUs idle in some queue that pending jobs of another queue could take
    (NaN where no queue's idle GPUs are known: no total, or no in-use count; and NaN where
    no queue's pending demand is known)."""
    idle, pending = idle_and_pending(grid)
    p_sum, i_sum = pending.sum(axis=0), idle.sum(axis=0)
    own = (p_sum + i_sum)[None, :] - pending - idle
    flow = np.minimum(np.minimum(p_sum, i_sum), own.min(axis=0))
    idle_known = (~np.isnan(grid.total) & ~np.isnan(grid.in_use)).any(axis=0)
    pending_known = (~np.isnan(grid.pending)).any(axis=0)
    return np.where(idle_known & pending_known, np.maximum(flow, 0.0), np.nan)


def _crossing(
    grid: Grid, movable: np.ndarray, hours: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per queue, over the steps with movable GPUs: its pending that others' idle could take,
    min(p_a, I − i_a), and its idle that others' pending could take, min(i_b, P − p_b); and
    the number of steps where the first is above 0. NaN where unknown: the first for a queue
    whose pending demand is never known, the second when no step's movable GPUs are."""
    idle, pending = idle_and_pending(grid)
    on = np.nan_to_num(movable) > 0
    p_sum, i_sum = pending.sum(axis=0), idle.sum(axis=0)
    waiting = np.minimum(pending, i_sum[None, :] - idle)[:, on]
    lent = np.minimum(idle, p_sum[None, :] - pending)[:, on].sum(axis=1) * hours
    waited = waiting.sum(axis=1) * hours
    waited = np.where((~np.isnan(grid.pending)).any(axis=1), waited, np.nan)
    lent = lent if (~np.isnan(movable)).any() else np.full(lent.shape, np.nan)
    return waited, lent, (waiting > 0).sum(axis=1)


def _queue(grid: Grid, q: int, hours: float) -> QueueSummary:
    total, in_use, pending = grid.total[q], grid.in_use[q], grid.pending[q]
    both = ~np.isnan(total) & ~np.isnan(in_use)
    gpu_h = float(total[both].sum()) * hours
    use_h = float(in_use[both].sum()) * hours
    positive = both & (total > 0)
    ratios = in_use[positive] / total[positive]
    quartiles = (
        tuple(float(x) for x in np.percentile(ratios, [25, 50, 75]))
        if ratios.size
        else (float("nan"),) * 3
    )
    with_data = ~np.isnan(total) | ~np.isnan(in_use) | ~np.isnan(pending)
    steps = int(with_data.sum())
    seen_pending = ~np.isnan(pending)
    return QueueSummary(
        name=grid.queues[q],
        gpus=float(np.nanmax(total)) if (~np.isnan(total)).any() else float("nan"),
        allocation=_ratio(use_h, gpu_h),
        allocation_quartiles=quartiles,  # type: ignore[arg-type]
        gpu_hours=gpu_h,
        in_use_gpu_hours=use_h,
        idle_gpu_hours=float(np.maximum(total[both] - in_use[both], 0.0).sum()) * hours,
        pending_gpu_hours=(
            float(pending[seen_pending].sum()) * hours if seen_pending.any() else float("nan")
        ),
        pending_steps_share=(
            _ratio(float((pending[seen_pending] > 0).sum()), float(steps))
            if seen_pending.any()
            else float("nan")
        ),
        steps=steps,
    )


def _with_crossing(q: QueueSummary, waited: float, lent: float, steps: int) -> QueueSummary:
    return replace(
        q,
        pending_while_idle_share=(
            _ratio(float(steps), float(q.steps)) if q.pending_known else float("nan")
        ),
        waited_while_idle_gpu_hours=float(waited),
        idle_while_others_waited_gpu_hours=float(lent),
    )


def summarise(grid: Grid) -> ClusterSummary:
    """The pooled and per-queue figures of a cluster sequence."""
    hours = grid.step_s / 3600.0
    movable = movable_gpus(grid)
    waited, lent, waited_steps = _crossing(grid, movable, hours)
    queues = tuple(
        _with_crossing(_queue(grid, q, hours), waited[q], lent[q], waited_steps[q])
        for q in range(len(grid.queues))
    )
    gpu_h = sum(q.gpu_hours for q in queues)
    use_h = sum(q.in_use_gpu_hours for q in queues)
    seen = ~np.isnan(movable)
    per_step_total = np.where(np.isnan(grid.total), 0.0, grid.total).sum(axis=0)
    peak_index, peak_hours = busiest_window(movable, grid.step_s)
    return ClusterSummary(
        start_s=grid.start_s,
        step_s=grid.step_s,
        steps=grid.steps,
        pooled_allocation=_ratio(use_h, gpu_h),
        gpus=float(per_step_total.max()) if per_step_total.size else float("nan"),
        gpu_hours=gpu_h,
        in_use_gpu_hours=use_h,
        pending_gpu_hours=(
            sum(q.pending_gpu_hours for q in queues if q.pending_known)
            if any(q.pending_known for q in queues)
            else float("nan")
        ),
        pending_while_idle_share=_ratio(float((movable[seen] > 0).sum()), float(seen.sum())),
        pending_while_idle_gpu_hours=(
            float(movable[seen].sum()) * hours if seen.any() else float("nan")
        ),
        queues=queues,
        movable=movable,
        peak_start_s=grid.start_s + peak_index * grid.step_s,
        peak_gpu_hours=peak_hours,
        step_total=_sum_known(grid.total),
        step_in_use=_sum_known(grid.in_use),
        step_pending=_sum_known(grid.pending),
    )


def busiest_window(movable: np.ndarray, step_s: int, window_s: int = 3600) -> tuple[int, float]:
    """(first step, GPU-hours) of the `window_s` span (at least one step) with the most
    movable GPU-time ((0, NaN) when no step's movable GPUs are known)."""
    if not (~np.isnan(movable)).any():
        return 0, float("nan")
    per_step = np.nan_to_num(movable) * step_s / 3600.0
    width = max(1, min(per_step.size, window_s // step_s))
    sums = np.convolve(per_step, np.ones(width), mode="valid")
    first = int(np.argmax(sums))
    return first, float(sums[first])


def _sum_known(matrix: np.ndarray) -> np.ndarray:
    known = ~np.isnan(matrix)
    return np.where(known.any(axis=0), np.where(known, matrix, 0.0).sum(axis=0), np.nan)
