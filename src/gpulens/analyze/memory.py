"""GPU memory: peaks and headroom, leaks with a projected out-of-memory time, over-provisioning.

Pure: interval frames in (see `gpulens.analyze.schema`), tables out, each row carrying the
numbers it was decided on.

- `memory_peaks`: per (job, GPU) the peak of `memory_used_bytes` (the whole GPU, what an
  out-of-memory depends on) and of `process_memory_bytes`, and the headroom
  `memory_total_bytes - peak` in bytes and as a ratio of the total. `job_memory_peaks` rolls
  that up per job (worst GPU).
- `detect_leaks`: per run of a (job, GPU) series (a run ends at a gap in the rows or a PID
  change, i.e. a restart) the steady window (no `warmup` rows; without a `state` column the
  first `warmup_s` seconds are skipped) is fitted with a Theil-Sen line. A leak needs a long
  enough window, an R² of that line, enough growth, and a rising floor: the suffix minimum
  ("the lowest memory will ever be from now on"), from the first to the third quarter of the
  window, must grow at least `leak_min_floor_ratio` of what the line grows, which rejects the
  sawtooth of caching allocators that fill and release.
  Time to out-of-memory = (total - last used) / slope.
- `overprovisioned`: "GPU too powerful" (jobstats / Job Defense Shield): a job whose mean duty
  cycle (SM activity when there is no duty cycle) stays at or below a threshold and whose
  peak memory is small, for long enough, with the smallest MIG profile of its GPU model that
  fits its memory (with a margin) and its compute (activity / target activity), or a smaller
  GPU when the model has no MIG.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass

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
    none_if_nan,
    not_warmup,
    rows_by_group,
    strings,
    weighted_mean,
)
from gpulens.analyze.mig import SMALLER_GPUS, MigProfile, mig_family, pick_mig_profile

GB = 1e9  # the unit of MIG profile names and of the over-provisioning threshold
MIB = float(1 << 20)


@dataclass(frozen=True, slots=True)
class MemorySettings:
    """Thresholds of leak detection and over-provisioning (defaults from DESIGN.md)."""

    warmup_s: float = 300.0  # skipped at a run's start when the frame has no state column
    leak_min_duration_s: float = 1800.0
    leak_min_r2: float = 0.8
    leak_min_growth_bytes: float = 512 * MIB
    leak_min_floor_ratio: float = 0.5
    leak_max_points: int = 256
    overprovisioned_max_activity: float = 0.15
    overprovisioned_max_memory_bytes: float = 10 * GB
    overprovisioned_min_duration_s: float = 3600.0
    mig_memory_margin: float = 1.1
    mig_target_activity: float = 0.8


_PEAK_SCHEMA = pa.schema(
    [
        ("job_id", pa.string()),
        ("host", pa.string()),
        ("gpu_uuid", pa.string()),
        ("gpu_model", pa.string()),
        ("first_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("intervals", pa.int64()),
        ("peak_used_bytes", pa.float64()),
        ("peak_process_bytes", pa.float64()),
        ("memory_total_bytes", pa.float64()),
        ("headroom_bytes", pa.float64()),
        ("headroom_ratio", pa.float64()),
    ]
)


def _nanmax(x: Floats) -> float:
    return float(np.nanmax(x)) if x.size and not np.isnan(x).all() else float("nan")


def memory_peaks(frame: pa.Table) -> pa.Table:
    """Per (job_id, host, gpu_uuid): peak memory and headroom (rows without a job: per GPU)."""
    ids, n = _group_ids(frame, ("job_id", "host", "gpu_uuid"))
    if n == 0:
        return _PEAK_SCHEMA.empty_table()
    start, step = ints(frame, "start_ns"), floats(frame, "step_s")
    used, proc = floats(frame, "memory_used_bytes"), floats(frame, "process_memory_bytes")
    total = floats(frame, "memory_total_bytes")
    job, host, uuid = strings(frame, "job_id"), strings(frame, "host"), strings(frame, "gpu_uuid")
    model = strings(frame, "gpu_model")
    rows = []
    for idx in rows_by_group(ids, n):
        peak, tot = _nanmax(used[idx]), _nanmax(total[idx])
        head = tot - peak
        i0 = int(idx[0])
        rows.append(
            {
                "job_id": job[i0],
                "host": host[i0],
                "gpu_uuid": uuid[i0],
                "gpu_model": model[i0],
                "first_ns": int(start[idx].min()),
                "end_ns": int((start[idx] + np.nan_to_num(step[idx]) * 1e9).max()),
                "intervals": int(idx.size),
                "peak_used_bytes": none_if_nan(peak),
                "peak_process_bytes": none_if_nan(_nanmax(proc[idx])),
                "memory_total_bytes": none_if_nan(tot),
                "headroom_bytes": none_if_nan(head),
                "headroom_ratio": none_if_nan(head / tot if tot > 0 else float("nan")),
            }
        )
    return pa.Table.from_pylist(rows, schema=_PEAK_SCHEMA)


def job_memory_peaks(peaks: pa.Table) -> pa.Table:
    """Per job (rows of `memory_peaks` with a job_id): GPUs, worst peak and smallest headroom."""
    with_job = peaks.filter(peaks.column("job_id").is_valid())
    return (
        with_job.group_by("job_id")
        .aggregate(
            [
                ("gpu_uuid", "count_distinct"),
                ("peak_used_bytes", "max"),
                ("peak_process_bytes", "max"),
                ("memory_total_bytes", "min"),
                ("headroom_bytes", "min"),
                ("headroom_ratio", "min"),
            ]
        )
        .rename_columns(
            [
                "job_id",
                "gpus",
                "peak_used_bytes",
                "peak_process_bytes",
                "memory_total_bytes",
                "headroom_bytes",
                "headroom_ratio",
            ]
        )
    )


def _median(x: Floats) -> float:
    """`np.median` of a 1-D array (NaN when it holds a NaN), without its per-call overhead:
    the same middle value(s), averaged the same way."""
    n = x.size
    if n == 0:
        return float("nan")
    if n < 512:
        v = np.sort(x)
        if v[-1] != v[-1]:  # NaN sorts last
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


def _labels(frame: pa.Table, name: str) -> _Labels:
    """Column `name` as strings, read per row on demand (what `strings` gives, without a
    Python string per row)."""
    return _Labels(frame, name)


class _Labels:
    def __init__(self, frame: pa.Table, name: str) -> None:
        if name not in frame.column_names or frame.num_rows == 0:
            self._codes = np.zeros(frame.num_rows, dtype=np.int64)
            self._values: list[str | None] = [None]
            return
        col = frame.column(name)
        if not pa.types.is_string(col.type) and not pa.types.is_large_string(col.type):
            col = pc.cast(col, pa.string())
        encoded = pc.dictionary_encode(col, null_encoding="encode").combine_chunks()
        self._codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        self._values = encoded.dictionary.to_pylist() or [None]

    def __getitem__(self, row: int) -> str | None:
        return self._values[int(self._codes[row])]


def _group_ids(frame: pa.Table, keys: tuple[str, ...]) -> tuple[Ints, int]:
    """`_arrays.group_ids` (the same ids: groups numbered in the order of their key codes),
    with the codes folded into one integer instead of a row-wise unique."""
    if frame.num_rows == 0 or not keys:
        return group_ids(frame, keys)
    parts = [codes(frame, k) for k in keys]
    combined = np.zeros(frame.num_rows, dtype=np.int64)
    span = 1
    for part in parts:
        size = int(part.max()) + 1
        span *= size
        if span >= 2**62:  # would overflow: the row-wise unique
            return group_ids(frame, keys)
        combined = combined * size + part
    _, inverse = np.unique(combined, return_inverse=True)
    ids = np.asarray(inverse, dtype=np.int64).reshape(-1)
    return ids, int(ids.max()) + 1


def _null_codes(frame: pa.Table, name: str) -> Ints:
    """Codes of a label column where equal values share a code and null has its own."""
    if name not in frame.column_names:
        return np.zeros(frame.num_rows, dtype=np.int64)
    valid = np.asarray(pc.is_valid(frame.column(name)).to_numpy(zero_copy_only=False))
    return np.where(valid, codes(frame, name), -1)


def _runs(start: np.ndarray, step0: Floats, pid: Ints, idx: np.ndarray) -> list[np.ndarray]:
    """Split time-ordered rows `idx` where rows are missing (gap > 1.5 steps) or the PID changes
    (`step0`: steps with NaN as 0; `pid`: PID codes, null its own code)."""
    if idx.size == 0:
        return []
    gap = np.diff(start[idx]) > 1.5 * step0[idx[:-1]] * 1e9
    new_pid = pid[idx[1:]] != pid[idx[:-1]]
    cuts = np.flatnonzero(gap | new_pid) + 1
    return [r for r in np.split(idx, cuts) if r.size]


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
    has_state = "state" in frame.column_names
    job, host, uuid = _labels(frame, "job_id"), _labels(frame, "host"), _labels(frame, "gpu_uuid")
    model, pid = _labels(frame, "gpu_model"), _null_codes(frame, "pid")
    ids, n = _group_ids(frame, ("job_id", "host", "gpu_uuid"))
    order = np.argsort(start, kind="stable").astype(np.int64)
    rows = []
    for idx in rows_by_group(ids, n, order):
        if job[int(idx[0])] is None:
            continue
        for run_no, run in enumerate(_runs(start, step, pid, idx)):
            keep = steady[run]
            if not has_state:
                keep &= start[run] >= start[run[0]] + s.warmup_s * 1e9
            w = run[keep]
            if w.size < 3:
                continue
            row = _fit(w, start, step, used, low, total, s)
            i0 = int(w[0])
            row.update(
                job_id=job[i0], host=host[i0], gpu_uuid=uuid[i0], gpu_model=model[i0], run=run_no
            )
            rows.append(row)
    return pa.Table.from_pylist(rows, schema=_LEAK_SCHEMA)


def _fit(
    w: np.ndarray,
    start: np.ndarray,
    step: Floats,
    used: Floats,
    low: Floats,
    total: Floats,
    s: MemorySettings,
) -> dict[str, object]:
    """The fit of one window `w` (`step`: NaN as 0; `low`: NaN as +inf)."""
    t0 = int(start[w[0]])
    end = int(start[w[-1]] + step[w[-1]] * 1e9)
    t = (start[w] - t0) / 1e9 + step[w] / 2
    y = used[w]
    slope, intercept = theil_sen(t, y, s.leak_max_points)
    r2 = r_squared(t, y, slope, intercept)
    duration = (end - t0) / 1e9
    floor = np.minimum.accumulate(low[w][::-1])[::-1]
    # First versus third quarter: the suffix minimum of the last stretch is the data itself
    # (nobody knows yet whether it will drop), so the last quarter would flatter a sawtooth.
    q = max(1, w.size // 4)
    q1, q3 = slice(0, q), slice(2 * q, 3 * q) if w.size >= 4 else slice(-1, None)
    expected = slope * float(_median(t[q3]) - _median(t[q1]))
    floor_growth = float(_median(floor[q3]) - _median(floor[q1]))
    floor_ratio = floor_growth / expected if expected > 0 else 0.0
    growth = slope * duration
    tot = _nanmax(total[w])
    last = float(y[-1])
    leak = bool(
        duration >= s.leak_min_duration_s
        and slope > 0
        and growth >= s.leak_min_growth_bytes
        and r2 >= s.leak_min_r2
        and floor_ratio >= s.leak_min_floor_ratio
    )
    confidence = (
        min(1.0, max(0.0, r2))
        * min(1.0, duration / (2 * s.leak_min_duration_s))
        * min(1.0, max(0.0, floor_ratio))
    )
    head = tot - last
    to_oom = head / slope if slope > 0 and head == head else float("nan")
    return {
        "window_start_ns": t0,
        "window_end_ns": end,
        "duration_s": duration,
        "intervals": int(w.size),
        "rate_bytes_per_second": slope,
        "r2": r2,
        "floor_ratio": floor_ratio,
        "growth_bytes": growth,
        "first_used_bytes": float(y[0]),
        "last_used_bytes": last,
        "memory_total_bytes": none_if_nan(tot),
        "headroom_bytes": none_if_nan(head),
        "time_to_oom_s": none_if_nan(max(0.0, to_oom)),
        "oom_at_ns": None if to_oom != to_oom else end + round(max(0.0, to_oom) * 1e9),
        "confidence": confidence if slope > 0 else 0.0,
        "leak": leak,
    }


_OVER_SCHEMA = pa.schema(
    [
        ("job_id", pa.string()),
        ("host", pa.string()),
        ("gpus", pa.int64()),
        ("gpu_model", pa.string()),
        ("duration_s", pa.float64()),
        ("gpu_hours", pa.float64()),
        ("activity_basis", pa.string()),
        ("mean_activity", pa.float64()),
        ("mean_duty", pa.float64()),
        ("mean_sm_active", pa.float64()),
        ("peak_memory_bytes", pa.float64()),
        ("memory_total_bytes", pa.float64()),
        ("overprovisioned", pa.bool_()),
        ("mig_profile", pa.string()),
        ("mig_compute_fraction", pa.float64()),
        ("mig_memory_bytes", pa.float64()),
        ("smaller_gpu", pa.string()),
        ("suggestion", pa.string()),
    ]
)


def overprovisioned(frame: pa.Table, settings: MemorySettings | None = None) -> pa.Table:
    """Per job: "GPU too powerful" verdict with its evidence and a MIG profile or smaller GPU."""
    s = settings or MemorySettings()
    if "job_id" not in frame.column_names or frame.num_rows == 0:
        return _OVER_SCHEMA.empty_table()
    has_job = pc.is_valid(frame.column("job_id")).to_numpy(zero_copy_only=False)
    keep = not_warmup(frame) & np.asarray(has_job, dtype=bool)
    f = frame.filter(pa.array(keep))
    start, step = ints(f, "start_ns"), floats(f, "step_s")
    duty, sm = floats(f, "duty"), floats(f, "sm_active")
    proc, used = floats(f, "process_memory_bytes"), floats(f, "memory_used_bytes")
    mem = np.where(np.isnan(proc), used, proc)
    total = floats(f, "memory_total_bytes")
    job, host, uuid, model = (_labels(f, c) for c in ("job_id", "host", "gpu_uuid", "gpu_model"))
    ids, n = _group_ids(f, ("job_id",))
    rows = []
    for idx in rows_by_group(ids, n):
        weights = np.nan_to_num(step[idx])
        mean_duty, mean_sm = weighted_mean(duty[idx], weights), weighted_mean(sm[idx], weights)
        basis, activity = ("duty", mean_duty) if mean_duty == mean_duty else ("sm_active", mean_sm)
        peak, tot = _nanmax(mem[idx]), _nanmax(total[idx])
        duration = float((start[idx] + weights * 1e9).max() - start[idx].min()) / 1e9
        gpu_model = Counter(model[int(i)] for i in idx).most_common(1)[0][0]
        flagged = bool(
            activity == activity
            and activity <= s.overprovisioned_max_activity
            and peak == peak
            and peak <= s.overprovisioned_max_memory_bytes
            and duration >= s.overprovisioned_min_duration_s
        )
        family = mig_family(gpu_model, tot)
        profile = (
            pick_mig_profile(family, peak, activity, s.mig_memory_margin, s.mig_target_activity)
            if flagged
            else None
        )
        smaller = None
        if flagged and profile is None:
            smaller = next(
                (
                    g
                    for g, m in SMALLER_GPUS
                    if m >= peak * s.mig_memory_margin
                    and g.upper() not in (gpu_model or "").upper()
                ),
                None,
            )
        rows.append(
            {
                "job_id": job[int(idx[0])],
                "host": host[int(idx[0])],
                "gpus": len({uuid[int(i)] for i in idx}),
                "gpu_model": gpu_model,
                "duration_s": duration,
                "gpu_hours": float(weights.sum()) / 3600.0,
                "activity_basis": basis if activity == activity else None,
                "mean_activity": none_if_nan(activity),
                "mean_duty": none_if_nan(mean_duty),
                "mean_sm_active": none_if_nan(mean_sm),
                "peak_memory_bytes": none_if_nan(peak),
                "memory_total_bytes": none_if_nan(tot),
                "overprovisioned": flagged,
                "mig_profile": profile.name if profile else None,
                "mig_compute_fraction": profile.compute_fraction if profile else None,
                "mig_memory_bytes": profile.memory_bytes if profile else None,
                "smaller_gpu": smaller,
                "suggestion": _suggest(flagged, profile, smaller, gpu_model, peak, basis, activity),
            }
        )
    return pa.Table.from_pylist(rows, schema=_OVER_SCHEMA)


def _suggest(
    flagged: bool,
    profile: MigProfile | None,
    smaller: str | None,
    gpu_model: str | None,
    peak: float,
    basis: str,
    activity: float,
) -> str | None:
    if not flagged:
        return None
    why = f"peak memory {peak / GB:.1f} GB, mean {basis} {activity:.2f}"
    if profile is not None:
        return (
            f"request the MIG profile {profile.name} ({profile.compute_fraction:.0%} of the SMs, "
            f"{profile.memory_bytes / GB:.0f} GB) instead of a whole {gpu_model}: {why}"
        )
    if smaller is not None:
        return f"run on a smaller GPU such as {smaller} instead of a {gpu_model}: {why}"
    return f"share the {gpu_model} (MPS or time-slicing) with other small jobs: {why}"
