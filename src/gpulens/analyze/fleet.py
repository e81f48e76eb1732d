"""Fleet statistics for the fleet report: idle GPUs holding memory, the spread of per-entity
duty cycle, skew across groups, and the gap between duty cycle and useful work.

Pure numpy/pyarrow: tables or arrays in, small frozen records out. Column names follow the
interval frame (`duty`, `sm_active`, `tensor_active`, `memory_used_bytes`; see
`gpulens.analyze.schema`), so the functions take interval frames as well as samples with
those columns. Missing values are NaN or null and are left out of every statistic, never
counted as 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

GIB = float(1 << 30)
DEFAULT_QUANTILES: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95)
ArrayLike: TypeAlias = np.ndarray | pa.Array | pa.ChunkedArray | Sequence[float]


def _floats(values: ArrayLike) -> np.ndarray:
    """Float64 numpy values, null → NaN."""
    if isinstance(values, pa.ChunkedArray | pa.Array):
        values = values.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
    return np.asarray(values, dtype=np.float64)


def _codes(entities: ArrayLike) -> tuple[np.ndarray, list[str]]:
    """(int codes, -1 for null; names) of an entity column."""
    arr = entities if isinstance(entities, pa.Array | pa.ChunkedArray) else pa.array(entities)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if not pa.types.is_dictionary(arr.type):
        arr = pc.dictionary_encode(arr.cast(pa.string()))
    codes = np.asarray(arr.indices.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
    return codes, [str(v) for v in arr.dictionary.to_pylist()]


# -- (a) idle while holding memory -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IdleHolding:
    """Samples at zero duty cycle while holding more than `min_bytes` of GPU memory."""

    samples: int  # samples with both duty cycle and memory known
    idle_holding: int
    share: float | None  # idle_holding / samples; None without samples
    min_bytes: float


def idle_holding_share(
    duty: ArrayLike, memory_bytes: ArrayLike, min_bytes: float = GIB, idle_at: float = 0.0
) -> IdleHolding:
    """Share of samples with duty cycle <= `idle_at` (0: zero) and memory > `min_bytes`."""
    d, m = _floats(duty), _floats(memory_bytes)
    known = np.isfinite(d) & np.isfinite(m)
    hit = known & (d <= idle_at) & (m > min_bytes)
    total = int(known.sum())
    count = int(hit.sum())
    return IdleHolding(total, count, count / total if total else None, min_bytes)


# -- (b) distributions -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Distribution:
    """Summary of a set of values: count, mean, quantiles and a histogram over `edges`."""

    count: int
    mean: float | None
    quantiles: Mapping[float, float]
    edges: tuple[float, ...]
    counts: tuple[int, ...]

    @property
    def median(self) -> float | None:
        return self.quantiles.get(0.5)


def distribution(
    values: ArrayLike,
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
    bins: int = 10,
    value_range: tuple[float, float] = (0.0, 1.0),
) -> Distribution:
    """Quantiles (linear interpolation) and a histogram of the finite `values`."""
    v = _floats(values)
    v = v[np.isfinite(v)]
    qs = tuple(sorted({*quantiles, 0.5}))
    edges = np.linspace(value_range[0], value_range[1], bins + 1)
    if v.size == 0:
        return Distribution(0, None, {}, tuple(edges.tolist()), (0,) * bins)
    counts, _ = np.histogram(np.clip(v, value_range[0], value_range[1]), bins=edges)
    qv = np.quantile(v, qs)
    return Distribution(
        count=int(v.size),
        mean=float(v.mean()),
        quantiles={q: float(x) for q, x in zip(qs, qv, strict=True)},
        edges=tuple(float(e) for e in edges),
        counts=tuple(int(c) for c in counts),
    )


def entity_means(entities: ArrayLike, values: ArrayLike) -> tuple[list[str], np.ndarray]:
    """(entity names, mean of each entity's finite values); entities with none are left out."""
    codes, names = _codes(entities)
    v = _floats(values)
    ok = (codes >= 0) & np.isfinite(v)
    sums = np.bincount(codes[ok], weights=v[ok], minlength=len(names))
    counts = np.bincount(codes[ok], minlength=len(names))
    has = counts > 0
    return [n for n, h in zip(names, has, strict=True) if h], sums[has] / counts[has]


def group_totals(groups: ArrayLike, weights: ArrayLike) -> tuple[list[str], np.ndarray]:
    """(group names, sum of each group's finite weights); rows without a group are left out."""
    codes, names = _codes(groups)
    w = _floats(weights)
    ok = (codes >= 0) & np.isfinite(w)
    sums = np.bincount(codes[ok], weights=w[ok], minlength=len(names))
    seen = np.bincount(codes[ok], minlength=len(names)) > 0
    return [n for n, s in zip(names, seen, strict=True) if s], sums[seen]


# -- (c) skew ----------------------------------------------------------------------------------


def gini(values: ArrayLike) -> float | None:
    """Gini coefficient of non-negative amounts: 0 = all equal, → 1 = one holds everything.

    None with no values or a zero total; negative values are a ValueError.
    """
    v = _floats(values)
    v = np.sort(v[np.isfinite(v)])
    if v.size == 0 or v.sum() <= 0:
        return None
    if v[0] < 0:
        raise ValueError("gini needs non-negative amounts")
    n = v.size
    ranks = np.arange(1, n + 1, dtype=np.float64)
    return float(2.0 * np.dot(ranks, v) / (n * v.sum()) - (n + 1) / n)


@dataclass(frozen=True, slots=True)
class Skew:
    """How unequally an amount (GPU-time, useful work) spreads over groups."""

    groups: int
    gini: float | None
    top_decile_share: float | None  # share of the total held by the top 10 % of groups
    top: tuple[tuple[str, float], ...]  # the largest groups, largest first


def skew(groups: ArrayLike, amounts: ArrayLike, top: int = 5) -> Skew:
    """Totals of `amounts` per group, their Gini coefficient and concentration."""
    names, totals = group_totals(groups, amounts)
    if not names:
        return Skew(0, None, None, ())
    order = np.argsort(-totals, kind="stable")
    k = max(1, int(np.ceil(len(names) * 0.1)))
    total = float(totals.sum())
    share = float(totals[order[:k]].sum() / total) if total > 0 else None
    leaders = tuple((names[i], float(totals[i])) for i in order[:top])
    return Skew(len(names), gini(totals), share, leaders)


# -- (d) duty cycle versus useful work --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ActivityGap:
    """Duty cycle, SM activity and tensor activity distributions side by side."""

    duty: Distribution
    sm_active: Distribution
    tensor_active: Distribution
    summary: str  # "duty cycle median 99 % while SM activity 50 % and tensor 14 %"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.0f} %"


def activity_gap(
    duty: ArrayLike, sm_active: ArrayLike | None = None, tensor_active: ArrayLike | None = None
) -> ActivityGap:
    """Compare the three utilisations; `summary` names the gap in one line."""
    empty: ArrayLike = np.zeros(0)
    d = distribution(duty)
    s = distribution(sm_active if sm_active is not None else empty)
    t = distribution(tensor_active if tensor_active is not None else empty)
    line = f"duty cycle median {_pct(d.median)}"
    if s.count or t.count:
        sm = _pct(s.median) if s.count else "not measured"
        tc = _pct(t.median) if t.count else "not measured"
        line += f" while SM activity {sm} and tensor {tc}"
    else:
        line += " (SM and tensor activity not measured: useful work unknown)"
    return ActivityGap(d, s, t, line)


# -- summary and published curves -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FleetSummary:
    """The fleet report's figures over a samples table (one row per entity and time)."""

    samples: int
    entities: int
    idle_holding: IdleHolding
    entity_duty: Distribution  # per-entity mean duty cycle
    gpu_time_skew: Skew  # samples (GPU-time) per group
    busy_time_skew: Skew  # duty-weighted samples (busy GPU-time) per group
    gap: ActivityGap


def fleet_summary(
    samples: pa.Table, entity: str = "gpu_uuid", group: str | None = None, min_bytes: float = GIB
) -> FleetSummary:
    """Every fleet figure at once; `group` (default: the entity) is the skew's unit.

    Each row counts as one sample of equal length (true of fixed-rate telemetry and of
    interval frames); missing columns give empty figures.
    """
    n = samples.num_rows

    def col(name: str) -> np.ndarray:
        return _floats(samples.column(name)) if name in samples.column_names else np.full(n, np.nan)

    duty = col("duty")
    names, means = entity_means(samples.column(entity), duty)
    groups = samples.column(group or entity)
    return FleetSummary(
        samples=n,
        entities=len(names),
        idle_holding=idle_holding_share(duty, col("memory_used_bytes"), min_bytes),
        entity_duty=distribution(means),
        gpu_time_skew=skew(groups, np.where(np.isfinite(duty), 1.0, np.nan)),
        busy_time_skew=skew(groups, duty),
        gap=activity_gap(duty, col("sm_active"), col("tensor_active")),
    )
