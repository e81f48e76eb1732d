"""From the store to a report's view model: frames → states → useful work → waste → findings,
and a verdict per job against its workload's baseline.

`analyse(...)` is the one place the report front ends get their numbers from; renderers in
`present.report` only format what it returns.

Verdicts: each job is judged against the baseline of its workload type (GPU model | engine |
process | project | model size; `analyze.baselines`). The baseline is learned from the period
of the same length (at most `MAX_HISTORY_S`, 7 days) just before the report window, at the
same interval length and over the same scope (a job report drops the job filter and keeps the
job's engine, process and project, so it learns from the workload's other runs as well). A
workload with no readings there is learned from the report window itself when the window
holds at least two of its jobs (each job then compared with all of them, itself included);
otherwise its verdict is unknown, with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.analyze import fairness, fleet, rollups, waste
from gpulens.analyze.baselines import BaselineSettings, run_verdicts
from gpulens.analyze.carbon import DEFAULT_REGION
from gpulens.analyze.efficiency import Thresholds, classify, useful_work
from gpulens.analyze.inference import Objective
from gpulens.analyze.memory import (
    JOB_PEAK_COLUMNS,
    MemorySettings,
    job_memory_peaks,
    memory_peaks,
)
from gpulens.analyze.mfu import job_mfu
from gpulens.analyze.prices import Prices
from gpulens.app import profiles, session
from gpulens.app.gpus import coverage_notes, gpu_counts, gpu_rows, time_notes
from gpulens.app.inference import section as serving_section
from gpulens.app.training import section as training_section
from gpulens.config import Config
from gpulens.findings.context import FindingThresholds
from gpulens.findings.engine import build_context, run_rules
from gpulens.findings.model import Finding
from gpulens.store import Store
from gpulens.store.events import events
from gpulens.store.frames import gpu_intervals

NS = 1_000_000_000
MAX_HISTORY_S = 7 * 86400  # the longest history a report learns its baselines from
SCOPE_KEYS: tuple[str, ...] = ("job_id", "user", "host", "engine", "project")
#: `report --by` choices → the frame column grouped by (`queue`: from node → queue)
BY_COLUMNS: Mapping[str, str] = {
    "node": "host",
    "namespace": "namespace",
    "team": "team",
    "queue": "queue",
    "partition": "queue",
    "job": "job_id",
    "user": "user",
    "project": "project",
}
GROUP_COLUMNS: tuple[str, ...] = (
    "gpus",
    "gpu_hours",
    "allocated_gpu_hours",
    "useful_gpu_hours",
    "wasted_gpu_hours",
    "mean_duty",
    "mean_sm_active",
    "mean_tensor_active",
    "wasted_cost",
)


def auto_step(span_s: float) -> float:
    """Interval length for a report span: fine for short spans, coarse enough for long ones."""
    if span_s <= 6 * 3600:
        return 60.0
    if span_s <= 2 * 86400:
        return 300.0
    if span_s <= 10 * 86400:
        return 900.0
    return 3600.0


@dataclass
class ReportView:
    """Everything a report shows; renderers format it and compute nothing."""

    title: str
    scope: dict[str, str]
    start_ns: int | None
    end_ns: int | None
    step_s: float
    totals: dict[str, Any] = field(default_factory=dict)
    waste_by_cause: list[dict[str, Any]] = field(default_factory=list)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    top_users: list[dict[str, Any]] = field(default_factory=list)
    top_jobs: list[dict[str, Any]] = field(default_factory=list)
    engines: list[dict[str, Any]] = field(default_factory=list)
    fairness: dict[str, Any] = field(default_factory=dict)
    states: list[dict[str, Any]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    gap: str = ""  # duty cycle versus SM versus tensor activity, in one line
    mfu: list[dict[str, Any]] = field(default_factory=list)  # per job, where measurable
    idle_holding_share: float | None = None  # intervals at zero duty while holding memory
    # per job (and workload): verdict against the workload baseline, its evidence, memory peak
    jobs: list[dict[str, Any]] = field(default_factory=list)
    baseline: dict[str, Any] = field(default_factory=dict)  # where the baselines came from
    # per job with app readings: the framework's timing (data wait, step time, MFU...)
    training: list[dict[str, Any]] = field(default_factory=list)
    # per (job, model, engine) served through gpulens.torch.inference: latency and QPS; the
    # engine choice by load per model; the engine fallbacks (app/inference.py)
    latency: list[dict[str, Any]] = field(default_factory=list)
    engine_choice: list[dict[str, Any]] = field(default_factory=list)
    fallbacks: list[dict[str, Any]] = field(default_factory=list)
    # profiles captured on demand linked to the findings that asked (app/profiles.py)
    profiles: list[dict[str, Any]] = field(default_factory=list)
    # `report --by KEY`: {"by": KEY, "rows": one per group, largest GPU-hours first}
    groups: dict[str, Any] = field(default_factory=dict)

    @property
    def is_job_report(self) -> bool:
        return "job_id" in self.scope


def _rows(table: pa.Table, limit: int | None = None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows if limit is None else rows[:limit]


def _top(table: pa.Table, key: str, limit: int) -> list[dict[str, Any]]:
    if table.num_rows == 0 or key not in table.column_names:
        return []
    ordered = table.sort_by([("wasted_gpu_hours", "descending")])
    return [r for r in _rows(ordered) if r.get(key) is not None][:limit]


def _floats(table: pa.Table, name: str) -> np.ndarray:
    """A column as float64 with nulls as NaN (missing, not 0)."""
    if name not in table.column_names:
        return np.zeros(0)
    return np.asarray(table[name].to_numpy(zero_copy_only=False), dtype=np.float64)


def _state_shares(frame: pa.Table) -> list[dict[str, Any]]:
    """Allocated GPU-hours per state, largest first."""
    if frame.num_rows == 0:
        return []
    grouped = frame.group_by("state").aggregate([("gpu_s", "sum"), ("allocated_s", "sum")])
    total = float(pc.sum(grouped["gpu_s_sum"]).as_py() or 0.0)
    out = []
    for r in grouped.to_pylist():
        hours = (r["gpu_s_sum"] or 0.0) / 3600
        out.append(
            {
                "state": r["state"],
                "gpu_hours": hours,
                "share": (r["gpu_s_sum"] or 0.0) / total if total else None,
            }
        )
    return sorted(out, key=lambda r: -r["gpu_hours"])


def analyse(
    store: Store,
    start_ns: int | None = None,
    end_ns: int | None = None,
    scope: Mapping[str, str] | None = None,
    step_s: float | None = None,
    prices: Prices | None = None,
    region: str | float = DEFAULT_REGION,
    quotas: Mapping[str, float] | None = None,
    states: Thresholds | None = None,
    finding_thresholds: FindingThresholds | None = None,
    memory: MemorySettings | None = None,
    baselines: BaselineSettings | None = None,
    max_gap_s: float | None = None,
    by: str | None = None,
    node_queues: Mapping[str, str] | None = None,
    objective: Objective | None = None,
    findings_only: bool = False,
) -> ReportView:
    """Build the report of the store over [start_ns, end_ns) for the given label scope.
    `max_gap_s`: the coverage rule's cap (None: twice each GPU's sampling interval). `by`: a
    key of `BY_COLUMNS` to break the report down by (queues from `node_queues`). `objective`:
    the serving latency objective of the engine choice by load (default p95 <= 100 ms).
    `findings_only`: stop once the findings are known (the agent's findings pass: the rest of
    the view, the previous period's frame for the job verdicts above all, is not built)."""
    filters = {k: v for k, v in (scope or {}).items() if v}
    if step_s is None:
        first, last = (None, None) if None not in (start_ns, end_ns) else store.time_bounds()
        lo = start_ns if start_ns is not None else first
        hi = end_ns if end_ns is not None else last
        span = ((hi or 0) - (lo or 0)) / NS if lo is not None and hi is not None else 0.0
        step_s = auto_step(span)
    frame = gpu_intervals(
        store, step_s=step_s, start_ns=start_ns, end_ns=end_ns, where=filters, max_gap_s=max_gap_s
    )
    title = f"Job {filters['job_id']}" if "job_id" in filters else "Fleet report"
    view = ReportView(title, filters, start_ns, end_ns, step_s)
    view.training, app_only = training_section(
        store, start_ns, end_ns, filters, step_s, frame, states, finding_thresholds
    )
    serving = serving_section(store, start_ns, end_ns, filters, frame, objective)
    view.latency, view.engine_choice = serving.latency, serving.engine_choice
    view.fallbacks = serving.fallbacks
    app_only = [*app_only, *serving.findings]
    if frame.num_rows == 0:
        view.findings = app_only
        view.notes.append(
            "no GPU readings in this window and scope"
            + (": the training figures are the framework's own timing" if view.training else "")
        )
        return view
    first = int(pc.min(frame["start_ns"]).as_py())
    last = int(pc.max(frame["start_ns"]).as_py() + step_s * NS)
    if by is not None and BY_COLUMNS.get(by) == "queue":
        frame = with_queues(frame, node_queues or {})
    ctx = build_context(
        frame,
        events(store, first, last),  # version changes for baseline_regression, deploys...
        prices=prices,
        region=region,
        quotas=quotas,
        states=states,
        thresholds=finding_thresholds,
        memory=memory,
        baselines=baselines,
        latency=tuple(view.latency),
    )
    annotated = ctx.frame
    view.findings = [*run_rules(ctx), *app_only]
    if findings_only:
        return view
    cluster = rollups.rollup(annotated, (), prices=prices, region=region)
    view.totals = _rows(cluster)[0] if cluster.num_rows else {}
    view.totals["start_ns"] = int(pc.min(annotated["start_ns"]).as_py())
    view.totals["end_ns"] = int(pc.max(annotated["start_ns"]).as_py() + step_s * NS)
    view.waste_by_cause = _rows(waste.waste_by_cause(annotated, prices=prices, region=region))
    view.gpus = gpu_rows(annotated)
    view.totals.update(gpu_counts(view.gpus))
    view.top_users = _top(
        rollups.rollup(annotated, "user", prices=prices, region=region), "user", 10
    )
    view.top_jobs = _top(
        rollups.rollup(annotated, "job_id", prices=prices, region=region), "job_id", 10
    )
    view.engines = _rows(rollups.rollup(annotated, "engine", prices=prices, region=region))
    quota_by = (finding_thresholds or FindingThresholds()).unfair_by
    summary = fairness.shares(annotated, quota_by, quotas=quotas, prices=prices, region=region)
    view.fairness = {
        "by": quota_by,
        "table": _rows(summary.table),
        "jain_useful": summary.jain_useful,
        "jain_allocation_over_quota": summary.jain_allocation_over_quota,
    }
    view.states = _state_shares(annotated)
    if by is not None:
        view.groups = _groups(annotated, by, prices, region)
    view.mfu = _rows(job_mfu(annotated))
    activity = [c for c in ("duty", "sm_active", "tensor_active") if c in annotated.column_names]
    busy = annotated.select(activity).filter(pc.greater(annotated["allocated_s"], 0))
    view.gap = (
        fleet.activity_gap(
            _floats(busy, "duty"), _floats(busy, "sm_active"), _floats(busy, "tensor_active")
        ).summary
        + " (medians over allocated GPU intervals)"
    )
    if "memory_used_bytes" in annotated.column_names:
        view.idle_holding_share = fleet.idle_holding_share(
            _floats(annotated, "duty"), _floats(annotated, "memory_used_bytes")
        ).share
    history, lo, hi = _history(store, first, last, step_s, filters, annotated, states, max_gap_s)
    verdicts = run_verdicts(annotated, history, ctx.baselines)
    view.jobs = _jobs(verdicts, job_memory_peaks(memory_peaks(annotated)))
    view.baseline = _baseline(view.jobs, history, lo, hi, step_s)
    view.notes.extend(coverage_notes(annotated, view.totals))
    view.notes.extend(time_notes(ctx.events))
    tiers = (
        set(pc.unique(annotated["tier"]).to_pylist()) if "tier" in annotated.column_names else set()
    )
    if tiers and tiers != {"profiling"}:
        view.notes.append(
            "some GPUs report duty cycle only (no SM or tensor activity): their useful work is "
            "unmeasured; enable DCGM profiling or use Hopper+ GPUs with NVML GPM"
        )
    return view


def report(
    cfg: Config,
    start_ns: int | None = None,
    end_ns: int | None = None,
    scope: Mapping[str, str] | None = None,
    step_s: float | None = None,
    by: str | None = None,
    node_queues: Mapping[str, str] | None = None,
) -> ReportView:
    """`analyse` of the store of `cfg` with its prices, carbon region, quotas and thresholds:
    what `gpulens report` and the demo's summary show."""
    store = session.open_store(cfg.data_dir)
    try:
        view = analyse(
            store,
            start_ns,
            end_ns,
            scope,
            step_s,
            prices=session.prices(cfg),
            region=session.carbon_region(cfg),
            quotas=session.quotas(cfg),
            **session.analysis_settings(cfg),
            by=by,
            node_queues=node_queues,
        )
    finally:
        store.close()
    view.profiles = profiles.linked(cfg, view.findings)
    return view


UNMAPPED_QUEUE = "(no queue)"


def with_queues(frame: pa.Table, node_queues: Mapping[str, str]) -> pa.Table:
    """`frame` with a `queue` column from its `host` (UNMAPPED_QUEUE for others)."""
    hosts = frame["host"].to_pylist() if "host" in frame.column_names else [None] * len(frame)
    queues = pa.array([node_queues.get(str(h), UNMAPPED_QUEUE) for h in hosts], pa.string())
    if "queue" in frame.column_names:
        frame = frame.drop_columns(["queue"])
    return frame.append_column("queue", queues)


def _groups(
    annotated: pa.Table, by: str, prices: Prices | None, region: str | float
) -> dict[str, Any]:
    """The report broken down by `by` (a `BY_COLUMNS` key): one row per group, with its
    allocation (allocated ÷ capacity GPU-hours), largest GPU-hours first."""
    column = BY_COLUMNS.get(by)
    if column is None:
        raise ValueError(f"--by {by!r}: use one of {', '.join(BY_COLUMNS)}")
    if column not in annotated.column_names:
        return {"by": by, "column": column, "rows": []}
    table = rollups.rollup(annotated, column, prices=prices, region=region)
    rows = []
    for r in table.to_pylist():
        row: dict[str, Any] = {by: r.get(column) if r.get(column) is not None else "(none)"}
        row.update({c: r.get(c) for c in GROUP_COLUMNS})
        gpu_h, alloc_h = r.get("gpu_hours"), r.get("allocated_gpu_hours")
        row["allocation"] = alloc_h / gpu_h if gpu_h and alloc_h is not None else None
        rows.append(row)
    rows.sort(key=lambda r: -(r["gpu_hours"] or 0))
    return {"by": by, "column": column, "rows": rows}


def _history(
    store: Store,
    first: int,
    last: int,
    step_s: float,
    filters: Mapping[str, str],
    frame: pa.Table,
    states: Thresholds | None,
    max_gap_s: float | None = None,
) -> tuple[pa.Table | None, int, int]:
    """(classified frame of the period of the same length, at most `MAX_HISTORY_S`, before
    [first, last), or None when the store holds nothing earlier; its start; its end)."""
    lo, hi = first - min(last - first, MAX_HISTORY_S * NS), first
    earliest, _ = store.time_bounds()
    if earliest is None or earliest >= hi:
        return None, lo, hi
    where = {k: v for k, v in filters.items() if k != "job_id"}
    if "job_id" in filters:  # the job's workload, over all of its runs
        for key in ("engine", "process_name", "project"):
            if key in frame.column_names and key not in where:
                values = [v for v in pc.unique(frame[key]).to_pylist() if v is not None]
                if len(values) == 1:
                    where[key] = str(values[0])
    history = gpu_intervals(
        store, step_s=step_s, start_ns=lo, end_ns=hi, where=where, max_gap_s=max_gap_s
    )
    if history.num_rows == 0:
        return None, lo, hi
    return useful_work(classify(history, states or Thresholds())), lo, hi


_VERDICT_ORDER = {"degraded": 0, "healthy": 1, "unknown": 2}
_EVIDENCE = (
    "metric",
    "value",
    "baseline_median",
    "baseline_n",
    "median_z",
    "anomalous_share",
    "intervals",
    "baseline",
    "runs",
)


def _jobs(verdicts: pa.Table, peaks: pa.Table) -> list[dict[str, Any]]:
    """One row per job and workload: verdict, evidence (the metric is a 0..1 ratio) and the
    job's GPU memory peak; jobs seen only in warm-up get an unknown verdict. Degraded first."""
    memory = {r["job_id"]: r for r in peaks.to_pylist()}
    rows: list[dict[str, Any]] = []
    judged: set[str | None] = set()
    for v in verdicts.to_pylist():
        judged.add(v["job_id"])
        evidence = {k: v.get("median" if k == "value" else k) for k in _EVIDENCE}
        evidence["unit"] = "ratio"
        mem = memory.get(v["job_id"], {})
        rows.append(
            {
                "job_id": v["job_id"],
                "workload": v["workload"],
                "verdict": v["verdict"],
                "reason": v["reason"],
                "evidence": evidence,
                **{k: mem.get(k) for k in JOB_PEAK_COLUMNS},
            }
        )
    for job, mem in memory.items():
        if job not in judged:
            rows.append(
                {
                    "job_id": job,
                    "workload": None,
                    "verdict": "unknown",
                    "reason": "only warm-up intervals in this window",
                    "evidence": None,
                    **{k: mem.get(k) for k in JOB_PEAK_COLUMNS},
                }
            )
    rows.sort(key=lambda r: (_VERDICT_ORDER[r["verdict"]], str(r["job_id"]), str(r["workload"])))
    return rows


def _baseline(
    jobs: list[dict[str, Any]], history: pa.Table | None, lo: int, hi: int, step_s: float
) -> dict[str, Any]:
    """Where the verdicts' baselines came from, and how many verdicts of each kind."""
    sources = [j["evidence"]["baseline"] for j in jobs if j["evidence"]]
    counts = {k: sum(1 for j in jobs if j["verdict"] == k) for k in _VERDICT_ORDER}
    span = _span((hi - lo) / NS)
    from_history, from_window = sources.count("history"), sources.count("window")
    if not jobs:
        said = ["no jobs in this window"]
    else:
        said = [f"{counts['degraded']} degraded, {counts['healthy']} healthy, "
                f"{counts['unknown']} unknown"]  # fmt: skip
        if history is None:
            said.append(f"no readings in the {span} before this window to learn baselines from")
        else:
            said.append(
                f"baselines per workload type from the {span} before this window "
                f"({history.num_rows} intervals of {step_s:g} s)"
            )
    if from_window:
        said.append(f"{from_window} job(s) compared with the window's runs of their workload")
    return {
        "history_start_ns": lo,
        "history_end_ns": hi,
        "step_s": step_s,
        "history_intervals": 0 if history is None else history.num_rows,
        "from_history": from_history,
        "from_window": from_window,
        "without": len(jobs) - from_history - from_window,
        "verdicts": counts,
        "summary": "; ".join(said),
    }


def _span(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.3g} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.3g} hours"
    return f"{seconds / 60:.3g} minutes"


__all__ = ["BY_COLUMNS", "ReportView", "analyse", "auto_step"]
