"""Fairness: who gets the GPUs, who turns them into useful work, against what they were promised.

- `shares(frame, by, quotas)`: per user/team/project: allocated and useful GPU-hours, share of
  allocation, share of useful work, quota share (quotas normalised to sum to 1 over the groups
  given one), allocation ÷ quota and useful ÷ allocation share ratios. Rows with a null label
  (unallocated or unattributed time) are left out of the shares.
- `jain_index(x) = (Σx)² / (n·Σx²)`: 1 when all equal, 1/n when one has everything.
- `starvation(frame, queue)`: queued demand that idle GPUs could have served (the capture
  view of *pending while idle*; without queue data the answer is "unknown", never 0). It keeps
  its name for the API; in reports and findings *starvation* means jobs pending while their
  queue is under its quota (analyze/cluster/quotas.py, docs/plans.md).
- `monopolies(frame)`: *dominance*, one group holding more than `share` of the fleet's GPUs
  for at least `min_hours` in a row, whatever the quotas (a *monopoly* in findings is a queue
  over quota while another starves: analyze/cluster/quotas.py).
- `workload_gaps(frame)`: the same workload (engine + model labels) run by several teams,
  with useful work per GPU-hour compared; ratios ≥ `ratio` are flagged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.analyze.carbon import DEFAULT_REGION
from gpulens.analyze.prices import Prices
from gpulens.analyze.rollups import group_columns, rollup
from gpulens.analyze.waste import ensure_annotated
from gpulens.numbers import is_nan

DEFAULT_WORKLOAD_KEYS: tuple[str, ...] = ("engine", "model_parameters", "process_name")


def jain_index(values: Sequence[float] | np.ndarray) -> float | None:
    """Jain's fairness index of non-negative values, in [1/n, 1]; None when undefined
    (no values, or all zero). NaN values are ignored."""
    x = np.asarray(values, dtype=np.float64)
    x = x[~np.isnan(x)]
    if x.size == 0:
        return None
    if (x < 0).any():
        raise ValueError(f"Jain's index needs values >= 0, got {float(x.min())!r}")
    square = float(np.sum(x * x))
    if square == 0.0:
        return None
    return min(1.0, float(np.sum(x)) ** 2 / (x.size * square))


@dataclass(frozen=True, slots=True)
class FairnessSummary:
    """Shares per group plus the two Jain indices (None when undefined or no quotas)."""

    table: pa.Table
    jain_useful: float | None
    jain_allocation_over_quota: float | None


def shares(
    frame: pa.Table,
    by: str = "user",
    quotas: Mapping[str, float] | None = None,
    prices: Prices | None = None,
    region: str | float = DEFAULT_REGION,
) -> FairnessSummary:
    """Allocation vs useful work vs quota per group of `by`, and Jain's indices.

    Columns: `<by>`, `allocated_gpu_hours`, `useful_gpu_hours`, `allocation_share`,
    `useful_share`, `quota_share`, `allocation_over_quota`, `useful_over_allocation`.
    `jain_useful` is over useful-work shares; `jain_allocation_over_quota` over
    allocation ÷ quota ratios of the groups with a quota (a quota-weighted fairness: 1 when
    every group got the same multiple of its quota).
    """
    keys = group_columns(by)
    if len(keys) != 1:
        raise ValueError(f"shares are per one label column, got {keys!r}")
    key = keys[0]
    r = rollup(frame, keys, prices, region)
    r = r.filter(pc.is_valid(r[key]))
    names = [str(v) for v in r[key].to_pylist()]
    alloc = np.nan_to_num(_np(r["allocated_gpu_hours"]))
    useful = np.nan_to_num(_np(r["useful_gpu_hours"]))
    alloc_share = alloc / alloc.sum() if alloc.sum() > 0 else np.full(len(names), np.nan)
    useful_share = useful / useful.sum() if useful.sum() > 0 else np.full(len(names), np.nan)
    quota = np.array([np.nan if quotas is None else quotas.get(n, np.nan) for n in names])
    if quotas is not None and any(v < 0 for v in quotas.values()):
        raise ValueError(f"quotas must be >= 0, got {dict(quotas)!r}")
    quota_total = float(np.nansum(quota))
    quota_share = quota / quota_total if quota_total > 0 else np.full(len(names), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        over_quota = np.where(quota_share > 0, alloc_share / quota_share, np.nan)
        useful_over = np.where(alloc_share > 0, useful_share / alloc_share, np.nan)
    table = pa.table(
        {
            key: r[key],
            "allocated_gpu_hours": pa.array(alloc),
            "useful_gpu_hours": pa.array(useful),
            "allocation_share": _arr(alloc_share),
            "useful_share": _arr(useful_share),
            "quota_share": _arr(quota_share),
            "allocation_over_quota": _arr(over_quota),
            "useful_over_allocation": _arr(useful_over),
        }
    )
    return FairnessSummary(table, jain_index(useful_share), jain_index(over_quota))


@dataclass(frozen=True, slots=True)
class Starvation:
    """Queued demand that could have run on idle GPUs. `status` is "unknown" (no queue data:
    starvation cannot be ruled out, and is not 0) or "measured"; `table` has, per group,
    `starved_gpu_hours`, `max_queued_gpus` and `starved_intervals` (None when unknown)."""

    status: str
    starved_gpu_hours: float | None
    table: pa.Table | None


def starvation(frame: pa.Table, queue: pa.Table | None = None, by: str = "user") -> Starvation:
    """Starved GPU-hours per group: in each interval of the frame, the GPUs idle (unallocated,
    or allocated with no work) are offered to the queued demand (`queue`: `start_ns`, `<by>`,
    `queued_gpus`; a queue row applies to the frame interval it falls in, the largest value
    per interval and group counts), split in proportion to demand when idle GPUs are fewer."""
    if queue is None:
        return Starvation("unknown", None, None)
    for col in ("start_ns", by, "queued_gpus"):
        if col not in queue.column_names:
            raise ValueError(
                f"queue table lacks column {col!r}: it needs start_ns, {by}, queued_gpus"
            )
    t = ensure_annotated(frame)
    empty = pa.table(
        {
            by: pa.array([], pa.string()),
            "starved_gpu_hours": pa.array([], pa.float64()),
            "max_queued_gpus": pa.array([], pa.float64()),
            "starved_intervals": pa.array([], pa.int64()),
        }
    )
    if t.num_rows == 0 or queue.num_rows == 0:
        return Starvation("measured", 0.0, empty)
    starts = _ints(t["start_ns"])
    buckets, inverse = np.unique(starts, return_inverse=True)
    cause = t["waste_cause"].to_pylist()
    idle_rows = np.array([c in ("idle_unallocated", "idle_allocated") for c in cause], dtype=bool)
    idle_gpus = np.bincount(inverse, weights=np.where(idle_rows, _np(t["gpu_share"]), 0.0))
    step = np.zeros(len(buckets))
    np.maximum.at(step, inverse, np.nan_to_num(_np(t["step_s"])))
    q_start = _ints(queue["start_ns"])
    q_bucket = np.searchsorted(buckets, q_start, side="right") - 1
    at = np.clip(q_bucket, 0, None)
    inside = (q_bucket >= 0) & (q_start < buckets[at] + (step[at] * 1e9).astype(np.int64))
    q_names = [None if v is None else str(v) for v in queue[by].to_pylist()]
    demand: dict[tuple[int, str], float] = {}
    q_gpus = _np(queue["queued_gpus"])
    for b, name, gpus, ok in zip(q_bucket, q_names, q_gpus, inside, strict=True):
        if ok and name is not None and not is_nan(gpus) and gpus > 0:
            k = (int(b), name)
            demand[k] = max(demand.get(k, 0.0), float(gpus))
    total_demand = np.zeros(len(buckets))
    for (b, _), gpus in demand.items():
        total_demand[b] += gpus
    per: dict[str, list[float]] = {}
    for (b, name), gpus in demand.items():
        served = min(1.0, idle_gpus[b] / total_demand[b]) if total_demand[b] > 0 else 0.0
        starved_h = gpus * served * step[b] / 3600.0
        acc = per.setdefault(name, [0.0, 0.0, 0.0])
        acc[0] += starved_h
        acc[1] = max(acc[1], gpus)
        acc[2] += 1 if starved_h > 0 else 0
    names = sorted(per, key=lambda k: -per[k][0])
    table = pa.table(
        {
            by: pa.array(names, pa.string()),
            "starved_gpu_hours": pa.array([per[k][0] for k in names], pa.float64()),
            "max_queued_gpus": pa.array([per[k][1] for k in names], pa.float64()),
            "starved_intervals": pa.array([int(per[k][2]) for k in names], pa.int64()),
        }
    )
    return Starvation("measured", float(sum(v[0] for v in per.values())), table)


@dataclass(frozen=True, slots=True)
class Monopoly:
    """A run of intervals in which one group held more than the threshold share of GPUs."""

    group: str
    start_ns: int
    end_ns: int
    hours: float
    mean_share: float
    max_share: float


def monopolies(
    frame: pa.Table, by: str = "user", share: float = 0.5, min_hours: float = 24.0
) -> list[Monopoly]:
    """Runs of consecutive intervals where one group held > `share` of the GPUs in the frame
    (allocated GPU share ÷ all GPU share in that interval) lasting ≥ `min_hours`."""
    if not 0.0 < share < 1.0:
        raise ValueError(f"monopoly share {share!r}: expected a fraction between 0 and 1")
    t = ensure_annotated(frame)
    if t.num_rows == 0 or by not in t.column_names:
        return []
    starts = _ints(t["start_ns"])
    buckets, inverse = np.unique(starts, return_inverse=True)
    step_ns = np.zeros(len(buckets))
    np.maximum.at(step_ns, inverse, np.nan_to_num(_np(t["step_s"])) * 1e9)
    capacity = np.bincount(inverse, weights=_np(t["gpu_share"]), minlength=len(buckets))
    held_s = np.where(_np(t["allocated_s"]) > 0, _np(t["gpu_share"]), 0.0)
    enc = pc.dictionary_encode(t[by]).combine_chunks()
    codes = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    names = enc.dictionary.to_pylist()
    out: list[Monopoly] = []
    for i, name in enumerate(names):
        mine = codes == i
        held = np.bincount(inverse[mine], weights=held_s[mine], minlength=len(buckets))
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = np.where(capacity > 0, held / capacity, 0.0)
        over = np.flatnonzero(frac > share)
        if over.size == 0:
            continue
        # split where buckets are not consecutive or not contiguous in time
        gap = (np.diff(over) != 1) | (
            buckets[over[1:]] != buckets[over[:-1]] + step_ns[over[:-1]].astype(np.int64)
        )
        for run in np.split(over, np.flatnonzero(gap) + 1):
            start = int(buckets[run[0]])
            end = int(buckets[run[-1]] + int(step_ns[run[-1]]))
            hours = (end - start) / 3.6e12
            if hours >= min_hours:
                part = frac[run]
                out.append(
                    Monopoly(str(name), start, end, hours, float(part.mean()), float(part.max()))
                )
    return sorted(out, key=lambda m: -m.hours)


def workload_gaps(
    frame: pa.Table,
    by: str = "team",
    workload: Sequence[str] = DEFAULT_WORKLOAD_KEYS,
    ratio: float = 2.0,
    min_gpu_hours: float = 1.0,
    prices: Prices | None = None,
    region: str | float = DEFAULT_REGION,
) -> pa.Table:
    """Similar workloads across groups: per workload key (the `workload` columns present in
    the frame; rows where all are null are skipped) and group of `by` with at least
    `min_gpu_hours` allocated, the useful work per GPU-hour, the metric used
    ("tokens_per_gpu_hour" when every compared group reports tokens, else
    "useful_per_gpu_hour"), the best group's value ÷ this group's (`ratio_to_best`) and
    `flagged` = ratio_to_best ≥ `ratio` ("same model, 3× different useful work per GPU-hour")."""
    t = ensure_annotated(frame, prices, region)
    wkeys = [k for k in workload if k in t.column_names]
    cols = [*wkeys, by, "allocated_gpu_hours", "metric", "value", "ratio_to_best", "flagged"]
    schema = pa.schema(
        [(k, t.schema.field(k).type) for k in wkeys]
        + [(by, pa.string()), ("allocated_gpu_hours", pa.float64()), ("metric", pa.string())]
        + [("value", pa.float64()), ("ratio_to_best", pa.float64()), ("flagged", pa.bool_())]
    )
    if not wkeys or by not in t.column_names or t.num_rows == 0:
        return schema.empty_table()
    any_key = pc.is_valid(t[wkeys[0]])
    for k in wkeys[1:]:
        any_key = pc.or_(any_key, pc.is_valid(t[k]))
    t = t.filter(pc.and_(any_key, pc.is_valid(t[by])))
    r = rollup(t, [*wkeys, by])
    r = r.filter(pc.greater_equal(r["allocated_gpu_hours"], min_gpu_hours))
    rows: list[dict[str, object]] = []
    groups: dict[tuple[object, ...], list[dict[str, object]]] = {}
    for row in r.to_pylist():
        groups.setdefault(tuple(row[k] for k in wkeys), []).append(row)
    for members in groups.values():
        if len(members) < 2:
            continue
        tokens = [m["tokens_per_gpu_hour"] for m in members]
        metric = "tokens_per_gpu_hour" if all(v is not None for v in tokens) else None
        metric = metric or "useful_per_gpu_hour"
        values = [m[metric] for m in members]
        known = [float(v) for v in values if isinstance(v, float)]
        if len(known) < 2:
            continue
        best = max(known)
        for m, v in zip(members, values, strict=True):
            rel = best / v if isinstance(v, float) and v > 0 else None
            row = {k: m[k] for k in wkeys}
            row.update(
                {
                    by: m[by],
                    "allocated_gpu_hours": m["allocated_gpu_hours"],
                    "metric": metric,
                    "value": v,
                    "ratio_to_best": rel if best > 0 else None,
                    "flagged": bool(best > 0 and (rel is None or rel >= ratio)),
                }
            )
            rows.append(row)
    return pa.Table.from_pylist(rows, schema=schema).select(cols)


def _ints(values: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(pc.cast(values, pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)


def _np(values: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(
        pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64
    )


def _arr(values: np.ndarray) -> pa.Array:
    return pa.array(values, type=pa.float64(), from_pandas=True)
