"""A training job's figures from the framework's own timing (app readings; pure).

The in-process tracker (gpulens.torch and its callbacks) writes one app reading per window
with `app_steps` and per-step means. Here they are summed back exactly: a window counts for its
steps' time (`app_steps × app_step_seconds`), so the data-wait share of a job is its total
wait over its total step time, throughput its samples over that time, MFU the time-weighted
mean. Readings from other writers (the simulator, CSV imports) carry ratios and rates without
`app_steps`: each then counts for one unit of weight. Missing stays missing (NaN, None).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# (output key, app metric, how rows combine): "time" = time-weighted mean, "steps" = mean
# weighted by steps, "max", "last"
_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("samples_per_second", "app_samples_per_second", "time"),
    ("tokens_per_second", "app_tokens_per_second", "time"),
    ("forward_seconds", "app_forward_seconds", "steps"),
    ("backward_seconds", "app_backward_seconds", "steps"),
    ("optimizer_seconds", "app_optimizer_seconds", "steps"),
    ("flops_per_second", "app_flops_per_second", "time"),
    ("mfu", "app_mfu_ratio", "time"),
    ("peak_flops_per_second", "app_peak_flops_per_second", "last"),
    ("step_flops", "app_step_flops", "last"),
    ("batch_size", "app_batch_size", "steps"),
    ("memory_max_allocated_bytes", "app_memory_max_allocated_bytes", "max"),
    ("memory_reserved_bytes", "app_memory_reserved_bytes", "max"),
    ("memory_fragmentation_bytes", "app_memory_fragmentation_bytes", "max"),
    ("loader_workers", "app_loader_workers", "max"),
    ("loader_cpu_ratio", "app_loader_cpu_ratio", "time"),
)
_LABELS: tuple[str, ...] = (
    "run_id", "source", "host", "device", "gpu_uuid", "gpu_model", "precision"
)  # fmt: skip


def _col(table: pa.Table, name: str) -> np.ndarray:
    if name not in table.column_names:
        return np.full(table.num_rows, np.nan)
    return np.asarray(
        pc.cast(table[name], pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64
    )


def _strings(table: pa.Table, name: str) -> list[str | None]:
    if name not in table.column_names:
        return [None] * table.num_rows
    col = table[name]
    if pa.types.is_dictionary(col.type):
        col = pc.cast(col, col.type.value_type)
    return [None if v is None else str(v) for v in col.to_pylist()]


def _weights(t: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(time weight, step weight) per row: the window's step time and steps where the tracker
    gave them, else 1."""
    steps, step_s = _col(t, "app_steps"), _col(t, "app_step_seconds")
    timed = ~np.isnan(steps) & ~np.isnan(step_s)
    return np.where(timed, steps * step_s, 1.0), np.where(np.isnan(steps), 1.0, steps)


def _mean(values: np.ndarray, weight: np.ndarray) -> float | None:
    seen = ~np.isnan(values)
    total = float(weight[seen].sum())
    return float((values[seen] * weight[seen]).sum() / total) if seen.any() and total > 0 else None


def wait_ratio(t: pa.Table) -> np.ndarray:
    """Per row, the share of its step time spent waiting for data (NaN where not reported)."""
    wait, step = _col(t, "app_data_wait_seconds"), _col(t, "app_step_seconds")
    with np.errstate(divide="ignore", invalid="ignore"):
        exact = np.where(step > 0, wait / step, np.nan)
    return np.where(np.isnan(exact), _col(t, "app_data_wait_ratio"), exact)


def job_summary(app: pa.Table) -> dict[str, Any]:
    """One job's training figures from its app readings (`ts` in int ns)."""
    time_w, step_w = _weights(app)
    steps = _col(app, "app_steps")
    step_s = _col(app, "app_step_seconds")
    ts = np.asarray(pc.cast(app["ts"], pa.int64()).to_numpy(zero_copy_only=False))
    out: dict[str, Any] = {
        "readings": app.num_rows,
        "start_ns": int(ts.min()) if ts.size else None,
        "end_ns": int(ts.max()) if ts.size else None,
        "steps": int(np.nansum(steps)) if not np.isnan(steps).all() else None,
        "step_seconds": _mean(step_s, step_w),
        "data_wait_ratio": _mean(wait_ratio(app), time_w),
        "data_wait_seconds": _mean(_col(app, "app_data_wait_seconds"), step_w),
    }
    for key, metric, how in _FIELDS:
        values = _col(app, metric)
        seen = values[~np.isnan(values)]
        if how == "time":
            out[key] = _mean(values, time_w)
        elif how == "steps":
            out[key] = _mean(values, step_w)
        elif how == "max":
            out[key] = float(seen.max()) if seen.size else None
        else:
            out[key] = float(seen[-1]) if seen.size else None
    for label in _LABELS:
        names = sorted({v for v in _strings(app, label) if v})
        out[label + "s"] = names
    return out


def summaries(app: pa.Table) -> list[dict[str, Any]]:
    """`job_summary` of every job in `app` (rows ordered by time), by job name."""
    if app.num_rows == 0 or "job_id" not in app.column_names:
        return []
    app = app.sort_by([("ts", "ascending")])
    jobs = np.array([j or "" for j in _strings(app, "job_id")], dtype=object)
    names, codes = np.unique(jobs, return_inverse=True)
    order = np.argsort(codes, kind="stable")  # time order kept within each job
    cuts = np.flatnonzero(np.diff(codes[order])) + 1
    out = []
    for rows in np.split(order, cuts):
        name = str(names[codes[rows[0]]])
        if name:
            out.append({"job_id": name, **job_summary(app.take(pa.array(rows)))})
    return out


def wait_intervals(app: pa.Table, step_s: float) -> pa.Table:
    """Per (job, interval of `step_s` seconds): the data-wait share (step-time weighted) and
    the seconds of steps behind it, for the findings on app readings alone."""
    schema = pa.schema(
        [
            ("job_id", pa.string()),
            ("start_ns", pa.int64()),
            ("data_wait", pa.float64()),
            ("covered_s", pa.float64()),
        ]
    )
    if app.num_rows == 0 or "job_id" not in app.column_names:
        return schema.empty_table()
    step_ns = int(step_s * 1e9)
    ts = np.asarray(pc.cast(app["ts"], pa.int64()).to_numpy(zero_copy_only=False))
    bucket = ts // step_ns * step_ns
    jobs = _strings(app, "job_id")
    wait = wait_ratio(app)
    time_w, _ = _weights(app)
    steps, step_len = _col(app, "app_steps"), _col(app, "app_step_seconds")
    covered = np.where(np.isnan(steps) | np.isnan(step_len), np.nan, steps * step_len)
    groups: dict[tuple[str, int], list[int]] = {}
    for i, job in enumerate(jobs):
        if job and not np.isnan(wait[i]):
            groups.setdefault((job, int(bucket[i])), []).append(i)
    rows = sorted(groups.items())
    return pa.table(
        {
            "job_id": [k[0] for k, _ in rows],
            "start_ns": [k[1] for k, _ in rows],
            "data_wait": [_mean(wait[ix], time_w[ix]) for _, ix in rows],
            "covered_s": [
                float(np.nansum(covered[ix])) if not np.isnan(covered[ix]).all() else step_s
                for _, ix in rows
            ],
        },
        schema=schema,
    )
