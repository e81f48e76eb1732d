"""Why the device was idle: each device-level idle gap attributed to its CPU-side cause (pure).

A gap is a time when no stream of a device runs any kernel, memcpy or memset (the gaps of the
union of all streams, between the device's first and last activity). Each gap gets one cause,
decided from what the CPU threads did during it, in this order:

1. `data_loader` — a data-loader range (`enumerate(DataLoader)#…__next__`, `…DataLoader…`)
   covers at least half of the gap: the GPU waited for the next batch.
2. `sync` — a synchronising call overlaps the gap: `cudaStreamSynchronize`,
   `cudaDeviceSynchronize`, `cudaEventSynchronize`, synchronous `cudaMemcpy` (and the HIP
   equivalents, `hipMemcpyWithStream`), `aten::item`, `aten::_local_scalar_dense`, or a
   `cudaMemcpyAsync` whose copy goes to or from pageable memory. The CPU waited for the GPU to
   drain, so nothing was queued behind it.
3. `unknown` — the activity that ends the gap has no launch call in the trace (CUDA-graph
   replay, launched before the profiler started).
4. `gpu_wait` — the activity that ends the gap was launched before the gap began: the GPU
   waited on something else (a cross-stream event, a dependency, launch latency).
5. `launch_overhead` — it was launched during the gap and the gap is shorter than
   `launch_gap_ns` (default 50 µs): per-kernel dispatch and launch cost.
6. `cpu_ops` — launched during a longer gap: the CPU was busy in Python or operator code.

Totals and shares are per cause over all gaps; examples are the longest gaps of each cause with
the CPU event that explains them. For the `cpu_ops` gaps, `cpu_ops_busy_ns` is the part during
which a profiled CPU operator or Python function (`cpu_op`, `python_function`) runs on some
thread, and `cpu_ops_python_ns` the part covered by Python functions (traces recorded with
`with_stack=True`): whether the CPU was really busy, and in what.
"""

from __future__ import annotations

import re

import numpy as np
import numpy.typing as npt

from gpulens.analyze.traces.arrays import distinct
from gpulens.analyze.traces.breakdown import merge_intervals
from gpulens.analyze.traces.kernels import gpu_work_rows
from gpulens.analyze.traces.model import LAUNCH_CATEGORIES, MISSING, Ints, Trace
from gpulens.analyze.traces.record import Record

CAUSES = ("data_loader", "sync", "launch_overhead", "cpu_ops", "gpu_wait", "unknown")
LAUNCH_GAP_NS = 50_000
DATA_LOADER_COVER = 0.5
CPU_CATEGORIES = frozenset({"cpu_op", "Operator", "user_annotation", "python_function"}) | (
    LAUNCH_CATEGORIES
)
OP_CATEGORIES = frozenset({"cpu_op", "Operator", "python_function"})
PYTHON_CATEGORIES = frozenset({"python_function"})
DATA_LOADER = re.compile(r"enumerate\(DataLoader\)|DataLoader.*__next__|dataloader", re.I)
SYNC_CALLS = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cudaMemcpy2D",
        "cudaMemcpyFromSymbol",
        "hipStreamSynchronize",
        "hipDeviceSynchronize",
        "hipEventSynchronize",
        "hipMemcpy",
        "hipMemcpyWithStream",
        "aten::item",
        "aten::_local_scalar_dense",
    }
)
ASYNC_COPY_CALLS = frozenset({"cudaMemcpyAsync", "hipMemcpyAsync"})
_PROFILER_STEP = re.compile(r"^ProfilerStep#")


def cpu_rows(trace: Trace) -> npt.NDArray[np.intp]:
    return np.flatnonzero(trace.category_mask(CPU_CATEGORIES) & trace.events.has_dur)


def launch_rows(trace: Trace, gpu: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
    """Row of the launch call (runtime/driver, same correlation) per GPU row; -1 where none."""
    ev = trace.events
    out = np.full(gpu.size, MISSING, dtype=np.intp)
    cand = np.flatnonzero(trace.category_mask(LAUNCH_CATEGORIES) & (ev.correlation != MISSING))
    if cand.size == 0 or gpu.size == 0:
        return out
    corr = ev.correlation[cand]
    order = np.lexsort((cand, corr))
    uniq, first = np.unique(corr[order], return_index=True)
    launch = cand[order][first]
    want = ev.correlation[gpu]
    pos = np.clip(np.searchsorted(uniq, want), 0, uniq.size - 1)
    found = (uniq[pos] == want) & (want != MISSING)
    out[found] = launch[pos[found]]
    return out


def covered(seg_start: Ints, seg_end: Ints, a: Ints, b: Ints) -> Ints:
    """Length of the union segments (sorted, disjoint) inside each [a, b)."""
    if seg_start.size == 0:
        return np.zeros(a.size, dtype=np.int64)
    length = seg_end - seg_start
    before = np.concatenate(([0], np.cumsum(length)))

    def upto(x: Ints) -> Ints:
        k = np.searchsorted(seg_start, x, side="right")
        j = np.maximum(k - 1, 0)
        part = np.clip(x - seg_start[j], 0, length[j])
        out: Ints = np.where(k > 0, before[j] + part, 0)
        return out

    result: Ints = np.maximum(upto(b) - upto(a), 0)
    return result


def _union(trace: Trace, rows: npt.NDArray[np.intp]) -> tuple[Ints, Ints]:
    ev = trace.events
    return merge_intervals(ev.ts_ns[rows], ev.ts_ns[rows] + ev.dur_ns[rows])


class Gaps(Record):
    """Device idle gaps, one entry per gap (ts order within each device)."""

    device: Ints
    start_ns: Ints
    end_ns: Ints
    cause: npt.NDArray[np.int32]  # index into CAUSES
    next_row: npt.NDArray[np.intp]  # the GPU row that ends the gap
    cpu_row: npt.NDArray[np.intp]  # the CPU row that explains it (-1: none)

    @property
    def dur_ns(self) -> Ints:
        return self.end_ns - self.start_ns

    def __len__(self) -> int:
        return int(self.start_ns.size)


class GapExample(Record):
    device: int
    start_ns: int
    dur_ns: int
    cpu_event: str | None
    cpu_ts_ns: int | None
    cpu_dur_ns: int | None
    next_gpu_event: str

    def to_dict(self, origin_ns: int) -> dict[str, object]:
        return {
            "device": self.device,
            "offset_us": (self.start_ns - origin_ns) / 1000,
            "ts_ns": self.start_ns,
            "duration_us": self.dur_ns / 1000,
            "cpu_event": self.cpu_event,
            "cpu_event_offset_us": None
            if self.cpu_ts_ns is None
            else (self.cpu_ts_ns - origin_ns) / 1000,
            "cpu_event_duration_us": None if self.cpu_dur_ns is None else self.cpu_dur_ns / 1000,
            "next_gpu_event": self.next_gpu_event,
        }


class CauseTotal(Record):
    cause: str
    idle_ns: int
    gaps: int
    share_of_idle: float
    share_of_span: float
    examples: list[GapExample]


class IdleCauses(Record):
    span_ns: int  # sum over devices of first activity → last activity
    idle_ns: int
    causes: dict[str, CauseTotal]
    gaps: Gaps
    kernels_with_launch: int
    kernels_shorter_than_launch: int  # GPU kernels whose duration < their launch call's
    cpu_ops_busy_ns: int = 0  # cpu_ops gap time with a CPU operator / Python function running
    cpu_ops_python_ns: int = 0  # … with a Python function running

    def idle(self, cause: str) -> int:
        return self.causes[cause].idle_ns

    def share(self, cause: str) -> float:
        return self.causes[cause].share_of_span

    def to_dict(self, origin_ns: int) -> dict[str, object]:
        return {
            "span_us": self.span_ns / 1000,
            "idle_us": self.idle_ns / 1000,
            "gaps": len(self.gaps),
            "kernels_with_launch": self.kernels_with_launch,
            "kernels_shorter_than_launch": self.kernels_shorter_than_launch,
            "cpu_ops_busy_us": self.cpu_ops_busy_ns / 1000,
            "cpu_ops_python_us": self.cpu_ops_python_ns / 1000,
            "causes": {
                c.cause: {
                    "idle_us": c.idle_ns / 1000,
                    "gaps": c.gaps,
                    "share_of_idle": c.share_of_idle,
                    "share_of_span": c.share_of_span,
                    "examples": [e.to_dict(origin_ns) for e in c.examples],
                }
                for c in self.causes.values()
            },
        }


def _name(trace: Trace, row: int) -> str:
    code = int(trace.events.name[row])
    return trace.names[code] if code >= 0 else ""


def _best_overlap(
    trace: Trace, rows: npt.NDArray[np.intp], start: int, end: int, specific: bool
) -> int:
    """The row of `rows` overlapping [start, end) most (ties: the shortest if `specific`)."""
    if rows.size == 0:
        return MISSING
    ev = trace.events
    ts, te = ev.ts_ns[rows], ev.ts_ns[rows] + ev.dur_ns[rows]
    overlap = np.minimum(te, end) - np.maximum(ts, start)
    best = overlap.max()
    if best <= 0:
        return MISSING
    cand = np.flatnonzero(overlap == best)
    pick = cand[np.argmin(ev.dur_ns[rows[cand]])] if specific else cand[0]
    return int(rows[pick])


def _window(trace: Trace, rows: npt.NDArray[np.intp], start: int, end: int) -> npt.NDArray[np.intp]:
    """Rows of `rows` (sorted by ts) that can overlap [start, end)."""
    ev = trace.events
    ts = ev.ts_ns[rows]
    hi = int(np.searchsorted(ts, end, side="left"))
    sel = rows[:hi]
    return sel[(ev.ts_ns[sel] + ev.dur_ns[sel]) > start]


def idle_causes(
    trace: Trace, *, launch_gap_ns: int = LAUNCH_GAP_NS, examples: int = 3
) -> IdleCauses:
    """Attribute every device idle gap of `trace` to one cause (module docstring)."""
    ev = trace.events
    work = gpu_work_rows(trace)
    cpu = cpu_rows(trace)
    names = trace.names
    loader_flags = np.asarray([DATA_LOADER.search(n) is not None for n in names], np.bool_)
    sync_flags = np.asarray([n in SYNC_CALLS for n in names], np.bool_)
    step_flags = np.asarray([_PROFILER_STEP.match(n) is not None for n in names], np.bool_)
    cpu_mask = np.zeros(len(ev), dtype=np.bool_)
    cpu_mask[cpu] = True
    loader = np.flatnonzero(cpu_mask & trace.name_mask(loader_flags))
    sync_mask = cpu_mask & trace.name_mask(sync_flags)

    # async copies to/from pageable memory block the CPU like a sync
    launch = launch_rows(trace, work)
    pageable_names = np.asarray(["Pageable" in n for n in names], np.bool_)
    copy_flags = np.asarray([n in ASYNC_COPY_CALLS for n in names], np.bool_)
    pageable_gpu = trace.name_mask(pageable_names)[work] & (launch != MISSING)
    pageable_calls = launch[pageable_gpu]
    pageable_calls = pageable_calls[trace.name_mask(copy_flags)[pageable_calls]]
    sync_mask[pageable_calls] = True
    sync = np.flatnonzero(sync_mask)

    def by_ts(rows: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
        return rows[np.argsort(ev.ts_ns[rows], kind="stable")]

    loader_s, loader_e = _union(trace, loader)
    sync_s, sync_e = _union(trace, sync)
    explain = by_ts(cpu[~trace.name_mask(step_flags)[cpu]])
    loader_sorted, sync_sorted = by_ts(loader), by_ts(sync)

    parts: list[tuple[Ints, Ints, Ints, npt.NDArray[np.intp], npt.NDArray[np.intp]]] = []
    span = 0
    for device in distinct(ev.pid[work]).tolist():
        sel = np.flatnonzero(ev.pid[work] == device)
        r = work[sel]
        order = np.lexsort((ev.index[r], ev.ts_ns[r]))
        r, lr = r[order], launch[sel][order]
        ts, end = ev.ts_ns[r], ev.ts_ns[r] + ev.dur_ns[r]
        seg_s, seg_e = merge_intervals(ts, end)
        span += int(end.max() - ts.min())
        opener = np.searchsorted(ts, seg_s[1:], side="left")
        parts.append(
            (
                np.full(opener.size, device, dtype=np.int64),
                seg_e[:-1],
                seg_s[1:],
                r[opener],
                lr[opener],
            )
        )
    if parts:
        device_a = np.concatenate([p[0] for p in parts])
        gs = np.concatenate([p[1] for p in parts])
        ge = np.concatenate([p[2] for p in parts])
        nxt = np.concatenate([p[3] for p in parts])
        nlaunch = np.concatenate([p[4] for p in parts])
    else:
        device_a = gs = ge = np.zeros(0, dtype=np.int64)
        nxt = nlaunch = np.zeros(0, dtype=np.intp)
    gap = ge - gs
    cause = np.full(gap.size, CAUSES.index("cpu_ops"), dtype=np.int32)
    known = nlaunch != MISSING
    launch_ts = np.where(known, ev.ts_ns[np.where(known, nlaunch, 0)], 0)
    queued = known & (launch_ts <= gs)
    cause[known & ~queued & (gap < launch_gap_ns)] = CAUSES.index("launch_overhead")
    cause[queued] = CAUSES.index("gpu_wait")
    cause[~known] = CAUSES.index("unknown")
    cause[covered(sync_s, sync_e, gs, ge) > 0] = CAUSES.index("sync")
    in_loader = covered(loader_s, loader_e, gs, ge) >= DATA_LOADER_COVER * gap
    cause[in_loader & (gap > 0)] = CAUSES.index("data_loader")
    gaps = Gaps(device_a, gs, ge, cause, nxt, np.full(gap.size, MISSING, dtype=np.intp))

    idle = int(gap.sum())
    totals: dict[str, CauseTotal] = {}
    for code, name in enumerate(CAUSES):
        sel = np.flatnonzero(cause == code)
        ns = int(gap[sel].sum())
        picks = sel[np.argsort(-gap[sel], kind="stable")[:examples]]
        shown: list[GapExample] = []
        for g in picks.tolist():
            a, b = int(gs[g]), int(ge[g])
            if name == "data_loader":
                row = _best_overlap(trace, _window(trace, loader_sorted, a, b), a, b, False)
            elif name == "sync":
                row = _best_overlap(trace, _window(trace, sync_sorted, a, b), a, b, True)
            elif name == "launch_overhead":
                row = int(nlaunch[g])
            elif name == "cpu_ops":
                row = _best_overlap(trace, _window(trace, explain, a, b), a, b, True)
            else:
                row = MISSING
            gaps.cpu_row[g] = row
            shown.append(
                GapExample(
                    int(device_a[g]),
                    a,
                    b - a,
                    _name(trace, row) if row != MISSING else None,
                    int(ev.ts_ns[row]) if row != MISSING else None,
                    int(ev.dur_ns[row]) if row != MISSING else None,
                    _name(trace, int(nxt[g])),
                )
            )
        totals[name] = CauseTotal(
            name,
            ns,
            int(sel.size),
            ns / idle if idle else 0.0,
            ns / span if span else 0.0,
            shown,
        )

    kernels = trace.category_mask({"kernel", "Kernel"})[work] & (launch != MISSING)
    k_rows, l_rows = work[kernels], launch[kernels]
    shorter = int((ev.dur_ns[k_rows] < ev.dur_ns[l_rows]).sum())
    cpu_gap = cause == CAUSES.index("cpu_ops")
    busy = python = 0
    if cpu_gap.any():
        ops = cpu[trace.category_mask(OP_CATEGORIES)[cpu]]
        py = cpu[trace.category_mask(PYTHON_CATEGORIES)[cpu]]
        a, b = gs[cpu_gap], ge[cpu_gap]
        busy = int(covered(*_union(trace, ops), a, b).sum())
        python = int(covered(*_union(trace, py), a, b).sum())
    return IdleCauses(span, idle, totals, gaps, int(k_rows.size), shorter, busy, python)
