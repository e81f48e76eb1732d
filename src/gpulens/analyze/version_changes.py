"""Before and after a version change (driver, CUDA, framework, image): did the workload slow down?

`version_changes(events)` and `compare_version_changes(frame, events)`: for each version
change, each affected workload's primary metric in [ts - window, ts) versus [ts, ts + window)
(restricted to hours of day present on both sides when that leaves enough samples), the
relative change of the medians, a two-sided Mann-Whitney p-value, and `regression` when the
drop is at least `regression_drop` with p < `alpha`. Interval rows are autocorrelated, so the
p-value is optimistic: it is a screen, the size of the drop is the finding.

Workload keys and the thresholds (`BaselineSettings`) are those of baselines.py.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from gpulens.analyze._arrays import Floats, floats, ints, none_if_nan, not_warmup, strings
from gpulens.analyze.baselines import BaselineSettings, hours_of_day, workload_keys
from gpulens.analyze.events import VERSION_EVENTS
from gpulens.numbers import is_nan


def _group(keys: list[str | None], mask: np.ndarray) -> dict[str, np.ndarray]:
    """Row indices per workload key, over the rows in `mask`."""
    groups: dict[str, list[int]] = {}
    for i, k in enumerate(keys):
        if k is not None and mask[i]:
            groups.setdefault(k, []).append(i)
    return {k: np.asarray(v, dtype=np.int64) for k, v in groups.items()}


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
