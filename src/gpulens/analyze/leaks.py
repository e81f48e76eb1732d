"""GPU memory leaks, with a projected out-of-memory time.

Pure: interval frames in (see `gpulens.analyze.schema`), a table out, each row carrying the
numbers it was decided on.

`detect_leaks`: per run of a (job, GPU) series (a run ends at a gap in the rows or a PID
change, i.e. a restart) the steady window (no `warmup` rows; without a `state` column the
first `warmup_s` seconds are skipped) is fitted with a Theil-Sen line. A leak needs a long
enough window, an R² of that line, enough growth, and a rising floor: the suffix minimum
("the lowest memory will ever be from now on"), from the first to the third quarter of the
window, must grow at least `leak_min_floor_ratio` of what the line grows, which rejects the
sawtooth of caching allocators that fill and release.
Time to out-of-memory = (total - last used) / slope. The window's duration (and its growth,
slope × duration) is its steady seconds: the interval where the warm-up ends counts for its
steady share, read from the activity on either side, and the last interval for the seconds
its samples cover (`_steady_seconds`), so it does not move with the interval grid's phase.
"""

from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.analyze._arrays import (
    Floats,
    Ints,
    codes,
    floats,
    group_ids,
    ints,
    label_codes,
    nanmax,
    not_warmup,
)
from gpulens.analyze.memory import MemorySettings
from gpulens.analyze.phases import activity
from gpulens.numbers import is_nan


def _median(x: Floats) -> float:
    """`np.median` of a 1-D array (NaN when it holds a NaN), without its per-call overhead:
    the same middle value(s), averaged the same way."""
    n = x.size
    if n == 0:
        return float("nan")
    if n < 512:
        v = np.sort(x)
        if is_nan(v[-1]):  # NaN sorts last
            return float("nan")
    else:
        if np.isnan(x).any():
            return float("nan")
        v = np.partition(x, ((n - 1) // 2, n // 2))
    half = n // 2
    return float(v[half]) if n % 2 else float((v[half - 1] + v[half]) / 2)


@functools.lru_cache(maxsize=64)
def _pairs(n: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    i, j = np.triu_indices(n, k=1)
    return i, j


def theil_sen(t: Floats, y: Floats, max_points: int = 256) -> tuple[float, float]:
    """(slope, intercept) of the Theil-Sen line, over at most `max_points` evenly spaced points."""
    if t.size > max_points:
        pick = np.linspace(0, t.size - 1, max_points).round().astype(np.int64)
        t, y = t[pick], y[pick]
    i, j = _pairs(t.size)
    dt = t[j] - t[i]
    ok = dt > 0
    if not ok.any():
        return float("nan"), float("nan")
    slope = _median((y[j] - y[i])[ok] / dt[ok])
    return slope, _median(y - slope * t)


def r_squared(t: Floats, y: Floats, slope: float, intercept: float) -> float:
    """1 - SS_res / SS_tot of the line; 0 for a flat series."""
    ss_tot = float(((y - y.mean()) ** 2).sum())
    if ss_tot <= 0:
        return 0.0
    return 1.0 - float(((y - (slope * t + intercept)) ** 2).sum()) / ss_tot


_LEAK_SCHEMA = pa.schema(
    [
        ("job_id", pa.string()),
        ("host", pa.string()),
        ("gpu_uuid", pa.string()),
        ("gpu_model", pa.string()),
        ("run", pa.int64()),
        ("window_start_ns", pa.int64()),
        ("window_end_ns", pa.int64()),
        ("duration_s", pa.float64()),
        ("intervals", pa.int64()),
        ("rate_bytes_per_second", pa.float64()),
        ("r2", pa.float64()),
        ("floor_ratio", pa.float64()),
        ("growth_bytes", pa.float64()),
        ("first_used_bytes", pa.float64()),
        ("last_used_bytes", pa.float64()),
        ("memory_total_bytes", pa.float64()),
        ("headroom_bytes", pa.float64()),
        ("time_to_oom_s", pa.float64()),
        ("oom_at_ns", pa.int64()),
        ("confidence", pa.float64()),
        ("leak", pa.bool_()),
    ]
)


def _null_codes(frame: pa.Table, name: str) -> Ints:
    """Codes of a label column where equal values share a code and null has its own."""
    if name not in frame.column_names:
        return np.zeros(frame.num_rows, dtype=np.int64)
    valid = np.asarray(pc.is_valid(frame.column(name)).to_numpy(zero_copy_only=False))
    return np.where(valid, codes(frame, name), -1)


def _windows(
    frame: pa.Table, start: Ints, step0: Floats, steady: npt.NDArray[np.bool_], warmup_s: float
) -> tuple[Ints, Ints, Ints, Ints]:
    """The steady windows of every (job, GPU) run, in (job, host, GPU) group order then time:
    (rows of all windows back to back, the first position of each window in them, its run
    number within its group, and per window the rows of the run's two intervals just before
    it, latest first, as a (2, windows) array with -1 where the run has none). A run ends
    where rows are missing (gap > 1.5 steps) or the PID changes; without a state column a
    run's first `warmup_s` are left out."""
    ids, _ = group_ids(frame, ("job_id", "host", "gpu_uuid"))
    order = np.argsort(start, kind="stable").astype(np.int64)
    rows = order[np.argsort(ids[order], kind="stable")]  # by group, then time
    job, jobs = label_codes(frame, "job_id")
    rows = rows[np.array([j is not None for j in jobs], dtype=bool)[job[rows]]]
    empty = np.zeros(0, dtype=np.int64)
    if rows.size == 0:
        return empty, empty, empty, np.zeros((2, 0), dtype=np.int64)
    pid = _null_codes(frame, "pid")
    g, t = ids[rows], start[rows]
    new_group = np.r_[True, g[1:] != g[:-1]]
    gap = np.r_[False, np.diff(t) > 1.5 * step0[rows[:-1]] * 1e9]
    cut = new_group | gap | np.r_[False, pid[rows[1:]] != pid[rows[:-1]]]
    run = np.cumsum(cut) - 1
    run_no = run - np.maximum.accumulate(np.where(new_group, run, 0))
    keep = steady[rows]
    if "state" not in frame.column_names:
        run_start = t[np.maximum.accumulate(np.where(cut, np.arange(rows.size), 0))]
        keep &= t >= run_start + warmup_s * 1e9
    every, every_run = rows, run
    at = np.flatnonzero(keep)  # each kept row's position in `every`
    rows, run, run_no = rows[keep], run[keep], run_no[keep]
    if rows.size == 0:
        return empty, empty, empty, np.zeros((2, 0), dtype=np.int64)
    heads = np.flatnonzero(np.r_[True, run[1:] != run[:-1]])
    size = np.diff(np.r_[heads, rows.size])
    big = size >= 3  # a window needs three points
    keep = np.repeat(big, size)
    before = np.stack([at[heads[big]] - 1, at[heads[big]] - 2])  # positions in `every`
    ok = (before >= 0) & (every_run[np.maximum(before, 0)] == run[heads[big]])
    heads = (np.cumsum(np.where(big, size, 0)) - np.where(big, size, 0))[big]
    return rows[keep], heads, run_no[keep][heads], np.where(ok, every[np.maximum(before, 0)], -1)


def detect_leaks(frame: pa.Table, settings: MemorySettings | None = None) -> pa.Table:
    """Per (job, GPU, run) with enough steady rows: slope, fit, floor, projection, verdict."""
    s = settings or MemorySettings()
    if "job_id" not in frame.column_names or frame.num_rows == 0:
        return _LEAK_SCHEMA.empty_table()
    start, step = ints(frame, "start_ns"), np.nan_to_num(floats(frame, "step_s"))
    used, total = floats(frame, "memory_used_bytes"), floats(frame, "memory_total_bytes")
    low = np.fmin(
        np.fmin(floats(frame, "memory_used_first"), floats(frame, "memory_used_last")), used
    )
    low = np.nan_to_num(low, nan=np.inf)
    steady = not_warmup(frame) & ~np.isnan(used)
    rows, heads, run_no, before = _windows(frame, start, step, steady, s.warmup_s)
    if heads.size == 0:
        return _LEAK_SCHEMA.empty_table()
    fit = _fit_all(rows, heads, start, step, used, low, total, s)
    seconds = _steady_seconds(frame, rows, heads, before, start, step)
    fits = _finish(*fit, seconds, s)
    first = rows[heads]
    for c in ("job_id", "host", "gpu_uuid", "gpu_model"):
        code, values = label_codes(frame, c)
        fits[c] = pa.array([values[k] for k in code[first].tolist()], pa.string())
    fits["run"] = pa.array(run_no, pa.int64())
    return pa.table([fits[f.name] for f in _LEAK_SCHEMA], schema=_LEAK_SCHEMA)


def _covered(frame: pa.Table, step: Floats) -> Floats:
    """Per row, the seconds its interval covers: its length times its samples over the most
    samples an interval of its GPU entity holds (the whole length without a sample count)."""
    samples = floats(frame, "samples")
    if np.isnan(samples).all():
        return step
    gpu, n = group_ids(frame, ("host", "gpu_uuid", "mig_instance"))
    full = np.zeros(n)
    np.fmax.at(full, gpu, samples)
    share = np.divide(samples, full[gpu], out=np.ones_like(step), where=full[gpu] > 0)
    share = np.where(np.isnan(share), 1.0, np.clip(share, 0.0, 1.0))
    return np.asarray(step * share, dtype=np.float64)


def _steady_seconds(
    frame: pa.Table, rows: Ints, heads: Ints, before: Ints, start: Ints, step: Floats
) -> Floats:
    """Per window, the seconds of steady state it spans: from its first interval's start to
    the seconds its last interval covers (a recording that stops inside an interval counts to
    its last sample), with the warm-up's end read inside the interval where it falls.

    The warm-up ends inside an interval, which is classified one way or the other, so the
    window would gain or lose up to one interval with the phase of the grid. Where the run's
    two intervals before the window are warm-up and the window's second interval shows the
    steady level, the interval where the state changes (the window's first, or the warm-up's
    last) is read as a mix of the activity (`phases.activity`) of the warm-up (the earlier
    warm-up interval) and of the steady state (the window's second interval): an interval at
    x is (x - warm) / (steady - warm) steady, clipped to 0..1 (`findings/runs.py`
    `with_edges` reads a run's edges the same way). The window's first interval counts for
    its steady share and the warm-up's last one adds its own, each of the seconds it covers."""
    cover = _covered(frame, step)
    last = rows[np.r_[heads[1:], rows.size] - 1]
    first = rows[heads]
    seconds = (start[last] - start[first]) / 1e9 + cover[last]
    if "state" not in frame.column_names:  # the warm-up is the run's first `warmup_s`
        return np.asarray(seconds, dtype=np.float64)
    edge, outer = before
    warm = ~not_warmup(frame)
    act = activity(frame)
    found = (edge >= 0) & (outer >= 0)
    found[found] &= warm[edge[found]] & warm[outer[found]]
    k = np.flatnonzero(found)
    x_out, x_in = act[outer[k]], act[rows[heads[k] + 1]]
    x_edge, x_first = act[edge[k]], act[first[k]]
    contrast = x_in - x_out
    with np.errstate(invalid="ignore"):
        ok = (np.abs(contrast) >= 1e-6) & ~np.isnan(x_edge) & ~np.isnan(x_first)
    k, contrast = k[ok], contrast[ok]
    steady_edge = np.clip((x_edge[ok] - x_out[ok]) / contrast, 0.0, 1.0)
    steady_first = np.clip((x_first[ok] - x_out[ok]) / contrast, 0.0, 1.0)
    seconds[k] += steady_edge * cover[edge[k]] - (1.0 - steady_first) * cover[first[k]]
    return np.asarray(seconds, dtype=np.float64)


# What a window's row is computed from (`_finish`): its first start and its end (ns), its
# points, and the fit: slope, R², the time and floor differences between the first and the
# third quarter's medians, the total memory, the first and the last value.
Fit = tuple[Ints, Ints, Ints, Floats, Floats, Floats, Floats, Floats, Floats, Floats]


def _fit_all(
    rows: Ints,
    heads: Ints,
    start: Ints,
    step: Floats,
    used: Floats,
    low: Floats,
    total: Floats,
    s: MemorySettings,
) -> Fit:
    """The fit of every window (`rows[heads[k]:heads[k + 1]]`). Windows of the same length
    are fitted together, a block per numpy call (`_fit_block`); a window whose times are not
    strictly increasing is fitted alone (`_fit`)."""
    size = np.diff(np.r_[heads, rows.size])
    k = heads.size
    ends = np.zeros((2, k), dtype=np.int64)  # first start, end
    values = np.zeros((7, k))
    for m in np.unique(size).tolist():
        which = np.flatnonzero(size == m)
        per_window = max(m, min(m, s.leak_max_points) ** 2 // 2)
        block = max(1, 2_000_000 // per_window)  # bounds the pairwise slopes held at once
        for lo in range(0, which.size, block):
            part = which[lo : lo + block]
            w = rows[heads[part][:, None] + np.arange(m)]
            alone, ends[:, part], values[:, part] = _fit_block(w, start, step, used, low, total, s)
            for j in np.flatnonzero(alone).tolist():
                t0, end, numbers = _fit(w[j], start, step, used, low, total, s)
                ends[:, part[j]] = (t0, end)
                values[:, part[j]] = numbers
    return ends[0], ends[1], size, *values


def _row_median(x: Floats) -> Floats:
    """`_median` of each row of a 2-D array without NaN."""
    n = x.shape[1]
    half = n // 2
    if n % 2:
        return np.asarray(np.partition(x, half, axis=1)[:, half])
    v = np.partition(x, (half - 1, half), axis=1)
    return np.asarray((v[:, half - 1] + v[:, half]) / 2)


def _fit_block(
    w: Ints,
    start: Ints,
    step: Floats,
    used: Floats,
    low: Floats,
    total: Floats,
    s: MemorySettings,
) -> tuple[npt.NDArray[np.bool_], Ints, Floats]:
    """`_fit` of each row of `w` (windows of one length, one per row), the same numbers
    computed a block at a time: (windows `_fit` must do alone, as their times are not strictly
    increasing; first starts and ends, 2 × windows; the other numbers, 7 × windows)."""
    m = w.shape[1]
    t0 = start[w[:, 0]]
    t = (start[w] - t0[:, None]) / 1e9 + step[w] / 2
    y = used[w]
    tt, yy = t, y
    if m > s.leak_max_points:  # theil_sen's evenly spaced points
        pick = np.linspace(0, m - 1, s.leak_max_points).round().astype(np.int64)
        tt, yy = t[:, pick], y[:, pick]
    i, j = _pairs(tt.shape[1])
    dt = tt[:, j] - tt[:, i]
    alone = np.asarray(~(dt > 0).all(axis=1), dtype=bool)
    slope = _row_median((yy[:, j] - yy[:, i]) / np.where(dt > 0, dt, 1.0))
    intercept = _row_median(yy - slope[:, None] * tt)
    ss_tot = ((y - y.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
    ss_res = ((y - (slope[:, None] * t + intercept[:, None])) ** 2).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        r2 = np.where(ss_tot > 0, 1.0 - ss_res / np.where(ss_tot > 0, ss_tot, 1.0), 0.0)
    floor = np.minimum.accumulate(low[w][:, ::-1], axis=1)[:, ::-1]
    q1, q3 = _quarters(m)
    t_gap = _row_median(t[:, q3]) - _row_median(t[:, q1])
    floor_growth = _row_median(floor[:, q3]) - _row_median(floor[:, q1])
    with np.errstate(invalid="ignore"):  # all NaN: NaN, as nanmax
        tot = np.fmax.reduce(total[w], axis=1)
    end = (start[w[:, -1]] + step[w[:, -1]] * 1e9).astype(np.int64)
    numbers = np.stack([slope, r2, t_gap, floor_growth, tot, y[:, 0], y[:, -1]])
    return alone, np.stack([t0, end]), numbers


def _quarters(m: int) -> tuple[slice, slice]:
    """The first and third quarter of a window of `m` points (the last point for 3 points)."""
    q = max(1, m // 4)
    return slice(0, q), slice(2 * q, 3 * q) if m >= 4 else slice(-1, None)


def _fit(
    w: np.ndarray,
    start: np.ndarray,
    step: Floats,
    used: Floats,
    low: Floats,
    total: Floats,
    s: MemorySettings,
) -> tuple[int, int, list[float]]:
    """The fit of one window `w` (`step`: NaN as 0; `low`: NaN as +inf): first start, end and
    the numbers `_fit_block` gives."""
    t0 = int(start[w[0]])
    end = int(start[w[-1]] + step[w[-1]] * 1e9)
    t = (start[w] - t0) / 1e9 + step[w] / 2
    y = used[w]
    slope, intercept = theil_sen(t, y, s.leak_max_points)
    r2 = r_squared(t, y, slope, intercept)
    floor = np.minimum.accumulate(low[w][::-1])[::-1]
    q1, q3 = _quarters(w.size)
    t_gap = float(_median(t[q3]) - _median(t[q1]))
    floor_growth = float(_median(floor[q3]) - _median(floor[q1]))
    tot = nanmax(total[w])
    return t0, end, [slope, r2, t_gap, floor_growth, tot, float(y[0]), float(y[-1])]


def _at_least(x: Floats, floor: float) -> Floats:
    """`max(floor, x)` per element as Python's max: `floor` unless x is larger (NaN too)."""
    return np.where(x > floor, x, floor)


def _at_most(x: Floats, ceiling: float) -> Floats:
    """`min(ceiling, x)` per element as Python's min: `ceiling` unless x is smaller."""
    return np.where(x < ceiling, x, ceiling)


def _finish(
    t0: Ints,
    end: Ints,
    points: Ints,
    slope: Floats,
    r2: Floats,
    t_gap: Floats,
    floor_growth: Floats,
    tot: Floats,
    first: Floats,
    last: Floats,
    duration: Floats,
    s: MemorySettings,
) -> dict[str, pa.Array]:
    """The windows' columns from their fits and their steady seconds (`_steady_seconds`):
    rate, growth, floor ratio, the verdict, its confidence and the projected out-of-memory
    time."""
    # First versus third quarter: the suffix minimum of the last stretch is the data itself
    # (nobody knows yet whether it will drop), so the last quarter would flatter a sawtooth.
    expected = slope * t_gap
    with np.errstate(divide="ignore", invalid="ignore"):
        floor_ratio = np.where(
            expected > 0, floor_growth / np.where(expected > 0, expected, 1.0), 0.0
        )
        growth = slope * duration
        leak = (
            (duration >= s.leak_min_duration_s)
            & (slope > 0)
            & (growth >= s.leak_min_growth_bytes)
            & (r2 >= s.leak_min_r2)
            & (floor_ratio >= s.leak_min_floor_ratio)
        )
        confidence = (
            _at_most(_at_least(r2, 0.0), 1.0)
            * _at_most(duration / (2 * s.leak_min_duration_s), 1.0)
            * _at_most(_at_least(floor_ratio, 0.0), 1.0)
        )
        head = tot - last
        known = (slope > 0) & ~np.isnan(head)
        to_oom = np.where(known, head / np.where(known, slope, 1.0), np.nan)
    # unknown (no total memory, or not growing) stays null: never 0, which reads "out of
    # memory now"
    to_oom_s = np.where(np.isnan(to_oom), np.nan, np.maximum(to_oom, 0.0))
    oom_at = [
        None if is_nan(x) else e + round(max(0.0, x) * 1e9)
        for e, x in zip(end.tolist(), to_oom.tolist(), strict=True)
    ]
    return {
        "window_start_ns": pa.array(t0, pa.int64()),
        "window_end_ns": pa.array(end, pa.int64()),
        "duration_s": pa.array(duration, pa.float64()),
        "intervals": pa.array(points, pa.int64()),
        "rate_bytes_per_second": pa.array(slope, pa.float64()),
        "r2": pa.array(r2, pa.float64()),
        "floor_ratio": pa.array(floor_ratio, pa.float64()),
        "growth_bytes": pa.array(growth, pa.float64()),
        "first_used_bytes": pa.array(first, pa.float64()),
        "last_used_bytes": pa.array(last, pa.float64()),
        "memory_total_bytes": pa.array(tot, pa.float64(), from_pandas=True),
        "headroom_bytes": pa.array(head, pa.float64(), from_pandas=True),
        "time_to_oom_s": pa.array(to_oom_s, pa.float64(), from_pandas=True),
        "oom_at_ns": pa.array(oom_at, pa.int64()),
        "confidence": pa.array(np.where(slope > 0, confidence, 0.0), pa.float64()),
        "leak": pa.array(leak, pa.bool_()),
    }
