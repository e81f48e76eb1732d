"""What a profile captured on demand says about the finding that asked for it (pure).

A tracked process profiles a few steps (gpulens.torch.profile_on_demand) and the trace is
analysed like any other (`gpulens trace`). This module turns the analysis into the one line a
finding links to, e.g. "profiled steps 1200-1205: 38 % of the device idle waiting on the
DataLoader":

- with device activity in the trace: the device's idle share of its span and the share of the
  span idle because of the DataLoader (`IdleCauses`, cause `data_loader`);
- without (a CPU run): the share of the profiled steps' time (`ProfilerStep#N` ranges) spent
  inside DataLoader ranges (`enumerate(DataLoader)#...__next__`), on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpulens.analyze.traces.breakdown import union_length
from gpulens.analyze.traces.causes import DATA_LOADER, IdleCauses
from gpulens.analyze.traces.model import Trace
from gpulens.analyze.traces.steps import Step


@dataclass(frozen=True, slots=True)
class Profiled:
    """The figures of one profiled rank."""

    steps: int
    step_seconds: float | None  # mean profiled step (the ProfilerStep ranges)
    device: bool  # the trace has device activity
    device_idle_share: float | None  # of the device's span (device traces)
    loader_share: float | None  # DataLoader share: of the device span, else of the step time

    def text(self, first_step: int | None = None, last_step: int | None = None) -> str:
        """The link line: "profiled steps a-b: N % ..." (steps as the tracker counted them)."""
        span = (
            f"profiled steps {first_step}-{last_step}"
            if first_step is not None and last_step is not None
            else f"{self.steps} profiled step(s)"
        )
        if self.loader_share is None:
            return f"{span}: no DataLoader ranges in the trace"
        if self.device:
            idle = self.device_idle_share or 0.0
            return (
                f"{span}: {self.loader_share:.0%} of the device's time idle waiting on the "
                f"DataLoader ({idle:.0%} idle in all)"
            )
        return (
            f"{span}: {self.loader_share:.0%} of the step time waiting on the DataLoader "
            "(CPU trace, no device activity)"
        )


def profiled(trace: Trace, steps: list[Step], causes: IdleCauses) -> Profiled:
    """The figures of one rank's trace, its steps and idle causes (`RankAnalysis` fields)."""
    step_s = sum(s.end_ns - s.start_ns for s in steps) / len(steps) / 1e9 if steps else None
    if causes.span_ns > 0:
        return Profiled(
            len(steps),
            step_s,
            True,
            causes.idle_ns / causes.span_ns,
            causes.share("data_loader"),
        )
    return Profiled(len(steps), step_s, False, None, _cpu_loader_share(trace, steps))


def _cpu_loader_share(trace: Trace, steps: list[Step]) -> float | None:
    """The share of the steps' time covered by DataLoader ranges (None: no such range)."""
    ev = trace.events
    loader = trace.name_mask([bool(DATA_LOADER.search(n)) for n in trace.names]) & ev.has_dur
    if not loader.any():
        return None
    starts, ends = ev.ts_ns[loader], ev.ts_ns[loader] + ev.dur_ns[loader]
    if not steps:
        return None
    lo = np.array([s.start_ns for s in steps], dtype=np.int64)
    hi = np.array([s.end_ns for s in steps], dtype=np.int64)
    total = int((hi - lo).sum())
    if total <= 0:
        return None
    inside = 0
    for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
        s = np.clip(starts, a, b)
        e = np.clip(ends, a, b)
        keep = e > s
        if keep.any():
            inside += union_length(s[keep], e[keep])
    return inside / total
