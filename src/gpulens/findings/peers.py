"""The slow GPU of a communication-bound job: the peer the others wait for.

In a data-parallel job every rank waits in the all-reduce for the slowest one, so while its
peers sit in `comm_bound` the straggler itself looks busy: it has the highest SM activity of
the job in those intervals (it is still computing) and often a lower SM clock (locked,
power-capped or thermally throttled). For each run of a job's `comm_bound` intervals, the GPU
that is the busiest in at least `straggler_min_share` of them, and is not itself waiting in
most of them, is the straggler. Shared by the `straggler` and `comm_bound` rules.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from gpulens.findings.context import Context
from gpulens.findings.runs import Run, floats, in_states, qualifying, starts, strings


@dataclass(frozen=True, slots=True)
class Straggler:
    """One straggler: the job, the slow GPU's rows and its peers' waiting rows in a run."""

    job_id: str
    run: Run
    slow_rows: np.ndarray
    waiting_rows: np.ndarray
    gpu_uuid: str
    share: float  # of the run's intervals in which it was the busiest GPU


def _find(ctx: Context) -> list[Straggler]:
    t = ctx.thresholds
    waiting = in_states(ctx, "comm_bound")
    job, uuid = strings(ctx, "job_id"), strings(ctx, "gpu_uuid")
    start = starts(ctx)
    sm_raw = floats(ctx, "sm_active")
    sm = np.where(np.isnan(sm_raw), floats(ctx, "graphics_active"), sm_raw)
    by_job: dict[str, list[int]] = {}
    for i, j in enumerate(job):
        if j is not None:
            by_job.setdefault(j, []).append(i)
    out: list[Straggler] = []
    for run in qualifying(ctx, "straggler", waiting):
        name = job[int(run.rows[0])]
        if name is None:
            continue
        rows = np.asarray(by_job[name], dtype=np.int64)
        rows = rows[(start[rows] >= run.start_ns) & (start[rows] < run.end_ns)]
        if len({uuid[int(i)] for i in rows}) < 2:
            continue
        busiest: Counter[str] = Counter()
        buckets = np.unique(start[run.rows])
        for b in buckets:
            here = rows[start[rows] == b]
            here = here[~np.isnan(sm[here])]
            if here.size:
                busiest[uuid[int(here[np.argmax(sm[here])])] or ""] += 1
        if not busiest:
            continue
        gpu, count = busiest.most_common(1)[0]
        share = count / buckets.size
        slow = rows[np.array([uuid[int(i)] == gpu for i in rows], dtype=bool)]
        if share < t.straggler_min_share or waiting[slow].mean() >= 0.5:
            continue
        peers = run.rows[np.array([uuid[int(i)] != gpu for i in run.rows], dtype=bool)]
        out.append(Straggler(name, run, slow, peers, gpu, share))
    return out


def stragglers(ctx: Context) -> list[Straggler]:
    """The stragglers of `ctx` (computed once per context)."""
    return ctx.cached("stragglers", lambda: _find(ctx))
