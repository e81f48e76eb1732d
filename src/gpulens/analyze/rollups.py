"""Rollups: totals of an interval frame per process, job, user, project, team, engine, host or
cluster (or any label columns). Pure and columnar: one pyarrow hash aggregation.

`rollup(frame, "user")` (or `by=("host", "pid")`, or `by=()` for the whole frame) returns one
row per group with, all GPU-hours weighted by `gpu_share` (see `waste`):

- `gpus` (distinct physical GPUs: `gpu_uuid`, a MIG instance counted as its `parent_uuid`),
  `mean_gpus` (allocated GPU-hours / the frame's span in hours:
  how many GPUs the group held on average), `start_ns`, `end_ns`;
- `gpu_hours` (capacity), `allocated_gpu_hours`, `useful_gpu_hours`, `wasted_gpu_hours`
  (actionable waste), `headroom_gpu_hours` (the not-useful remainder in healthy states, not
  waste), `warmup_gpu_hours`, `unmeasured_gpu_hours`, `idle_unallocated_gpu_hours`, and
  `wasted_gpu_hours_<cause>` for every cause in `waste.WASTE_CAUSES` (allocated = useful +
  wasted + headroom + warm-up + unmeasured; gpu_hours = allocated + idle_unallocated);
- `no_data_gpu_hours`: time inside the group's series with no data (gaps between readings
  beyond the maximum gap, see `gpulens.store.coverage`), counted apart from `gpu_hours`:
  neither allocated nor unallocated, never zero activity;
- `mean_duty`, `mean_sm_active`, `mean_tensor_active`: time-weighted means over the rows where
  the metric exists (null when it never does; the plain mean for a group covering no time, a
  snapshot);
- `energy_kwh`, `cost`, `energy_cost`, `total_cost`, `wasted_cost` (the waste's share of
  `total_cost`), `headroom_cost` (the headroom's share), `co2e_kg`;
- `useful_per_gpu_hour` (useful / allocated GPU-hours: useful work per allocated GPU-hour,
  0..1) and `tokens_per_gpu_hour` (Σ tokens_per_s × covered seconds / allocated GPU-hours;
  null without tokens; an application that reports the same throughput on each of its GPUs
  is counted once per GPU).

A sum over no known value is null ("unknown"), never 0. Rows with a null label form their own
group (e.g. `user` null: unattributed or unallocated time). Group columns missing from the
frame count as null. Long spans: a 30-day × 512-GPU fleet at 10 s buckets is 133 M rows;
reports roll up 300 s buckets (4.4 M rows; see bench/bench_rollups.py) for spans over a day.
The aggregation is numpy `bincount` over dense group ids built from dictionary codes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.analyze.carbon import DEFAULT_REGION
from gpulens.analyze.prices import Prices
from gpulens.analyze.waste import CAUSE_NAMES, WASTE_CAUSES, covered, ensure_annotated

ROLLUPS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "process": ("host", "pid"),
        "job": ("job_id",),
        "user": ("user",),
        "project": ("project",),
        "team": ("team",),
        "engine": ("engine",),
        "host": ("host",),
        "gpu": ("host", "gpu_uuid"),
        "cluster": (),
    }
)
_MEANS: tuple[tuple[str, str], ...] = (
    ("duty", "mean_duty"),
    ("sm_active", "mean_sm_active"),
    ("tensor_active", "mean_tensor_active"),
)
_HOURS = (
    "gpu_hours",
    "allocated_gpu_hours",
    "useful_gpu_hours",
    "wasted_gpu_hours",
    "headroom_gpu_hours",
    "warmup_gpu_hours",
    "unmeasured_gpu_hours",
    "idle_unallocated_gpu_hours",
    "no_data_gpu_hours",
)
_MONEY = (
    "energy_kwh",
    "cost",
    "energy_cost",
    "total_cost",
    "wasted_cost",
    "headroom_cost",
    "co2e_kg",
)
_INT_COLUMNS = frozenset({"gpus", "start_ns", "end_ns"})
CAUSE_COLUMNS: tuple[str, ...] = tuple(f"wasted_gpu_hours_{c}" for c in WASTE_CAUSES)
METRIC_COLUMNS: tuple[str, ...] = (
    "gpus",
    "mean_gpus",
    "start_ns",
    "end_ns",
    *_HOURS,
    *CAUSE_COLUMNS,
    *(name for _, name in _MEANS),
    *_MONEY,
    "useful_per_gpu_hour",
    "tokens_per_gpu_hour",
)


def group_columns(by: str | Sequence[str]) -> tuple[str, ...]:
    """The label columns of a named rollup ("user", "process", "cluster"...) or of a list."""
    if isinstance(by, str):
        if by in ROLLUPS:
            return ROLLUPS[by]
        return (by,)
    return tuple(by)


def _f(t: pa.Table, name: str) -> np.ndarray:
    if name not in t.column_names:
        return np.full(t.num_rows, np.nan)
    return np.asarray(
        pc.cast(t[name], pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64
    )


def _null_to_nan(values: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(
        pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64
    )


def output_schema(keys: Sequence[str], frame_schema: pa.Schema | None = None) -> pa.Schema:
    """The schema `rollup` returns for group columns `keys`."""
    fields = []
    for k in keys:
        known = frame_schema is not None and k in frame_schema.names
        fields.append(pa.field(k, frame_schema.field(k).type if known else pa.string()))  # type: ignore[union-attr]
    for c in METRIC_COLUMNS:
        fields.append(pa.field(c, pa.int64() if c in _INT_COLUMNS else pa.float64()))
    return pa.schema(fields)


def _codes(t: pa.Table, name: str) -> tuple[np.ndarray, pa.Array]:
    """Dense codes of a column (nulls get the last code) and the values they stand for."""
    n = t.num_rows
    if name not in t.column_names:
        return np.zeros(n, dtype=np.int64), pa.nulls(1, pa.string())
    col = t[name].combine_chunks()
    enc = col if pa.types.is_dictionary(col.type) else pc.dictionary_encode(col)
    values = enc.dictionary
    codes = enc.indices.to_numpy(zero_copy_only=False)
    codes = np.asarray(np.nan_to_num(codes, nan=len(values)), dtype=np.int64)
    if enc.null_count:
        codes[~enc.is_valid().to_numpy(zero_copy_only=False)] = len(values)
    return codes, pa.concat_arrays([values, pa.nulls(1, values.type)])


def _physical(t: pa.Table) -> pa.Table:
    """`t` with `gpu_uuid` naming the physical GPU: a MIG instance's parent (so `gpus` counts a
    MIG-enabled GPU once, with or without its instances)."""
    if "parent_uuid" not in t.column_names or "gpu_uuid" not in t.column_names:
        return t
    parent = t["parent_uuid"]
    if parent.null_count == len(parent):
        return t
    physical = pc.coalesce(pc.cast(parent, pa.string()), pc.cast(t["gpu_uuid"], pa.string()))
    return t.select(["gpu_uuid"]).set_column(0, "gpu_uuid", physical)


def _group_ids(t: pa.Table, keys: Sequence[str]) -> tuple[np.ndarray, int, dict[str, pa.Array]]:
    """A dense group id per row, the group count, and each key's value per group."""
    gid = np.zeros(t.num_rows, dtype=np.int64)
    parts: list[tuple[np.ndarray, pa.Array]] = [_codes(t, k) for k in keys]
    radix = 1
    for codes, values in parts:
        gid = gid * len(values) + codes
        radix *= len(values)
    if radix <= 4 * t.num_rows + 1024:
        present = np.flatnonzero(np.bincount(gid, minlength=radix))
        remap = np.zeros(radix, dtype=np.int64)
        remap[present] = np.arange(len(present))
        gid, uniq = remap[gid], present
    else:
        uniq, gid = np.unique(gid, return_inverse=True)
    labels: dict[str, pa.Array] = {}
    rest = uniq
    for k, (_, values) in reversed(list(zip(keys, parts, strict=True))):
        labels[k] = values.take(pa.array(rest % len(values)))
        rest = rest // len(values)
    return gid, len(uniq), {k: labels[k] for k in keys}


def rollup(
    frame: pa.Table,
    by: str | Sequence[str],
    prices: Prices | None = None,
    region: str | float = DEFAULT_REGION,
) -> pa.Table:
    """One row per group of `by` with the columns of the module doc, largest allocation first.

    `frame` is a classified interval frame, annotated by `waste.annotate` or not (then it is
    annotated here with `prices` and `region`).
    """
    keys = group_columns(by)
    t = ensure_annotated(frame, prices, region)
    n = t.num_rows
    schema = output_schema(keys, t.schema)
    if n == 0:
        return schema.empty_table()
    gid, groups, labels = _group_ids(t, keys)

    def total(x: np.ndarray) -> np.ndarray:
        """Per-group sum skipping NaN; NaN where a group has no value at all."""
        valid = ~np.isnan(x)
        if valid.all():
            return np.bincount(gid, weights=x, minlength=groups)
        sums = np.bincount(gid, weights=np.where(valid, x, 0.0), minlength=groups)
        seen = np.bincount(gid[valid], minlength=groups)
        return np.where(seen > 0, sums, np.nan)

    gpu_s = _f(t, "gpu_s")
    allocated = _f(t, "allocated_s")
    wasted = _f(t, "wasted_s")
    headroom = _f(t, "headroom_s")
    out: dict[str, pa.Array] = dict(labels)
    gpu_codes, gpu_values = _codes(_physical(t), "gpu_uuid")
    pair = gid * len(gpu_values) + gpu_codes
    if groups * len(gpu_values) <= 4 * n + 1024:
        held = np.bincount(pair, minlength=groups * len(gpu_values)).reshape(groups, -1) > 0
        if "gpu_uuid" in t.column_names:
            held[:, -1] = False  # null uuids are not GPUs
        out["gpus"] = pa.array(held.sum(axis=1).astype(np.int64))
    else:
        uniq = np.unique(pair[gpu_codes < len(gpu_values) - 1])
        out["gpus"] = pa.array(np.bincount(uniq // len(gpu_values), minlength=groups))
    start = np.zeros(n, dtype=np.int64)
    if "start_ns" in t.column_names:
        start = np.asarray(t["start_ns"].to_numpy(), dtype=np.int64)
    end = start + np.round(np.nan_to_num(_f(t, "step_s")) * 1e9).astype(np.int64)
    first = np.full(groups, np.iinfo(np.int64).max)
    last = np.full(groups, np.iinfo(np.int64).min)
    np.minimum.at(first, gid, start)
    np.maximum.at(last, gid, end)
    span_h = (int(end.max()) - int(start.min())) / 3.6e12
    alloc_h = total(allocated) / 3600.0
    useful_h = total(_f(t, "useful_s")) / 3600.0
    with np.errstate(invalid="ignore", divide="ignore"):
        out["mean_gpus"] = _arr(alloc_h / span_h if span_h > 0 else np.full(groups, np.nan))
        out["start_ns"] = pa.array(first)
        out["end_ns"] = pa.array(last)
        hours = {
            "gpu_hours": total(gpu_s) / 3600.0,
            "allocated_gpu_hours": alloc_h,
            "useful_gpu_hours": useful_h,
            "wasted_gpu_hours": total(wasted) / 3600.0,
            "headroom_gpu_hours": total(headroom) / 3600.0,
            "warmup_gpu_hours": total(_f(t, "warmup_s")) / 3600.0,
            "unmeasured_gpu_hours": total(_f(t, "unmeasured_s")) / 3600.0,
            "idle_unallocated_gpu_hours": total(gpu_s - allocated) / 3600.0,
            "no_data_gpu_hours": total(np.nan_to_num(_f(t, "no_data_gpu_s"))) / 3600.0,
        }
        out.update({k: _arr(v) for k, v in hours.items()})
        cause_codes, cause_values = _codes(t, "waste_cause")
        known = ~np.isnan(wasted)
        width = len(cause_values)
        by_cause = np.bincount(
            gid[known] * width + cause_codes[known],
            weights=wasted[known],
            minlength=groups * width,
        ).reshape(groups, width)
        names = cause_values.to_pylist()
        for cause, col in zip(WASTE_CAUSES, CAUSE_COLUMNS, strict=True):
            i = names.index(cause) if cause in names else -1
            out[col] = _arr(by_cause[:, i] / 3600.0 if i >= 0 else np.zeros(groups))
        for src, col in _MEANS:
            x = _f(t, src)
            valid = ~np.isnan(x)
            w = np.bincount(gid, weights=np.where(valid, gpu_s, 0.0), minlength=groups)
            xw = np.bincount(gid, weights=np.where(valid, x * gpu_s, 0.0), minlength=groups)
            # a group covering no time (a snapshot): the plain mean, the state at that instant
            seen = np.bincount(gid, weights=valid.astype(np.float64), minlength=groups)
            xs = np.bincount(gid, weights=np.where(valid, x, 0.0), minlength=groups)
            plain = np.where(seen > 0, xs / np.where(seen > 0, seen, 1.0), np.nan)
            out[col] = _arr(np.where(w > 0, xw / np.where(w > 0, w, 1.0), plain))
        cost = _f(t, "total_cost")
        frac = np.divide(np.nan_to_num(wasted), gpu_s, out=np.zeros(n), where=gpu_s > 0)
        spare = np.divide(np.nan_to_num(headroom), gpu_s, out=np.zeros(n), where=gpu_s > 0)
        money = {
            "energy_kwh": total(_f(t, "energy_kwh")),
            "cost": total(_f(t, "cost")),
            "energy_cost": total(_f(t, "energy_cost")),
            "total_cost": total(cost),
            "wasted_cost": total(cost * frac),
            "headroom_cost": total(cost * spare),
            "co2e_kg": total(_f(t, "co2e_kg")),
        }
        out.update({k: _arr(v) for k, v in money.items()})
        out["useful_per_gpu_hour"] = _arr(np.where(alloc_h > 0, useful_h / alloc_h, np.nan))
        tokens = total(_f(t, "tokens_per_s") * covered(t))
        out["tokens_per_gpu_hour"] = _arr(np.where(alloc_h > 0, tokens / alloc_h, np.nan))
    result = pa.table(out).cast(schema)
    order = pc.sort_indices(result, sort_keys=[("allocated_gpu_hours", "descending")])
    return result.take(order)


def _arr(values: np.ndarray) -> pa.Array:
    return pa.array(values, type=pa.float64(), from_pandas=True)


__all__ = ["CAUSE_COLUMNS", "CAUSE_NAMES", "METRIC_COLUMNS", "ROLLUPS", "group_columns", "rollup"]
