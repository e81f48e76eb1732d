"""The storage form of buffered readings, built straight from their columns.

`SegmentWriter` buffers readings in groups of one shape (interned label tuples, one flat list
of values). The general path turns each group into an Arrow table, concatenates the tables of a
kind and `normalize`s the result. When a flush holds groups only, this module builds the same
tables (same columns and types, same values bit for bit, same row order, same dictionaries) in
one pass: the groups' values in one numpy matrix, one stable sort by (labels..., ts), each
metric rounded once, each Arrow column built once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa

from gpulens.model import LABEL_KEYS
from gpulens.store.layout import NS_PER_DAY
from gpulens.store.schema import (
    FLOAT32_MAX_STEPS,
    RESERVED,
    TS,
    TS_TYPE,
    Rounding,
    label_order,
    metric_order,
    rounding,
)

#: names a metric may not have on this path (`normalize` reads them as labels or refuses them)
_NOT_METRICS = frozenset(LABEL_KEYS) | RESERVED


class BufferedGroup(Protocol):
    """The buffer of one (kind, label keys, value keys) shape, as `SegmentWriter` keeps it."""

    label_keys: tuple[str, ...]
    value_keys: tuple[str, ...]
    ts: list[int]
    codes: list[int]
    label_rows: list[tuple[str, ...]]
    values: list[float]


@dataclass(frozen=True, slots=True)
class GroupColumns:
    """One group's readings as arrays: `codes` index the distinct label values of each key,
    `values` has one row per reading (NaN = absent)."""

    label_keys: tuple[str, ...]
    value_keys: tuple[str, ...]
    ts: np.ndarray
    codes: np.ndarray
    labels: tuple[list[str | None], ...]
    values: np.ndarray


def group_columns(group: BufferedGroup) -> GroupColumns:
    """The arrays of `group`; raises as converting it to a table does (TypeError, ValueError,
    ArrowException) when a timestamp, label or value cannot be stored."""
    ts = pa.array(group.ts, type=pa.int64()).to_numpy(zero_copy_only=False)
    width = len(group.label_keys)
    flat = pa.array([row[j] for j in range(width) for row in group.label_rows], pa.string())
    distinct = len(group.label_rows)
    labels = tuple(flat.slice(j * distinct, distinct).to_pylist() for j in range(width))
    values = np.empty((len(ts), 0))
    if group.value_keys:
        values = np.array(group.values, dtype=np.float64).reshape(len(ts), len(group.value_keys))
    codes = np.array(group.codes, dtype=np.intp)
    return GroupColumns(group.label_keys, group.value_keys, ts, codes, labels, values)


def direct(groups: Sequence[GroupColumns]) -> bool:
    """Whether `day_tables` builds what `normalize` would for these groups of one kind: every
    timestamp is there, no name is reserved, no metric bears a label's name, no name is a label
    in one group and a metric in another."""
    labels = {k for g in groups for k in g.label_keys}
    metrics = {k for g in groups for k in g.value_keys}
    missing_ts = any(g.ts.dtype != np.int64 for g in groups)  # a null timestamp
    return not (missing_ts or labels & RESERVED or metrics & _NOT_METRICS or labels & metrics)


def day_tables(groups: Sequence[GroupColumns]) -> list[tuple[int, pa.Table]]:
    """(UTC day number, storage-form table) of the groups of one kind, days ascending."""
    ts = np.concatenate([g.ts for g in groups])
    labels = label_order({k for g in groups for k in g.label_keys})
    ranks = {name: _label_ranks(name, groups) for name in labels}
    metrics = metric_order({k for g in groups for k in g.value_keys})
    matrix = _value_matrix(metrics, groups, len(ts))
    days = ts // NS_PER_DAY
    distinct_days = np.unique(days)
    out: list[tuple[int, pa.Table]] = []
    for day in distinct_days:
        rows = np.arange(len(ts)) if len(distinct_days) == 1 else np.flatnonzero(days == day)
        if len(rows) > 1:
            keys = [ts[rows], *(ranks[name][0][rows] for name in reversed(labels))]
            rows = rows[np.lexsort(keys)]
        columns: dict[str, pa.Array] = {TS: pa.array(ts[rows], type=pa.int64()).cast(TS_TYPE)}
        for name in labels:
            columns[name] = _dictionary(*ranks[name], rows)
        columns.update(_metric_columns(metrics, matrix[:, rows]))
        out.append((int(day), pa.table(columns)))
    return out


def _label_ranks(name: str, groups: Sequence[GroupColumns]) -> tuple[np.ndarray, pa.Array]:
    """Each row's rank among the distinct values of label `name` (absent: after them all),
    and those values in ascending order (code point order, that is UTF-8 byte order)."""
    distinct: set[str] = set()
    for g in groups:
        if name in g.label_keys:
            distinct.update(v for v in g.labels[g.label_keys.index(name)] if v is not None)
    ordered = sorted(distinct)
    rank = {v: i for i, v in enumerate(ordered)}
    absent = len(ordered)
    parts: list[np.ndarray] = []
    for g in groups:
        if name not in g.label_keys:
            parts.append(np.full(len(g.ts), absent, dtype=np.intp))
            continue
        values = g.labels[g.label_keys.index(name)]
        by_code = np.array([absent if v is None else rank[v] for v in values], dtype=np.intp)
        parts.append(by_code[g.codes])
    return np.concatenate(parts), pa.array(ordered, type=pa.string())


def _dictionary(ranks: np.ndarray, ordered: pa.Array, rows: np.ndarray) -> pa.Array:
    """The label column of `rows`, dictionary-encoded (by `dictionary_encode`, as `normalize`
    does: values in order of first appearance, int32 indices, null where absent)."""
    picked = ranks[rows]
    return ordered.take(pa.array(picked, mask=picked == len(ordered))).dictionary_encode()


def _value_matrix(metrics: list[str], groups: Sequence[GroupColumns], rows: int) -> np.ndarray:
    """(metric, row) float64 matrix of all groups; NaN where a group lacks a metric."""
    position = {name: i for i, name in enumerate(metrics)}
    matrix = np.full((len(metrics), rows), np.nan)
    start = 0
    for g in groups:
        end = start + len(g.ts)
        if g.value_keys:
            matrix[[position[k] for k in g.value_keys], start:end] = g.values.T
        start = end
    return matrix


def _metric_columns(metrics: list[str], matrix: np.ndarray) -> dict[str, pa.Array]:
    """The metric columns of `matrix` as `round_metric` makes them; all-absent ones left out."""
    nulls = np.isnan(matrix)
    kept: list[int] = np.flatnonzero(~nulls.all(axis=1)).tolist()
    rules = [rounding(metrics[i]) for i in kept]
    rounded, steps = _round(matrix[kept], rules)
    small = np.nanmax(np.abs(steps), axis=1, initial=0.0) <= FLOAT32_MAX_STEPS
    out: dict[str, pa.Array] = {}
    for j, i in enumerate(kept):
        rule, mask = rules[j], nulls[i]
        if rule is not None and rule.gauge and small[j]:
            out[metrics[i]] = pa.array(rounded[j].astype(np.float32), pa.float32(), mask=mask)
        else:
            out[metrics[i]] = pa.array(rounded[j], type=pa.float64(), mask=mask)
    return out


def _round(values: np.ndarray, rules: list[Rounding | None]) -> tuple[np.ndarray, np.ndarray]:
    """`values` (a row per metric) rounded to their rules, and the steps they are rounded to;
    rows without a rule (metrics unknown to the catalog) stay as they are."""
    rounded = values.copy()
    steps = np.full_like(values, np.nan)
    for per_unit in (True, False):
        sel = [j for j, r in enumerate(rules) if r is not None and r.per_unit is per_unit]
        if not sel:
            continue
        scale = np.array([r.scale for r in rules if r is not None and r.per_unit is per_unit])
        if per_unit:
            steps[sel] = np.round(values[sel] * scale[:, None])
            rounded[sel] = steps[sel] / scale[:, None]
        else:
            steps[sel] = np.round(values[sel] / scale[:, None])
            rounded[sel] = steps[sel] * scale[:, None]
    return rounded, steps
