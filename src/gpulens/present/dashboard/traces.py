"""The Traces page: the analysis of one trace or job (`gpulens.app.traces`, through the
report's view, `present.reports.trace`) as a view model, and a small cache of them.

Which traces the configured directories hold, and which files a name inside one stands for, is
`gpulens.app.trace_dirs`. Files are shown by name only, never by the server's own paths.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulens.analyze.traces.causes import CAUSES
from gpulens.analyze.traces.limits import DEFAULT_LIMITS, TraceLimits
from gpulens.analyze.traces.model import base_name
from gpulens.app.trace_dirs import file_stamps
from gpulens.app.traces import TraceJob, analyze_files
from gpulens.present.dashboard.common import num
from gpulens.present.reports.trace import build_view

#: idle gaps per rank drawn on the timeline (the longest ones)
MAX_GAPS_DRAWN = 1500


# -- the analysis view ------------------------------------------------------------------------


@dataclass
class GapSeries:
    """A rank's longest idle gaps of one cause: offsets and durations in µs from its start."""

    cause: str
    offsets_us: list[float] = field(default_factory=list)
    durations_us: list[float] = field(default_factory=list)


@dataclass
class RankView:
    """One rank's analysis: overview figures, idle gaps by cause, kernel classes, steps."""

    rank: int | None
    file: str
    device: str | None
    span_us: float | None
    kernel_time_us: float | None
    device_idle_us: float | None
    idle_share: float | None
    occupancy_pct: float | None
    tensor_core_share_of_gemm: float | None
    exposed_comm_us: float | None
    comm_us: float | None
    idle_causes: list[dict[str, Any]] = field(default_factory=list)
    kernel_classes: list[dict[str, Any]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    gaps: list[GapSeries] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class TracePage:
    """A trace's analysis as the Traces page shows it."""

    title: str
    source: str
    ranks: list[RankView] = field(default_factory=list)
    cluster: dict[str, Any] = field(default_factory=dict)
    findings: list[dict[str, Any]] = field(default_factory=list)


def _scrub(value: Any) -> Any:
    """JSON-safe copy: non-finite floats become None."""
    if isinstance(value, float):
        return num(value)
    if isinstance(value, dict):
        return {str(k): _scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(v) for v in value]
    return value


def _rank(r: dict[str, Any], gaps: list[tuple[float, float, str]], name: str) -> RankView:
    causes = r["idle_causes"]
    span = causes.get("span_us")
    kc = r["kernel_classes"]
    comm = r["communication"]
    temporal = r.get("temporal") or {}
    series = {c: GapSeries(c) for c in CAUSES}
    for offset, dur, cause in sorted(gaps, key=lambda g: -g[1])[:MAX_GAPS_DRAWN]:
        series[cause].offsets_us.append(offset)
        series[cause].durations_us.append(dur)
    return RankView(
        rank=r.get("rank"),
        file=name,
        device=r.get("device"),
        span_us=num(span),
        kernel_time_us=num(temporal.get("kernel_time_us")),
        device_idle_us=num(r.get("device_idle_us")),
        idle_share=num(causes["idle_us"] / span) if span else None,
        occupancy_pct=num(kc.get("occupancy_pct")),
        tensor_core_share_of_gemm=num(kc.get("tensor_core_share_of_gemm")),
        exposed_comm_us=num(comm.get("exposed_us")),
        comm_us=num(comm.get("comm_us")),
        idle_causes=[
            _scrub({"cause": c, **{k: v for k, v in d.items() if k != "examples"}})
            for c, d in causes["causes"].items()
        ],
        kernel_classes=[
            _scrub(
                {
                    "class": c,
                    **{k: v for k, v in d.items() if k != "top"},
                    "top_kernel": d["top"][0]["name"] if d.get("top") else None,
                }
            )
            for c, d in kc["classes"].items()
        ],
        steps=[
            _scrub(
                {
                    k: s.get(k)
                    for k in ("step", "duration_us", "kernels", "kernel_time_us", "idle_share")
                }
            )
            for s in r["steps"]
        ],
        gaps=[s for s in series.values() if s.offsets_us],
        notes=[str(n) for n in r.get("notes", [])],
    )


def trace_page(job: TraceJob, source: str) -> TracePage:
    """The page of an analysed trace or job (`gpulens.app.traces.analyze_files`); `source` is
    the name shown (files are shown by name only)."""
    view = build_view(job)
    ranks = [
        _rank(r, t.gaps, base_name(str(r["file"])))
        for r, t in zip(view.doc["ranks"], view.timelines, strict=True)
    ]
    cluster = _scrub(view.doc["cluster"])
    for row in cluster.get("per_rank", []):
        if "file" in row:
            row["file"] = base_name(str(row["file"]))
    return TracePage(
        title=view.title,
        source=source,
        ranks=ranks,
        cluster=cluster,
        findings=[_scrub(f) for f in view.doc["findings"]],
    )


class TraceCache:
    """The last few pages, keyed by the files' paths, sizes and modification times."""

    def __init__(self, size: int = 8, limits: TraceLimits = DEFAULT_LIMITS) -> None:
        self.size = size
        self.limits = limits
        self._items: OrderedDict[tuple[Any, ...], TracePage] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, files: Sequence[Path], source: str) -> TracePage:
        """The page of `files` (one trace, or the rank files of one job), analysed on a miss;
        TraceFormatError for input that is not a trace."""
        key = (*file_stamps(files), source)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        page = trace_page(analyze_files(files, limits=self.limits), source)
        with self._lock:
            self._items[key] = page
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return page
