"""The Traces page: the profiler traces under the configured directories, opened by name only
inside them, and the analysis of one (`present.trace_report`), as a view model.

Names are relative to one of `trace_dirs`; a name is resolved (symlinks followed) and must
stay inside its directory, so neither `..` nor a symlink pointing elsewhere reaches a file
outside. Paths shown are these relative names, never the server's own paths.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from gpulens.analyze.traces.causes import CAUSES
from gpulens.present.dashboard.common import num
from gpulens.present.reports.trace import TRACE_SUFFIXES, build_view

MAX_LISTED = 500
MAX_DEPTH = 4
#: idle gaps per rank drawn on the timeline (the longest ones)
MAX_GAPS_DRAWN = 1500


class TracePathError(ValueError):
    """A trace name that is not a trace file or directory inside the configured directories;
    `status` is the HTTP status that says why."""

    status = 422


class TraceNotFound(TracePathError):
    status = 404


class TraceOutside(TracePathError):
    status = 403


class TraceTooLarge(TracePathError):
    status = 413


@dataclass
class TraceEntry:
    """A trace the page can open: a file, or a directory of one job's rank files."""

    dir: int
    name: str
    kind: str  # "file" or "job"
    size_bytes: int
    files: int = 1


def _is_trace(path: Path) -> bool:
    return path.name.endswith(TRACE_SUFFIXES)


def _inside(path: Path, base: Path) -> bool:
    try:
        return path.resolve(strict=True).is_relative_to(base)
    except (OSError, RuntimeError):
        return False


def list_traces(dirs: Sequence[Path], limit: int = MAX_LISTED) -> list[TraceEntry]:
    """Trace files (and directories holding several, as one job each) under `dirs`, walked
    `MAX_DEPTH` levels deep; entries whose real path leaves their directory are skipped."""
    out: list[TraceEntry] = []
    for i, raw in enumerate(dirs):
        try:
            base = Path(raw).resolve(strict=True)
        except (OSError, RuntimeError):
            continue
        if not base.is_dir():
            continue
        stack: list[tuple[Path, int]] = [(base, 0)]
        while stack and len(out) < limit:
            folder, depth = stack.pop()
            try:
                children = sorted(folder.iterdir())
            except OSError:
                continue
            files = [c for c in children if c.is_file() and _is_trace(c) and _inside(c, base)]
            rel = folder.relative_to(base).as_posix()
            if len(files) > 1 and folder != base:
                size = sum(f.stat().st_size for f in files)
                out.append(TraceEntry(i, rel, "job", size, len(files)))
            for f in files:
                out.append(TraceEntry(i, f.relative_to(base).as_posix(), "file", f.stat().st_size))
            if depth < MAX_DEPTH:
                subdirs = [c for c in children if c.is_dir() and not c.is_symlink()]
                stack.extend((d, depth + 1) for d in reversed(subdirs))
    return out[:limit]


def resolve_trace(dirs: Sequence[Path], dir_index: int, name: str, max_bytes: int) -> list[Path]:
    """The files of trace `name` in `dirs[dir_index]`: the file itself, or the rank files of a
    directory. TracePathError for anything outside the directory, missing, not a trace, or
    larger than `max_bytes` in all."""
    if not 0 <= dir_index < len(dirs):
        raise TraceNotFound(
            f"trace directory {dir_index} does not exist: {len(dirs)} directories are configured"
        )
    rel = PurePosixPath(name)
    if not name or "\x00" in name or "\\" in name or rel.is_absolute() or ".." in rel.parts:
        raise TracePathError(
            f"trace name {name!r} is not a relative path inside the trace directory"
        )
    try:
        base = Path(dirs[dir_index]).resolve(strict=True)
        target = (base / rel).resolve(strict=True)
    except (OSError, RuntimeError):
        raise TraceNotFound(
            f"trace {name!r} does not exist in trace directory {dir_index}"
        ) from None
    if not target.is_relative_to(base):
        raise TraceOutside(f"trace {name!r} leads outside its trace directory: refused")
    if target.is_dir():
        files = sorted(f for f in target.iterdir() if f.is_file() and _is_trace(f))
        files = [f.resolve() for f in files if _inside(f, base)]
        if not files:
            raise TracePathError(f"{name!r} holds no trace files (*.json, *.json.gz)")
    elif target.is_file() and _is_trace(target):
        files = [target]
    else:
        raise TracePathError(f"{name!r} is not a trace file (*.json, *.json.gz)")
    size = sum(f.stat().st_size for f in files)
    if size > max_bytes:
        raise TraceTooLarge(f"{name!r} is {size:,} bytes; the limit is {max_bytes:,} bytes")
    return files


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


def trace_page(files: Sequence[Path], source: str) -> TracePage:
    """Analyse `files` (one trace, or the rank files of one job); `source` is the name shown
    (file paths are shown by name only). TraceFormatError for input that is not a trace."""
    view = build_view(files)
    names = {str(p): Path(p).name for p in files}
    ranks = [
        _rank(r, t.gaps, names.get(str(r["file"]), Path(str(r["file"])).name))
        for r, t in zip(view.doc["ranks"], view.timelines, strict=True)
    ]
    cluster = _scrub(view.doc["cluster"])
    for row in cluster.get("per_rank", []):
        if "file" in row:
            row["file"] = Path(str(row["file"])).name
    return TracePage(
        title=view.title,
        source=source,
        ranks=ranks,
        cluster=cluster,
        findings=[_scrub(f) for f in view.doc["findings"]],
    )


class TraceCache:
    """The last few analyses, keyed by the files' paths, sizes and modification times."""

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self._items: OrderedDict[tuple[Any, ...], TracePage] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, files: Sequence[Path], source: str) -> TracePage:
        key = (*((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files), source)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        page = trace_page(files, source)
        with self._lock:
            self._items[key] = page
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return page
