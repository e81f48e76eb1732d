"""Quotas and fair share per queue (team): usage against quota, starvation, monopoly, and
fairness by allocation and by useful work.

One meaning per word (docs/plans.md):

Without pending demand in the sources (GPU series alone), starvation and monopoly are unknown
(NaN), never 0.

- **starvation**: a queue has jobs pending while it holds fewer GPUs than its quota — the
  scheduler owes it GPUs and does not give them. Starved GPU-hours = Σ min(pending,
  quota − in use) over those steps.
- **monopoly**: a queue holds more GPUs than its quota while another queue is starved — its
  borrowing keeps the owner out. Monopoly GPU-hours = Σ min(in use − quota, GPUs the starved
  queues are owed) over those steps.
- **pending while idle** (analyze/cluster/queues.py) is another thing: GPUs idle in one queue
  while another waits, whatever the quotas.
- Fairness by **allocation**: each queue's in-use GPU-hours ÷ its quota (its entitlement);
  fairness by **useful work**: its useful GPU-hours (SM-active time, from the GPU series) ÷ its
  quota. Jain's index and the Gini coefficient of each; with no quota, the raw hours.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from gpulens.analyze.cluster.grid import Grid
from gpulens.analyze.fairness import jain_index
from gpulens.quota_model import QueueQuota, Quotas


@dataclass(frozen=True, slots=True)
class QueueQuotaUse:
    """One queue against its quota over the window (NaN: unknown)."""

    name: str
    quota: QueueQuota
    mean_in_use: float
    peak_in_use: float
    in_use_gpu_hours: float
    quota_gpu_hours: float
    usage_over_quota: float  # in-use GPU-hours ÷ quota GPU-hours
    over_quota_share: float  # steps above quota ÷ steps with data
    starved_gpu_hours: float
    starved_steps: int
    monopoly_gpu_hours: float
    monopoly_steps: int
    useful_gpu_hours: float = float("nan")


@dataclass(frozen=True, slots=True)
class QuotaReport:
    """Per queue with a quota; queues of the sources without one; the fairness indices."""

    queues: tuple[QueueQuotaUse, ...]
    unmatched: tuple[str, ...]
    step_s: int
    start_s: int
    steps: int
    jain_allocation: float | None
    gini_allocation: float | None
    jain_useful: float | None
    gini_useful: float | None

    @property
    def end_s(self) -> int:
        return self.start_s + self.steps * self.step_s


def gini(values: np.ndarray | list[float]) -> float | None:
    """Gini coefficient of non-negative values: 0 all equal, → 1 one holds everything (None:
    no values or all zero). NaN values are ignored."""
    x = np.asarray(values, dtype=np.float64)
    x = np.sort(x[~np.isnan(x)])
    if x.size == 0 or x.sum() <= 0:
        return None
    if (x < 0).any():
        raise ValueError(f"Gini needs values >= 0, got {float(x.min())!r}")
    n = x.size
    ranks = np.arange(1, n + 1)
    return float((2 * np.sum(ranks * x) / (n * x.sum())) - (n + 1) / n)


def _normalised(hours: list[float], quotas: list[float]) -> list[float]:
    if all(q > 0 for q in quotas):
        return [h / q for h, q in zip(hours, quotas, strict=True)]
    return hours


def quota_report(
    grid: Grid, quotas: Quotas, useful_gpu_hours: Mapping[str, float] | None = None
) -> QuotaReport:
    """Usage, starvation and monopoly per queue of `grid` with a quota in `quotas`, and the
    fairness indices. `useful_gpu_hours` (queue → hours) adds fairness by useful work."""
    hours = grid.step_s / 3600.0
    rows = [(i, q, quotas.of(q)) for i, q in enumerate(grid.queues)]
    matched = [(i, q, quota) for i, q, quota in rows if quota is not None]
    unmatched = tuple(q for _, q, quota in rows if quota is None)
    if not matched:
        return QuotaReport((), unmatched, grid.step_s, grid.start_s, grid.steps, *(None,) * 4)
    idx = np.array([i for i, _, _ in matched])
    quota_v = np.array([quota.gpus for _, _, quota in matched])[:, None]
    in_use = grid.in_use[idx]
    pending = grid.pending[idx]
    seen = ~np.isnan(in_use)
    use0 = np.nan_to_num(in_use)
    pend0 = np.nan_to_num(pending)
    owed = np.where(seen & (pend0 > 0), np.minimum(pend0, np.maximum(quota_v - use0, 0.0)), 0.0)
    starved = owed > 0
    excess = np.where(seen, np.maximum(use0 - quota_v, 0.0), 0.0)
    owed_total = owed.sum(axis=0)[None, :]
    owed_others = owed_total - owed
    monopoly = np.minimum(excess, owed_others)
    # no pending data for a queue: its starvation is unknown, not 0; and with none for any
    # queue, whether anyone was kept out (monopoly) is unknown too
    pending_known = (~np.isnan(pending)).any(axis=1)
    useful = useful_gpu_hours or {}
    out = []
    for k, (_, name, quota) in enumerate(matched):
        n_seen = int(seen[k].sum())
        use_h = float(use0[k].sum()) * hours
        quota_h = quota.gpus * n_seen * hours
        out.append(
            QueueQuotaUse(
                name=name,
                quota=quota,
                mean_in_use=float(use0[k][seen[k]].mean()) if n_seen else float("nan"),
                peak_in_use=float(use0[k][seen[k]].max()) if n_seen else float("nan"),
                in_use_gpu_hours=use_h,
                quota_gpu_hours=quota_h,
                usage_over_quota=use_h / quota_h if quota_h > 0 else float("nan"),
                over_quota_share=(
                    float((excess[k] > 0).sum()) / n_seen if n_seen else float("nan")
                ),
                starved_gpu_hours=(
                    float(owed[k].sum()) * hours if pending_known[k] else float("nan")
                ),
                starved_steps=int(starved[k].sum()),
                monopoly_gpu_hours=(
                    float(monopoly[k].sum()) * hours if pending_known.any() else float("nan")
                ),
                monopoly_steps=int((monopoly[k] > 0).sum()),
                useful_gpu_hours=float(useful.get(name, float("nan"))),
            )
        )
    q_list = [u.quota.gpus for u in out]
    alloc = _normalised([u.in_use_gpu_hours for u in out], q_list)
    has_useful = all(not np.isnan(u.useful_gpu_hours) for u in out)
    use = _normalised([u.useful_gpu_hours for u in out], q_list) if has_useful else []
    return QuotaReport(
        queues=tuple(out),
        unmatched=unmatched,
        step_s=grid.step_s,
        start_s=grid.start_s,
        steps=grid.steps,
        jain_allocation=jain_index(alloc),
        gini_allocation=gini(alloc),
        jain_useful=jain_index(use) if use else None,
        gini_useful=gini(use) if use else None,
    )
