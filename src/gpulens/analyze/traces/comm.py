"""Communication: collective kernel time, the part not overlapped by compute, per collective (pure).

Collective kernels are those of class `communication` (kernels.py). On each device:

* `comm_ns` = |∪ collective kernels|;
* `exposed_ns` = the part of that union during which no non-collective kernel runs on any other
  stream of the device (copies do not count as overlap: they are not computation);
* per collective (the name after `ncclKernel_` / `ncclDevKernel_`, e.g. AllReduce, SendRecv,
  Generic; else the kernel name up to its argument list): count, total, mean, max and exposed
  time, each kernel's exposed time being its duration minus the compute that covers it.

NCCL kernels start when launched and spin until their peers arrive, so their time includes the
wait for the slowest rank (see ranks.py for the cross-rank view).
"""

from __future__ import annotations

import re

import numpy as np
import numpy.typing as npt

from gpulens.analyze.traces.arrays import distinct
from gpulens.analyze.traces.breakdown import merge_intervals
from gpulens.analyze.traces.causes import covered
from gpulens.analyze.traces.kernels import KERNEL_CLASSES, class_codes, gpu_work_rows
from gpulens.analyze.traces.model import Ints, Trace
from gpulens.analyze.traces.record import Record

_COLLECTIVE = re.compile(r"(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.I)


def collective_name(kernel: str) -> str:
    m = _COLLECTIVE.search(kernel)
    if m:
        return m.group(1)
    return kernel.split("(")[0].strip()[:60]


def collective_labels(trace: Trace, rows: npt.NDArray[np.intp]) -> tuple[list[str], Ints]:
    """`collective_name` of each of `rows`: the distinct names, in order of first appearance
    among `rows`, and each row's index into them (one regex per distinct kernel name)."""
    used, first, inverse = np.unique(
        trace.events.name[rows], return_index=True, return_inverse=True
    )
    names = [collective_name(trace.names[c] if c >= 0 else "") for c in used.tolist()]
    firsts: dict[str, int] = {}
    for name, f in zip(names, first.tolist(), strict=True):
        firsts[name] = min(firsts.get(name, f), f)
    labels = sorted(firsts, key=firsts.__getitem__)
    position = {name: i for i, name in enumerate(labels)}
    per_name = np.asarray([position[n] for n in names], dtype=np.int64)
    return labels, per_name[inverse.reshape(-1)]


class Collective(Record):
    name: str
    count: int
    total_ns: int
    mean_ns: float
    max_ns: int
    exposed_ns: int

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "count": self.count,
            "total_us": self.total_ns / 1000,
            "mean_us": self.mean_ns / 1000,
            "max_us": self.max_ns / 1000,
            "exposed_us": self.exposed_ns / 1000,
        }


class Communication(Record):
    comm_ns: int  # union of collective kernels, summed over devices
    exposed_ns: int
    compute_ns: int  # union of non-collective kernels
    span_ns: int  # first → last GPU activity, summed over devices
    collectives: list[Collective]

    @property
    def exposed_share_of_span(self) -> float:
        return self.exposed_ns / self.span_ns if self.span_ns else 0.0

    @property
    def overlap_share(self) -> float | None:
        """Share of collective time hidden behind compute."""
        return 1 - self.exposed_ns / self.comm_ns if self.comm_ns else None

    def to_dict(self) -> dict[str, object]:
        return {
            "comm_us": self.comm_ns / 1000,
            "exposed_us": self.exposed_ns / 1000,
            "compute_us": self.compute_ns / 1000,
            "exposed_share_of_span": self.exposed_share_of_span,
            "overlap_share": self.overlap_share,
            "collectives": [c.to_dict() for c in self.collectives],
        }


def communication(trace: Trace) -> Communication:
    ev = trace.events
    rows = gpu_work_rows(trace)
    codes = class_codes(trace, rows)
    is_comm = codes == KERNEL_CLASSES.index("communication")
    is_compute = ~is_comm & (codes != KERNEL_CLASSES.index("memcpy_memset"))
    comm_total = exposed_total = compute_total = span = 0
    per_kernel_exposed = np.zeros(rows.size, dtype=np.int64)
    for device in distinct(ev.pid[rows]).tolist():
        on = ev.pid[rows] == device
        ts, end = ev.ts_ns[rows], ev.ts_ns[rows] + ev.dur_ns[rows]
        span += int(end[on].max() - ts[on].min())
        c_s, c_e = merge_intervals(ts[on & is_comm], end[on & is_comm])
        k_s, k_e = merge_intervals(ts[on & is_compute], end[on & is_compute])
        comm_total += int((c_e - c_s).sum())
        compute_total += int((k_e - k_s).sum())
        exposed_total += int(((c_e - c_s) - covered(k_s, k_e, c_s, c_e)).sum())
        sel = np.flatnonzero(on & is_comm)
        per_kernel_exposed[sel] = (end[sel] - ts[sel]) - covered(k_s, k_e, ts[sel], end[sel])
    comm_idx = np.flatnonzero(is_comm)
    labels, label_of = collective_labels(trace, rows[comm_idx])
    collectives = []
    for label, name in enumerate(labels):
        idx = comm_idx[label_of == label]
        d = ev.dur_ns[rows[idx]]
        collectives.append(
            Collective(
                name,
                len(idx),
                int(d.sum()),
                float(d.mean()),
                int(d.max()),
                int(per_kernel_exposed[idx].sum()),
            )
        )
    collectives.sort(key=lambda c: -c.total_ns)
    return Communication(comm_total, exposed_total, compute_total, span, collectives)
