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

import msgspec
import numpy as np

from gpulens.analyze.traces.breakdown import merge_intervals
from gpulens.analyze.traces.causes import CAUSES, IdleCauses, covered, cpu_rows, launch_rows
from gpulens.analyze.traces.kernels import gpu_work_rows
from gpulens.analyze.traces.model import MISSING, Trace

_STEP = re.compile(r"^ProfilerStep#(\d+)")


class Step(msgspec.Struct, frozen=True):
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
    devices = np.unique(ev.pid[work]).tolist()
    unions = []
    for d in devices:
        on = work[ev.pid[work] == d]
        unions.append(merge_intervals(ev.ts_ns[on], ev.ts_ns[on] + ev.dur_ns[on]))
    out: list[Step] = []
    for r in chosen:
        start, end = int(ev.ts_ns[r]), int(ev.ts_ns[r] + ev.dur_ns[r])
        name = trace.names[int(ev.name[r])]
        m = _STEP.match(name)
        launched = (anchor >= start) & (anchor < end)
        a, b = np.asarray([start]), np.asarray([end])
        busy = sum(int(covered(s, e, a, b)[0]) for s, e in unions)
        per_cause = dict.fromkeys(CAUSES, 0)
        if causes is not None and len(causes.gaps):
            g = causes.gaps
            clip = np.clip(np.minimum(g.end_ns, end) - np.maximum(g.start_ns, start), 0, None)
            for code, cause in enumerate(CAUSES):
                per_cause[cause] = int(clip[g.cause == code].sum())
        out.append(
            Step(
                name,
                int(m.group(1)) if m else len(out),
                start,
                end,
                int(launched.sum()),
                int(ev.dur_ns[work[launched]].sum()),
                busy,
                (end - start) * len(devices) - busy,
                per_cause,
            )
        )
    return out
