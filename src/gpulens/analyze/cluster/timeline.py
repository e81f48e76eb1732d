"""A job table (gpulens.cluster_schema.JOB_SCHEMA) → the per-step cluster sequence.

A job holds `gpus` GPUs from start to end and is pending from submit to start (or to its end
when it never started). Each step gets the mean over the step: GPU-seconds ÷ step, computed
exactly with the integral of a step function (sorted events and cumulative sums), so a month
of a large log stays O((jobs + steps) log jobs). A job still running or waiting at the end of
the log is counted up to `horizon_s`. `capacity` (queue → GPUs) gives the totals; a queue
without one has an unknown total (null), and so unknown allocation.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.analyze.cluster.grid import check_size
from gpulens.cluster_schema import (
    END,
    GPUS,
    IN_USE,
    PENDING,
    QUEUE,
    SEQUENCE_SCHEMA,
    START,
    SUBMIT,
    TOTAL,
    TS,
)


def _gpu_seconds(lo: np.ndarray, hi: np.ndarray, gpus: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Σ gpus × |[lo, hi) ∩ [edge_k, edge_k+1)| for each bucket k: F(t) = Σ g·clip(t−lo) −
    Σ g·clip(t−hi), with F(t) = t·S1(t) − S2(t) over the events before t."""
    keep = (hi > lo) & (gpus > 0)
    times = np.concatenate([lo[keep], hi[keep]])
    slopes = np.concatenate([gpus[keep], -gpus[keep]])
    order = np.argsort(times, kind="stable")
    times, slopes = times[order], slopes[order]
    s1 = np.concatenate([[0.0], np.cumsum(slopes)])
    s2 = np.concatenate([[0.0], np.cumsum(slopes * times)])
    idx = np.searchsorted(times, edges, side="left")
    cumulative = edges * s1[idx] - s2[idx]
    return np.diff(cumulative)


def jobs_to_sequence(
    jobs: pa.Table,
    step_s: int = 60,
    capacity: Mapping[str, float] | None = None,
    horizon_s: float | None = None,
) -> pa.Table:
    """The cluster sequence of a job table, one row per queue and step from the first submit
    (or start) to `horizon_s` (default: the last time the log shows)."""
    if jobs.num_rows == 0:
        raise ValueError("the job table has no jobs")
    submit = np.asarray(jobs[SUBMIT].to_numpy(zero_copy_only=False), dtype=np.float64)
    start = np.asarray(jobs[START].to_numpy(zero_copy_only=False), dtype=np.float64)
    end = np.asarray(jobs[END].to_numpy(zero_copy_only=False), dtype=np.float64)
    gpus = np.nan_to_num(np.asarray(jobs[GPUS].to_numpy(zero_copy_only=False), dtype=np.float64))
    times = np.concatenate([submit, start, end])
    times = times[~np.isnan(times)]
    if times.size == 0:
        raise ValueError("no job has a submit, start or end time")
    origin = float(np.floor(times.min() / step_s) * step_s)
    last = float(times.max()) if horizon_s is None else float(horizon_s)
    n_steps = max(1, int(np.ceil((last - origin) / step_s)))
    queue_col = pc.fill_null(jobs[QUEUE], "").combine_chunks()
    names = sorted(set(queue_col.to_pylist()))
    check_size(len(names), n_steps, step_s)
    edges = np.arange(n_steps + 1, dtype=np.float64) * step_s
    run_lo = start - origin
    run_hi = np.where(np.isnan(end), last, end) - origin
    wait_lo = np.where(np.isnan(submit), start, submit) - origin
    wait_hi = np.where(np.isnan(start), np.where(np.isnan(end), last, end), start) - origin
    running = ~np.isnan(run_lo)
    waiting = ~np.isnan(wait_lo)
    queue_of = np.asarray(queue_col.to_numpy(zero_copy_only=False), dtype=object)
    caps = capacity or {}
    ts = (origin + edges[:-1]).astype(np.int64)
    parts = []
    for name in names:
        mine = queue_of == name
        r, w = mine & running, mine & waiting
        in_use = _gpu_seconds(run_lo[r], run_hi[r], gpus[r], edges) / step_s
        pending = _gpu_seconds(wait_lo[w], wait_hi[w], gpus[w], edges) / step_s
        total = np.full(n_steps, float(caps[name]) if name in caps else np.nan)
        parts.append(
            pa.table(
                {
                    TS: ts,
                    QUEUE: pa.array([name or "(none)"] * n_steps, pa.string()),
                    TOTAL: pa.array(total, mask=np.isnan(total)),
                    IN_USE: in_use,
                    PENDING: pending,
                },
                schema=SEQUENCE_SCHEMA,
            )
        )
    return pa.concat_tables(parts)
