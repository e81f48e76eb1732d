"""View models of `gpulens top`: a `LiveSnapshot` in, rows and text cells out.

Pure functions: the terminal front end (`present.top`) only copies what these return into its
widgets. Fleet means, state counts, sorting, filtering and every displayed string are built
here. Missing values stay missing: they show as "–", never as 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from statistics import fmean

from gpulens import catalog
from gpulens.app.live import GpuNow, LiveSnapshot, ProcessNow, gpu_key
from gpulens.present import format as human
from gpulens.present.names import gpu_names

MISSING = "–"

#: sort orders `s` cycles through, in order; "gpu" is host, then index
SORT_KEYS: tuple[str, ...] = (
    "gpu",
    "state",
    "duty",
    "sm",
    "tensor",
    "memory",
    "power",
    "temperature",
)

#: GPU table columns: (key, title)
GPU_COLUMNS: tuple[tuple[str, str], ...] = (
    ("gpu", "GPU"),
    ("state", "state"),
    ("duty", "duty cycle"),
    ("sm", "SM active"),
    ("tensor", "tensor"),
    ("memory", "memory GB"),
    ("power", "power W"),
    ("clock", "SM clock"),
    ("temperature", "temp"),
    ("job", "job"),
    ("user", "user"),
)

#: process table columns: (key, title)
PROCESS_COLUMNS: tuple[tuple[str, str], ...] = (
    ("gpu", "GPU"),
    ("pid", "pid"),
    ("user", "user"),
    ("job", "job"),
    ("container", "container"),
    ("engine", "engine"),
    ("name", "process"),
    ("memory", "GPU memory"),
    ("sm", "SM"),
    ("cpu", "CPU cores"),
)

#: how a state reads at a glance: bad (waste), warn (limited by something), good, neutral
STATE_TONES: Mapping[str, str] = {
    "idle_allocated": "bad",
    "hollow_busy": "bad",
    "throttled": "bad",
    "input_bound": "warn",
    "comm_bound": "warn",
    "memory_bound": "warn",
    "compute_fp32": "warn",
    "compute_tensor": "good",
    "busy": "neutral",
    "warmup": "neutral",
    "idle_unallocated": "neutral",
    "unknown": "neutral",
}
_TONE_ORDER = {"bad": 0, "warn": 1, "neutral": 2, "good": 3}


@dataclass(frozen=True, slots=True)
class GpuRow:
    """One GPU (or MIG instance): the numbers its row shows, in base units."""

    key: str
    name: str
    model: str
    state: str | None
    reason: str | None
    tone: str
    duty: float | None
    sm: float | None
    tensor: float | None
    memory_used: float | None
    memory_total: float | None
    power: float | None
    power_limit: float | None
    sm_clock_hz: float | None
    temperature: float | None
    useful: float | None
    job: str
    user: str
    processes: int
    text: str  # lower-case label text the filter searches


@dataclass(frozen=True, slots=True)
class ProcessRow:
    """One process on a GPU."""

    key: str
    gpu_key: str
    gpu: str
    pid: str
    user: str
    job: str
    container: str
    engine: str
    name: str
    memory: float | None
    sm: float | None
    cpu_cores: float | None
    rss: float | None
    text: str


@dataclass(frozen=True, slots=True)
class FleetSummary:
    """The header: fleet means of the three utilisations, totals, GPUs per state."""

    ts: int | None
    gpus: int
    duty: float | None
    sm: float | None
    tensor: float | None
    power: float | None
    power_limit: float | None
    memory_used: float | None
    memory_total: float | None
    states: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class TopView:
    """Everything the main screen shows."""

    summary: FleetSummary
    gpus: tuple[GpuRow, ...]
    processes: tuple[ProcessRow, ...]
    total_gpus: int
    total_processes: int
    sort: str
    query: str
    message: str | None
    problems: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GpuDetail:
    """Everything the detail screen shows for one GPU."""

    row: GpuRow
    labels: tuple[tuple[str, str], ...]
    attribution: tuple[tuple[str, str], ...]
    values: tuple[tuple[str, str], ...]
    processes: tuple[ProcessRow, ...]


# -- rows ----------------------------------------------------------------------------------------
def key_text(labels: Mapping[str, str]) -> str:
    """The row key of the GPU entity `labels` belong to: host, uuid and MIG instance."""
    return "|".join(gpu_key(labels))


def gpu_name(labels: Mapping[str, str]) -> str:
    """`host/index`, and `MIG <profile> #<instance>` after it for a MIG instance (alone: no
    UUID suffix; `gpu_names` tells apart the GPUs of one snapshot)."""
    return gpu_names([labels])[0]


def snapshot_names(snap: LiveSnapshot) -> dict[str, str]:
    """Row key → unambiguous name of every GPU entity of `snap` (present/names.py)."""
    labels = [g.labels for g in snap.gpus]
    return dict(zip((key_text(x) for x in labels), gpu_names(labels), strict=True))


def _text(*parts: Iterable[str]) -> str:
    return " ".join(p for part in parts for p in part if p).lower()


def gpu_row(gpu: GpuNow, processes: int = 0, name: str | None = None) -> GpuRow:
    """The row of one GPU; `processes` is how many processes run on it, `name` its name among
    the snapshot's GPUs (default: `gpu_name`)."""
    v, labels, attr = gpu.values, gpu.labels, gpu.attribution
    name = name or gpu_name(labels)
    return GpuRow(
        key=key_text(labels),
        name=name,
        model=labels.get("gpu_model", ""),
        state=gpu.state,
        reason=gpu.reason,
        tone=STATE_TONES.get(gpu.state or "", "neutral"),
        duty=v.get("gpu_util_ratio"),
        sm=v.get("sm_active_ratio"),
        tensor=v.get("tensor_active_ratio"),
        memory_used=v.get("memory_used_bytes"),
        memory_total=v.get("memory_total_bytes"),
        power=v.get("power_watts"),
        power_limit=v.get("power_limit_watts"),
        sm_clock_hz=v.get("sm_clock_hertz"),
        temperature=v.get("temperature_celsius"),
        useful=gpu.useful_ratio,
        job=attr.get("job_id", ""),
        user=attr.get("user", ""),
        processes=processes,
        text=_text(labels.values(), attr.values(), [gpu.state or "", name]),
    )


def process_row(
    proc: ProcessNow, index: int = 0, host_values: Mapping[str, float] | None = None
) -> ProcessRow:
    """The row of one process on a GPU; `index` keeps keys unique when a pid repeats,
    `host_values` are the host-side readings of the same process (CPU, resident memory)."""
    labels = proc.labels
    pid = labels.get("pid", "")
    key = key_text(labels)
    host = host_values or {}
    return ProcessRow(
        key=f"{key}|{pid}|{index}",
        gpu_key=key,
        gpu=gpu_name(labels),
        pid=pid,
        user=labels.get("user", ""),
        job=labels.get("job_id", ""),
        container=labels.get("container", "") or labels.get("pod", ""),
        engine=labels.get("engine", ""),
        name=labels.get("process_name", ""),
        memory=proc.values.get("process_memory_used_bytes"),
        sm=proc.values.get("process_sm_util_ratio"),
        cpu_cores=host.get("process_cpu_cores"),
        rss=host.get("process_rss_bytes"),
        text=_text(labels.values(), [gpu_name(labels)]),
    )


def process_rows(processes: Sequence[ProcessNow]) -> list[ProcessRow]:
    """One row per process on a GPU, in snapshot order, with the host-side readings of the
    same (host, pid) joined on; host-side readings are not rows of their own."""
    host_side: dict[tuple[str, str], Mapping[str, float]] = {}
    on_gpu: list[ProcessNow] = []
    for p in processes:
        if p.labels.get("gpu_uuid"):
            on_gpu.append(p)
        else:
            host_side[(p.labels.get("host", ""), p.labels.get("pid", ""))] = p.values
    return [
        process_row(p, i, host_side.get((p.labels.get("host", ""), p.labels.get("pid", ""))))
        for i, p in enumerate(on_gpu)
    ]


def _sort_value(row: GpuRow, sort: str) -> float | None:
    if sort == "memory":
        return row.memory_used
    if sort == "temperature":
        return row.temperature
    if sort in ("duty", "sm", "tensor", "power"):
        value: float | None = getattr(row, sort)
        return value
    return None


def sort_gpus(rows: Sequence[GpuRow], sort: str) -> list[GpuRow]:
    """Rows in `sort` order: "gpu" keeps the given order, "state" puts waste first (then by
    name), the numbers go highest first with missing values last. Ties keep the given order."""
    if sort not in SORT_KEYS:
        raise ValueError(f"unknown sort {sort!r}: use one of {', '.join(SORT_KEYS)}")
    if sort == "gpu":
        return list(rows)
    if sort == "state":
        return sorted(rows, key=lambda r: (_TONE_ORDER.get(r.tone, 2), r.state or "~"))
    present = [r for r in rows if _sort_value(r, sort) is not None]
    missing = [r for r in rows if _sort_value(r, sort) is None]
    present.sort(key=lambda r: -(_sort_value(r, sort) or 0.0))
    return present + missing


def next_sort(sort: str) -> str:
    """The sort order after `sort` in `SORT_KEYS` (wrapping round)."""
    i = SORT_KEYS.index(sort) if sort in SORT_KEYS else -1
    return SORT_KEYS[(i + 1) % len(SORT_KEYS)]


def matches(text: str, query: str) -> bool:
    """Whether every whitespace-separated term of `query` occurs in `text` (any case)."""
    return all(term in text for term in query.lower().split())


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return fmean(present) if present else None


def _total(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def fleet_summary(ts: int | None, rows: Sequence[GpuRow]) -> FleetSummary:
    """Means of duty cycle, SM and tensor activity over the GPUs that report them, totals of
    power and memory, and the number of GPUs per state (most common first)."""
    counts = Counter(r.state or "no state yet" for r in rows)
    return FleetSummary(
        ts=ts,
        gpus=len(rows),
        duty=_mean(r.duty for r in rows),
        sm=_mean(r.sm for r in rows),
        tensor=_mean(r.tensor for r in rows),
        power=_total(r.power for r in rows),
        power_limit=_total(r.power_limit for r in rows),
        memory_used=_total(r.memory_used for r in rows),
        memory_total=_total(r.memory_total for r in rows),
        states=tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
    )


def problems(snap: LiveSnapshot, notes: Sequence[str] = ()) -> tuple[str, ...]:
    """One line per collector whose last tick failed, then the feed's own notes."""
    lines = [
        f"{c.name}: {c.last_status}" + (f": {c.last_error}" if c.last_error else "")
        for c in snap.collectors
        if c.last_status in ("error", "timeout")
    ]
    return (*lines, *notes)


def _message(snap: LiveSnapshot, issues: Sequence[str], shown: int) -> str | None:
    if snap.ts is None:
        return "waiting for the first readings…"
    if snap.gpus:
        return None if shown else "no GPU matches the filter"
    if issues:
        return "no GPU readings: " + "; ".join(issues)
    names = ", ".join(c.name for c in snap.collectors) or "none"
    return (
        f"the collectors ({names}) report no GPU on this machine; "
        "`gpulens top --simulated` shows the simulated fleet"
    )


def build_top(
    snap: LiveSnapshot, sort: str = "gpu", query: str = "", notes: Sequence[str] = ()
) -> TopView:
    """The main screen for `snap`: GPUs sorted by `sort`, GPUs and processes narrowed to those
    matching `query` (a GPU also shows when one of its processes matches, a process when its
    GPU matches), the processes in the order of their GPUs, biggest GPU memory first."""
    names = snapshot_names(snap)
    procs = [replace(p, gpu=names.get(p.gpu_key, p.gpu)) for p in process_rows(snap.processes)]
    per_gpu = Counter(p.gpu_key for p in procs)
    rows = [
        gpu_row(g, per_gpu.get(key, 0), names[key])
        for g, key in ((g, key_text(g.labels)) for g in snap.gpus)
    ]
    summary = fleet_summary(snap.ts, rows)
    shown_gpus = rows
    shown_procs = procs
    if query.strip():
        gpu_hit = {r.key for r in rows if matches(r.text, query)}
        proc_hit = [p for p in procs if matches(p.text, query) or p.gpu_key in gpu_hit]
        with_proc = {p.gpu_key for p in procs if matches(p.text, query)}
        shown_gpus = [r for r in rows if r.key in gpu_hit or r.key in with_proc]
        shown_procs = proc_hit
    ordered = sort_gpus(shown_gpus, sort)
    position = {r.key: i for i, r in enumerate(ordered)}
    shown_procs = sorted(
        shown_procs, key=lambda p: (position.get(p.gpu_key, len(position)), -(p.memory or 0.0))
    )
    issues = problems(snap, notes)
    return TopView(
        summary=summary,
        gpus=tuple(ordered),
        processes=tuple(shown_procs),
        total_gpus=len(rows),
        total_processes=len(procs),
        sort=sort,
        query=query.strip(),
        message=_message(snap, issues, len(ordered)),
        problems=issues,
    )


def gpu_detail(snap: LiveSnapshot, key: str) -> GpuDetail | None:
    """The detail of the GPU whose row key is `key`, or None when it is gone."""
    procs = process_rows(snap.processes)
    mine = tuple(sorted((p for p in procs if p.gpu_key == key), key=lambda p: -(p.memory or 0)))
    for gpu in snap.gpus:
        if key_text(gpu.labels) == key:
            return GpuDetail(
                row=gpu_row(gpu, len(mine), snapshot_names(snap)[key]),
                labels=tuple(sorted(gpu.labels.items())),
                attribution=tuple(sorted(gpu.attribution.items())),
                values=tuple((n, format_value(n, v)) for n, v in sorted(gpu.values.items())),
                processes=mine,
            )
    return None


# -- text ----------------------------------------------------------------------------------------
_EIGHTHS = " ▏▎▍▌▋▊▉█"


def bar(ratio: float | None, width: int = 5) -> str:
    """`ratio` (0..1, clamped) as a bar of `width` cells drawn in eighths."""
    if ratio is None:
        return " " * width
    eighths = round(min(1.0, max(0.0, ratio)) * width * 8)
    full, part = divmod(eighths, 8)
    text = "█" * full + (_EIGHTHS[part] if part else "")
    return text.ljust(width)


def percent(ratio: float | None) -> str:
    """ "73%", or "–" when missing."""
    return MISSING if ratio is None else f"{ratio * 100:.0f}%"


def bar_cell(ratio: float | None) -> str:
    """A bar and the percentage beside it: how the three utilisations read side by side."""
    return f"{bar(ratio)} {percent(ratio):>4}"


def _num(value: float | None, fmt: str) -> str:
    return MISSING if value is None else format(value, fmt)


def pair(used: float | None, total: float | None, scale: float, fmt: str) -> str:
    """ "used/total" after dividing by `scale`; "–" for a missing side."""
    if used is None and total is None:
        return MISSING
    a = _num(None if used is None else used / scale, fmt)
    b = _num(None if total is None else total / scale, fmt)
    return f"{a}/{b}"


def gpu_cells(row: GpuRow) -> tuple[str, ...]:
    """The text of each `GPU_COLUMNS` cell."""
    return (
        row.name,
        row.state or MISSING,
        bar_cell(row.duty),
        bar_cell(row.sm),
        bar_cell(row.tensor),
        pair(row.memory_used, row.memory_total, 1e9, ".1f"),
        pair(row.power, row.power_limit, 1.0, ".0f"),
        MISSING if row.sm_clock_hz is None else f"{row.sm_clock_hz / 1e6:.0f} MHz",
        MISSING if row.temperature is None else f"{row.temperature:.0f}°C",
        row.job or MISSING,
        row.user or MISSING,
    )


def size(n: float | None) -> str:
    """Bytes in decimal units (present/format.py): "22.3 GB", "512 MB"; "–" when missing."""
    return MISSING if n is None else human.size(n)


def process_cells(row: ProcessRow) -> tuple[str, ...]:
    """The text of each `PROCESS_COLUMNS` cell."""
    return (
        row.gpu,
        row.pid or MISSING,
        row.user or MISSING,
        row.job or MISSING,
        row.container or MISSING,
        row.engine or MISSING,
        row.name or MISSING,
        size(row.memory),
        percent(row.sm),
        _num(row.cpu_cores, ".1f"),
    )


def format_value(name: str, value: float) -> str:
    """A reading's value in the unit the catalog gives it, for people (present/format.py)."""
    metric = catalog.METRICS.get(name)
    unit = metric.unit if metric is not None else ""
    if unit == "J":
        return f"{human.number(value / 3.6e6)} kWh"
    if unit == "bitmask":
        names = catalog.reason_names(int(value))
        return f"{int(value):#x}" + (f" ({', '.join(names)})" if names else "")
    return human.quantity(value, unit)


def clock_text(ts: int | None) -> str:
    """The tick time as HH:MM:SS UTC."""
    if ts is None:
        return MISSING
    return datetime.fromtimestamp(ts / 1e9, tz=UTC).strftime("%H:%M:%S UTC")


def header_text(summary: FleetSummary) -> str:
    """Fleet means, totals and GPUs per state on one line."""
    parts = [
        f"{summary.gpus} GPUs",
        f"duty {percent(summary.duty)}",
        f"SM {percent(summary.sm)}",
        f"tensor {percent(summary.tensor)}",
        f"power {pair(summary.power, summary.power_limit, 1000.0, '.1f')} kW",
        f"memory {pair(summary.memory_used, summary.memory_total, 1e9, '.0f')} GB",
    ]
    states = "  ".join(f"{name} {n}" for name, n in summary.states)
    return (
        "  ".join(parts) + (f"  │  {states}" if states else "") + f"  │  {clock_text(summary.ts)}"
    )


def status_text(view: TopView) -> str:
    """Sort order, filter and counts, after any collector problem."""
    shown = f"{len(view.gpus)} of {view.total_gpus} GPUs, "
    shown += f"{len(view.processes)} of {view.total_processes} processes"
    parts = [f"sort: {view.sort}"]
    if view.query:
        parts.append(f"filter: {view.query!r}")
    parts.append(shown)
    line = "  ·  ".join(parts)
    return "  ·  ".join(view.problems) + "\n" + line if view.problems else line


def detail_text(detail: GpuDetail) -> str:
    """The detail screen's text: identity, state and reason, useful work, attribution, every
    value, and the processes."""
    row = detail.row
    lines = [
        f"{row.name}  {row.model}",
        "",
        f"state        {row.state or MISSING}",
        f"reason       {row.reason or MISSING}",
        f"useful work  {percent(row.useful)}  (busiest math pipe's activity)",
        f"duty cycle   {percent(row.duty)}   SM active {percent(row.sm)}   "
        f"tensor active {percent(row.tensor)}",
        "",
        "labels",
        *(f"  {k:<22} {v}" for k, v in detail.labels),
    ]
    if detail.attribution:
        lines += ["", "attribution", *(f"  {k:<22} {v}" for k, v in detail.attribution)]
    lines += ["", "values", *(f"  {k:<34} {v}" for k, v in detail.values)]
    lines += ["", f"processes ({len(detail.processes)})"]
    for p in detail.processes:
        lines.append(
            f"  pid {p.pid or MISSING:<8} {p.user or MISSING:<10} job {p.job or MISSING:<12} "
            f"{p.container or MISSING:<14} {p.engine or MISSING:<10} GPU {size(p.memory):>10}  "
            f"SM {percent(p.sm):>4}  CPU {_num(p.cpu_cores, '.1f'):>5}  RSS {size(p.rss):>10}  "
            f"{p.name}"
        )
    return "\n".join(lines)
