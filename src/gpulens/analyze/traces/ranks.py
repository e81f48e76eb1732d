"""One rank's full analysis, and a job of several ranks: alignment, per-rank table, straggler.

`analyze_rank` runs every analysis of this package over one `Trace`. `analyze_job` puts the
ranks of one job side by side:

* alignment (align.py): ranks are put on one clock by the end of their first common collective
  (`alignment = "collective"`), else by their shared clock base, else by their starts; each
  rank's `clock_shift_ns` is what was added to its timestamps and `offset_ns` its aligned start
  minus the job's aligned start;
* per rank: span, busy, compute (non-collective kernel union), collective time, exposed
  collective time, device idle, `sync_wait_share` = collective time / span (NCCL kernels spin
  while they wait for peers, so this is the synchronisation wait plus the transfer);
* `imbalance` = (max compute − mean compute) / mean compute over ranks;
* straggler: the rank with the most compute, when it is at least `straggler_threshold` (5 %)
  above the median of the others and the others spend more time in collectives than it does
  (they wait for it); `straggler_excess_ns` = its compute minus the others' median.
"""

from __future__ import annotations

from statistics import median

from gpulens.analyze.traces.align import Alignment, align
from gpulens.analyze.traces.breakdown import (
    RankBreakdown,
    breakdown,
    job_step_name_count,
    selection,
)
from gpulens.analyze.traces.causes import IdleCauses, idle_causes
from gpulens.analyze.traces.comm import Communication, communication
from gpulens.analyze.traces.hta_figures import HtaFigures, hta_figures
from gpulens.analyze.traces.kernels import CopyStats, KernelClasses, copy_stats, kernel_classes
from gpulens.analyze.traces.model import Trace
from gpulens.analyze.traces.record import Record, field
from gpulens.analyze.traces.steps import Step, steps

STRAGGLER_THRESHOLD = 0.05
RESIDUAL_NOTE_NS = 1_000_000  # a residual clock disagreement worth a note


class RankAnalysis(Record):
    trace: Trace
    breakdown: RankBreakdown
    causes: IdleCauses
    kernels: KernelClasses
    comm: Communication
    copies: list[CopyStats]
    steps: list[Step]
    hta: HtaFigures  # HTA's kernel-type time, comm/comp overlap, launch statistics

    @property
    def rank(self) -> int | None:
        return self.trace.rank

    @property
    def origin_ns(self) -> int:
        return self.trace.min_ts_ns or 0

    @property
    def end_ns(self) -> int:
        ev = self.trace.events
        return int((ev.ts_ns + ev.dur_ns).max()) if len(ev) else 0

    @property
    def device(self) -> str | None:
        props = self.trace.device_properties
        name = props[0].get("name") if props else None
        return str(name) if name else None


def analyze_rank(
    trace: Trace, *, hta_window: bool = False, job_step_names: int | None = None
) -> RankAnalysis:
    result = breakdown(
        trace, hta_window=hta_window, hta_quirks=hta_window, job_step_names=job_step_names
    )
    causes = idle_causes(trace)
    return RankAnalysis(
        trace,
        result,
        causes,
        kernel_classes(trace),
        communication(trace),
        copy_stats(trace),
        steps(trace, causes),
        hta_figures(
            trace,
            selection(trace, hta_window=hta_window, job_step_names=job_step_names),
            hta_quirks=hta_window,
        ),
    )


class RankRow(Record):
    rank: int | None
    file: str
    offset_ns: int
    clock_shift_ns: int
    span_ns: int
    busy_ns: int
    compute_ns: int
    comm_ns: int
    exposed_comm_ns: int
    device_idle_ns: int

    @property
    def sync_wait_share(self) -> float:
        return self.comm_ns / self.span_ns if self.span_ns else 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "rank": self.rank,
            "file": self.file,
            "offset_us": self.offset_ns / 1000,
            "clock_shift_us": self.clock_shift_ns / 1000,
            "span_us": self.span_ns / 1000,
            "busy_us": self.busy_ns / 1000,
            "compute_us": self.compute_ns / 1000,
            "comm_us": self.comm_ns / 1000,
            "exposed_comm_us": self.exposed_comm_ns / 1000,
            "device_idle_us": self.device_idle_ns / 1000,
            "sync_wait_share": self.sync_wait_share,
        }


class Cluster(Record):
    alignment: Alignment
    world_size: int | None
    rows: list[RankRow]
    imbalance: float | None
    straggler: int | None
    straggler_excess_ns: int
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {
            "ranks": len(self.rows),
            "world_size": self.world_size,
            "alignment": self.alignment.method,
            "alignment_anchor": self.alignment.describe(),
            "alignment_residual_us": self.alignment.residual_ns / 1000,
            "per_rank": [r.to_dict() for r in self.rows],
            "imbalance": self.imbalance,
            "straggler": self.straggler,
            "straggler_excess_us": self.straggler_excess_ns / 1000,
            "sync_wait_share": (
                sum(r.comm_ns for r in self.rows) / sum(r.span_ns for r in self.rows)
                if sum(r.span_ns for r in self.rows)
                else 0.0
            ),
            "notes": self.notes,
        }


def analyze_job(
    traces: list[Trace], *, hta_window: bool = False
) -> tuple[list[RankAnalysis], Cluster]:
    """Analyse the ranks of one job and compare them (ranks sorted by rank, unknown last)."""
    ordered = sorted(traces, key=lambda t: (t.rank is None, t.rank or 0, t.source))
    n_steps = job_step_name_count(ordered)
    analyses = [analyze_rank(t, hta_window=hta_window, job_step_names=n_steps) for t in ordered]
    return analyses, cluster(analyses)


def cluster(
    analyses: list[RankAnalysis], *, straggler_threshold: float = STRAGGLER_THRESHOLD
) -> Cluster:
    notes: list[str] = []
    alignment = align([a.trace for a in analyses])
    starts = [a.origin_ns + shift for a, shift in zip(analyses, alignment.shifts_ns, strict=True)]
    job_start = min(starts, default=0)
    if alignment.method == "per-rank start":
        notes.append("ranks record different baseTimeNanoseconds: each rank aligned at its start")
    shifted = [(a.rank, s) for a, s in zip(analyses, alignment.shifts_ns, strict=True) if s]
    if alignment.method == "collective" and shifted:
        notes.append(
            f"clocks aligned on the end of the first {alignment.anchor} collective: "
            + ", ".join(f"rank {r} shifted by {s / 1000:+,.1f} µs" for r, s in shifted)
        )
    if alignment.residual_ns > RESIDUAL_NOTE_NS:
        notes.append(
            f"after alignment, later {alignment.anchor} kernels still disagree by up to "
            f"{alignment.residual_ns / 1000:,.1f} µs: the ranks' collectives do not pair one to "
            "one (sampled traces?), so the clock shifts are uncertain"
        )
    rows = [
        RankRow(
            a.rank,
            a.trace.source,
            start - job_start,
            shift,
            a.comm.span_ns,
            a.comm.span_ns - a.causes.idle_ns,
            a.comm.compute_ns,
            a.comm.comm_ns,
            a.comm.exposed_ns,
            a.causes.idle_ns,
        )
        for a, start, shift in zip(analyses, starts, alignment.shifts_ns, strict=True)
    ]
    sizes = {a.trace.world_size for a in analyses if a.trace.world_size is not None}
    world = max(sizes) if sizes else None
    if world is not None and world > len(rows):
        notes.append(f"{len(rows)} of {world} ranks present: cluster figures cover those only")
    imbalance: float | None = None
    straggler: int | None = None
    excess = 0
    computes = [r.compute_ns for r in rows]
    if len(rows) >= 2 and sum(computes) > 0:
        mean = sum(computes) / len(computes)
        imbalance = (max(computes) - mean) / mean
        top = max(range(len(rows)), key=lambda i: computes[i])
        others = [r for i, r in enumerate(rows) if i != top]
        base = median(r.compute_ns for r in others)
        waits_more = median(r.comm_ns for r in others) > rows[top].comm_ns
        if base > 0 and computes[top] >= base * (1 + straggler_threshold) and waits_more:
            straggler = rows[top].rank
            excess = int(computes[top] - base)
    return Cluster(alignment, world, rows, imbalance, straggler, excess, notes)
