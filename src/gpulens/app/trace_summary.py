"""One rank's analysis without its trace: what the cross-rank analysis and the reports read.

A `RankAnalysis` holds the rank's loaded `Trace` (every event, as columns). Once the rank is
analysed, the job-level work (`ranks.cluster`, the findings, the report) reads only a little of
it: the trace's name, rank and metadata (device, world size, clock base), its first timestamp
and last end, and, for the clock alignment (`align.collective_ends`), the first
`align.CHECKED` kernels of each collective. `summarize` keeps exactly that, as a `Trace` of a
few events (a skeleton), so that the existing cross-rank code runs unchanged on summaries that
come back from other processes or machines, and its results equal those over the full traces:

* the collective kernels kept are, per collective name, the first `CHECKED` in time order,
  in file order (so time order among them is as in the whole trace);
* two more rows carry the earliest start and the latest end, with no category and no name,
  so that no analysis reads them as GPU work;
* the name table holds the names of the kept rows only; metadata, source, rank and the raw
  event count are the trace's.

Of the idle gaps (`IdleCauses.gaps`) the report reads their count and, for its timeline, the
longest: `thin` keeps the longest `KEPT_GAPS` in their order and the count (`KeptGaps`), so a
summary does not grow with the rank's gaps. Their two row references (`next_row`, `cpu_row`),
which point into the full trace, become a broadcast -1, and a device column of one value a
broadcast of it; `thin` runs again where the summaries are kept, as pickling expands
broadcasts.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpulens.analyze.traces.align import CHECKED
from gpulens.analyze.traces.arrays import distinct
from gpulens.analyze.traces.causes import Gaps, IdleCauses
from gpulens.analyze.traces.comm import collective_labels
from gpulens.analyze.traces.kernels import KERNEL_CLASSES, class_codes, gpu_work_rows
from gpulens.analyze.traces.model import MISSING, EventTable, FlowTable, Trace
from gpulens.analyze.traces.ranks import RankAnalysis
from gpulens.analyze.traces.record import record_fields, replace

__all__ = ["KEPT_GAPS", "KeptGaps", "anchor_rows", "skeleton", "summarize", "thin"]

_COMMUNICATION = KERNEL_CLASSES.index("communication")
# gaps kept per rank: at least as many as the report's timeline draws (MAX_TIMELINE_GAPS in
# present/reports/trace.py; a test holds them together)
KEPT_GAPS = 3000


def anchor_rows(trace: Trace) -> npt.NDArray[np.intp]:
    """Rows of the first `CHECKED` kernels (time order) of each collective, in file order."""
    ev = trace.events
    work = gpu_work_rows(trace)
    comm = work[class_codes(trace, work) == _COMMUNICATION]
    if comm.size == 0:
        return np.zeros(0, dtype=np.intp)
    by_ts = comm[np.argsort(ev.ts_ns[comm], kind="stable")]
    labels, label_of = collective_labels(trace, by_ts)
    kept = [by_ts[label_of == label][:CHECKED] for label in range(len(labels))]
    return np.sort(np.concatenate(kept))


def skeleton(trace: Trace) -> Trace:
    """`trace` reduced to what the cross-rank analysis and the reports read (module docstring)."""
    ev = trace.events
    rows = anchor_rows(trace)
    if len(ev):
        ends = ev.ts_ns + ev.dur_ns
        bounds = np.asarray([int(np.argmin(ev.ts_ns)), int(np.argmax(ends))], dtype=np.intp)
    else:
        bounds = np.zeros(0, dtype=np.intp)
    picked = np.concatenate([rows, bounds])
    fields = {name: getattr(ev, name)[picked] for name in record_fields(EventTable)}
    codes = fields["name"][: rows.size]
    used = distinct(codes[codes >= 0])
    names = [trace.names[int(c)] for c in used.tolist()]
    remapped = np.full(picked.size, MISSING, dtype=fields["name"].dtype)
    remapped[: rows.size] = np.where(codes >= 0, np.searchsorted(used, codes), MISSING)
    fields["name"] = remapped
    fields["category"][rows.size :] = MISSING  # the bound rows: not GPU work, no name
    none, codes0 = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
    flows = FlowTable(none, none, codes0, codes0, none, none, none)
    return Trace(
        trace.source,
        trace.rank,
        trace.rank_source,
        EventTable(**fields),
        flows,
        names,
        list(trace.categories),
        dict(trace.metadata),
        raw_event_count=trace.raw_event_count,
    )


class KeptGaps(Gaps):
    """The longest `KEPT_GAPS` idle gaps of a rank, in their order, and how many it had
    (`len`): what the report reads of them (the count, and the longest for the timeline)."""

    total: int = 0

    def __len__(self) -> int:
        return self.total


def _thin_gaps(gaps: Gaps) -> KeptGaps:
    count = len(gaps)
    rows: slice | npt.NDArray[np.intp] = slice(None)
    if gaps.start_ns.size > KEPT_GAPS:  # the longest, ties by order (as the timeline picks)
        longest = np.argsort(gaps.start_ns - gaps.end_ns, kind="stable")[:KEPT_GAPS]
        rows = np.sort(longest)
    start, end = gaps.start_ns[rows], gaps.end_ns[rows]
    device = gaps.device[rows]
    if device.size and device.strides[0] != 0 and (device == device[0]).all():
        device = np.broadcast_to(device[:1].copy(), start.shape)  # one device: one value
    none = np.broadcast_to(np.intp(MISSING), start.shape)
    return KeptGaps(device, start, end, gaps.cause[rows], none, none, total=count)


def thin(analysis: RankAnalysis) -> RankAnalysis:
    """`analysis` with its gaps' row references dropped (they point into the full trace)."""
    causes: IdleCauses = analysis.causes
    return replace(analysis, causes=replace(causes, gaps=_thin_gaps(causes.gaps)))


def summarize(analysis: RankAnalysis) -> RankAnalysis:
    """`analysis` holding the skeleton of its trace instead of the trace (module docstring)."""
    return thin(replace(analysis, trace=skeleton(analysis.trace)))
