"""GPU memory: peaks and headroom, over-provisioning (leaks are in leaks.py).

Pure: interval frames in (see `gpulens.analyze.schema`), tables out, each row carrying the
numbers it was decided on.

- `memory_peaks`: per (job, GPU) the peak of `memory_used_bytes` (the whole GPU, what an
  out-of-memory depends on) and of `process_memory_bytes`, and the headroom
  `memory_total_bytes - peak` in bytes and as a ratio of the total. `job_memory_peaks` rolls
  that up per job (worst GPU).
- `overprovisioned`: "GPU too powerful" (jobstats / Job Defense Shield): a job whose mean duty
  cycle (SM activity when there is no duty cycle) stays at or below a threshold and whose
  peak memory is small, for long enough, with the smallest MIG profile of its GPU model that
  fits its memory (with a margin) and its compute (activity / target activity), or a smaller
  GPU when the model has no MIG.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.analyze._arrays import (
    Floats,
    LabelColumn,
    floats,
    group_ids,
    group_most_common,
    ints,
    label_codes,
    none_if_nan,
    not_warmup,
    rows_of,
    strings_at,
)
from gpulens.analyze.mig import SMALLER_GPUS, MigProfile, mig_family, pick_mig_profile
from gpulens.numbers import is_nan

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


def memory_peaks(frame: pa.Table) -> pa.Table:
    """Per (job_id, host, gpu_uuid): peak memory and headroom (rows without a job: per GPU)."""
    ids, n = group_ids(frame, ("job_id", "host", "gpu_uuid"))
    if n == 0:
        return _PEAK_SCHEMA.empty_table()
    order = np.argsort(ids, kind="stable")
    starts = np.searchsorted(ids[order], np.arange(n))
    first = order[starts]  # each group's first row, in row order

    def peak(name: str) -> Floats:  # NaN-ignoring max per group; NaN when none is known
        return np.asarray(np.fmax.reduceat(floats(frame, name)[order], starts), np.float64)

    start, step = ints(frame, "start_ns"), floats(frame, "step_s")
    used, total = peak("memory_used_bytes"), peak("memory_total_bytes")
    head = total - used
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(total > 0, head / total, np.nan)
    end = np.maximum.reduceat((start + np.nan_to_num(step) * 1e9)[order], starts)
    cols: dict[str, pa.Array] = {}
    for name in ("job_id", "host", "gpu_uuid", "gpu_model"):
        cols[name] = pa.array(strings_at(frame, name, first), pa.string())
    cols["first_ns"] = pa.array(np.minimum.reduceat(start[order], starts), pa.int64())
    cols["end_ns"] = pa.array(end.astype(np.int64), pa.int64())
    cols["intervals"] = pa.array(np.diff(np.r_[starts, ids.size]), pa.int64())
    for name, values in (
        ("peak_used_bytes", used),
        ("peak_process_bytes", peak("process_memory_bytes")),
        ("memory_total_bytes", total),
        ("headroom_bytes", head),
        ("headroom_ratio", ratio),
    ):
        cols[name] = pa.array(values, pa.float64(), from_pandas=True)
    return pa.table(cols, schema=_PEAK_SCHEMA)


JOB_PEAK_COLUMNS = (
    "gpus",
    "peak_used_bytes",
    "peak_process_bytes",
    "memory_total_bytes",
    "headroom_bytes",
    "headroom_ratio",
)
"""The columns `job_memory_peaks` gives per job, after `job_id`."""


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
        .rename_columns(["job_id", *JOB_PEAK_COLUMNS])
    )


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
    needed = (
        *("job_id", "host", "gpu_uuid", "gpu_model", "start_ns", "step_s", "duty", "sm_active"),
        *("process_memory_bytes", "memory_used_bytes", "memory_total_bytes"),
    )
    f = rows_of(frame, keep, needed)
    ids, n = group_ids(f, ("job_id",))
    if n == 0:
        return _OVER_SCHEMA.empty_table()
    # rows by job (row order within a job), and each job's slice of them
    order = np.argsort(ids, kind="stable")
    bounds = np.searchsorted(ids[order], np.arange(n + 1))
    heads = bounds[:-1]
    start = ints(f, "start_ns")[order]
    weights = np.nan_to_num(floats(f, "step_s"))[order]
    proc, used = floats(f, "process_memory_bytes")[order], floats(f, "memory_used_bytes")[order]
    with np.errstate(invalid="ignore"):  # a job with every value missing: NaN
        peaks = np.fmax.reduceat(np.where(np.isnan(proc), used, proc), heads)
        totals = np.fmax.reduceat(floats(f, "memory_total_bytes")[order], heads)
    ends = np.maximum.reduceat(start + weights * 1e9, heads)
    durations = ((ends - np.minimum.reduceat(start, heads)) / 1e9).tolist()
    duty, sm = (
        _Sums(floats(f, "duty")[order], weights),
        _Sums(floats(f, "sm_active")[order], weights),
    )
    job_of = ids[order]
    model, models = label_codes(f, "gpu_model")
    gpu_models = [models[c] for c in group_most_common(job_of, model[order], n).tolist()]
    uuid, uuids = label_codes(f, "gpu_uuid")
    gpus = np.bincount(np.unique(job_of * len(uuids) + uuid[order]) // len(uuids), minlength=n)
    job, host = LabelColumn(f, "job_id"), LabelColumn(f, "host")
    rows = []
    for g in range(n):
        lo, hi = int(bounds[g]), int(bounds[g + 1])
        mean_duty, mean_sm = duty.mean(lo, hi), sm.mean(lo, hi)
        basis, activity = ("duty", mean_duty) if not is_nan(mean_duty) else ("sm_active", mean_sm)
        peak, tot, duration = float(peaks[g]), float(totals[g]), durations[g]
        gpu_model = gpu_models[g]
        flagged = bool(
            not is_nan(activity)
            and activity <= s.overprovisioned_max_activity
            and not is_nan(peak)
            and peak <= s.overprovisioned_max_memory_bytes
            and duration >= s.overprovisioned_min_duration_s
        )
        profile = (
            pick_mig_profile(
                mig_family(gpu_model, tot),
                peak,
                activity,
                s.mig_memory_margin,
                s.mig_target_activity,
            )
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
                "job_id": job[int(order[lo])],
                "host": host[int(order[lo])],
                "gpus": int(gpus[g]),
                "gpu_model": gpu_model,
                "duration_s": duration,
                "gpu_hours": float(np.add.reduce(weights[lo:hi])) / 3600.0,
                "activity_basis": basis if not is_nan(activity) else None,
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


class _Sums:
    """Step-weighted means of `values` over slices of rows, as `weighted_mean` of each slice
    computes them (the same products, summed in the same order), one sum per slice."""

    def __init__(self, values: Floats, weights: Floats) -> None:
        ok = ~np.isnan(values) & ~np.isnan(weights)
        self._at = np.r_[0, np.cumsum(ok)]  # slice [lo, hi) of rows is [at[lo], at[hi]) here
        self._xw = (values * weights)[ok]
        self._w = weights[ok]

    def mean(self, lo: int, hi: int) -> float:
        a, b = int(self._at[lo]), int(self._at[hi])
        total = float(np.add.reduce(self._w[a:b]))
        return float(np.add.reduce(self._xw[a:b]) / total) if total > 0 else float("nan")


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
