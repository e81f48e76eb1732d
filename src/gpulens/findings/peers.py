"""The slow GPU of a communication-bound job: the peer the others wait for.

In a data-parallel job every rank waits in the all-reduce for the slowest one, so while its
peers sit in `comm_bound` the straggler itself looks busy: it has the highest SM activity of
the job in those intervals (it is still computing) and often a lower SM clock (locked,
power-capped or thermally throttled). For each run of a job's `comm_bound` intervals, the GPU
that is the busiest in at least `straggler_min_share` of them, and is not itself waiting in
most of them, is the straggler. Shared by the `straggler` and `comm_bound` rules.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpulens.analyze._arrays import split_at
from gpulens.findings.columns import floats, in_states, label_codes, starts
from gpulens.findings.context import Context
from gpulens.findings.runs import Run, qualifying


@dataclass(frozen=True, slots=True)
class Straggler:
    """One straggler: the job, the slow GPU's rows and its peers' waiting rows in a run."""

    job_id: str
    run: Run
    slow_rows: np.ndarray
    waiting_rows: np.ndarray
    gpu_uuid: str
    share: float  # of the run's intervals in which it was the busiest GPU


def _ranges(keys: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each query k, the positions [lo[k], hi[k]) of the sorted `keys` whose value is in
    that range, back to back: (positions, query of each position)."""
    first = np.searchsorted(keys, lo, side="left")
    count = np.searchsorted(keys, hi, side="left") - first
    query = np.repeat(np.arange(lo.size), count)
    pos = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    return pos + np.repeat(first, count), query


def _find(ctx: Context) -> list[Straggler]:
    """The stragglers of every qualifying `comm_bound` run, all runs at once: per run, the
    job's rows in the run's window, the busiest GPU of each of the run's intervals (the first
    in row order among equals), the GPU busiest most often (the earliest among equals)."""
    t = ctx.thresholds
    waiting = in_states(ctx, "comm_bound")
    job_code, job_names = label_codes(ctx, "job_id")
    found = [
        r
        for r in qualifying(ctx, "straggler", waiting)
        if job_names[int(job_code[r.rows[0]])] is not None
    ]
    if not found:
        return []
    uuid_code, uuid_names = label_codes(ctx, "gpu_uuid")
    start = starts(ctx)
    sm_raw = floats(ctx, "sm_active")
    sm = np.where(np.isnan(sm_raw), floats(ctx, "graphics_active"), sm_raw)
    n_runs = len(found)
    run_job = np.array([int(job_code[r.rows[0]]) for r in found], dtype=np.int64)
    run_lo = np.array([r.start_ns for r in found], dtype=np.int64)
    run_hi = np.array([r.end_ns for r in found], dtype=np.int64)
    # the rows of each run's job in its window, by (run, start, row), through a sorted
    # (job, time rank) key
    times = np.unique(np.concatenate([start, run_lo, run_hi]))
    span = times.size + 1
    key = job_code * span + np.searchsorted(times, start)
    by_key = np.lexsort((np.arange(start.size), key))
    pos, run = _ranges(
        key[by_key],
        run_job * span + np.searchsorted(times, run_lo),
        run_job * span + np.searchsorted(times, run_hi),
    )
    rows = by_key[pos]
    gpu = uuid_code[rows]
    n_uuid = len(uuid_names)
    gpus = np.bincount(np.unique(run * n_uuid + gpu) // n_uuid, minlength=n_runs)
    # the run's intervals: the starts of its own (waiting) rows
    hit_rows = np.concatenate([r.rows for r in found])
    hit_run = np.repeat(np.arange(n_runs), [r.rows.size for r in found])
    buckets = np.unique(hit_run * span + np.searchsorted(times, start[hit_rows]))
    n_buckets = np.bincount(buckets // span, minlength=n_runs)
    here_key = run * span + np.searchsorted(times, start[rows])
    here = np.isin(here_key, buckets) & ~np.isnan(sm[rows])
    # per (run, interval), the busiest row: sorted by run, start, -sm, row
    h_rows, h_run, h_key = rows[here], run[here], here_key[here]
    order = np.lexsort((h_rows, -sm[h_rows], h_key))
    h_rows, h_run, h_key = h_rows[order], h_run[order], h_key[order]
    top = np.r_[True, h_key[1:] != h_key[:-1]]
    top_rows, top_run = h_rows[top], h_run[top]
    # per run, the GPU (by name) busiest most often; the earliest to be busiest among equals
    names = [v or "" for v in uuid_names]
    name_index = {v: i for i, v in enumerate(dict.fromkeys(names))}
    name_code = np.array([name_index[v] for v in names], dtype=np.int64)[uuid_code[top_rows]]
    n_names = len(name_index)
    pair, first_at, count = np.unique(
        top_run * n_names + name_code, return_index=True, return_counts=True
    )
    best = np.lexsort((first_at, -count, pair // n_names))
    pair, count = pair[best], count[best]
    lead = np.r_[True, pair[1:] // n_names != pair[:-1] // n_names]
    has_top = np.zeros(n_runs, dtype=bool)
    has_top[pair[lead] // n_names] = True
    top_name = np.full(n_runs, -1, dtype=np.int64)
    top_name[pair[lead] // n_names] = pair[lead] % n_names
    top_count = np.zeros(n_runs, dtype=np.int64)
    top_count[pair[lead] // n_names] = count[lead]
    name_list = list(name_index)
    code_of = {v: c for c, v in enumerate(uuid_names)}
    slow_code = np.array(
        [code_of.get(name_list[c], -1) if c >= 0 else -1 for c in top_name.tolist()],
        dtype=np.int64,
    )
    share = top_count / np.maximum(n_buckets, 1)
    is_slow = gpu == slow_code[run]
    slow_n = np.bincount(run[is_slow], minlength=n_runs)
    slow_waiting = np.bincount(run[is_slow], weights=waiting[rows[is_slow]], minlength=n_runs)
    with np.errstate(invalid="ignore", divide="ignore"):
        mostly_waiting = slow_waiting / slow_n >= 0.5
    keep = (gpus >= 2) & has_top & (share >= t.straggler_min_share) & ~mostly_waiting
    slow_rows = rows[is_slow & keep[run]]
    slow_run = run[is_slow & keep[run]]
    slow_rows = slow_rows[np.lexsort((slow_rows, slow_run))]
    slow_parts = split_at(slow_rows, np.cumsum(np.bincount(slow_run, minlength=n_runs))[:-1])
    out: list[Straggler] = []
    for k in np.flatnonzero(keep).tolist():
        r = found[k]
        c = int(slow_code[k])
        out.append(
            Straggler(
                str(job_names[int(run_job[k])]),
                r,
                slow_parts[k],
                r.rows[uuid_code[r.rows] != c],
                name_list[int(top_name[k])],
                float(share[k]),
            )
        )
    return out


def stragglers(ctx: Context) -> list[Straggler]:
    """The stragglers of `ctx` (computed once per context)."""
    return ctx.cached("stragglers", lambda: _find(ctx))
