"""Clock alignment of the ranks of one job (pure).

Every rank's trace is timed by its own host's clock; hosts drift apart by micro- to
milliseconds (and ranks whose traces record different `baseTimeNanoseconds` are not even on
the same time base). Ranks are aligned on a common collective: a blocking collective kernel
(NCCL/RCCL spin until every peer has arrived) ends at nearly the same instant on every rank, so
the difference between its end timestamps is the clock skew.

* anchor: the collective (`comm.collective_name`: AllReduce, SendRecv, …) that every rank runs
  and whose first kernel is the earliest on the reference rank (the first one); on each rank,
  the end of its first kernel of that collective;
* `shifts_ns[r]` = anchor end on the reference rank − anchor end on rank r, to be added to rank
  r's timestamps (0 for the reference);
* `residual_ns`: over the first `CHECKED` kernels of the anchor collective on every rank, paired
  in order, the largest disagreement between their end differences and the shift. Small when
  the ranks ran the same collectives one to one; large when they did not (sampled traces, ranks
  in different process groups), and then the shift should not be trusted;
* without a common collective: "shared clock" when every rank records the same
  `baseTimeNanoseconds` (or none does) — no shift — else "per-rank start": each rank shifted so
  that it starts with the reference (HTA's min-ts alignment would mislead here).
"""

from __future__ import annotations

import numpy as np

from gpulens.analyze.traces.comm import collective_labels
from gpulens.analyze.traces.kernels import KERNEL_CLASSES, class_codes, gpu_work_rows
from gpulens.analyze.traces.model import Trace
from gpulens.analyze.traces.record import Record

CHECKED = 8  # anchor kernels per rank compared to measure the residual


class Alignment(Record):
    method: str  # "collective", "shared clock" or "per-rank start"
    anchor: str | None  # the collective aligned on
    shifts_ns: list[int]  # per rank, in the order given: added to its timestamps
    anchor_end_ns: list[int | None]  # per rank, the anchor's end in the rank's own clock
    residual_ns: int = 0

    def describe(self) -> str:
        if self.method == "collective":
            return f"end of the first {self.anchor} collective on every rank"
        if self.method == "shared clock":
            return "the ranks' own timestamps (one clock base for all)"
        return "each rank's first event (different clock bases, no common collective)"


def collective_ends(trace: Trace) -> dict[str, tuple[int, list[int]]]:
    """Per collective name: start of its first kernel and the ends of its first `CHECKED` (ns)."""
    ev = trace.events
    rows = gpu_work_rows(trace)
    comm = rows[class_codes(trace, rows) == KERNEL_CLASSES.index("communication")]
    comm = comm[np.argsort(ev.ts_ns[comm], kind="stable")]
    labels, label_of = collective_labels(trace, comm)
    out: dict[str, tuple[int, list[int]]] = {}
    for label, name in enumerate(labels):
        first = comm[label_of == label][:CHECKED]
        out[name] = (int(ev.ts_ns[first[0]]), (ev.ts_ns[first] + ev.dur_ns[first]).tolist())
    return out


def align(traces: list[Trace]) -> Alignment:
    """Clock shifts that put every rank on the first rank's clock (see the module docstring)."""
    if not traces:
        return Alignment("shared clock", None, [], [])
    found = [collective_ends(t) for t in traces]
    common = set(found[0]).intersection(*found[1:]) if len(traces) > 1 else set()
    if common:
        anchor = min(common, key=lambda name: found[0][name][0])
        ends = [f[anchor][1] for f in found]
        shifts = [ends[0][0] - e[0] for e in ends]
        paired = min(len(e) for e in ends)
        residual = max(
            abs(ends[0][i] - e[i] - shift)
            for e, shift in zip(ends, shifts, strict=True)
            for i in range(paired)
        )
        return Alignment("collective", anchor, shifts, [e[0] for e in ends], residual)
    none: list[int | None] = [None] * len(traces)
    if len({t.metadata.get("baseTimeNanoseconds") for t in traces}) == 1:
        return Alignment("shared clock", None, [0] * len(traces), none)
    starts = [t.min_ts_ns or 0 for t in traces]
    return Alignment("per-rank start", None, [starts[0] - s for s in starts], none)
