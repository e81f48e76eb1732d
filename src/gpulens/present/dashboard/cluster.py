"""The Cluster page: nodes × time, queues and teams, the idle-allocated inventory,
pending-while-idle, and the fleet plans (consolidation, off-peak, capacity forecast), with
the state of its source (when it was read, and why the last read failed, if it did).

Built from `app.cluster_feed.FeedState` (the data comes from a site's Prometheus or the
agent's store through `app.cluster_view`); this module only reshapes it into plain values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from gpulens.analyze.cluster.offpeak import WEEKDAYS
from gpulens.present.dashboard.common import clean, num, nums

if TYPE_CHECKING:  # the fleet analysis is imported when a cluster is read, not with the page
    from gpulens.app.cluster_feed import FeedState
    from gpulens.app.cluster_view import ClusterData

NS = 1_000_000_000
#: per-queue figures of the usage rollup shown beside the allocation
USAGE_KEYS: tuple[str, ...] = (
    "gpu_hours",
    "allocated_gpu_hours",
    "useful_gpu_hours",
    "wasted_gpu_hours",
    "mean_duty",
    "mean_sm_active",
    "mean_tensor_active",
    "wasted_cost",
)
TEAM_KEYS: tuple[str, ...] = ("team", "gpus", "allocation", *USAGE_KEYS)
MAX_IDLE_ROWS = 200


@dataclass
class SourceStatus:
    """Where the data comes from and how fresh it is (epoch ns; None: not yet)."""

    source: str
    prometheus: bool
    error: str | None = None
    failed_ns: int | None = None
    refreshed_ns: int | None = None
    next_ns: int | None = None
    every_s: float | None = None
    reading: bool = False


@dataclass
class ClusterHeat:
    """Per node (`nodes`, labelled with their queue and GPUs) and step: useful work and duty
    cycle (0..1, None: no data); `metric` is the one shown by default (useful work when any
    GPU reports it, else duty cycle)."""

    nodes: list[str] = field(default_factory=list)
    queues: list[str] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)
    times_ns: list[int] = field(default_factory=list)
    useful: list[list[float | None]] = field(default_factory=list)
    duty: list[list[float | None]] = field(default_factory=list)
    metric: str = "useful"
    nodes_total: int = 0


@dataclass
class ClusterSeries:
    """Per step, summed over the queues (GPUs): reporting, in use (held), pending, and the
    GPUs idle in one queue that another queue's pending jobs could have used."""

    times_ns: list[int] = field(default_factory=list)
    total: list[float | None] = field(default_factory=list)
    in_use: list[float | None] = field(default_factory=list)
    pending: list[float | None] = field(default_factory=list)
    pending_while_idle: list[float | None] = field(default_factory=list)


@dataclass
class OffPeakView:
    """The off-peak plan: mean demand (GPUs) per weekday (rows, Monday first) and UTC hour,
    the peak, the level after moving batch work, and the GPU-hours per week that move."""

    weekdays: list[str] = field(default_factory=list)
    demand_gpus: list[list[float | None]] = field(default_factory=list)
    batch_queues: list[str] = field(default_factory=list)
    peak_gpus: float | None = None
    level_gpus: float | None = None
    peak_freed_gpus: float | None = None
    movable_gpu_hours_per_week: float | None = None
    quiet_hours: list[str] = field(default_factory=list)
    weeks: float | None = None


@dataclass
class ForecastView:
    """The capacity forecast of pooled demand (GPUs, hourly) and its measured errors."""

    model: str
    baseline: str
    test_mase: float | None
    baseline_mase: float | None
    level: float
    times_ns: list[int] = field(default_factory=list)
    mean: list[float | None] = field(default_factory=list)
    lo: list[float | None] = field(default_factory=list)
    hi: list[float | None] = field(default_factory=list)


@dataclass
class ClusterPage:
    """Everything the Cluster page shows."""

    status: SourceStatus
    currency: str = "USD"
    start_ns: int | None = None
    end_ns: int | None = None
    step_s: int | None = None
    totals: dict[str, Any] = field(default_factory=dict)
    heat: ClusterHeat = field(default_factory=ClusterHeat)
    series: ClusterSeries = field(default_factory=ClusterSeries)
    queues: list[dict[str, Any]] = field(default_factory=list)
    teams: list[dict[str, Any]] = field(default_factory=list)
    idle: list[dict[str, Any]] = field(default_factory=list)
    idle_total: int = 0
    findings: list[dict[str, Any]] = field(default_factory=list)
    consolidation: dict[str, Any] | None = None
    offpeak: OffPeakView | None = None
    forecast: ForecastView | None = None
    notes: list[str] = field(default_factory=list)


def _matrix(m: np.ndarray) -> list[list[float | None]]:
    return [nums(row) for row in np.asarray(m, dtype=np.float64)]


def _heat(d: ClusterData) -> ClusterHeat:
    h = d.heat
    steps = h.useful.shape[1] if h.useful.ndim == 2 else 0
    useful_known = bool(h.useful.size) and not np.isnan(h.useful).all()
    return ClusterHeat(
        nodes=list(h.nodes),
        queues=list(h.queues),
        gpus=list(h.gpus),
        times_ns=[h.start_ns + i * h.step_s * NS for i in range(steps)],
        useful=_matrix(h.useful),
        duty=_matrix(h.duty),
        metric="useful" if useful_known else "duty",
        nodes_total=h.nodes_total,
    )


def _series(d: ClusterData) -> ClusterSeries:
    s = d.view.summary if d.view is not None else None
    if s is None:
        return ClusterSeries()
    movable = np.where(np.isnan(s.step_pending), np.nan, s.movable)
    return ClusterSeries(
        times_ns=[(s.start_s + i * s.step_s) * NS for i in range(s.steps)],
        total=nums(s.step_total),
        in_use=nums(s.step_in_use),
        pending=nums(s.step_pending),
        pending_while_idle=nums(movable),
    )


def _queues(d: ClusterData) -> list[dict[str, Any]]:
    """The summary's queues (allocation, pending-while-idle) beside their usage rollup."""
    view = d.view
    if view is None or view.summary is None:
        return []
    used = {str(r["queue"]): r for r in (view.usage.by_queue if view.usage else [])}
    out = []
    for q in view.summary.queues:
        row: dict[str, Any] = {
            "queue": q.name,
            "gpus": q.gpus,
            "allocation": q.allocation,
            "allocation_q1": q.allocation_quartiles[0],
            "allocation_median": q.allocation_quartiles[1],
            "allocation_q3": q.allocation_quartiles[2],
            "in_use_gpu_hours": q.in_use_gpu_hours,
            "idle_gpu_hours": q.idle_gpu_hours,
            "pending_gpu_hours": q.pending_gpu_hours,
            "pending_while_idle_share": q.pending_while_idle_share,
            "waited_while_idle_gpu_hours": q.waited_while_idle_gpu_hours,
            "idle_while_others_waited_gpu_hours": q.idle_while_others_waited_gpu_hours,
        }
        u = used.get(q.name, {})
        row.update({k: u.get(k) for k in USAGE_KEYS})
        out.append(clean(row))
    return out


def _idle(d: ClusterData) -> tuple[list[dict[str, Any]], int]:
    """The idle-allocated inventory: owner, where, since when, how long, what it cost."""
    u = d.view.usage if d.view is not None else None
    if u is None:
        return [], 0
    rows = []
    for f in u.idle_allocated:
        s = f.subject
        owner = ", ".join(f"{k}={s[k]}" for k in ("user", "job_id", "team", "pod") if s.get(k))
        rows.append(
            clean(
                {
                    "severity": f.severity.value,
                    "owner": owner or "unattributed",
                    "queue": s.get("queue"),
                    "where": "/".join(str(s[k]) for k in ("host", "gpu_index") if s.get(k)),
                    "start_ns": f.window[0],
                    "duration_s": (f.window[1] - f.window[0]) / NS,
                    "wasted_gpu_hours": f.impact.wasted_gpu_hours,
                    "cost": f.impact.cost,
                    "summary": f.summary,
                }
            )
        )
    rows.sort(key=lambda r: -(r["wasted_gpu_hours"] or 0.0))
    return rows[:MAX_IDLE_ROWS], len(rows)


def _totals(d: ClusterData) -> dict[str, Any]:
    view = d.view
    if view is None or view.summary is None:
        return {}
    s, used = view.summary, view.usage
    idle_h = used.idle_allocated_gpu_hours if used else None
    idle_cost = used.idle_allocated_cost if used else None
    useful = used.useful_gpu_hours if used else None
    return clean(
        {
            "nodes": d.heat.nodes_total,
            "gpus": s.gpus,
            "pooled_allocation": s.pooled_allocation,
            "gpu_hours": s.gpu_hours,
            "in_use_gpu_hours": s.in_use_gpu_hours,
            "useful_gpu_hours": useful,
            "useful_share": num(useful / s.in_use_gpu_hours)
            if useful is not None and s.in_use_gpu_hours > 0
            else None,
            "pending_gpu_hours": s.pending_gpu_hours,
            "pending_while_idle_share": s.pending_while_idle_share,
            "pending_while_idle_gpu_hours": s.pending_while_idle_gpu_hours
            if not math.isnan(s.pending_while_idle_share)
            else None,
            "peak_start_ns": s.peak_start_s * NS if s.peak_gpu_hours > 0 else None,
            "peak_gpu_hours": s.peak_gpu_hours if s.peak_gpu_hours > 0 else None,
            "idle_allocated_gpu_hours": idle_h,
            "idle_allocated_cost": idle_cost,
        }
    )


def _plans(d: ClusterData, page: ClusterPage) -> None:
    p = d.plans
    if p is None:
        return
    if p.consolidation is not None:
        c = p.consolidation
        page.consolidation = {
            "gpus_freed": c.gpus_freed,
            "jobs_considered": c.jobs_considered,
            "jobs_unknown": c.jobs_unknown,
            "moves": [
                clean(
                    {
                        "kind": m.kind,
                        "jobs": ", ".join(m.jobs[:6]) + (" …" if len(m.jobs) > 6 else ""),
                        "target": m.target,
                        "gpus_freed": m.gpus_freed,
                        "memory_headroom": m.memory_headroom,
                        "interference": m.interference,
                        "risk": m.risk,
                    }
                )
                for m in c.moves[:100]
            ],
        }
    if p.offpeak is not None:
        o = p.offpeak
        page.offpeak = OffPeakView(
            weekdays=list(WEEKDAYS),
            demand_gpus=_matrix(o.heat),
            batch_queues=list(o.batch_queues),
            peak_gpus=num(o.peak_gpus),
            level_gpus=num(o.level_gpus),
            peak_freed_gpus=num(o.peak_freed_gpus),
            movable_gpu_hours_per_week=num(o.movable_gpu_hours),
            quiet_hours=[f"{WEEKDAYS[w]} {h:02d}:00" for w, h in o.quiet_hours[:12]],
            weeks=num(o.weeks),
        )
    if p.forecast is not None:
        f = p.forecast.pooled
        page.forecast = ForecastView(
            model=f.model,
            baseline=f.baseline,
            test_mase=num(f.test_mase),
            baseline_mase=num(f.baseline_mase),
            level=f.level,
            times_ns=[(f.start_s + i * f.step_s) * NS for i in range(f.mean.size)],
            mean=nums(f.mean),
            lo=nums(f.lo),
            hi=nums(f.hi),
        )


def cluster_page(state: FeedState, prometheus: bool) -> ClusterPage:
    """The Cluster page of what the feed holds now."""
    page = ClusterPage(
        SourceStatus(
            source=state.source,
            prometheus=prometheus,
            error=state.error,
            failed_ns=state.failed_ns,
            refreshed_ns=state.refreshed_ns,
            next_ns=state.next_ns,
            every_s=state.every_s,
            reading=state.reading,
        )
    )
    d = state.data
    if d is None:
        if state.error is None:
            page.notes.append(f"the first read of {state.source} is in progress")
        return page
    page.currency = d.currency
    page.start_ns, page.end_ns, page.step_s = d.start_ns, d.end_ns, d.step_s
    page.heat = _heat(d)
    page.series = _series(d)
    page.queues = _queues(d)
    page.totals = _totals(d)
    if d.view is not None and d.view.usage is not None:
        page.teams = [clean({k: r.get(k) for k in TEAM_KEYS}) for r in d.view.usage.by_team]
    page.idle, page.idle_total = _idle(d)
    if d.view is not None:
        page.findings = [
            {"rule_id": f.rule_id, "severity": f.severity.value, "summary": f.summary}
            for f in d.view.findings
        ]
    _plans(d, page)
    page.notes.extend([d.source, *d.notes] if prometheus else list(d.notes))
    return page
