"""Baselines per workload type, anomaly scores and verdicts.

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
- `workload_verdicts`: per workload over the frame (or per run of some labels, `by=
  ("job_id",)`: each run judged as its most common workload), `degraded` when the median z of
  the primary metric is ≤ -`degraded_z` or the anomalous share is ≥ `degraded_share`.
- `run_verdicts(frame, history)`: the report's verdict per job. Baselines come from `history`
  (the frame before the report window) where it holds the workload, else from `frame` itself
  when it holds at least two runs of the workload (each run then judged against all of them,
  itself included: conservative); else `unknown`, with the reason. Each row says which.

Before/after comparisons of version changes are in version_changes.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.analyze._arrays import (
    Floats,
    Ints,
    floats,
    group_ids,
    ints,
    label_codes,
    not_warmup,
    rows_by_group,
    strings_at,
)
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


def _key_parts(frame: pa.Table, column: str) -> tuple[Ints, list[str | None]]:
    """(code per row, text per code) of one key column; null is None. Floats are written with
    four significant digits (1.3e+09), so near-equal numbers share a text."""
    if column in frame.column_names and pa.types.is_floating(frame.schema.field(column).type):
        uniq, inverse = np.unique(floats(frame, column), return_inverse=True)  # NaNs: one code
        texts = [None if is_nan(v) else _fmt(v) for v in uniq.tolist()]
        return np.asarray(inverse, dtype=np.int64).reshape(-1), texts
    return label_codes(frame, column)


def workload_codes(
    frame: pa.Table, settings: BaselineSettings | None = None
) -> tuple[Ints, list[str]]:
    """(code per row, key per code) of the workload keys ("a|b|-|..."): codes number the keys
    in sorted order; -1 marks rows without engine and process (no workload)."""
    s = settings or BaselineSettings()
    n = frame.num_rows
    if n == 0:
        return np.zeros(0, dtype=np.int64), []
    parts = [_key_parts(frame, c) for c in s.key_columns]
    if math.prod(max(1, len(t)) for _, t in parts) < 2**62:
        combined = np.zeros(n, dtype=np.int64)
        for part, texts in parts:
            combined = combined * max(1, len(texts)) + part
        _, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
    else:  # too many combinations for one integer: unique rows instead
        stacked = np.stack([p for p, _ in parts], axis=1)
        _, first, inverse = np.unique(stacked, axis=0, return_index=True, return_inverse=True)
    texts_of = [
        "|".join("-" if t[int(p[r])] is None else str(t[int(p[r])]) for p, t in parts)
        for r in first.tolist()
    ]
    names = sorted(set(texts_of))
    position = {k: i for i, k in enumerate(names)}
    code = np.array([position[k] for k in texts_of], dtype=np.int64)[inverse.reshape(-1)]
    engine, engines = label_codes(frame, "engine")
    proc, procs = label_codes(frame, "process_name")
    none = (
        np.array([v is None for v in engines])[engine] & np.array([v is None for v in procs])[proc]
    )
    code[none] = -1
    used = np.unique(code[code >= 0])
    if used.size < len(names):  # a key seen only on rows without a workload: renumber
        names = [names[i] for i in used.tolist()]
        remap = np.full(len(position) + 1, -1, dtype=np.int64)
        remap[used] = np.arange(used.size)
        code = remap[code]
    return code, names


def workload_keys(frame: pa.Table, settings: BaselineSettings | None = None) -> list[str | None]:
    """The workload key of each row ("a|b|-|..."), None for rows without engine and process."""
    code, names = workload_codes(frame, settings)
    lookup: list[str | None] = [*names, None]  # code -1 reads the None at the end
    return [lookup[c] for c in code.tolist()]


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


def _stats(x: Floats, s: BaselineSettings) -> tuple[float, float, float]:
    med = float(np.median(x))
    mad = float(np.median(np.abs(x - med)))
    floor = max(s.mad_floor_abs, s.mad_floor_rel * abs(med))
    return med, mad, MAD_TO_SIGMA * max(mad, floor)


def learn_baselines(history: pa.Table, settings: BaselineSettings | None = None) -> pa.Table:
    """Median/MAD per (workload, metric, hour) and per (workload, metric) over all hours."""
    s = settings or BaselineSettings()
    code, names = workload_codes(history, s)
    return _learn(history, code, names, s)


def _learn(frame: pa.Table, code: Ints, names: list[str], s: BaselineSettings) -> pa.Table:
    """`learn_baselines` over the rows whose workload `code` is set (>= 0), warm-up left out."""
    hours = hours_of_day(frame, s)
    usable = np.flatnonzero((code >= 0) & not_warmup(frame))
    groups = rows_by_group(code, len(names), usable)
    rows = []
    for metric in s.metrics:
        if metric not in frame.column_names:
            continue
        values = floats(frame, metric)
        for key, idx in zip(names, groups, strict=True):
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


@dataclass(frozen=True, slots=True)
class _Scores:
    """Per row and metric the baseline median and robust z (NaN without a reference)."""

    median: dict[str, Floats]
    z: dict[str, Floats]
    seasonal: npt.NDArray[np.bool_]  # the primary metric used the row's hour bucket
    anomaly: Floats  # 1.0, 0.0, or NaN without a reference
    primary: str | None


def _score(
    frame: pa.Table, baselines: pa.Table, s: BaselineSettings, code: Ints, names: list[str]
) -> _Scores:
    """Rows with `code` -1 (no workload, warm-up) get no reference."""
    hours = hours_of_day(frame, s)
    known = code >= 0
    primary = primary_metric(frame, baselines, s)
    at = {k: i for i, k in enumerate(names)}
    median: dict[str, Floats] = {}
    zs: dict[str, Floats] = {}
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
            if b_m[i] == metric and b_w[i] in at:
                med[at[b_w[i]], b_h[i] + 1] = b_med[i]
                scale[at[b_w[i]], b_h[i] + 1] = b_sc[i]
        row = np.where(known, code, len(names))
        by_hour = med[row, hours + 1]
        use_hour = ~np.isnan(by_hour)
        m = np.where(use_hour, by_hour, med[row, 0])
        sc = np.where(use_hour, scale[row, hours + 1], scale[row, 0])
        z = (floats(frame, metric) - m) / sc
        median[metric], zs[metric] = m, z
        if metric == primary:
            seasonal = use_hour
            anomaly = np.where(np.isnan(z), np.nan, (z <= -s.anomaly_z).astype(np.float64))
    return _Scores(median, zs, seasonal, anomaly, primary)


def score_intervals(
    frame: pa.Table, baselines: pa.Table, settings: BaselineSettings | None = None
) -> pa.Table:
    """Row-aligned with `frame`: workload, `<metric>_median`, `<metric>_z`, seasonal, anomaly."""
    s = settings or BaselineSettings()
    code, names = workload_codes(frame, s)
    scored = code.copy()
    scored[~not_warmup(frame)] = -1
    sc = _score(frame, baselines, s, scored, names)
    known = scored >= 0
    lookup = pa.array([*names, None], pa.string())
    cols: dict[str, pa.Array] = {
        "workload": lookup.take(pa.array(np.where(code >= 0, code, len(names))))
    }
    for metric in sc.z:
        cols[f"{metric}_median"] = pa.array(sc.median[metric], pa.float64(), from_pandas=True)
        cols[f"{metric}_z"] = pa.array(sc.z[metric], pa.float64(), from_pandas=True)
    has_ref = ~np.isnan(sc.anomaly)
    cols["seasonal"] = pa.array(np.where(known, sc.seasonal, False), mask=~known)
    cols["anomaly"] = pa.array(sc.anomaly == 1.0, mask=~has_ref)
    return pa.table(cols)


VERDICT_SCHEMA = pa.schema(
    [
        ("workload", pa.string()),
        ("metric", pa.string()),
        ("intervals", pa.int64()),
        ("median", pa.float64()),
        ("baseline_median", pa.float64()),
        ("baseline_n", pa.int64()),
        ("median_z", pa.float64()),
        ("anomalous_share", pa.float64()),
        ("verdict", pa.string()),
    ]
)


def _run_codes(frame: pa.Table, code: Ints, by: Sequence[str]) -> tuple[Ints, Ints, int]:
    """(run id per row, each row's workload replaced by its run's most common one, run count).

    A run is a distinct combination of the `by` labels (a null label is a value of its own);
    rows without a workload (`code` -1) stay -1, and a run's other rows are judged as its
    most common workload (ties: the first key in sorted order), so intervals that miss one key
    label (a model size not yet reported) stay with their run."""
    runs, n = group_ids(frame, by)
    usable = code >= 0
    if n == 0 or not usable.any():
        return runs, np.full(frame.num_rows, -1, dtype=np.int64), n
    width = int(code.max()) + 1
    pair, count = np.unique(runs[usable] * width + code[usable], return_counts=True)
    order = np.lexsort((pair % width, -count, pair // width))
    best = pair[order]
    lead = np.r_[True, best[1:] // width != best[:-1] // width]
    of_run = np.full(n, -1, dtype=np.int64)
    of_run[best[lead] // width] = best[lead] % width
    return runs, np.where(usable, of_run[runs], -1), n


def workload_verdicts(
    frame: pa.Table,
    baselines: pa.Table,
    settings: BaselineSettings | None = None,
    by: Sequence[str] = (),
) -> pa.Table:
    """Per workload in `frame` (per run of the `by` labels, e.g. ("job_id",), when given):
    healthy, degraded, or unknown (no baseline or too few rows). Columns: the `by` labels,
    then `VERDICT_SCHEMA`; `baseline_n` is the samples of the all-hours baseline."""
    s = settings or BaselineSettings()
    code, names = workload_codes(frame, s)
    code[~not_warmup(frame)] = -1
    if not by:
        return _verdicts(frame, baselines, s, code, names, (), code, len(names))
    runs, code, n_runs = _run_codes(frame, code, by)
    return _verdicts(frame, baselines, s, code, names, by, runs, n_runs)


def _verdicts(
    frame: pa.Table,
    baselines: pa.Table,
    s: BaselineSettings,
    code: Ints,
    names: list[str],
    by: Sequence[str],
    groups_of: Ints,
    n_groups: int,
) -> pa.Table:
    """`workload_verdicts` over rows with a workload `code` (-1: left out), one verdict per
    group of `groups_of` (0 .. n_groups - 1) that has such rows, in group order."""
    scores = _score(frame, baselines, s, code, names)
    metric = scores.primary
    usable = np.flatnonzero(code >= 0)
    present, first = np.unique(groups_of[usable], return_index=True)
    first = usable[first]  # each group's first row with a workload
    keys = [names[int(c)] for c in code[first].tolist()]
    cols: dict[str, list[Any]] = {b: strings_at(frame, b, first) for b in by}
    cols.update(workload=keys, metric=[metric] * len(keys))
    n = len(keys)
    verdict = np.full(n, "unknown", dtype=object)
    stats: dict[str, Any] = dict.fromkeys(
        ("intervals", "median", "baseline_median", "baseline_n", "median_z", "anomalous_share"),
        [None] * n,
    )
    if metric is not None:
        z = scores.z[metric]
        ok = usable[~np.isnan(z[usable])]
        slot = np.full(n_groups, -1, dtype=np.int64)
        slot[present] = np.arange(n)
        g = slot[groups_of[ok]]
        count = np.bincount(g, minlength=n)
        enough = count >= s.min_samples
        mz = _group_median(z[ok], g, n)
        share = np.bincount(g, weights=(z[ok] <= -s.anomaly_z), minlength=n) / np.maximum(count, 1)
        bad = (mz <= -s.degraded_z) | (share >= s.degraded_share)
        verdict[enough] = np.where(bad[enough], "degraded", "healthy")
        learned_n = {
            w: int(k)
            for w, m, h, k in zip(
                *(baselines.column(c).to_pylist() for c in ("workload", "metric", "hour", "n")),
                strict=True,
            )
            if h == ALL_HOURS and m == metric
        }

        def known(x: Floats) -> list[float | None]:
            return [float(v) if e else None for v, e in zip(x.tolist(), enough, strict=True)]

        stats = {
            "intervals": count.tolist(),
            "median": known(_group_median(floats(frame, metric)[ok], g, n)),
            "baseline_median": known(_group_median(scores.median[metric][ok], g, n)),
            "baseline_n": [learned_n.get(k) for k in keys],
            "median_z": known(mz),
            "anomalous_share": known(share),
        }
    cols.update(stats)
    cols["verdict"] = verdict.tolist()
    schema = pa.schema([*(pa.field(b, pa.string()) for b in by), *VERDICT_SCHEMA])
    return pa.table({f.name: pa.array(cols[f.name], f.type) for f in schema}, schema=schema)


def _group_median(values: Floats, group: Ints, n: int) -> Floats:
    """`np.median` of `values` (no NaN) per group 0 .. n-1; NaN for an empty group."""
    order = np.lexsort((values, group))
    v, g = values[order], group[order]
    count = np.bincount(g, minlength=n)
    start = np.cumsum(count) - count
    out = np.full(n, np.nan)
    has = count > 0
    lo = start[has] + (count[has] - 1) // 2
    hi = start[has] + count[has] // 2
    out[has] = (v[lo] + v[hi]) / 2
    return out


RUN_VERDICT_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("baseline", pa.string()),  # "history", "window", or null (none learned)
    ("runs", pa.int64()),  # runs of the workload in the frame
    ("reason", pa.string()),  # why a verdict is unknown
)


def run_verdicts(
    frame: pa.Table,
    history: pa.Table | None,
    settings: BaselineSettings | None = None,
    run: str = "job_id",
    min_runs: int = 2,
) -> pa.Table:
    """A verdict per run (distinct `run` label; rows without one form one run per workload)
    of each workload in `frame`, against the workload's baseline.

    The baseline is learned from `history` (the interval frame before `frame`, at the same
    step) for every workload it holds. A workload without earlier history is learned from
    `frame` itself when `frame` holds at least `min_runs` runs of it: each run is then judged
    against its workload's runs in the window, itself included, so a run is flagged only when
    it is worse than most of them. Other workloads get `unknown` with the reason. Columns: the
    run label, `VERDICT_SCHEMA`, then `baseline`, `runs` and `reason`."""
    s = settings or BaselineSettings()
    learned = (
        learn_baselines(history, s)
        if history is not None and history.num_rows
        else BASELINE_SCHEMA.empty_table()
    )
    known = set(learned.filter(pc.equal(learned["hour"], ALL_HOURS)).column("workload").to_pylist())
    code, names = workload_codes(frame, s)
    code[~not_warmup(frame)] = -1
    runs, code, n_runs = _run_codes(frame, code, (run,))
    per_workload = np.zeros(len(names), dtype=np.int64)
    if (code >= 0).any():
        pairs = np.unique(code[code >= 0] * (int(runs.max()) + 1) + runs[code >= 0])
        per_workload = np.bincount(pairs // (int(runs.max()) + 1), minlength=len(names))
    local = [i for i, k in enumerate(names) if k not in known and per_workload[i] >= min_runs]
    if local:
        mine = np.where(np.isin(code, local), code, -1)
        learned = pa.concat_tables([learned, _learn(frame, mine, names, s)])
    source = dict.fromkeys(known, "history")
    source.update({k: "window" for k in learned.column("workload").to_pylist() if k not in source})
    verdicts = _verdicts(frame, learned, s, code, names, (run,), runs, n_runs)
    count = {k: int(per_workload[i]) for i, k in enumerate(names)}
    extra: dict[str, list[object]] = {name: [] for name, _ in RUN_VERDICT_COLUMNS}
    for r in verdicts.to_pylist():
        key = r["workload"]
        extra["baseline"].append(source.get(key))
        extra["runs"].append(count.get(key, 0))
        extra["reason"].append(_reason(r, source.get(key), count.get(key, 0), s, min_runs))
    for name, kind in RUN_VERDICT_COLUMNS:
        verdicts = verdicts.append_column(pa.field(name, kind), pa.array(extra[name], kind))
    return verdicts


def _reason(
    r: dict[str, Any], source: str | None, runs: int, s: BaselineSettings, min_runs: int
) -> str | None:
    if r["verdict"] != "unknown":
        return None
    if r["metric"] is None:
        return "no useful-work metric to compare (SM or tensor activity needs profiling metrics)"
    if source is None:
        return (
            f"no earlier history of this workload and {runs} run(s) of it in the window "
            f"(a window baseline needs {min_runs})"
        )
    return (
        f"{r['intervals'] or 0} interval(s) with {r['metric']} after warm-up "
        f"(a verdict needs {s.min_samples})"
    )
