"""The per-rank half of a job's trace analysis: one rank file in, its summary out.

`analyse_rank(task)` is what every executor runs, in this process, in a local worker process
or on a Dask worker: it opens the rank's file itself (a path on a file system the worker
shares, or an fsspec URL), loads and analyses it, and returns a `RankOutcome` holding the
rank's summary (`trace_summary.summarize`: every per-rank figure, and the little of the trace
the cross-rank analysis needs), never the trace. A rank that cannot be read or parsed (any
`GpulensError`) comes back as an outcome with its error, so the other ranks still complete;
anything else is a bug and is raised.

HTA's window (`hta_window`) depends on the whole job: it applies when the job's ranks hold at
least two distinct `ProfilerStep#N` names. A rank decides alone when it holds two or more
(the job then does too) or none (it has no window either way); a rank with exactly one name,
in a job of several files, is analysed both ways (`windowed`: as if the job had two) and the
job picks one once every rank's names are known (`combine` in app/traces.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpulens.analyze.traces.breakdown import profiler_step_names
from gpulens.analyze.traces.limits import TraceLimits
from gpulens.analyze.traces.ranks import RankAnalysis, analyze_rank
from gpulens.app.trace_summary import summarize
from gpulens.errors import GpulensError

__all__ = ["RankFailure", "RankOutcome", "RankTask", "analyse_rank", "settled"]


@dataclass(frozen=True, slots=True)
class RankTask:
    """One rank file of a job: where it is, what it is called, how to analyse it.

    `position`: the file's place in the job (its rank when the trace names none); `path`: a
    path or fsspec URL the worker opens; `name`: what the report calls it (the path as given);
    `several`: the job has more than one file (see the module docstring)."""

    position: int
    path: str
    name: str
    limits: TraceLimits
    hta_window: bool = False
    several: bool = False


@dataclass(frozen=True, slots=True)
class RankFailure:
    """A rank file that could not be analysed: which, and why (the error's class and text)."""

    position: int
    file: str
    error_type: str
    error: str

    def to_dict(self) -> dict[str, object]:
        return {
            "position": self.position,
            "file": self.file,
            "error_type": self.error_type,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class RankOutcome:
    """What comes back from one rank: its summary (and the windowed variant, see above) and
    its step names, or its failure."""

    position: int
    analysis: RankAnalysis | None = None
    windowed: RankAnalysis | None = None
    step_names: frozenset[str] = field(default_factory=frozenset)
    failure: RankFailure | None = None


def settled(outcome: RankOutcome) -> RankOutcome:
    """`outcome` as the client keeps it: its gaps' row references dropped again
    (`trace_summary.thin`), as unpickling expands them to one value per gap."""
    from dataclasses import replace

    from gpulens.app.trace_summary import thin

    if outcome.analysis is None:
        return outcome
    windowed = None if outcome.windowed is None else thin(outcome.windowed)
    return replace(outcome, analysis=thin(outcome.analysis), windowed=windowed)


def analyse_rank(task: RankTask) -> RankOutcome:
    """Load and analyse one rank file; its summary, or its failure (module docstring)."""
    from gpulens.app.trace_files import load_trace_file

    try:
        trace = load_trace_file(task.path, rank=task.position, name=task.name, limits=task.limits)
    except GpulensError as exc:
        failure = RankFailure(task.position, task.name, type(exc).__name__, str(exc))
        return RankOutcome(task.position, failure=failure)
    names = frozenset(profiler_step_names(trace)) if task.hta_window else frozenset()
    analysis = analyze_rank(trace, hta_window=task.hta_window, job_step_names=len(names))
    windowed = None
    if task.hta_window and task.several and len(names) == 1:
        windowed = summarize(analyze_rank(trace, hta_window=True, job_step_names=2))
    return RankOutcome(task.position, summarize(analysis), windowed, names)
