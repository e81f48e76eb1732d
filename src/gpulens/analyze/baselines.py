"""Baselines per workload type, anomaly scores, verdicts, and before/after version changes.

A workload type is the key `workload_keys` builds from `BaselineSettings.key_columns` (default
gpu_model | engine | process_name | project | model_parameters): the same model served or
trained the same way on the same GPU model. Rows with neither an engine nor a process name
(nobody on the GPU) belong to no workload. Warm-up rows (`state == "warmup"`) never count.

- `learn_baselines(history)`: per workload, metric and UTC hour of day (`hour` -1 = all hours)
  the median, the MAD and the robust scale 1.4826 × max(MAD, floor); the floor
  (max(`mad_floor_abs`, `mad_floor_rel` × |median|)) keeps a flat history from making every
  wiggle an anomaly.
- `score_intervals(frame, baselines)`: per row the robust z = (x - median) / scale of each
  metric, using the row's hour bucket when it holds `min_samples_per_hour` samples, else the
  all-hours baseline; `anomaly` when the primary metric's z ≤ -`anomaly_z` (low is bad).
- `workload_verdicts`: per workload over the frame, `degraded` when the median z of the
  primary metric is ≤ -`degraded_z` or the anomalous share is ≥ `degraded_share`.
- `version_changes(events)` and `compare_version_changes(frame, events)`: for each version
  change, each affected workload's primary metric in [ts - window, ts) versus [ts, ts + window)
  (restricted to hours of day present on both sides when that leaves enough samples), the
  relative change of the medians, a two-sided Mann-Whitney p-value, and `regression` when the
  drop is at least `regression_drop` with p < `alpha`. Interval rows are autocorrelated, so the
  p-value is optimistic: it is a screen, the size of the drop is the finding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from gpulens.analyze._arrays import Floats, floats, ints, none_if_nan, not_warmup, strings
from gpulens.analyze.events import VERSION_EVENTS
from gpulens.numbers import is_nan

HOUR_NS = 3_600_000_000_000
ALL_HOURS = -1
MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True, slots=True)
class BaselineSettings:
    """How baselines are keyed and learned and when a workload counts as degraded."""

    key_columns: tuple[str, ...] = (
        "gpu_model",
        "engine",
        "process_name",
        "project",
        "model_parameters",
    )
    metrics: tuple[str, ...] = ("useful_ratio", "sm_active", "tensor_active")
    min_samples: int = 10
    min_samples_per_hour: int = 30
    mad_floor_abs: float = 0.01
    mad_floor_rel: float = 0.02
    utc_offset_s: int = 0
    anomaly_z: float = 3.0
    degraded_z: float = 2.0
    degraded_share: float = 0.5
    version_window_s: float = 6 * 3600.0
    regression_drop: float = 0.1
    alpha: float = 0.05


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def workload_keys(frame: pa.Table, settings: BaselineSettings | None = None) -> list[str | None]:
    """The workload key of each row ("a|b|-|..."), None for rows without engine and process."""
    s = settings or BaselineSettings()
    cols: list[list[str | None]] = []
    for c in s.key_columns:
        if c in frame.column_names and pa.types.is_floating(frame.schema.field(c).type):
            cols.append([None if is_nan(v) else _fmt(v) for v in floats(frame, c).tolist()])
        else:
            cols.append(strings(frame, c))
    engine, proc = strings(frame, "engine"), strings(frame, "process_name")
    out: list[str | None] = []
    for i in range(frame.num_rows):
        if engine[i] is None and proc[i] is None:
            out.append(None)
        else:
            out.append("|".join("-" if col[i] is None else str(col[i]) for col in cols))
    return out


def hours_of_day(frame: pa.Table, settings: BaselineSettings | None = None) -> np.ndarray:
    """Hour of day (0..23, UTC shifted by `utc_offset_s`) of each row's interval start."""
    s = settings or BaselineSettings()
    start = ints(frame, "start_ns") + s.utc_offset_s * 1_000_000_000
    return np.asarray((start // HOUR_NS) % 24, dtype=np.int64)


BASELINE_SCHEMA = pa.schema(
    [
        ("workload", pa.string()),
        ("metric", pa.string()),
        ("hour", pa.int64()),
        ("n", pa.int64()),
        ("median", pa.float64()),
        ("mad", pa.float64()),
        ("scale", pa.float64()),
    ]
)


def _group(keys: list[str | None], mask: np.ndarray) -> dict[str, np.ndarray]:
    groups: dict[str, list[int]] = {}
    for i, k in enumerate(keys):
        if k is not None and mask[i]:
            groups.setdefault(k, []).append(i)
    return {k: np.asarray(v, dtype=np.int64) for k, v in groups.items()}


def _stats(x: Floats, s: BaselineSettings) -> tuple[float, float, float]:
    med = float(np.median(x))
    mad = float(np.median(np.abs(x - med)))
    floor = max(s.mad_floor_abs, s.mad_floor_rel * abs(med))
    return med, mad, MAD_TO_SIGMA * max(mad, floor)


def learn_baselines(history: pa.Table, settings: BaselineSettings | None = None) -> pa.Table:
    """Median/MAD per (workload, metric, hour) and per (workload, metric) over all hours."""
    s = settings or BaselineSettings()
    keys, hours = workload_keys(history, s), hours_of_day(history, s)
    groups = _group(keys, not_warmup(history))
    rows = []
    for metric in s.metrics:
        if metric not in history.column_names:
            continue
        values = floats(history, metric)
        for key, idx in sorted(groups.items()):
            v, h = values[idx], hours[idx]
            ok = ~np.isnan(v)
            v, h = v[ok], h[ok]
            if v.size < s.min_samples:
                continue
            buckets = [(ALL_HOURS, v)] + [(hr, v[h == hr]) for hr in range(24)]
            for hr, x in buckets:
                if hr != ALL_HOURS and x.size < s.min_samples_per_hour:
                    continue
                med, mad, scale = _stats(x, s)
                rows.append(
                    {
                        "workload": key,
                        "metric": metric,
                        "hour": hr,
                        "n": int(x.size),
                        "median": med,
                        "mad": mad,
                        "scale": scale,
                    }
                )
    return pa.Table.from_pylist(rows, schema=BASELINE_SCHEMA)


def primary_metric(frame: pa.Table, baselines: pa.Table, settings: BaselineSettings) -> str | None:
    """The first of `settings.metrics` that both the frame and the baselines have."""
    learned = set(baselines.column("metric").to_pylist())
    return next((m for m in settings.metrics if m in frame.column_names and m in learned), None)


def score_intervals(
    frame: pa.Table, baselines: pa.Table, settings: BaselineSettings | None = None
) -> pa.Table:
    """Row-aligned with `frame`: workload, `<metric>_median`, `<metric>_z`, seasonal, anomaly."""
    s = settings or BaselineSettings()
    keys, hours = workload_keys(frame, s), hours_of_day(frame, s)
    names = sorted({k for k in keys if k is not None})
    code = {k: i for i, k in enumerate(names)}
    kc = np.array([code.get(k, -1) if k is not None else -1 for k in keys], dtype=np.int64)
    kc[~not_warmup(frame)] = -1
    known = kc >= 0
    primary = primary_metric(frame, baselines, s)
    cols: dict[str, pa.Array] = {"workload": pa.array(keys, pa.string())}
    seasonal = np.zeros(frame.num_rows, dtype=bool)
    anomaly = np.full(frame.num_rows, np.nan)
    b_w, b_m = baselines.column("workload").to_pylist(), baselines.column("metric").to_pylist()
    b_h = np.asarray(baselines.column("hour").to_numpy(), dtype=np.int64)
    b_med, b_sc = floats(baselines, "median"), floats(baselines, "scale")
    for metric in s.metrics:
        if metric not in frame.column_names:
            continue
        med = np.full((len(names) + 1, 25), np.nan)  # column 0: all hours; last row: no workload
        scale = np.full_like(med, np.nan)
        for i in range(baselines.num_rows):
            if b_m[i] == metric and b_w[i] in code:
                med[code[b_w[i]], b_h[i] + 1] = b_med[i]
                scale[code[b_w[i]], b_h[i] + 1] = b_sc[i]
        row = np.where(known, kc, len(names))
        by_hour = med[row, hours + 1]
        use_hour = ~np.isnan(by_hour)
        m = np.where(use_hour, by_hour, med[row, 0])
        sc = np.where(use_hour, scale[row, hours + 1], scale[row, 0])
        z = (floats(frame, metric) - m) / sc
        cols[f"{metric}_median"] = pa.array(m, pa.float64(), from_pandas=True)
        cols[f"{metric}_z"] = pa.array(z, pa.float64(), from_pandas=True)
        if metric == primary:
            seasonal = use_hour
            anomaly = np.where(np.isnan(z), np.nan, (z <= -s.anomaly_z).astype(np.float64))
    has_ref = ~np.isnan(anomaly)
    cols["seasonal"] = pa.array(np.where(known, seasonal, False), mask=~known)
    cols["anomaly"] = pa.array(anomaly == 1.0, mask=~has_ref)
    return pa.table(cols)


VERDICT_SCHEMA = pa.schema(
    [
        ("workload", pa.string()),
        ("metric", pa.string()),
        ("intervals", pa.int64()),
        ("median", pa.float64()),
        ("baseline_median", pa.float64()),
        ("median_z", pa.float64()),
        ("anomalous_share", pa.float64()),
        ("verdict", pa.string()),
    ]
)


def workload_verdicts(
    frame: pa.Table, baselines: pa.Table, settings: BaselineSettings | None = None
) -> pa.Table:
    """Per workload in `frame`: healthy, degraded, or unknown (no baseline or too few rows)."""
    s = settings or BaselineSettings()
    metric = primary_metric(frame, baselines, s)
    scores = score_intervals(frame, baselines, s)
    keys = scores.column("workload").to_pylist()
    groups = _group(keys, not_warmup(frame))
    rows = []
    for key, idx in sorted(groups.items()):
        row: dict[str, object] = {"workload": key, "metric": metric, "verdict": "unknown"}
        if metric is not None:
            x, z = floats(frame, metric)[idx], floats(scores, f"{metric}_z")[idx]
            med_ref = floats(scores, f"{metric}_median")[idx]
            ok = ~np.isnan(z)
            row["intervals"] = int(ok.sum())
            if ok.sum() >= s.min_samples:
                mz = float(np.median(z[ok]))
                share = float((z[ok] <= -s.anomaly_z).mean())
                bad = mz <= -s.degraded_z or share >= s.degraded_share
                row.update(
                    median=float(np.median(x[ok])),
                    baseline_median=float(np.median(med_ref[ok])),
                    median_z=mz,
                    anomalous_share=share,
                    verdict="degraded" if bad else "healthy",
                )
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=VERDICT_SCHEMA)


def mann_whitney(a: Floats, b: Floats) -> tuple[float, float]:
    """(U of `a`, two-sided p) by the normal approximation with tie and continuity corrections."""
    n1, n2 = a.size, b.size
    if n1 == 0 or n2 == 0:
        return float("nan"), float("nan")
    x = np.concatenate([a, b])
    n = x.size
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(n)
    ranks[order] = np.arange(1, n + 1)
    ranks = (np.bincount(inverse, weights=ranks) / counts)[inverse]
    u = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2)
    mu = n1 * n2 / 2
    ties = float((counts**3 - counts).sum())
    var = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1))) if n > 1 else 0.0
    if var <= 0:
        return u, 1.0
    z = (abs(u - mu) - 0.5) / math.sqrt(var)
    return u, min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2)))


CHANGE_SCHEMA = pa.schema(
    [
        ("ts", pa.int64()),
        ("host", pa.string()),
        ("gpu_uuid", pa.string()),
        ("job_id", pa.string()),
        ("event", pa.string()),
        ("message", pa.string()),
        ("previous", pa.string()),
        ("current", pa.string()),
    ]
)


def _parse_change(message: str) -> tuple[str | None, str]:
    low = message.lower()
    if " changed from " in low and " to " in low:
        rest = message[low.index(" changed from ") + len(" changed from ") :]
        cut = rest.lower().rindex(" to ")
        return rest[:cut].strip(), rest[cut + 4 :].strip()
    return None, message.strip()


def version_changes(events: pa.Table) -> pa.Table:
    """Version events that change a version: said so ("changed from A to B"), or a value that
    differs from the previous event of the same (host, gpu_uuid, job_id, event)."""
    if events.num_rows == 0:
        return CHANGE_SCHEMA.empty_table()
    ts = ints(events, "ts")
    name, msg = strings(events, "event"), strings(events, "message")
    host, gpu, job = (strings(events, c) for c in ("host", "gpu_uuid", "job_id"))
    last: dict[tuple[str | None, ...], str] = {}
    rows = []
    for i in np.argsort(ts, kind="stable").tolist():
        n = (name[i] or "").lower()
        if not (n in VERSION_EVENTS or n.endswith("_version")):
            continue
        prev, cur = _parse_change(msg[i] or "")
        key = (host[i], gpu[i], job[i], n)
        seen = last.get(key)
        last[key] = cur
        if prev is None:
            if seen is None or seen == cur:
                continue
            prev = seen
        rows.append(
            {
                "ts": int(ts[i]),
                "host": host[i],
                "gpu_uuid": gpu[i],
                "job_id": job[i],
                "event": name[i],
                "message": msg[i],
                "previous": prev,
                "current": cur,
            }
        )
    return pa.Table.from_pylist(rows, schema=CHANGE_SCHEMA)


COMPARE_SCHEMA = pa.schema(
    [
        *CHANGE_SCHEMA,
        ("workload", pa.string()),
        ("metric", pa.string()),
        ("before_n", pa.int64()),
        ("after_n", pa.int64()),
        ("before_median", pa.float64()),
        ("after_median", pa.float64()),
        ("relative_change", pa.float64()),
        ("p_value", pa.float64()),
        ("same_hours", pa.bool_()),
        ("regression", pa.bool_()),
    ]
)


def compare_version_changes(
    frame: pa.Table, events: pa.Table, settings: BaselineSettings | None = None
) -> pa.Table:
    """Per version change and affected workload: before/after medians, change, p, regression."""
    s = settings or BaselineSettings()
    changes = version_changes(events)
    metric = next((m for m in s.metrics if m in frame.column_names), None)
    if metric is None or changes.num_rows == 0 or frame.num_rows == 0:
        return COMPARE_SCHEMA.empty_table()
    keys, hours = workload_keys(frame, s), hours_of_day(frame, s)
    start, values = ints(frame, "start_ns"), floats(frame, metric)
    f_host, f_gpu, f_job = (strings(frame, c) for c in ("host", "gpu_uuid", "job_id"))
    usable = not_warmup(frame) & ~np.isnan(values)
    window = int(s.version_window_s * 1e9)
    rows = []
    for change in changes.to_pylist():
        t = int(change["ts"])
        near = usable & (start >= t - window) & (start < t + window)
        for col, want in (
            (f_host, change["host"]),
            (f_gpu, change["gpu_uuid"]),
            (f_job, change["job_id"]),
        ):
            if want is not None:
                near &= np.array([v == want for v in col], dtype=bool)
        for key, idx in sorted(_group(keys, near).items()):
            before, after = idx[start[idx] < t], idx[start[idx] >= t]
            common = np.intersect1d(hours[before], hours[after])
            b2, a2 = before[np.isin(hours[before], common)], after[np.isin(hours[after], common)]
            same = b2.size >= s.min_samples and a2.size >= s.min_samples
            if same:
                before, after = b2, a2
            rows.append({**change, **_compare(values[before], values[after], s), "workload": key,
                         "metric": metric, "same_hours": same})  # fmt: skip
    return pa.Table.from_pylist(rows, schema=COMPARE_SCHEMA)


def _compare(b: Floats, a: Floats, s: BaselineSettings) -> dict[str, object]:
    mb = float(np.median(b)) if b.size else float("nan")
    ma = float(np.median(a)) if a.size else float("nan")
    rel = (ma - mb) / mb if mb > 0 else float("nan")
    _, p = mann_whitney(b, a)
    enough = b.size >= s.min_samples and a.size >= s.min_samples
    return {
        "before_n": int(b.size),
        "after_n": int(a.size),
        "before_median": none_if_nan(mb),
        "after_median": none_if_nan(ma),
        "relative_change": none_if_nan(rel),
        "p_value": none_if_nan(p),
        "regression": bool(
            enough and not is_nan(rel) and rel <= -s.regression_drop and p < s.alpha
        ),
    }
