"""Small column helpers shared by memory, baselines, engines and events (pure numpy/pyarrow).

Frames are `pyarrow.Table`s (see `gpulens.analyze.schema`); these helpers read a column as a
numpy array with nulls as NaN (floats) or None (strings), and number the groups of rows that
share the values of some key columns, so the analysis modules can loop over groups cheaply.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]


def floats(table: pa.Table, name: str) -> Floats:
    """Column `name` as float64 with nulls (and a missing column) as NaN."""
    if name not in table.column_names:
        return np.full(table.num_rows, np.nan)
    col = pc.cast(table.column(name), pa.float64())
    return np.asarray(col.to_numpy(), dtype=np.float64)


def ints(table: pa.Table, name: str) -> Ints:
    """Column `name` (integers or timestamps) as int64; nulls are not allowed here."""
    col = table.column(name)
    if pa.types.is_timestamp(col.type):
        col = pc.cast(col, pa.int64())
    return np.asarray(pc.cast(col, pa.int64()).to_numpy(), dtype=np.int64)


def strings(table: pa.Table, name: str) -> list[str | None]:
    """Column `name` as Python strings (None for null or a missing column)."""
    if name not in table.column_names:
        return [None] * table.num_rows
    col = table.column(name)
    if not pa.types.is_string(col.type) and not pa.types.is_large_string(col.type):
        col = pc.cast(col, pa.string())  # dictionary-encoded labels and numbers alike
    return list(col.to_pylist())


def codes(table: pa.Table, name: str) -> Ints:
    """Integer codes of column `name` (equal values, equal codes; null and missing share one)."""
    if name not in table.column_names:
        return np.zeros(table.num_rows, dtype=np.int64)
    col = table.column(name)
    if pa.types.is_integer(col.type) or pa.types.is_timestamp(col.type):
        ints_ = pc.cast(col, pa.int64()).to_numpy(zero_copy_only=False)
        _, inverse = np.unique(np.asarray(ints_), return_inverse=True)
        return np.asarray(inverse, dtype=np.int64).reshape(-1)
    if pa.types.is_floating(col.type):
        values = floats(table, name)
        _, inverse = np.unique(np.nan_to_num(values, nan=-np.inf), return_inverse=True)
        return np.asarray(inverse, dtype=np.int64).reshape(-1)
    if pa.types.is_dictionary(col.type):
        col = pc.cast(col, pa.string())
    encoded = pc.dictionary_encode(pc.fill_null(pc.cast(col, pa.string()), "\x00")).combine_chunks()
    return np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)


def group_ids(table: pa.Table, keys: Sequence[str]) -> tuple[Ints, int]:
    """(group id per row, number of groups) for the distinct combinations of `keys`."""
    if table.num_rows == 0:
        return np.zeros(0, dtype=np.int64), 0
    if not keys:
        return np.zeros(table.num_rows, dtype=np.int64), 1
    stacked = np.stack([codes(table, k) for k in keys], axis=1)
    uniq, inverse = np.unique(stacked, axis=0, return_inverse=True)
    return np.asarray(inverse, dtype=np.int64).reshape(-1), int(uniq.shape[0])


def rows_by_group(ids: Ints, n: int, order: Ints | None = None) -> list[Ints]:
    """Row indices of each group, in `order` (default: row order) within a group."""
    idx = np.arange(ids.size, dtype=np.int64) if order is None else order
    sorted_idx = idx[np.argsort(ids[idx], kind="stable")]
    bounds = np.searchsorted(ids[sorted_idx], np.arange(n + 1))
    return [sorted_idx[bounds[g] : bounds[g + 1]] for g in range(n)]


def not_warmup(table: pa.Table) -> npt.NDArray[np.bool_]:
    """True for rows whose `state` is not "warmup" (all rows when there is no state column)."""
    if "state" not in table.column_names:
        return np.ones(table.num_rows, dtype=bool)
    states = strings(table, "state")
    return np.array([s != "warmup" for s in states], dtype=bool)


def weighted_mean(values: Floats, weights: Floats) -> float:
    """Mean of the non-NaN values weighted by `weights`; NaN when there is none."""
    ok = ~np.isnan(values) & ~np.isnan(weights)
    total = float(weights[ok].sum())
    return float((values[ok] * weights[ok]).sum() / total) if total > 0 else float("nan")


def none_if_nan(x: float) -> float | None:
    """`x`, or None for NaN (tables store missing as null, never NaN)."""
    return None if x != x else float(x)
