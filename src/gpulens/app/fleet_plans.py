"""`gpulens fleet --forecast 7d --plans`: the capacity forecast, the off-peak plan and the
consolidation plan over the fleet view's queue × step grid (the analysis is
analyze/cluster/forecast.py, offpeak.py and consolidation.py; quotas are in app/fleet.py,
as the fleet rules read them).

`gpulens report --plans [--forecast 7d]` (on a store, or `--prometheus`) gets the same plans
from `report_plans`: the grid is the GPU readings' own sequence (GPUs reporting and held per
queue, `fleet_usage.readings_sequence`), or Kueue's ClusterQueues where Prometheus has them;
the consolidation plan is of the jobs in the readings."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from gpulens.analyze.cluster.consolidation import ConsolidationPlan, consolidation_plan
from gpulens.analyze.cluster.forecast import CapacityForecast, capacity_forecast, demand_of
from gpulens.analyze.cluster.grid import to_grid
from gpulens.analyze.cluster.offpeak import OffPeakPlan, off_peak_plan
from gpulens.app.fleet import FleetView
from gpulens.config import Config
from gpulens.errors import ConfigError

if TYPE_CHECKING:
    import pyarrow as pa

    from gpulens.app.analysis import ReportView
    from gpulens.store import Store

_HORIZON = re.compile(r"^(\d+)\s*([hdw])$")
_HOURS = {"h": 1, "d": 24, "w": 168}
MAX_HORIZON_H = 28 * 24


def parse_horizon(text: str) -> int:
    """``48h``, ``7d``, ``2w`` → hours (ConfigError otherwise)."""
    match = _HORIZON.match(text.strip())
    hours = int(match.group(1)) * _HOURS[match.group(2)] if match else 0
    if not 1 <= hours <= MAX_HORIZON_H:
        raise ConfigError(
            f"--forecast {text!r}: give a horizon of whole hours, days or weeks up to 4 weeks "
            "(48h, 7d, 2w)"
        )
    return hours


@dataclass(frozen=True, slots=True)
class FleetPlans:
    forecast: CapacityForecast | None = None
    offpeak: OffPeakPlan | None = None
    consolidation: ConsolidationPlan | None = None
    notes: list[str] = field(default_factory=list)


def run_plans(
    view: FleetView,
    forecast_hours: int | None = None,
    plans: bool = False,
    batch_queues: Sequence[str] = (),
) -> FleetPlans:
    """The forecast (`forecast_hours` ahead) and, with `plans`, the off-peak and
    consolidation plans."""
    grid = view.grid
    if grid is None and (forecast_hours is not None or batch_queues):
        raise ConfigError(
            "the forecast and the off-peak plan need a scheduler source (--sequence, --jobs, "
            "--slurm, --k8s or --prometheus with Kueue)"
        )
    notes: list[str] = []
    forecast = offpeak = consolidation = None
    if grid is not None and (forecast_hours is not None or plans):
        demand = {q: demand_of(grid.in_use[i], grid.pending[i]) for i, q in enumerate(grid.queues)}
        if forecast_hours is not None:
            try:
                forecast = capacity_forecast(demand, grid.start_s, grid.step_s, forecast_hours)
            except ValueError as exc:
                raise ConfigError(f"--forecast: {exc}") from None
            if np.isnan(grid.pending).all():
                notes.append("no pending demand in the sources: the forecast is of GPUs in use")
        if plans:
            try:
                offpeak = off_peak_plan(demand, grid.start_s, grid.step_s, batch_queues or None)
            except ValueError as exc:
                raise ConfigError(f"--batch-queue: {exc}") from None
            if offpeak.weeks < 1:
                notes.append(
                    f"off-peak plan over {offpeak.weeks * 7:.1f} days of history: the hours of "
                    "the week without data are left out of the heat map and are no room to move "
                    "work into; a week or more gives the whole week"
                )
            if not batch_queues:
                notes.append(
                    "off-peak plan: every queue counted as batch (an upper bound); name the "
                    "queues whose work can wait with --batch-queue"
                )
    elif plans:
        notes.append("off-peak plan: needs a scheduler source (queue demand over time)")
    if plans:
        nodes = [(n.node, n.queues, n.gpus, n.used) for n in view.nodes if n.used is not None]
        jobs = view.usage.job_loads if view.usage is not None else []
        consolidation = consolidation_plan(jobs, nodes)
        if consolidation.jobs_unknown:
            notes.append(
                f"consolidation plan: {consolidation.jobs_unknown} of {len(jobs)} jobs lack SM "
                "activity, peak memory or the GPU's memory size in the GPU series, so no MIG or "
                "sharing move is proposed for them (dcgm-exporter: DCGM_FI_PROF_SM_ACTIVE, "
                "DCGM_FI_DEV_FB_USED, and DCGM_FI_DEV_FB_TOTAL or DCGM_FI_DEV_FB_FREE)"
            )
        if view.usage is None:
            notes.append(
                "consolidation plan: node packing from the node list only; moves of single "
                "jobs to MIG slices or shared GPUs need the GPU series (--data-dir or "
                "--prometheus)"
            )
    return FleetPlans(forecast, offpeak, consolidation, notes)


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """What `report --plans/--forecast/--batch-queue` asked for: the forecast's horizon
    (None: no forecast), the off-peak and consolidation plans, the batch queues."""

    forecast_hours: int | None = None
    plans: bool = True
    batch_queues: tuple[str, ...] = ()


def plan_request(
    forecast: str | None, plans: bool, batch_queues: Sequence[str]
) -> PlanRequest | None:
    """The request of the command-line flags (None when none asks for a plan)."""
    hours = parse_horizon(forecast) if forecast is not None else None
    if hours is None and not plans and not batch_queues:
        return None
    return PlanRequest(hours, plans or bool(batch_queues), tuple(batch_queues))


def report_plans(
    cfg: Config,
    request: PlanRequest,
    node_queues: Mapping[str, str] | None = None,
    start_ns: int | None = None,
    end_ns: int | None = None,
    kueue: pa.Table | None = None,
    store: Store | None = None,
) -> FleetPlans:
    """The plans of `gpulens report` over the store of `cfg` (for `--prometheus`, the range's
    temporary store): the GPU readings per queue (node → queue from `node_queues`), or
    `kueue`'s sequence when it has rows. A forecast the history cannot support is a note,
    not an error: the report stands without it. `store`: read through this one (`fleet_usage`)."""
    from gpulens.app.fleet_usage import usage

    used = usage(cfg, node_queues or {}, start_ns, end_ns, store)
    if used is None:
        return FleetPlans(notes=["plans: no GPU readings in this window"])
    notes: list[str] = []
    if kueue is not None and kueue.num_rows:
        sequence = kueue
        notes.append("plans: demand per Kueue ClusterQueue (quota and usage)")
    else:
        assert used.sequence is not None
        sequence = used.sequence
        notes.append(
            "plans: demand is the GPUs held per queue in the GPU readings (a job or pod label "
            "on the series); pending demand is unknown there, so demand is a lower bound: "
            "`gpulens fleet` adds a scheduler source (--jobs, --slurm, --k8s)"
        )
    try:
        grid = to_grid(sequence)
    except ValueError as exc:
        return FleetPlans(notes=[f"plans: {exc}"])
    view = FleetView(
        summary=None, findings=[], fragmentation=(), held_by_user={}, held_by_team={},
        nodes=[], sources=[], notes=[], usage=used, grid=grid,
    )  # fmt: skip
    hours = request.forecast_hours
    try:
        got = run_plans(view, hours, request.plans, request.batch_queues)
    except ConfigError as exc:
        if hours is None or not str(exc).startswith("--forecast"):
            raise
        got = run_plans(view, None, request.plans, request.batch_queues)
        notes.append(f"no forecast: {str(exc).removeprefix('--forecast: ')}")
    return FleetPlans(got.forecast, got.offpeak, got.consolidation, [*notes, *got.notes])


def report_with_plans(
    cfg: Config,
    url: str | None,
    start_ns: int | None,
    end_ns: int | None,
    now_ns: int,
    scope: Mapping[str, str] | None = None,
    step_s: float | None = None,
    by: str | None = None,
    node_queues: Mapping[str, str] | None = None,
    request: PlanRequest | None = None,
) -> tuple[ReportView, FleetPlans | None]:
    """`gpulens report --prometheus URL` and, with a `request` (`--plans/--forecast`), the
    plans of the same range, read from the report's temporary store (`report_plans`)."""
    from gpulens.app.prometheus import NS, Pulled, QueryOnce, report_then

    def plans_of(got: Pulled, queues: dict[str, str]) -> FleetPlans:
        assert request is not None
        store = QueryOnce(got.cfg.data_dir)  # keeps no query's memory
        try:
            return report_plans(
                got.cfg,
                request,
                queues,
                round(got.prom.start_s * NS),
                round(got.prom.end_s * NS),
                kueue=got.prom.sequence,
                store=store,
            )
        finally:
            store.close()

    return report_then(
        cfg, url, start_ns, end_ns, now_ns, scope, step_s, by, node_queues,
        then=plans_of if request is not None else None,
    )  # fmt: skip
