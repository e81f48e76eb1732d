"""HTA-equivalent temporal and idle breakdowns of one rank's trace, exact to the nanosecond (pure).

Definitions (HTA's, see docs/traces.md and ../shared/notes/hta-and-kineto.md §3.1-3.2):

* temporal: over the rank's GPU rows, `kernel_time = max(end) - min(ts)`, `idle = kernel_time -
  |union of all rows|`, `compute = |union of compute rows|`, `non_compute = kernel_time -
  compute - idle`; a row is compute when its name matches none of HTA's non-compute patterns.
* idle per stream: consecutive kernels/memcpys/memsets of a stream in `ts` order; the gap before
  each is `host_wait` when its launch call started after the previous one ended, else
  `kernel_wait` when shorter than 30 µs, else `other`.
* device idle (not in HTA): the same classification applied to the gaps in the union of all
  streams of one device: a GPU is idle only when no stream runs.

Modes: by default every GPU activity (kernel, memcpy, memset, MTIA ccp) of the file counts, exact
ns, and a GPU event whose launch is not in the trace is never "host wait". `hta_window=True`
keeps HTA's ProfilerStep window (when the job has at least two `ProfilerStep#N` names: CPU rows
before the start of the last step and the GPU rows they launched); `hta_quirks=True` also copies
HTA's rules we disagree with (cuda_sync rows with a stream count as GPU time; a GPU row without
a launch takes the `ts` of the file's first event as its launch time).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from gpulens.analyze.traces.arrays import distinct
from gpulens.analyze.traces.model import (
    GPU_WORK_CATEGORIES,
    MISSING,
    Bools,
    Ints,
    Trace,
)
from gpulens.analyze.traces.record import Record, field

KERNEL_WAIT_NS = 30_000  # HTA's consecutive_kernel_delay: 30 (µs, although documented as ns)
# HTA (traceinsight 0.6.x) non-compute names; anything else on the GPU is computation.
NON_COMPUTE = re.compile(
    r"(^nccl)|(.*Memcpy)|(.*Memset)|(.*dma)|(^.*Sync)|(^Stream Wait Event)|(cuda.*LaunchKernel)"
    r"|(^runFunction)|(^hip)|(^job_exe)|(^packet)|(^pe_exe)|(^cpum_exe_subgraph)|(^hccl)"
    r"|(^collective_subgraph_execution)"
)
PROFILER_STEP = re.compile(r"^ProfilerStep#\d+")
_SYNC_BY_NAME = ("Event Sync", "Context Sync")


class Temporal(Record):
    """HTA's temporal breakdown of one rank, in integer ns (`*_us` for µs floats)."""

    kernel_time_ns: int
    idle_ns: int
    compute_ns: int
    non_compute_ns: int

    def as_us(self) -> dict[str, float]:
        return {
            "kernel_time_us": self.kernel_time_ns / 1000,
            "idle_us": self.idle_ns / 1000,
            "compute_us": self.compute_ns / 1000,
            "non_compute_us": self.non_compute_ns / 1000,
        }


class IdleSplit(Record):
    """Idle gaps split by cause: one stream (HTA) or one device over all its streams (ours)."""

    key: int  # stream id, or device (pid) for device idle
    host_wait_ns: int
    kernel_wait_ns: int
    other_ns: int
    gaps: int
    gaps_without_launch: int  # gaps whose next event has no launch call in the trace

    @property
    def idle_ns(self) -> int:
        return self.host_wait_ns + self.kernel_wait_ns + self.other_ns

    def as_us(self) -> dict[str, float]:
        return {
            "host_wait_us": self.host_wait_ns / 1000,
            "kernel_wait_us": self.kernel_wait_ns / 1000,
            "other_us": self.other_ns / 1000,
        }


class DeviceIdle(Record):
    """Union of all streams of one device: span, busy and idle (split by cause), ns."""

    device: int
    span_ns: int
    busy_ns: int
    split: IdleSplit

    @property
    def idle_ns(self) -> int:
        return self.span_ns - self.busy_ns


class RankBreakdown(Record):
    rank: int | None
    temporal: Temporal | None  # None when the selection has no GPU rows
    idle_by_stream: list[IdleSplit]
    device_idle: list[DeviceIdle]
    window_end_ns: int | None = None  # start of the last ProfilerStep when the HTA window applied
    notes: list[str] = field(default_factory=list)


def union_length(starts: Ints, ends: Ints) -> int:
    """|∪ [start, end)|, merging an interval that starts at or before the running end (as HTA)."""
    segments = merge_intervals(starts, ends)
    return int((segments[1] - segments[0]).sum())


def merge_intervals(starts: Ints, ends: Ints, *, in_order: bool = False) -> tuple[Ints, Ints]:
    """Merged segments (starts, ends) of intervals sorted by start; touching intervals merge.
    `in_order`: the intervals already come sorted by start (no copy is made)."""
    if starts.size == 0:
        return starts[:0], ends[:0]
    if in_order:
        s, e = starts, ends
    else:
        order = np.argsort(starts, kind="stable")
        s, e = starts[order], ends[order]
        del order
    run_end = np.maximum.accumulate(e)
    new = np.empty(s.size, dtype=np.bool_)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, s.size - 1)
    return s[first], run_end[last]


def compute_name_flags(names: list[str]) -> Bools:
    """One flag per name: True when HTA classifies it as COMPUTATION."""
    return np.fromiter((NON_COMPUTE.match(n) is None for n in names), np.bool_, len(names))


def profiler_step_names(trace: Trace) -> set[str]:
    return {n for n in trace.names if PROFILER_STEP.match(n)}


def _parsed_rows(trace: Trace) -> Bools:
    """Rows HTA keeps after parsing: with a `dur` and a `cat`, not the `Trace` span."""
    ev = trace.events
    keep = ev.has_dur & (ev.category >= 0)
    if "Trace" in trace.categories:
        keep &= ev.category != trace.categories.index("Trace")
    return keep


def _hta_gpu_rows(trace: Trace) -> Bools:
    """HTA's GPUKernelFilter: stream >= 0 and correlation >= 0, or an Event/Context Sync."""
    ev = trace.events
    by_name = np.asarray([n in _SYNC_BY_NAME for n in trace.names], dtype=np.bool_)
    return ((ev.stream >= 0) & (ev.correlation >= 0)) | trace.name_mask(by_name)


def _launch_ts(trace: Trace, cpu: Bools, gpu_rows: npt.NDArray[np.intp]) -> Ints:
    """ts of the launching CPU row (same correlation) per GPU row; -1 where there is none.

    Where several CPU rows share a correlation the first in file order is taken.
    """
    ev = trace.events
    out = np.full(gpu_rows.size, MISSING, dtype=np.int64)
    cand = np.flatnonzero(cpu & (ev.correlation != MISSING))
    if cand.size == 0 or gpu_rows.size == 0:
        return out
    corr = ev.correlation[cand]
    order = np.lexsort((cand, corr))
    corr_sorted, rows_sorted = corr[order], cand[order]
    uniq, first = np.unique(corr_sorted, return_index=True)
    launch_rows = rows_sorted[first]
    want = ev.correlation[gpu_rows]
    pos = np.clip(np.searchsorted(uniq, want), 0, max(uniq.size - 1, 0))
    found = (uniq[pos] == want) & (want != MISSING)
    out[found] = ev.ts_ns[launch_rows[pos[found]]]
    return out


def _classify(
    gap_ns: Ints, prev_end_ns: Ints, launch_ns: Ints, known: Bools, delay_ns: int
) -> tuple[int, int, int]:
    host = known & (launch_ns > prev_end_ns)
    kernel = ~host & (gap_ns < delay_ns)
    other = ~host & ~kernel
    return int(gap_ns[host].sum()), int(gap_ns[kernel].sum()), int(gap_ns[other].sum())


def _groups(
    trace: Trace, rows: npt.NDArray[np.intp], keys: Ints, launch: Ints, known: Bools
) -> Iterator[tuple[int, Ints, Ints, Ints, Bools]]:
    """Per distinct key (stream or device): (key, start, end, launch, known) of its rows, in
    time order (file order among equal starts: `rows` come in file order, and the sort is
    stable). One key, the common case, takes no copy of the rows."""
    ev = trace.events
    keyset = distinct(keys)
    for key in keyset:
        sel = None if keyset.size == 1 else np.flatnonzero(keys == key)
        r = rows if sel is None else rows[sel]
        ts = ev.ts_ns[r]
        order = np.argsort(ts, kind="stable")
        ts = ts[order]
        end = ts + ev.dur_ns[r[order]]
        del r
        pick = order if sel is None else sel[order]
        del order, sel
        yield int(key), ts, end, launch[pick], known[pick]
        del ts, end, pick


def _stream_idle(
    trace: Trace,
    rows: npt.NDArray[np.intp],
    launch: Ints,
    known: Bools,
    delay_ns: int,
) -> list[IdleSplit]:
    out: list[IdleSplit] = []
    for stream, ts, end, lt, kn in _groups(trace, rows, trace.events.stream[rows], launch, known):
        prev_end = end[:-1]
        gap = ts[1:] - prev_end
        host, kernel, other = _classify(gap, prev_end, lt[1:], kn[1:], delay_ns)
        out.append(IdleSplit(stream, host, kernel, other, int(gap.size), int((~kn[1:]).sum())))
    return out


def _device_idle(
    trace: Trace,
    rows: npt.NDArray[np.intp],
    launch: Ints,
    known: Bools,
    delay_ns: int,
) -> list[DeviceIdle]:
    out: list[DeviceIdle] = []
    for device, ts, end, lt, kn in _groups(trace, rows, trace.events.pid[rows], launch, known):
        seg_start, seg_end = merge_intervals(ts, end, in_order=True)
        busy = int((seg_end - seg_start).sum())
        span = int(end.max() - ts.min())
        # the event that opens each segment after the first: first row (ts order) at its start
        opener = np.searchsorted(ts, seg_start[1:], side="left")
        gap = seg_start[1:] - seg_end[:-1]
        host, kernel, other = _classify(gap, seg_end[:-1], lt[opener], kn[opener], delay_ns)
        split = IdleSplit(device, host, kernel, other, int(gap.size), int((~kn[opener]).sum()))
        out.append(DeviceIdle(device, span, busy, split))
    return out


def hta_window_end(trace: Trace, cpu: Bools) -> int | None:
    """Start (ns) of the last `ProfilerStep#N` CPU row, or None without one."""
    flags = np.asarray([PROFILER_STEP.match(n) is not None for n in trace.names], np.bool_)
    steps = np.flatnonzero(cpu & trace.name_mask(flags))
    return int(trace.events.ts_ns[steps].max()) if steps.size else None


class Selection(Record):
    """The rows one rank's HTA-comparable analyses read (masks over the event table)."""

    selected: Bools  # parsed rows, within HTA's window when it applies
    cpu: Bools  # parsed rows that are not GPU rows by HTA's filter (whole file)
    window_end_ns: int | None
    notes: list[str]


def selection(
    trace: Trace, *, hta_window: bool = False, job_step_names: int | None = None
) -> Selection:
    """Rows HTA keeps (with `hta_window`: its ProfilerStep window, see `breakdown`)."""
    ev = trace.events
    notes: list[str] = []
    parsed = _parsed_rows(trace)
    gpu = parsed & _hta_gpu_rows(trace)
    cpu = parsed & ~gpu
    selected = parsed.copy()
    window_end: int | None = None
    if hta_window:
        n_steps = job_step_names if job_step_names is not None else len(profiler_step_names(trace))
        window_end = hta_window_end(trace, cpu) if n_steps >= 2 else None
        if window_end is not None:
            kept_cpu = cpu & (ev.ts_ns < window_end)
            kept_corr = distinct(ev.correlation[kept_cpu])
            selected = kept_cpu | (gpu & np.isin(ev.correlation, kept_corr))
            notes.append(f"HTA window: events before {window_end} ns (last ProfilerStep start)")
        else:
            notes.append("HTA window: fewer than 2 ProfilerStep names, all events kept")

    return Selection(selected, cpu, window_end, notes)


def breakdown(
    trace: Trace,
    *,
    hta_window: bool = False,
    hta_quirks: bool = False,
    job_step_names: int | None = None,
    consecutive_kernel_delay_ns: int = KERNEL_WAIT_NS,
) -> RankBreakdown:
    """Temporal breakdown, per-stream idle and device idle of one rank's trace.

    `hta_window`: apply HTA's ProfilerStep window when the job has >= 2 distinct step names
    (`job_step_names`, counted over all ranks; by default this trace's). `hta_quirks`: copy
    HTA's cuda_sync and missing-launch rules (module docstring).
    """
    ev = trace.events
    sel = selection(trace, hta_window=hta_window, job_step_names=job_step_names)
    selected, cpu, window_end, notes = sel.selected, sel.cpu, sel.window_end_ns, list(sel.notes)
    work = selected & trace.category_mask(GPU_WORK_CATEGORIES)
    temporal_rows = selected & (ev.stream != MISSING) if hta_quirks else work
    temporal = _temporal(trace, np.flatnonzero(temporal_rows))

    idle_rows = np.flatnonzero(work & (ev.stream != MISSING))
    launch = _launch_ts(trace, cpu, idle_rows)
    known = launch != MISSING
    if hta_quirks:
        # HTA points a correlated GPU row without a partner at row 0 (`min(correlation, 0)`)
        # and an uncorrelated one at row -1, which does not exist (never host wait).
        first = np.flatnonzero(selected & (ev.index == 0))
        orphan = ~known & (ev.correlation[idle_rows] >= 0)
        if first.size:
            launch = np.where(orphan, ev.ts_ns[first[0]], launch)
            known = known | orphan
    streams = _stream_idle(trace, idle_rows, launch, known, consecutive_kernel_delay_ns)
    del idle_rows, launch, known  # held no longer than needed: the peak of a large trace
    device_rows = np.flatnonzero(work)
    d_launch = _launch_ts(trace, cpu, device_rows)
    d_known = d_launch != MISSING
    devices = _device_idle(trace, device_rows, d_launch, d_known, consecutive_kernel_delay_ns)
    return RankBreakdown(trace.rank, temporal, streams, devices, window_end, notes)


def _temporal(trace: Trace, rows: npt.NDArray[np.intp]) -> Temporal | None:
    if rows.size == 0:
        return None
    ev = trace.events
    ts = ev.ts_ns[rows]
    end = ts + ev.dur_ns[rows]
    kernel_time = int(end.max() - ts.min())
    idle = kernel_time - union_length(ts, end)
    compute = np.append(compute_name_flags(trace.names), False)[ev.name[rows]]
    compute_ns = union_length(ts[compute], end[compute])
    return Temporal(kernel_time, idle, compute_ns, kernel_time - compute_ns - idle)


def job_step_name_count(traces: list[Trace]) -> int:
    """Distinct `ProfilerStep#N` names over all ranks (HTA's global symbol table)."""
    names: set[str] = set()
    for t in traces:
        names |= profiler_step_names(t)
    return len(names)
