"""A cluster sequence (gpulens.cluster_schema, long form) as queue × step matrices.

Rows are put on a regular grid of `step_s` seconds from the first time; several rows of one
queue in one step are averaged; a step a queue has no row for is NaN (no data, never 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.cluster_schema import IN_USE, PENDING, QUEUE, TOTAL, TS

Matrix = np.ndarray  # float64, shape (queues, steps)
MAX_CELLS = 50_000_000  # queues × steps: about 1.2 GB for the three matrices


@dataclass(frozen=True, slots=True)
class Grid:
    """`total`, `in_use`, `pending`: GPUs per queue (rows, in `queues` order) and step."""

    queues: tuple[str, ...]
    start_s: int
    step_s: int
    total: Matrix
    in_use: Matrix
    pending: Matrix

    @property
    def steps(self) -> int:
        return int(self.total.shape[1])


def infer_step(ts: np.ndarray) -> int:
    """The most common gap between distinct times, in seconds (60 when there is one time)."""
    ordered = np.sort(ts, kind="stable")
    if ordered.size < 2:
        return 60
    steps = np.diff(ordered)
    distinct = ordered[np.concatenate([[True], steps > 0])]
    if distinct.size < 2:
        return 60
    gaps, counts = np.unique(np.diff(distinct), return_counts=True)
    return max(1, int(gaps[np.argmax(counts)]))


def to_grid(table: pa.Table, step_s: int | None = None) -> Grid:
    """The queue × step matrices of a sequence table (ValueError when it is empty)."""
    if table.num_rows == 0:
        raise ValueError("the cluster sequence has no rows")
    ts = np.asarray(table[TS].to_numpy(), dtype=np.int64)
    step = step_s or infer_step(ts)
    start = int(ts.min())
    col = ((ts - start) // step).astype(np.int64)
    n_steps = int(col.max()) + 1
    encoded = pc.dictionary_encode(table[QUEUE]).combine_chunks()
    names = tuple(str(x) for x in encoded.dictionary.to_pylist())
    check_size(len(names), n_steps, step)
    row = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    cell = row * n_steps + col
    size = len(names) * n_steps
    mats = [_mean_by_cell(table[name], cell, size) for name in (TOTAL, IN_USE, PENDING)]
    order = np.argsort(np.array(names, dtype=object), kind="stable")
    shape = (len(names), n_steps)
    total, in_use, pending = (m.reshape(shape)[order] for m in mats)
    return Grid(tuple(names[i] for i in order), start, step, total, in_use, pending)


def check_size(queues: int, steps: int, step_s: int) -> None:
    """ValueError when queues × steps passes `MAX_CELLS` (sources far apart in time, or a
    step too fine for the span)."""
    if queues * steps > MAX_CELLS:
        days = steps * step_s / 86400
        raise ValueError(
            f"{queues} queues over {days:,.0f} days at {step_s} s steps is "
            f"{queues * steps:,} cells, over {MAX_CELLS:,}: use a longer step (--step), or read "
            "sources from different times separately"
        )


def _mean_by_cell(column: pa.ChunkedArray, cell: np.ndarray, size: int) -> np.ndarray:
    values = np.asarray(column.to_numpy(), dtype=np.float64)
    seen = ~np.isnan(values)
    sums = np.bincount(cell[seen], weights=values[seen], minlength=size)
    counts = np.bincount(cell[seen], minlength=size)
    out = np.full(size, np.nan)
    np.divide(sums, counts, out=out, where=counts > 0)
    return out
