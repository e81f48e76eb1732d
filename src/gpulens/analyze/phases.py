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

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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
    """A numeric frame column as float64 with NaN for null (all NaN when the column is absent)."""
    if name not in frame.column_names:
        return np.full(frame.num_rows, np.nan)
    col = frame.column(name).cast(pa.float64())
    return np.asarray(col.fill_null(np.nan).to_numpy(), dtype=np.float64)


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
    rows: dict[str, list[object]] = {f.name: [] for f in WINDOW_SCHEMA}
    if frame.num_rows == 0 or "job_id" not in frame.column_names:
        return pa.Table.from_pydict(rows, schema=WINDOW_SCHEMA)
    order = pc.sort_indices(
        frame, [("gpu_uuid", "ascending"), ("host", "ascending"), ("start_ns", "ascending")]
    )
    t = frame.take(order)
    start = np.asarray(t.column("start_ns").to_numpy(zero_copy_only=False), dtype=np.int64)
    step_ns = np.round(floats(t, "step_s") * 1e9)
    jobs = t.column("job_id").to_pylist()
    gpus = t.column("gpu_uuid").to_pylist()
    hosts = t.column("host").to_pylist()
    act = activity(t)
    mem = floats(t, "memory_used_bytes")
    mem_first = floats(t, "memory_used_first")
    n = t.num_rows
    i = 0
    while i < n:
        j = i + 1  # [i, j): one run of one job on one GPU, contiguous in time
        while (
            j < n
            and jobs[j] == jobs[i]
            and gpus[j] == gpus[i]
            and hosts[j] == hosts[i]
            and start[j] - start[j - 1] <= step_ns[j - 1]
        ):
            j += 1
        gpu_first = i == 0 or gpus[i - 1] != gpus[i] or hosts[i - 1] != hosts[i]
        visible = not gpu_first or (
            not math.isnan(mem_first[i]) and mem_first[i] <= idle_memory_bytes
        )
        if jobs[i] is not None and visible:
            found = _settle(
                act[i:j],
                mem[i:j],
                float(step_ns[i]) / 1e9,
                band,
                settle,
                memory_ratio,
                max_warmup_s,
            )
            if found is not None and found[0] > 0:
                end, capped = found
                for key, value in (
                    ("job_id", jobs[i]),
                    ("host", hosts[i]),
                    ("gpu_uuid", gpus[i]),
                    ("start_ns", int(start[i])),
                    ("end_ns", int(start[i + end - 1] + step_ns[i])),
                    ("intervals", end),
                    ("capped", capped),
                ):
                    rows[key].append(value)
        i = j
    return pa.Table.from_pydict(rows, schema=WINDOW_SCHEMA)


def _settle(
    act: np.ndarray,
    mem: np.ndarray,
    step_s: float,
    band: float,
    settle: int,
    memory_ratio: float,
    max_warmup_s: float,
) -> tuple[int, bool] | None:
    """(warm-up intervals, capped) of one run, or None when nothing is known about it."""
    n = len(act)
    cap = max(1, math.ceil(max_warmup_s / step_s))
    tail = slice(min(cap, n // 2), n)
    if n < 2 or np.all(np.isnan(act[tail])):
        return None
    level = float(np.nanmedian(act[tail]))
    mem_tail = mem[tail]
    mem_level = float(np.nanmedian(mem_tail)) if not np.all(np.isnan(mem_tail)) else math.nan
    for k in range(min(n, cap + 1)):
        window = act[k : k + settle]
        if np.any(np.isnan(window)) or np.any(np.abs(window - level) > band):
            continue
        if not math.isnan(mem_level) and not (mem[k] >= memory_ratio * mem_level):
            continue
        return min(k, cap), k > cap
    return min(cap, n), True


def in_windows(frame: pa.Table, windows: pa.Table) -> np.ndarray:
    """Boolean per frame row: inside one of `windows` (same job and GPU, start in the window)."""
    flags = np.zeros(frame.num_rows, dtype=bool)
    if windows.num_rows == 0 or frame.num_rows == 0:
        return flags
    index: dict[tuple[object, object, object], list[tuple[int, int]]] = {}
    for w in windows.to_pylist():
        key = (w["job_id"], w["gpu_uuid"], w["host"])
        index.setdefault(key, []).append((int(w["start_ns"]), int(w["end_ns"])))
    jobs = frame.column("job_id").to_pylist()
    gpus = frame.column("gpu_uuid").to_pylist()
    hosts = frame.column("host").to_pylist()
    starts = frame.column("start_ns").to_pylist()
    for r in range(frame.num_rows):
        spans = index.get((jobs[r], gpus[r], hosts[r])) if jobs[r] is not None else None
        if spans and any(a <= starts[r] < b for a, b in spans):
            flags[r] = True
    return flags
