"""The Workloads page: SM activity stacked by inference/training engine over time, and the
efficiency of each engine (native PyTorch versus TensorRT and the other optimised engines),
with the migrations the analysis recommends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpulens.analyze import rollups
from gpulens.analyze.engines import engine_timeline, recommend_engine_migration
from gpulens.app.inference import FALLBACK, fallbacks
from gpulens.present.dashboard.common import (
    ACTIVITY_KEYS,
    HOURS_KEYS,
    Analysed,
    clean,
    column,
    ints,
    nums,
    rows,
    top_cause,
)
from gpulens.present.dashboard.gpu import EventMark
from gpulens.present.dashboard.window import NS, WindowInfo
from gpulens.store.query import Queryable

#: the engine name shown for intervals without one (no process, or none attributed)
NO_ENGINE = "unattributed"
ENGINE_KEYS: tuple[str, ...] = (
    "engine",
    *HOURS_KEYS,
    *ACTIVITY_KEYS,
    "useful_per_gpu_hour",
    "tokens_per_gpu_hour",
    "total_cost",
    "wasted_cost",
)
MIGRATION_KEYS: tuple[str, ...] = (
    "engine",
    "process_name",
    "model",
    "jobs",
    "gpus",
    "gpu_hours",
    "dominant_state",
    "state_share",
    "sm_active",
    "tensor_active",
    "dram_active",
    "recommendation",
    "target_engine",
    "expected_gain",
    "gain_kind",
    "gain_basis",
    "gpu_hours_saved",
)


@dataclass
class EngineSeries:
    """One engine's stack layer: the SM-busy GPU equivalents (Σ SM activity over its GPUs)
    and the GPUs it ran on, per interval."""

    engine: str
    kind: str  # "native", "optimised" or "other"
    sm_busy_gpus: list[float | None] = field(default_factory=list)
    gpus: list[float | None] = field(default_factory=list)


@dataclass
class WorkloadsPage:
    """Everything the Workloads page shows."""

    window: WindowInfo
    currency: str
    times_ns: list[int] = field(default_factory=list)
    stack: list[EngineSeries] = field(default_factory=list)
    engines: list[dict[str, Any]] = field(default_factory=list)
    migrations: list[dict[str, Any]] = field(default_factory=list)
    fallbacks: list[EventMark] = field(default_factory=list)  # engine builds that failed
    notes: list[str] = field(default_factory=list)


def _kind(engine: str, a: Analysed) -> str:
    if a.context is None:
        return "other"
    s = a.context.engines
    name = engine.lower()
    if name in {e.lower() for e in s.native_engines}:
        return "native"
    if name in {e.lower() for e in s.optimised_engines}:
        return "optimised"
    return "other"


def engine_fallbacks(store: Queryable, window: WindowInfo) -> list[EventMark]:
    """The window's engine_fallback events (a serving process could not build the engine it
    was asked for and served on eager), each a mark labelled as the GPU timeline labels it."""
    return [
        EventMark(int(r["ts"]), FALLBACK, FALLBACK, r["message"], r["job_id"], r["host"])
        for r in fallbacks(store, window.start_ns, window.end_ns)
    ]


def workloads_page(a: Analysed, store: Queryable | None = None) -> WorkloadsPage:
    """The Workloads page of an analysed window; with `store`, its engine fallbacks too."""
    w = a.window
    n = w.points
    page = WorkloadsPage(WindowInfo.of(w), a.settings.prices.currency)
    page.times_ns = [w.start_ns + i * w.step_s * NS for i in range(n)]
    if store is not None:
        page.fallbacks = engine_fallbacks(store, page.window)
    if a.empty:
        page.notes.append("no GPU readings in this window")
        return page
    frame = a.frame
    tl = engine_timeline(frame, bucket_s=float(w.step_s), exclude_warmup=False)
    t = (ints(tl, "bucket_ns") - w.start_ns) // (w.step_s * NS)
    ok = (t >= 0) & (t < n)
    names = [e if e is not None else NO_ENGINE for e in tl.column("engine").to_pylist()]
    sm = column(tl, "sm_active") * column(tl, "gpus")
    gpus = column(tl, "gpus")
    for engine in sorted(set(names)):
        mine = ok & np.array([e == engine for e in names], dtype=bool)
        busy = np.full(n, np.nan)
        count = np.full(n, np.nan)
        busy[t[mine]] = sm[mine]
        count[t[mine]] = gpus[mine]
        page.stack.append(EngineSeries(engine, _kind(engine, a), nums(busy), nums(count)))
    s = a.settings
    by_engine = rollups.rollup(frame, "engine", prices=s.prices, region=s.region)
    for row in by_engine.to_pylist():
        out = {k: row.get(k) for k in ENGINE_KEYS}
        out["engine"] = row.get("engine") or NO_ENGINE
        out["kind"] = _kind(out["engine"], a)
        out["top_waste_cause"] = top_cause(row)
        page.engines.append(clean(out))
    engines = a.context.engines if a.context is not None else None
    page.migrations = rows(recommend_engine_migration(frame, engines), MIGRATION_KEYS)
    return page
