"""The Fleet page: allocated versus useful GPU-hours, waste by cause with its price, energy
and carbon, the fleet over time, and a GPU × time heatmap of useful work."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from gpulens.analyze import rollups, waste
from gpulens.analyze.schema import STATES
from gpulens.present.dashboard.common import (
    ACTIVITY_KEYS,
    HOURS_KEYS,
    PRICE_KEYS,
    Analysed,
    clean,
    column,
    ints,
    num,
    nums,
    rows,
    top_cause,
)
from gpulens.present.dashboard.window import NS, Window, WindowInfo
from gpulens.present.names import gpu_names, gpu_order

#: the headline figures of a window (rollup columns; `useful_share` = useful ÷ allocated is
#: added)
TOTAL_KEYS: tuple[str, ...] = (
    *HOURS_KEYS,
    "headroom_gpu_hours",
    "idle_unallocated_gpu_hours",
    "unmeasured_gpu_hours",
    *ACTIVITY_KEYS,
    *PRICE_KEYS,
    "headroom_cost",
)
CAUSE_KEYS: tuple[str, ...] = (
    "cause",
    "kind",
    "gpu_hours",
    "share",
    "total_cost",
    "energy_kwh",
    "co2e_kg",
)
GPU_KEYS: tuple[str, ...] = (
    "gpu_uuid",
    "host",
    "gpu_index",
    "gpu_model",
    "gpu_hours",
    "allocated_gpu_hours",
    "useful_gpu_hours",
    "wasted_gpu_hours",
    "mean_duty",
    "mean_sm_active",
    "mean_tensor_active",
    "total_cost",
    "wasted_cost",
)


@dataclass
class Timeline:
    """Per interval (`times_ns`, interval starts): GPUs present, allocated, and the GPU
    equivalents of useful and wasted work."""

    times_ns: list[int] = field(default_factory=list)
    gpus: list[float | None] = field(default_factory=list)
    allocated: list[float | None] = field(default_factory=list)
    useful: list[float | None] = field(default_factory=list)
    wasted: list[float | None] = field(default_factory=list)


@dataclass
class Heatmap:
    """Useful work (0..1) per GPU (rows) and interval (columns); `state` holds the index into
    `states` of each cell's state (-1: no data)."""

    gpus: list[str] = field(default_factory=list)
    gpu_uuids: list[str] = field(default_factory=list)
    times_ns: list[int] = field(default_factory=list)
    useful: list[list[float | None]] = field(default_factory=list)
    state: list[list[int]] = field(default_factory=list)
    states: list[str] = field(default_factory=lambda: list(STATES))


@dataclass
class FleetPage:
    """Everything the Fleet page shows."""

    window: WindowInfo
    currency: str
    totals: dict[str, Any] = field(default_factory=dict)
    waste_by_cause: list[dict[str, Any]] = field(default_factory=list)
    headroom_note: str = waste.HEADROOM_NOTE  # shown when `waste_by_cause` has headroom rows
    gpus: list[dict[str, Any]] = field(default_factory=list)
    timeline: Timeline = field(default_factory=Timeline)
    heatmap: Heatmap = field(default_factory=Heatmap)
    notes: list[str] = field(default_factory=list)


def _time_index(frame: pa.Table, w: Window) -> np.ndarray:
    return ((ints(frame, "start_ns") - w.start_ns) // (w.step_s * NS)).astype(np.int64)


def timeline(a: Analysed) -> Timeline:
    """Per-interval sums of GPU, allocated, useful and wasted seconds, as GPU equivalents."""
    w, frame = a.window, a.frame
    n = w.points
    times = [w.start_ns + i * w.step_s * NS for i in range(n)]
    if a.empty:
        return Timeline(times_ns=times)
    t = _time_index(frame, w)
    ok = (t >= 0) & (t < n)
    present = np.bincount(t[ok], minlength=n) > 0

    def per_step(name: str) -> list[float | None]:
        values = np.nan_to_num(column(frame, name)[ok])
        sums = np.bincount(t[ok], weights=values, minlength=n) / w.step_s
        return nums(np.where(present, sums, np.nan))

    return Timeline(
        times_ns=times,
        gpus=per_step("gpu_s"),
        allocated=per_step("allocated_s"),
        useful=per_step("useful_s"),
        wasted=per_step("wasted_s"),
    )


_NAME_KEYS = ("host", "gpu_index", "gpu_uuid", "mig_instance", "parent_uuid", "mig_profile")


def heatmap(a: Analysed) -> Heatmap:
    """The GPU × interval matrix of useful work (rows ordered by host and GPU index)."""
    w, frame = a.window, a.frame
    n = w.points
    times = [w.start_ns + i * w.step_s * NS for i in range(n)]
    if a.empty:
        return Heatmap(times_ns=times)
    uuids = frame.column("gpu_uuid").to_pylist()
    ids = frame.select([c for c in _NAME_KEYS if c in frame.column_names]).to_pylist()
    entities: dict[str, dict[str, Any]] = {}
    for u, labels in zip(uuids, ids, strict=True):
        entities.setdefault(str(u), labels)
    order = sorted(entities, key=lambda u: gpu_order(entities[u]))
    labels_of = dict(zip(order, gpu_names([entities[u] for u in order]), strict=True))
    row_of = {u: r for r, u in enumerate(order)}
    r = np.fromiter((row_of[str(u)] for u in uuids), dtype=np.int64, count=len(uuids))
    t = _time_index(frame, w)
    ok = (t >= 0) & (t < n)
    z = np.full((len(order), n), np.nan)
    z[r[ok], t[ok]] = column(frame, "useful_ratio")[ok]
    codes = {s: i for i, s in enumerate(STATES)}
    state = np.full((len(order), n), -1, dtype=np.int64)
    state_codes = np.fromiter(
        (codes.get(str(s), -1) for s in frame.column("state").to_pylist()),
        dtype=np.int64,
        count=frame.num_rows,
    )
    state[r[ok], t[ok]] = state_codes[ok]
    return Heatmap(
        gpus=[labels_of[u] for u in order],
        gpu_uuids=order,
        times_ns=times,
        useful=[nums(row) for row in z],
        state=state.tolist(),
    )


def fleet_page(a: Analysed) -> FleetPage:
    """The Fleet page of an analysed window."""
    s = a.settings
    page = FleetPage(WindowInfo.of(a.window), s.prices.currency)
    page.timeline = timeline(a)
    page.heatmap = heatmap(a)
    if a.empty:
        page.notes.append("no GPU readings in this window")
        return page
    frame = a.frame
    total = rollups.rollup(frame, (), prices=s.prices, region=s.region)
    page.totals = rows(total, TOTAL_KEYS)[0] if total.num_rows else {}
    allocated, useful = page.totals.get("allocated_gpu_hours"), page.totals.get("useful_gpu_hours")
    page.totals["useful_share"] = num(useful / allocated) if allocated and useful else None
    page.waste_by_cause = rows(
        waste.waste_by_cause(frame, prices=s.prices, region=s.region), CAUSE_KEYS
    )
    keys = (*_NAME_KEYS, "gpu_model")
    per_gpu = rollups.rollup(frame, keys, s.prices).to_pylist()
    per_gpu.sort(key=gpu_order)  # each MIG instance under its parent
    gpus = []
    for row, label in zip(per_gpu, gpu_names(per_gpu), strict=True):
        out = {k: row.get(k) for k in GPU_KEYS}
        out["label"] = label
        out["top_waste_cause"] = top_cause(row)
        gpus.append(clean(out))
    page.gpus = gpus
    return page
