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
from gpulens.findings.runs import (
    Run,
    floats,
    in_states,
    label_codes,
    qualifying,
    starts,
    strings,
)


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
    job = strings(ctx, "job_id")
    uuid_code, uuid_names = label_codes(ctx, "gpu_uuid")
    code_of = {name: c for c, name in enumerate(uuid_names)}
    start = starts(ctx)
    sm_raw = floats(ctx, "sm_active")
    sm = np.where(np.isnan(sm_raw), floats(ctx, "graphics_active"), sm_raw)
    job_code, job_names = label_codes(ctx, "job_id")
    by_code = np.argsort(job_code, kind="stable")  # rows ascending within a job
    cuts = np.searchsorted(job_code[by_code], np.arange(len(job_names) + 1))
    out: list[Straggler] = []
    for run in qualifying(ctx, "straggler", waiting):
        name = job[int(run.rows[0])]
        if name is None:
            continue
        code = int(job_code[int(run.rows[0])])
        rows = by_code[cuts[code] : cuts[code + 1]]
        rows = rows[(start[rows] >= run.start_ns) & (start[rows] < run.end_ns)]
        if np.unique(uuid_code[rows]).size < 2:
            continue
        buckets = np.unique(start[run.rows])
        # per bucket, the busiest row (the first in row order among equals)
        here = rows[np.isin(start[rows], buckets) & ~np.isnan(sm[rows])]
        order = np.lexsort((here, -sm[here], start[here]))
        ranked = here[order]
        firsts = np.flatnonzero(np.r_[True, np.diff(start[ranked]) != 0])
        busiest: Counter[str] = Counter(
            uuid_names[int(uuid_code[int(i)])] or "" for i in ranked[firsts]
        )
        if not busiest:
            continue
        gpu, count = busiest.most_common(1)[0]
        share = count / buckets.size
        gpu_code = code_of.get(gpu, -1)
        slow = rows[uuid_code[rows] == gpu_code]
        if share < t.straggler_min_share or waiting[slow].mean() >= 0.5:
            continue
        peers = run.rows[uuid_code[run.rows] != gpu_code]
        out.append(Straggler(name, run, slow, peers, gpu, share))
    return out


def stragglers(ctx: Context) -> list[Straggler]:
    """The stragglers of `ctx` (computed once per context)."""
    return ctx.cached("stragglers", lambda: _find(ctx))
