"""Per-step breakdown from the `ProfilerStep#N` annotations (pure).

A step's window is its CPU `ProfilerStep#N` range [ts, ts + dur). Per step:

* `kernel_time_ns` — summed duration of the GPU activities (kernels, copies) launched from
  inside the window (by the launch call's `correlation`; an activity without a launch call
  counts in the step where it starts);
* `busy_ns` — |∪ GPU activity| of all devices' streams clipped to the window (per device,
  summed), `device_idle_ns = window × devices − busy_ns`;
* `idle_causes` — the device idle gaps (causes.py) clipped to the window, per cause.

Steps are listed in time order; a trace without `ProfilerStep#N` ranges has none.
"""

from __future__ import annotations

import re

import numpy as np

from gpulens.analyze.traces.arrays import distinct
from gpulens.analyze.traces.breakdown import merge_intervals
from gpulens.analyze.traces.causes import CAUSES, IdleCauses, covered, cpu_rows, launch_rows
from gpulens.analyze.traces.kernels import gpu_work_rows
from gpulens.analyze.traces.model import MISSING, Ints, Trace
from gpulens.analyze.traces.record import Record

_STEP = re.compile(r"^ProfilerStep#(\d+)")


class Step(Record):
    name: str
    number: int
    start_ns: int
    end_ns: int
    kernels: int
    kernel_time_ns: int
    busy_ns: int
    device_idle_ns: int
    idle_causes_ns: dict[str, int]

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    def to_dict(self, origin_ns: int) -> dict[str, object]:
        return {
            "step": self.number,
            "name": self.name,
            "offset_us": (self.start_ns - origin_ns) / 1000,
            "duration_us": self.duration_ns / 1000,
            "kernels": self.kernels,
            "kernel_time_us": self.kernel_time_ns / 1000,
            "busy_us": self.busy_ns / 1000,
            "device_idle_us": self.device_idle_ns / 1000,
            "idle_share": self.device_idle_ns / self.duration_ns if self.duration_ns else 0.0,
            "idle_causes_us": {k: v / 1000 for k, v in self.idle_causes_ns.items() if v},
        }


def steps(trace: Trace, causes: IdleCauses | None = None) -> list[Step]:
    ev = trace.events
    cpu = cpu_rows(trace)
    flags = np.asarray([_STEP.match(n) is not None for n in trace.names], np.bool_)
    step_rows = cpu[trace.name_mask(flags)[cpu]]
    if step_rows.size == 0:
        return []
    # one range per step name (the outermost, if a name repeats on several threads)
    seen: dict[int, int] = {}
    for r in step_rows[np.argsort(ev.ts_ns[step_rows], kind="stable")].tolist():
        code = int(ev.name[r])
        if code not in seen or ev.dur_ns[r] > ev.dur_ns[seen[code]]:
            seen[code] = r
    chosen = sorted(seen.values(), key=lambda r: int(ev.ts_ns[r]))
    work = gpu_work_rows(trace)
    launch = launch_rows(trace, work)
    anchor = np.where(launch != MISSING, ev.ts_ns[np.where(launch != MISSING, launch, 0)], -1)
    anchor = np.where(launch != MISSING, anchor, ev.ts_ns[work])
    devices = distinct(ev.pid[work]).tolist()
    rows = np.asarray(chosen, dtype=np.intp)
    starts, ends = ev.ts_ns[rows], ev.ts_ns[rows] + ev.dur_ns[rows]
    busy = np.zeros(rows.size, dtype=np.int64)
    for d in devices:
        on = work[ev.pid[work] == d]
        union = merge_intervals(ev.ts_ns[on], ev.ts_ns[on] + ev.dur_ns[on])
        busy += covered(*union, starts, ends)
    # activities launched in [start, end): a range of the anchors in sorted order
    order = np.argsort(anchor, kind="stable")
    sorted_anchor = anchor[order]
    dur_before = np.concatenate(([0], np.cumsum(ev.dur_ns[work[order]])))
    lo = np.searchsorted(sorted_anchor, starts, side="left")
    hi = np.maximum(np.searchsorted(sorted_anchor, ends, side="left"), lo)
    kernels, kernel_time = hi - lo, dur_before[hi] - dur_before[lo]
    per_cause = np.zeros((len(CAUSES), rows.size), dtype=np.int64)
    if causes is not None and len(causes.gaps):
        g = causes.gaps
        for code in range(len(CAUSES)):
            pick = (g.cause == code) & (g.end_ns > g.start_ns)  # others clip to 0
            per_cause[code] = _clipped_sum(g.start_ns[pick], g.end_ns[pick], starts, ends)
    out: list[Step] = []
    for i, r in enumerate(rows.tolist()):
        start, end = int(starts[i]), int(ends[i])
        name = trace.names[int(ev.name[r])]
        m = _STEP.match(name)
        out.append(
            Step(
                name,
                int(m.group(1)) if m else len(out),
                start,
                end,
                int(kernels[i]),
                int(kernel_time[i]),
                int(busy[i]),
                (end - start) * len(devices) - int(busy[i]),
                {cause: int(per_cause[code, i]) for code, cause in enumerate(CAUSES)},
            )
        )
    return out


def _clipped_sum(g_start: Ints, g_end: Ints, a: Ints, b: Ints) -> Ints:
    """For each [a, b): Σ over the intervals [g_start, g_end) (non-empty, possibly overlapping)
    of max(0, min(g_end, b) − max(g_start, a)), as F(b) − F(a) with F(x) = Σ clip(x − g_start,
    0, g_end − g_start) = Σ_{g_start ≤ x} (x − g_start) − Σ_{g_end ≤ x} (x − g_end). The prefix
    sums may wrap around int64; the differences are exact whenever the result fits in int64."""
    s, e = np.sort(g_start), np.sort(g_end)
    s_before = np.concatenate(([0], np.cumsum(s)))
    e_before = np.concatenate(([0], np.cumsum(e)))

    def f(x: Ints) -> Ints:
        ks = np.searchsorted(s, x, side="right")
        ke = np.searchsorted(e, x, side="right")
        out: Ints = (ks - ke) * x - s_before[ks] + e_before[ke]
        return out

    result: Ints = np.maximum(f(b) - f(a), 0)
    return result
