"""Profiler traces of one job: load the files, analyse every rank, compare the ranks.

The file side (open a path or URL, bound it by the `limits.*` settings, find a directory's trace
files) is app/trace_files.py, re-exported here; `analyze_paths` loads the files of one job and
runs every analysis and the findings (`TraceJob`), which the report and the dashboard render.
The analyses are not imported until something is analysed (loading alone needs only the parser).

The ranks of a job are analysed by an executor (app/trace_executors.py: in this process, a
local process pool or a Dask cluster), each rank apart, and come back as summaries
(app/trace_summary.py); `combine` runs the cross-rank part over them. A rank file that cannot
be read or parsed is listed in `TraceJob.failures` and the other ranks still complete; only
when no rank could be analysed is the error raised. Paths may be fsspec URLs
(app/trace_urls.py).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn

from gpulens.analyze.traces.model import Trace
from gpulens.app.trace_files import (
    TRACE_SUFFIXES,
    PathLike,
    load_trace_file,
    open_trace,
    trace_files,
    trace_limits,
)

if TYPE_CHECKING:
    from gpulens.analyze.traces.hta_figures import KernelTypeRow
    from gpulens.analyze.traces.limits import TraceLimits
    from gpulens.analyze.traces.ranks import Cluster, RankAnalysis
    from gpulens.app.trace_executors import TraceExecutor
    from gpulens.app.trace_rank import RankFailure, RankOutcome
    from gpulens.findings.model import Finding

__all__ = [
    "TRACE_SUFFIXES",
    "TraceJob",
    "analyze_files",
    "analyze_paths",
    "analyze_traces",
    "combine",
    "load_trace_file",
    "open_trace",
    "trace_files",
    "trace_limits",
]


@dataclass(frozen=True)
class TraceJob:
    """One job's traces analysed: each rank, the ranks compared, and the findings."""

    analyses: list[RankAnalysis]
    cluster: Cluster
    findings: list[Finding] = field(default_factory=list)
    hta_window: bool = False
    # HTA's kernel-type breakdown, pooled over the ranks (as HTA pools the ranks it loaded)
    kernel_type_breakdown: list[KernelTypeRow] = field(default_factory=list)
    # rank files that could not be read or parsed (the others were analysed)
    failures: list[RankFailure] = field(default_factory=list)


def analyze_traces(traces: Sequence[Trace], *, hta_window: bool = False) -> TraceJob:
    """Every analysis of the loaded ranks of one job, and its findings."""
    from gpulens.analyze.traces.hta_figures import kernel_type_breakdown
    from gpulens.analyze.traces.ranks import analyze_job
    from gpulens.findings.traces import trace_findings

    analyses, cluster = analyze_job(list(traces), hta_window=hta_window)
    findings = trace_findings(analyses, cluster if len(analyses) > 1 else None)
    kinds = kernel_type_breakdown([a.hta.kernel_types for a in analyses])
    return TraceJob(analyses, cluster, findings, hta_window, kinds)


def _variant(outcome: RankOutcome, job_step_names: int) -> RankAnalysis:
    """The rank's analysis for a job with `job_step_names` ProfilerStep names (see
    app/trace_rank.py on HTA's window)."""
    if outcome.windowed is not None and job_step_names >= 2:
        return outcome.windowed
    assert outcome.analysis is not None
    return outcome.analysis


def _raise_all_failed(failures: Sequence[RankFailure]) -> NoReturn:
    """The error when no rank could be analysed: the one file's own error, or the first of
    several, with their count."""
    from gpulens import errors

    first = failures[0]
    kind = getattr(errors, first.error_type, None)
    if not (isinstance(kind, type) and issubclass(kind, errors.GpulensError)):
        kind = errors.TraceFormatError
    if len(failures) == 1:
        raise kind(first.error)
    raise kind(
        f"none of the {len(failures)} trace files could be analysed; the first: {first.error}"
    )


def combine(outcomes: Sequence[RankOutcome], *, hta_window: bool = False) -> TraceJob:
    """The job from its ranks' outcomes (`trace_rank.analyse_rank`, file order): the
    cross-rank analysis, the findings and HTA's pooled kernel-type breakdown over the ranks
    analysed, and the failed ones listed. Raises the error when every rank failed."""
    from gpulens.analyze.traces.hta_figures import kernel_type_breakdown
    from gpulens.analyze.traces.ranks import cluster
    from gpulens.app.trace_summary import thin
    from gpulens.findings.traces import trace_findings

    failures = [o.failure for o in outcomes if o.failure is not None]
    done = [o for o in outcomes if o.analysis is not None]
    if not done:
        _raise_all_failed(failures)
    steps = len(frozenset[str]().union(*(o.step_names for o in done)))
    chosen = [thin(_variant(o, steps)) for o in done]
    # as analyze_job orders the ranks: by rank, unknown last, then by name (stable)
    analyses = sorted(chosen, key=lambda a: (a.rank is None, a.rank or 0, a.trace.source))
    job = cluster(analyses)
    findings = trace_findings(analyses, job if len(analyses) > 1 else None)
    kinds = kernel_type_breakdown([a.hta.kernel_types for a in analyses])
    return TraceJob(analyses, job, findings, hta_window, kinds, failures)


def analyze_files(
    files: Sequence[PathLike],
    *,
    names: Sequence[str] | None = None,
    hta_window: bool = False,
    limits: TraceLimits | None = None,
    executor: TraceExecutor | None = None,
) -> TraceJob:
    """Load `files` (one job; file i is rank i unless its metadata or name says otherwise) and
    analyse them. `names`: what each is called (default: its path); `limits`: each file's
    (default: `trace_limits()`); `executor`: where the ranks are analysed (default: in this
    process, one after the other; see app/trace_executors.py)."""
    from gpulens.app.trace_executors import LocalExecutor
    from gpulens.app.trace_rank import RankTask

    shown = [os.fspath(f) for f in files] if names is None else list(names)
    bounds = trace_limits() if limits is None else limits
    several = len(shown) > 1
    tasks = [
        RankTask(i, _where(f), n, bounds, hta_window, several)
        for i, (f, n) in enumerate(zip(files, shown, strict=True))
    ]
    outcomes = (executor or LocalExecutor()).run(tasks)
    return combine(outcomes, hta_window=hta_window)


def _total_bytes(files: Sequence[str]) -> int | None:
    """The files' size in all; None when one is a URL or cannot be read (the executor then
    does not choose by size)."""
    if any("://" in f for f in files):
        return None
    try:
        return sum(os.stat(f).st_size for f in files)  # noqa: PTH116 - no pathlib (see above)
    except OSError:
        return None


def _where(path: PathLike) -> str:
    """`path` as a worker elsewhere opens it: a URL as it is, a path made absolute."""
    p = os.fspath(path)
    return p if "://" in p else os.path.abspath(p)  # noqa: PTH100 - no pathlib (see above)


def analyze_paths(
    paths: Sequence[PathLike],
    *,
    hta_window: bool = False,
    limits: TraceLimits | None = None,
    executor: TraceExecutor | str | None = None,
) -> TraceJob:
    """`analyze_files` over the trace files of `paths` (files, or directories of rank files).
    `executor`: an executor, or its `--executor` spec (default `auto`: in this process for one
    file or a few MB of them, else a local process pool)."""
    files = trace_files(paths)
    if executor is None or isinstance(executor, str):
        from gpulens.app.trace_executors import executor as named

        executor = named(executor, len(files), _total_bytes(files))
    return analyze_files(files, hta_window=hta_window, limits=limits, executor=executor)
