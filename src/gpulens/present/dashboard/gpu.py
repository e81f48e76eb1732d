"""The GPU page: one GPU's duty cycle, SM, tensor and DRAM activity, memory, power and clock
over time, with its jobs' warm-ups and the events (deploys, version changes, engine builds and
their failures, fallbacks) that touched it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from gpulens.analyze.efficiency import Thresholds
from gpulens.analyze.events import attach_events
from gpulens.analyze.phases import warmup_windows
from gpulens.present.dashboard.common import (
    Settings,
    column,
    ints,
    nums,
)
from gpulens.present.dashboard.window import NS, Window, WindowInfo
from gpulens.present.names import gpu_names, gpu_order
from gpulens.store import Store
from gpulens.store.events import day, events
from gpulens.store.frames import gpu_intervals

#: series of the GPU page: frame column → series name (base units)
SERIES: tuple[tuple[str, str], ...] = (
    ("duty", "duty"),
    ("sm_active", "sm_active"),
    ("tensor_active", "tensor_active"),
    ("dram_active", "dram_active"),
    ("memory_used_bytes", "memory_used_bytes"),
    ("memory_total_bytes", "memory_total_bytes"),
    ("power_w", "power_watts"),
    ("power_limit_w", "power_limit_watts"),
    ("sm_clock_hz", "sm_clock_hertz"),
    ("sm_clock_max_hz", "sm_clock_max_hertz"),
)


class UnknownGpu(LookupError):
    """No readings of the requested GPU in the store."""


@dataclass
class Span:
    """A shaded stretch of time (a job's warm-up on this GPU)."""

    start_ns: int
    end_ns: int
    job_id: str | None
    capped: bool = False  # not settled by the longest warm-up allowed: cut there

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / NS


@dataclass
class EventMark:
    """One event on this GPU's timeline; `category` from `analyze.events.categorise`."""

    ts_ns: int
    event: str | None
    category: str
    message: str | None
    job_id: str | None
    host: str | None = None  # where the mark lists events of several hosts

    @property
    def label(self) -> str:
        """The mark's short text: "TensorRT unavailable" for an engine fallback (the part of
        its message before the reason), else the event's name."""
        if self.category == "engine_fallback" and self.message and ":" in self.message:
            return self.message.split(":", 1)[0]
        return self.event or self.category


@dataclass
class GpuPage:
    """Everything a GPU page shows; `series` maps names (SERIES) to values per `times_ns`."""

    window: WindowInfo
    gpu_uuid: str
    label: str
    host: str | None
    gpu_index: str | None
    gpu_model: str | None
    jobs: list[str] = field(default_factory=list)
    times_ns: list[int] = field(default_factory=list)
    series: dict[str, list[float | None]] = field(default_factory=dict)
    warmups: list[Span] = field(default_factory=list)
    events: list[EventMark] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class GpuEntry:
    """One GPU of the store, for the GPU list."""

    gpu_uuid: str
    label: str
    host: str | None
    gpu_index: str | None
    gpu_model: str | None


GPUS_SQL = """
SELECT gpu_uuid, any_value(host) AS host, any_value(gpu_index) AS gpu_index,
       any_value(gpu_model) AS gpu_model, any_value(mig_instance) AS mig_instance,
       any_value(mig_profile) AS mig_profile, any_value(parent_uuid) AS parent_uuid
FROM gpu
WHERE gpu_uuid IS NOT NULL AND date >= $start_date::DATE
GROUP BY gpu_uuid
"""


def gpu_list(store: Store, latest_ns: int | None) -> list[GpuEntry]:
    """The GPUs with readings on the newest day of the store (and the day before)."""
    if latest_ns is None:
        return []
    table = store.query(GPUS_SQL, {"start_date": day(latest_ns - 86400 * NS)})
    found = sorted(table.to_pylist(), key=gpu_order)  # each MIG instance under its parent
    return [
        GpuEntry(r["gpu_uuid"], label, r["host"], r["gpu_index"], r["gpu_model"])
        for r, label in zip(found, gpu_names(found), strict=True)
    ]


def _first(table: pa.Table, name: str) -> str | None:
    if name not in table.column_names:
        return None
    for v in table.column(name).to_pylist():
        if v is not None:
            return str(v)
    return None


def _identity(frame: pa.Table) -> dict[str, Any]:
    """The naming labels of the frame's GPU entity (its first row)."""
    keys = ("host", "gpu_index", "gpu_uuid", "mig_instance", "parent_uuid", "mig_profile")
    return {k: _first(frame, k) for k in keys if k in frame.column_names}


def gpu_page(store: Store, gpu_uuid: str, window: Window, settings: Settings) -> GpuPage:
    """The GPU page of `gpu_uuid` over `window`; UnknownGpu when the window has no reading
    of it."""
    frame = gpu_intervals(
        store,
        step_s=float(window.step_s),
        start_ns=window.start_ns,
        end_ns=window.end_ns,
        where={"gpu_uuid": gpu_uuid},
        max_gap_s=settings.max_gap_s,
    )
    if frame.num_rows == 0:
        raise UnknownGpu(
            f"GPU {gpu_uuid!r} has no readings between {window.start_ns} and {window.end_ns} ns"
        )
    host, index = _first(frame, "host"), _first(frame, "gpu_index")
    page = GpuPage(
        window=WindowInfo.of(window),
        gpu_uuid=gpu_uuid,
        label=gpu_names([_identity(frame)])[0],
        host=host,
        gpu_index=index,
        gpu_model=_first(frame, "gpu_model"),
        jobs=sorted({str(j) for j in frame.column("job_id").to_pylist() if j is not None}),
    )
    n = window.points
    page.times_ns = [window.start_ns + i * window.step_s * NS for i in range(n)]
    t = (ints(frame, "start_ns") - window.start_ns) // (window.step_s * NS)
    ok = (t >= 0) & (t < n)
    for col, name in SERIES:
        values = np.full(n, np.nan)
        values[t[ok]] = column(frame, col)[ok]
        page.series[name] = nums(values)
    th = settings.states or Thresholds()
    windows = warmup_windows(
        frame,
        band=th.warmup_band,
        settle=th.warmup_settle,
        memory_ratio=th.warmup_memory_ratio,
        max_warmup_s=th.warmup_max_s,
        idle_memory_bytes=th.idle_memory_bytes,
    )
    page.warmups = [
        Span(r["start_ns"], r["end_ns"], r["job_id"], bool(r["capped"]))
        for r in windows.to_pylist()
    ]
    if host is not None:
        page.events = _events(store, frame, window, host, gpu_uuid)
    return page


def _events(
    store: Store, frame: pa.Table, window: Window, host: str, gpu_uuid: str
) -> list[EventMark]:
    """The events of the window that touched this GPU (`analyze.events.attach_events`: same
    host, same GPU and job when the event names them), plus host-wide events that matched no
    GPU row; each once."""
    ev = events(store, window.start_ns, window.end_ns, host)
    if ev.num_rows == 0:
        return []
    out: list[EventMark] = []
    seen: set[tuple[int, str | None, str | None]] = set()
    for r in attach_events(frame, ev, window_ns=window.step_s * NS).to_pylist():
        mine = r["gpu_uuid"] == gpu_uuid
        host_wide = r["rows"] == 0 and r["job_id"] is None and r["gpu_uuid"] is None
        key = (r["ts"], r["event"], r["message"])
        if (mine or host_wide) and key not in seen:
            seen.add(key)
            out.append(EventMark(r["ts"], r["event"], r["category"], r["message"], r["job_id"]))
    return out
