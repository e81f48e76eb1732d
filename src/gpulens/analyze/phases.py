"""Phases of a job on a GPU: the warm-up at its start, found in the interval frame.

A job's warm-up (weight loading, compilation, autotuning, an engine build, the first cells of
a notebook) runs from the job's first interval on a GPU until its metrics settle. "Settled" at
interval i means: the activity (SM active, else graphics-engine active, else duty cycle) of
intervals i .. i+settle-1 all lie within `band` of the job's steady median on that GPU, and
the memory in use has reached `memory_ratio` of its steady median (it stopped ramping). The
steady medians are taken over the intervals after the first `max_warmup_s` (or over the second
half of the run when it is shorter). A warm-up that has not settled by `max_warmup_s` is cut
there (`capped` true).

A run is a contiguous stretch of intervals in which one job holds the GPU (a restart after a gap
is a new run with its own warm-up). A run whose start the frame cannot see (it already held the
GPU in the frame's first interval, with memory already in use at that interval's first sample)
gets no warm-up window: the frame does not know where it began.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.analyze._arrays import group_ids, label_codes

WINDOW_SCHEMA = pa.schema(
    [
        ("job_id", pa.string()),
        ("host", pa.string()),
        ("gpu_uuid", pa.string()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("intervals", pa.int64()),
        ("capped", pa.bool_()),
    ]
)


def floats(frame: pa.Table, name: str) -> np.ndarray:
    """A numeric frame column as float64 with NaN for null (all NaN when the column is absent);
    read-only when it shares the column's memory."""
    if name not in frame.column_names:
        return np.full(frame.num_rows, np.nan)
    col = frame.column(name)
    if col.type != pa.float64():
        col = pc.cast(col, pa.float64())
    return np.asarray(col.to_numpy(), dtype=np.float64)  # nulls come out as NaN


def activity(frame: pa.Table) -> np.ndarray:
    """The best activity measure per row: SM active, else graphics-engine active, else duty."""
    sm = floats(frame, "sm_active")
    sm = np.where(np.isnan(sm), floats(frame, "graphics_active"), sm)
    return np.where(np.isnan(sm), floats(frame, "duty"), sm)


def warmup_windows(
    frame: pa.Table,
    *,
    band: float = 0.1,
    settle: int = 2,
    memory_ratio: float = 0.9,
    max_warmup_s: float = 900.0,
    idle_memory_bytes: float = 256 * 2**20,
) -> pa.Table:
    """One row per (job, GPU) run whose start the frame sees and that has a warm-up:
    `job_id`, `host`, `gpu_uuid`, `start_ns` (the run's first interval), `end_ns` (start of the
    first settled interval, exclusive), `intervals` (how many warm-up intervals), `capped`."""
    if frame.num_rows == 0 or "job_id" not in frame.column_names:
        return WINDOW_SCHEMA.empty_table()
    n = frame.num_rows
    start = np.asarray(pc.cast(frame.column("start_ns"), pa.int64()).to_numpy(), dtype=np.int64)
    job, jobs = label_codes(frame, "job_id")
    gpu = _sort_ranks(*label_codes(frame, "gpu_uuid"))
    host = _sort_ranks(*label_codes(frame, "host"))
    order = np.lexsort((start, host, gpu))  # by GPU, host (null last), then time; stable
    start, job, gpu, host = start[order], job[order], gpu[order], host[order]
    step_ns = np.round(floats(frame, "step_s")[order] * 1e9)
    act = activity(frame)[order]
    mem = floats(frame, "memory_used_bytes")[order]
    same_gpu = np.zeros(n, dtype=bool)
    same_gpu[1:] = (gpu[1:] == gpu[:-1]) & (host[1:] == host[:-1])
    joined = np.zeros(n, dtype=bool)  # row k continues the run of row k - 1
    joined[1:] = same_gpu[1:] & (job[1:] == job[:-1]) & (np.diff(start) <= step_ns[:-1])
    head = np.flatnonzero(~joined)  # one run of one job on one GPU per head, contiguous in time
    size = np.diff(np.r_[head, n])
    # the frame sees a run start unless the run opens its GPU's rows with memory already held
    mem_first = floats(frame, "memory_used_first")[order[head]]
    visible = same_gpu[head] | (~np.isnan(mem_first) & (mem_first <= idle_memory_bytes))
    step_s = step_ns[head] / 1e9
    with np.errstate(divide="ignore", invalid="ignore"):
        cap_f = np.ceil(max_warmup_s / step_s)
    known_step = np.isfinite(cap_f)  # a run starting with no (or a zero) step has no cap
    cap = np.maximum(1, np.minimum(np.where(known_step, cap_f, 0.0), size + 1)).astype(np.int64)
    has_job = np.array([v is not None for v in jobs], dtype=bool)[job[head]]
    eligible = has_job & visible & known_step & (size >= 2)
    tail_lo = head + np.minimum(cap, size // 2)  # the steady part: [tail_lo, head + size)
    tail_hi = np.where(eligible, head + size, tail_lo)  # only the runs that need it
    level = segment_nanmedian(act, tail_lo, tail_hi)
    mem_level = segment_nanmedian(mem, tail_lo, tail_hi)
    eligible &= ~np.isnan(level)
    warm, capped = _warmups(
        act, mem, head, size, cap, level, mem_level, band, settle, memory_ratio, eligible
    )
    keep = np.flatnonzero(eligible & (warm > 0))
    first, count = head[keep], warm[keep]
    end_ns = (start[first + count - 1] + step_ns[first]).astype(np.int64)
    picked = order[first]
    labels = {c: label_codes(frame, c) for c in ("job_id", "host", "gpu_uuid")}
    return pa.table(
        {
            **{
                c: pa.array([values[k] for k in code[picked].tolist()], pa.string())
                for c, (code, values) in labels.items()
            },
            "start_ns": pa.array(start[first], pa.int64()),
            "end_ns": pa.array(end_ns, pa.int64()),
            "intervals": pa.array(count, pa.int64()),
            "capped": pa.array(capped[keep], pa.bool_()),
        },
        schema=WINDOW_SCHEMA,
    )


def _warmups(
    act: np.ndarray,
    mem: np.ndarray,
    head: np.ndarray,
    size: np.ndarray,
    cap: np.ndarray,
    level: np.ndarray,
    mem_level: np.ndarray,
    band: float,
    settle: int,
    memory_ratio: float,
    eligible: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(warm-up intervals, capped) per run (rows `head[r]` .. `head[r] + size[r] - 1`): the
    first row k within the cap where the activity of rows k .. k + settle - 1 (within the run)
    lies within `band` of the run's level and the memory reached `memory_ratio` of its level;
    the cap (`capped`) where there is none."""
    n = act.size
    run = np.repeat(np.arange(head.size), size)
    with np.errstate(invalid="ignore"):
        bad = np.isnan(act) | (np.abs(act - level[run]) > band)
        mem_ok = np.isnan(mem_level[run]) | (mem >= memory_ratio * mem_level[run])
    next_bad = np.minimum.accumulate(np.where(bad, np.arange(n), n)[::-1])[::-1]
    rows = np.arange(n)
    settled = (next_bad >= np.minimum(rows + settle, (head + size)[run])) & mem_ok & eligible[run]
    settled &= rows - head[run] < np.minimum(size, cap + 1)[run]
    hit_runs, first_hit = np.unique(run[settled], return_index=True)
    warm = np.minimum(cap, size)  # not settled by the cap: cut there
    capped = np.ones(head.size, dtype=bool)
    warm[hit_runs] = np.flatnonzero(settled)[first_hit] - head[hit_runs]
    capped[hit_runs] = False
    return warm, capped


def _sort_ranks(code: np.ndarray, values: list[str | None]) -> np.ndarray:
    """Per row, the rank of its label in ascending order, null last (Arrow's sort order)."""
    order = sorted(range(len(values)), key=lambda k: (values[k] is None, values[k] or ""))
    rank = np.empty(len(values), dtype=np.int64)
    rank[order] = np.arange(len(values))
    return np.asarray(rank[code], dtype=np.int64)


def segment_nanmedian(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """`np.nanmedian(values[lo[s]:hi[s]])` for each segment s (NaN for an empty or all-NaN
    one), in one sort instead of one call per segment."""
    lengths = np.maximum(hi - lo, 0)
    seg = np.repeat(np.arange(lo.size), lengths)
    offsets = np.cumsum(lengths) - lengths
    idx = np.arange(int(lengths.sum())) - np.repeat(offsets, lengths) + np.repeat(lo, lengths)
    v = values[idx]
    v = v[np.lexsort((v, seg))]  # by segment, NaN last within each
    known = np.bincount(seg, weights=~np.isnan(v), minlength=lo.size).astype(np.int64)
    out = np.full(lo.size, np.nan)
    has = known > 0
    a = (offsets + (known - 1) // 2)[has]
    b = (offsets + known // 2)[has]
    out[has] = np.where(a == b, v[a], (v[a] + v[b]) / 2)
    return out


def in_windows(frame: pa.Table, windows: pa.Table) -> np.ndarray:
    """Boolean per frame row: inside one of `windows` (same job and GPU, start in the window)."""
    if windows.num_rows == 0 or frame.num_rows == 0:
        return np.zeros(frame.num_rows, dtype=bool)
    n = frame.num_rows
    both = pa.concat_tables(
        [
            pa.table(
                {k: pc.cast(src.column(k), pa.string()) for k in ("job_id", "gpu_uuid", "host")}
            )
            for src in (frame, windows)
        ]
    )
    key, _ = group_ids(both, ("job_id", "gpu_uuid", "host"))
    job, jobs = label_codes(both, "job_id")
    has_job = np.array([v is not None for v in jobs], dtype=bool)[job[:n]]
    starts = np.asarray(pc.cast(frame.column("start_ns"), pa.int64()).to_numpy(), dtype=np.int64)
    a = np.asarray(windows.column("start_ns").to_numpy(zero_copy_only=False), dtype=np.int64)
    b = np.asarray(windows.column("end_ns").to_numpy(zero_copy_only=False), dtype=np.int64)
    # times as ranks, so (key, time) folds into one integer: windows sorted by (key, start),
    # with the running maximum of their ends (a window of a lower key never reaches a row)
    times, rank = np.unique(np.concatenate([starts, a, b]), return_inverse=True)
    span = times.size + 1
    row_pos = key[:n] * span + rank[:n]
    w_start = key[n:] * span + rank[n : n + a.size]
    w_end = key[n:] * span + rank[n + a.size :]
    by_start = np.argsort(w_start, kind="stable")
    reach = np.maximum.accumulate(w_end[by_start])
    pos = np.searchsorted(w_start[by_start], row_pos, side="right") - 1
    inside = (pos >= 0) & (reach[np.maximum(pos, 0)] > row_pos)
    return np.asarray(inside & has_job, dtype=bool)
