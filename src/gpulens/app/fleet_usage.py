"""Allocation against duty cycle and useful work per queue, team and user, and the
idle-allocated inventory: the store's GPU readings (`gpulens fleet --data-dir`) grouped by the
queues the scheduler puts each node in.

The same analysis as `gpulens report` (the interval frame, `build_context`, the rollups and
the `idle_allocated` rule) with one more label: `queue`, from node → queues (Slurm
partitions, Kubernetes queues, or `--node-queue NODE=QUEUE`). A node in several queues counts
in a group named after all of them (``gpu,gpulong``), so no GPU-hour is counted twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gpulens.analyze import rollups
from gpulens.analyze.cluster.consolidation import JobLoad, job_loads
from gpulens.app import session
from gpulens.app.analysis import UNMAPPED_QUEUE, auto_step, with_queues
from gpulens.cluster_schema import IN_USE, PENDING, QUEUE, SEQUENCE_SCHEMA, TOTAL, TS
from gpulens.config import Config
from gpulens.findings.context import IDLE_RULE
from gpulens.findings.engine import build_context, run_rules
from gpulens.findings.model import Finding
from gpulens.store import Store
from gpulens.store.frames import gpu_intervals

NS = 1_000_000_000
COLUMNS = (
    "gpus",
    "gpu_hours",
    "allocated_gpu_hours",
    "useful_gpu_hours",
    "wasted_gpu_hours",
    "mean_duty",
    "mean_sm_active",
    "mean_tensor_active",
    "useful_per_gpu_hour",
    "wasted_cost",
)


@dataclass(frozen=True, slots=True)
class UsageView:
    """Per queue, team and user: capacity, allocation, duty cycle, useful work, waste; the
    idle-allocated findings (owners, durations, prices)."""

    start_ns: int
    end_ns: int
    currency: str
    by_queue: list[dict[str, Any]] = field(default_factory=list)
    by_team: list[dict[str, Any]] = field(default_factory=list)
    by_user: list[dict[str, Any]] = field(default_factory=list)
    idle_allocated: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    job_loads: list[JobLoad] = field(default_factory=list)  # for the consolidation plan
    #: the cluster sequence of the GPU readings (gpulens.cluster_schema): per queue and step,
    #: GPUs reporting (total) and held (in use), pending unknown (the plans' demand)
    sequence: pa.Table | None = None

    @property
    def useful_gpu_hours(self) -> float:
        """Useful GPU-hours over every queue (each GPU's hours are in exactly one)."""
        return sum(float(r.get("useful_gpu_hours") or 0.0) for r in self.by_queue)

    @property
    def idle_allocated_gpu_hours(self) -> float:
        """GPU-hours held idle, over the idle-allocated findings."""
        return sum(f.impact.wasted_gpu_hours for f in self.idle_allocated)

    @property
    def idle_allocated_cost(self) -> float:
        """The price of those GPU-hours (in `currency`)."""
        return sum(f.impact.cost for f in self.idle_allocated)


def readings_sequence(frame: pa.Table, step_s: float) -> pa.Table:
    """The cluster sequence of an annotated interval frame with a `queue` column: per queue
    and step, GPUs reporting (covered time ÷ step) and GPUs held (allocated time ÷ step);
    pending demand null (the GPU readings do not say what waits)."""
    if frame.num_rows == 0:
        return SEQUENCE_SCHEMA.empty_table()
    t = pa.table(
        {
            TS: pc.divide(frame["start_ns"], NS),
            QUEUE: pc.cast(frame["queue"], pa.string()),
            TOTAL: pc.divide(pc.cast(frame["covered_s"], pa.float64()), step_s),
            IN_USE: pc.divide(pc.cast(frame["allocated_s"], pa.float64()), step_s),
        }
    )
    grouped = t.group_by([TS, QUEUE]).aggregate([(TOTAL, "sum"), (IN_USE, "sum")])
    out = pa.table(
        {
            TS: pc.cast(grouped[TS], pa.int64()),
            QUEUE: grouped[QUEUE],
            TOTAL: grouped[f"{TOTAL}_sum"],
            IN_USE: grouped[f"{IN_USE}_sum"],
            PENDING: pa.nulls(grouped.num_rows, pa.float64()),
        },
        schema=SEQUENCE_SCHEMA,
    )
    return out.sort_by([(QUEUE, "ascending"), (TS, "ascending")])


def _rows(table: pa.Table, key: str) -> list[dict[str, Any]]:
    rows = []
    for row in table.to_pylist():
        out = {key: row.get(key) if row.get(key) is not None else "(none)"}
        out.update({c: row.get(c) for c in COLUMNS})
        gpu_h, alloc_h = row.get("gpu_hours"), row.get("allocated_gpu_hours")
        out["allocation"] = alloc_h / gpu_h if gpu_h and alloc_h is not None else None
        rows.append(out)
    return sorted(rows, key=lambda r: -(r["gpu_hours"] or 0))


def usage(
    cfg: Config,
    node_queues: Mapping[str, str],
    start_ns: int | None = None,
    end_ns: int | None = None,
    store: Store | None = None,
) -> UsageView | None:
    """The usage of the store of `cfg` per queue, team and user (None: no GPU readings).
    `store`: read through this one instead (left open: the caller's)."""
    own = store is None
    store = session.open_store(cfg.data_dir) if store is None else store
    try:
        first, last = store.time_bounds()
        lo = start_ns if start_ns is not None else first
        hi = end_ns if end_ns is not None else last
        span = ((hi or 0) - (lo or 0)) / NS if lo is not None and hi is not None else 0.0
        step_s = auto_step(span)
        max_gap = float(cfg.get("analysis.max_gap_seconds")) or None
        frame = gpu_intervals(store, step_s=step_s, start_ns=start_ns, end_ns=end_ns,
                              max_gap_s=max_gap)  # fmt: skip
    finally:
        if own:
            store.close()
    if frame.num_rows == 0:
        return None
    settings = session.analysis_settings(cfg)
    prices, region = session.prices(cfg), session.carbon_region(cfg)
    ctx = build_context(
        with_queues(frame, node_queues),
        prices=prices,
        region=region,
        quotas=session.quotas(cfg),
        states=settings["states"],
        thresholds=settings["finding_thresholds"],
        memory=settings["memory"],
    )
    annotated = ctx.frame
    view = UsageView(
        start_ns=int(pc.min(annotated["start_ns"]).as_py()),
        end_ns=int(pc.max(annotated["start_ns"]).as_py() + step_s * NS),
        currency=prices.currency,
        by_queue=_rows(rollups.rollup(annotated, "queue", prices=prices, region=region), "queue"),
        by_team=_rows(rollups.rollup(annotated, "team", prices=prices, region=region), "team"),
        by_user=_rows(rollups.rollup(annotated, "user", prices=prices, region=region), "user"),
        idle_allocated=run_rules(ctx, only=[IDLE_RULE]),
        job_loads=job_loads(annotated),
        sequence=readings_sequence(annotated, step_s),
    )
    if any(r["queue"] == UNMAPPED_QUEUE for r in view.by_queue):
        view.notes.append(
            f"hosts in no queue are grouped as {UNMAPPED_QUEUE}: give a node list (--slurm, --k8s) "
            "or --node-queue NODE=QUEUE"
        )
    return view
