"""The dashboard's Cluster page data: nodes × time, queues and teams, the idle-allocated
inventory, pending-while-idle and the fleet plans, from a store or a site's Prometheus.

The analysis is the fleet view's: the interval frame of the GPU readings (useful work, duty
cycle), `app.fleet_usage.usage` for queues, teams and the idle-allocated findings, the cluster
sequence through `analyze.cluster` (`summarise`: allocation, pending-while-idle), the fleet
rules, and `app.fleet_plans.run_plans` (consolidation, off-peak; the capacity forecast when
statsmodels is installed and the window holds enough history). From Prometheus the range is
read once (`app.prometheus.pulled`, downsampled on the server) into a temporary store that
lives only while the data is built; the queues are Kueue's when the server has them, else the
GPU series' own (GPUs reporting and held). From a store the sequence is the frame's: GPUs
reporting and allocated per queue and step, pending unknown.

What is kept is small (matrices of nodes × steps, rows per queue and team), so an agent can
hold the last one in memory between refreshes.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.analyze.cluster.grid import to_grid
from gpulens.analyze.cluster.queues import summarise
from gpulens.app import session
from gpulens.app.analysis import UNMAPPED_QUEUE, auto_step, with_queues
from gpulens.app.fleet import FleetView
from gpulens.app.fleet_plans import FleetPlans, run_plans
from gpulens.app.fleet_usage import readings_sequence, usage
from gpulens.app.heap import release_memory
from gpulens.config import Config
from gpulens.errors import ConfigError
from gpulens.findings.engine import build_context
from gpulens.findings.fleet import FleetContext, run_fleet_rules
from gpulens.model import Kind
from gpulens.store.frames import gpu_intervals

NS = 1_000_000_000
#: the most nodes the heat map shows (the busiest by GPU-hours first when there are more)
MAX_HEAT_NODES = 400
#: the forecast's horizon on the Cluster page, in hours
FORECAST_HOURS = 7 * 24
#: the frame's duty-cycle column
DUTY = "duty"


@dataclass(frozen=True, slots=True)
class NodeHeat:
    """Per node (rows, sorted by queue then name) and step (columns from `start_ns`): the
    GPU-time-weighted mean useful work and duty cycle of its GPUs (0..1, NaN: no data), and
    the GPUs seen on it."""

    nodes: tuple[str, ...] = ()
    queues: tuple[str, ...] = ()
    gpus: tuple[int, ...] = ()
    start_ns: int = 0
    step_s: int = 60
    useful: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    duty: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    nodes_total: int = 0  # nodes with readings (more than `nodes` when cut)


@dataclass(frozen=True, slots=True)
class ClusterData:
    """One analysed window of the cluster: where it came from, when it was built, the heat
    map, the fleet view (None: no GPU readings), its plans and what could not be shown."""

    source: str
    start_ns: int
    end_ns: int
    step_s: int
    built_ns: int
    currency: str
    heat: NodeHeat
    view: FleetView | None
    plans: FleetPlans | None
    notes: tuple[str, ...] = ()


def statsmodels_installed() -> bool:
    return importlib.util.find_spec("statsmodels") is not None


def node_heat(frame: pa.Table, start_ns: int, end_ns: int, step_s: int) -> NodeHeat:
    """The node × step matrices of an annotated interval frame (with `queue`)."""
    steps = max(1, round((end_ns - start_ns) / (step_s * NS)))
    if frame.num_rows == 0 or "host" not in frame.column_names:
        return NodeHeat(start_ns=start_ns, step_s=step_s, useful=np.zeros((0, steps)),
                        duty=np.zeros((0, steps)))  # fmt: skip
    hosts = pc.fill_null(pc.cast(frame["host"], pa.string()), "-")
    names = pc.unique(hosts)
    row = np.asarray(pc.index_in(hosts, names).to_numpy(zero_copy_only=False), dtype=np.int64)
    col = (np.asarray(frame["start_ns"].to_numpy(), dtype=np.int64) - start_ns) // (step_s * NS)
    ok = (col >= 0) & (col < steps)
    weight = _floats(frame, "gpu_s")
    n = len(names)
    cell = row * steps + col

    def mean_of(column: str) -> np.ndarray:
        x = _floats(frame, column)
        known = ok & ~np.isnan(x) & ~np.isnan(weight) & (weight > 0)
        w = np.bincount(cell[known], weights=weight[known], minlength=n * steps)
        xw = np.bincount(cell[known], weights=x[known] * weight[known], minlength=n * steps)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(w > 0, xw / w, np.nan).reshape(n, steps)

    useful, duty = mean_of("useful_ratio"), mean_of(DUTY)
    hours = np.bincount(row, weights=np.nan_to_num(weight), minlength=n)
    queue_of: dict[int, str] = {}
    gpus_of: dict[int, set[str]] = {}
    queues = frame["queue"].to_pylist() if "queue" in frame.column_names else [None] * len(row)
    uuids = frame["gpu_uuid"].to_pylist() if "gpu_uuid" in frame.column_names else [None] * len(row)
    for r, q, u in zip(row.tolist(), queues, uuids, strict=True):
        queue_of.setdefault(r, str(q or UNMAPPED_QUEUE))
        gpus_of.setdefault(r, set()).add(str(u))
    keep = sorted(range(n), key=lambda r: -hours[r])[:MAX_HEAT_NODES]
    text = names.to_pylist()
    keep.sort(key=lambda r: (queue_of[r], str(text[r])))
    return NodeHeat(
        nodes=tuple(str(text[r]) for r in keep),
        queues=tuple(queue_of[r] for r in keep),
        gpus=tuple(len(gpus_of[r]) for r in keep),
        start_ns=start_ns,
        step_s=step_s,
        useful=useful[keep],
        duty=duty[keep],
        nodes_total=n,
    )


def build(
    cfg: Config,
    start_ns: int,
    end_ns: int,
    step_s: int,
    node_queues: Mapping[str, str],
    source: str,
    sequence: pa.Table | None = None,
    notes: tuple[str, ...] = (),
    forecast: bool = True,
) -> ClusterData:
    """The Cluster page's data over [start_ns, end_ns) of the store of `cfg`, at `step_s`.
    `sequence` is the cluster sequence when the source has one (Kueue, the GPU series'
    holders); else it is the frame's."""
    max_gap = float(cfg.get("analysis.max_gap_seconds")) or None
    store = session.open_store(cfg.data_dir)
    try:
        frame = gpu_intervals(
            store, step_s=float(step_s), start_ns=start_ns, end_ns=end_ns, max_gap_s=max_gap
        )
    finally:
        store.close()
    prices = session.prices(cfg)
    built = time.time_ns()
    if frame.num_rows == 0:
        return ClusterData(source, start_ns, end_ns, step_s, built, prices.currency,
                           node_heat(frame, start_ns, end_ns, step_s), None, None,
                           (*notes, "no GPU readings in this window"))  # fmt: skip
    settings = session.analysis_settings(cfg)
    ctx = build_context(
        with_queues(frame, node_queues),
        prices=prices,
        region=session.carbon_region(cfg),
        states=settings["states"],
        thresholds=settings["finding_thresholds"],
        memory=settings["memory"],
    )
    del frame
    heat = node_heat(ctx.frame, start_ns, end_ns, step_s)
    seq = sequence if sequence is not None and sequence.num_rows else None
    if seq is None:
        seq = readings_sequence(ctx.frame, step_s)
    del ctx
    release_memory()  # the frame's buffers, before `usage` reads its own
    out_notes = list(notes)
    if heat.nodes_total > len(heat.nodes):
        out_notes.append(f"heat map: the {len(heat.nodes)} busiest of {heat.nodes_total} nodes")
    grid = to_grid(seq, step_s)
    summary = summarise(grid)
    used = usage(cfg, node_queues, start_ns, end_ns)
    if used is not None:
        out_notes.extend(used.notes)
    fleet_ctx = FleetContext(summary=summary)
    findings = run_fleet_rules(fleet_ctx)
    out_notes.extend(f"rule {e.rule_id} failed: {e.error}: {e.message}" for e in fleet_ctx.errors)
    if np.isnan(grid.pending).all():
        out_notes.append(
            "pending demand unknown (no Kueue series or scheduler source): pending-while-idle "
            "cannot be judged"
        )
    view = FleetView(
        summary=summary,
        findings=findings,
        fragmentation=(),
        held_by_user={},
        held_by_team={},
        nodes=[],
        sources=[source],
        notes=[],
        usage=used,
        grid=grid,
    )
    plans, plan_notes = _plans(view, forecast)
    out_notes.extend(plan_notes)
    return ClusterData(source, start_ns, end_ns, step_s, built, prices.currency, heat, view,
                       plans, tuple(out_notes))  # fmt: skip


def _plans(view: FleetView, forecast: bool) -> tuple[FleetPlans | None, list[str]]:
    """The plans, with the forecast when statsmodels is installed and history allows."""
    notes: list[str] = []
    hours: int | None = FORECAST_HOURS if forecast else None
    if hours is not None and not statsmodels_installed():
        notes.append("capacity forecast: needs statsmodels (pip install 'gpulens[forecast]')")
        hours = None
    try:
        plans = run_plans(view, hours, plans=True)
    except ConfigError as exc:
        if hours is None:
            return None, [*notes, f"plans: {exc}"]
        notes.append(f"capacity forecast: {exc}".replace("--forecast: ", ""))
        try:
            plans = run_plans(view, None, plans=True)
        except ConfigError as again:
            return None, [*notes, f"plans: {again}"]
    return plans, [*notes, *plans.notes]


def from_store(
    cfg: Config,
    start_ns: int,
    end_ns: int,
    step_s: int | None = None,
    node_queues: Mapping[str, str] | None = None,
) -> ClusterData:
    """The Cluster page of the store of `cfg`. Queues: `node_queues` (node → queue), else a
    `queue` or `partition` label the readings carry; hosts in none are one group."""
    step = step_s or int(auto_step((end_ns - start_ns) / NS))
    queues = {**_stored_queues(cfg, start_ns, end_ns), **(node_queues or {})}
    return build(cfg, start_ns, end_ns, step, queues, f"store: {cfg.data_dir}")


def _stored_queues(cfg: Config, start_ns: int, end_ns: int) -> dict[str, str]:
    """host → queue from the store's GPU readings, when they carry a queue label."""
    store = session.open_store(cfg.data_dir)
    try:
        if not store.files(Kind.GPU):
            return {}
        columns = set(store.query("SELECT * FROM gpu LIMIT 0").column_names)
        label = next((c for c in ("queue", "partition") if c in columns), None)
        if label is None:
            return {}
        got = store.query(
            f"SELECT DISTINCT host, {label} AS queue FROM gpu WHERE ts >= ? AND ts < ? "
            f"AND {label} IS NOT NULL",
            [start_ns, end_ns],
        )
    finally:
        store.close()
    return {str(r["host"]): str(r["queue"]) for r in got.to_pylist() if r["host"] is not None}


def from_prometheus(
    cfg: Config,
    url: str | None,
    start_ns: int | None,
    end_ns: int | None,
    now_ns: int,
    node_queues: Mapping[str, str] | None = None,
) -> ClusterData:
    """The Cluster page of a Prometheus range (default: the last 7 days, at the report's
    automatic step), read once into a temporary store. Queues: the series' `queue` or
    `partition` label, overridden by `node_queues`."""
    from gpulens.app.prometheus import allocation_sequence, drop_tables, fleet_window, pulled

    start, end, step = fleet_window(start_ns, end_ns, now_ns)
    with pulled(cfg, url, start, end, step, keep_tables=True) as got:
        prom = got.prom
        queues = {**prom.tables.node_queues, **(node_queues or {})}
        kueue = prom.sequence.num_rows > 0
        seq = prom.sequence if kueue else allocation_sequence(prom, queues)
        drop_tables(prom)
        notes = list(got.notes[1:])
        if kueue and prom.pending_workloads:
            notes.append("Kueue counts pending workloads, not GPUs: pending GPU demand unknown")
        return build(
            got.cfg,
            round(prom.start_s * NS),
            round(prom.end_s * NS),
            int(prom.step_s),
            queues,
            got.notes[0] if got.notes else "Prometheus",
            seq,
            tuple(notes),
        )


def _floats(frame: pa.Table, name: str) -> np.ndarray:
    if name not in frame.column_names:
        return np.full(frame.num_rows, np.nan)
    col = pc.cast(frame[name], pa.float64())
    return np.asarray(col.fill_null(np.nan).to_numpy(), dtype=np.float64)
