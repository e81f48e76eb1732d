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

The idle gaps (`IdleCauses.gaps`) are kept, as the report counts them and its timeline draws
the longest, but their two row references (`next_row`, `cpu_row`), which point into the full
trace, become a broadcast -1 and a device column of one value a broadcast of it (no memory
per gap): `thin`, to run where the summaries are kept, as pickling expands broadcasts. What
remains grows with the number of gaps: 20 bytes each (start, end, cause).
"""

from __future__ import annotations

import msgspec
import numpy as np
import numpy.typing as npt

from gpulens.analyze.traces.align import CHECKED
from gpulens.analyze.traces.causes import Gaps, IdleCauses
from gpulens.analyze.traces.comm import collective_labels
from gpulens.analyze.traces.kernels import KERNEL_CLASSES, class_codes, gpu_work_rows
from gpulens.analyze.traces.model import MISSING, EventTable, FlowTable, Trace
from gpulens.analyze.traces.ranks import RankAnalysis

__all__ = ["anchor_rows", "skeleton", "summarize", "thin"]

_COMMUNICATION = KERNEL_CLASSES.index("communication")


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
    fields = {name: getattr(ev, name)[picked] for name in EventTable.__struct_fields__}
    codes = fields["name"][: rows.size]
    used = np.unique(codes[codes >= 0])
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


def _thin_gaps(gaps: Gaps) -> Gaps:
    shape = gaps.start_ns.shape
    none = np.broadcast_to(np.intp(MISSING), shape)
    device = gaps.device
    if device.size and device.strides[0] != 0 and (device == device[0]).all():
        device = np.broadcast_to(device[:1].copy(), shape)  # one device: one value
    return msgspec.structs.replace(gaps, device=device, next_row=none, cpu_row=none)


def thin(analysis: RankAnalysis) -> RankAnalysis:
    """`analysis` with its gaps' row references dropped (they point into the full trace)."""
    causes: IdleCauses = analysis.causes
    return msgspec.structs.replace(
        analysis, causes=msgspec.structs.replace(causes, gaps=_thin_gaps(causes.gaps))
    )


def summarize(analysis: RankAnalysis) -> RankAnalysis:
    """`analysis` holding the skeleton of its trace instead of the trace (module docstring)."""
    return thin(msgspec.structs.replace(analysis, trace=skeleton(analysis.trace)))
