"""Small column helpers shared by memory, baselines, engines and events (pure numpy/pyarrow).

Frames are `pyarrow.Table`s (see `gpulens.analyze.schema`); these helpers read a column as a
numpy array with nulls as NaN (floats) or None (strings), and number the groups of rows that
share the values of some key columns, so the analysis modules can loop over groups cheaply.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.numbers import is_nan

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


def strings_at(table: pa.Table, name: str, rows: Ints) -> list[str | None]:
    """Column `name` at `rows` as Python strings (None for null or a missing column)."""
    if name not in table.column_names:
        return [None] * len(rows)
    return strings(pa.table({name: table.column(name).take(pa.array(rows, pa.int64()))}), name)


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
    """(group id per row, number of groups) for the distinct combinations of `keys`; groups are
    numbered in the order of their key codes (the first key's code first)."""
    if table.num_rows == 0:
        return np.zeros(0, dtype=np.int64), 0
    if not keys:
        return np.zeros(table.num_rows, dtype=np.int64), 1
    parts = [codes(table, k) for k in keys]
    combined = np.zeros(table.num_rows, dtype=np.int64)
    span = 1
    for part in parts:  # the codes folded into one integer, in the same order
        size = int(part.max()) + 1
        span *= size
        if span >= 2**62:  # would overflow: a row-wise unique instead
            uniq, inverse = np.unique(np.stack(parts, axis=1), axis=0, return_inverse=True)
            return np.asarray(inverse, dtype=np.int64).reshape(-1), int(uniq.shape[0])
        combined = combined * size + part
    _, inverse = np.unique(combined, return_inverse=True)
    ids = np.asarray(inverse, dtype=np.int64).reshape(-1)
    return ids, int(ids.max()) + 1


def first_rows(ids: Ints, n: int) -> Ints:
    """The first row (in row order) of each of the `n` groups numbered by `ids`."""
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    _, first = np.unique(ids, return_index=True)
    return np.asarray(first, dtype=np.int64)


def label_codes(table: pa.Table, name: str) -> tuple[Ints, list[str | None]]:
    """(code per row, value per code) of column `name` as strings: equal values share a code;
    null (and a missing column) has a code of its own, whose value is None."""
    if name not in table.column_names or table.num_rows == 0:
        return np.zeros(table.num_rows, dtype=np.int64), [None]
    col = table.column(name)
    if not pa.types.is_string(col.type) and not pa.types.is_large_string(col.type):
        col = pc.cast(col, pa.string())
    encoded = pc.dictionary_encode(col, null_encoding="encode").combine_chunks()
    values: list[str | None] = encoded.dictionary.to_pylist()
    if not values:
        return np.zeros(table.num_rows, dtype=np.int64), [None]
    return np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64), values


def rows_by_group(ids: Ints, n: int, order: Ints | None = None) -> list[Ints]:
    """Row indices of each group, in `order` (default: row order) within a group."""
    idx = np.arange(ids.size, dtype=np.int64) if order is None else order
    sorted_idx = idx[np.argsort(ids[idx], kind="stable")]
    bounds = np.searchsorted(ids[sorted_idx], np.arange(n + 1))
    return [sorted_idx[bounds[g] : bounds[g + 1]] for g in range(n)]


def split_at(values: np.ndarray, cuts: Ints) -> list[np.ndarray]:
    """`np.split(values, cuts)` (views between the cut positions), without its per-piece
    overhead."""
    edges = [0, *np.asarray(cuts).tolist(), values.shape[0]]
    return [values[a:b] for a, b in pairwise(edges)]


def not_warmup(table: pa.Table) -> npt.NDArray[np.bool_]:
    """True for rows whose `state` is not "warmup" (all rows when there is no state column)."""
    if "state" not in table.column_names:
        return np.ones(table.num_rows, dtype=bool)
    code, values = label_codes(table, "state")
    return np.array([v != "warmup" for v in values], dtype=bool)[code]


def rows_of(table: pa.Table, keep: npt.NDArray[np.bool_], columns: Sequence[str]) -> pa.Table:
    """The rows of `table` where `keep` holds, with only those of `columns` it has (filtering
    a wide frame copies every column: this copies only the ones needed)."""
    present = [c for c in dict.fromkeys(columns) if c in table.column_names]
    return table.select(present).filter(pa.array(keep, pa.bool_()))


def most_common(values: Ints) -> int:
    """The most frequent of `values` (the first to appear among equals), as
    `Counter(values).most_common(1)` picks it."""
    uniq, first, count = np.unique(values, return_index=True, return_counts=True)
    top = count == count.max()
    return int(uniq[top][np.argmin(first[top])])


def group_most_common(group: Ints, values: Ints, n: int) -> Ints:
    """Per group (0 .. n-1, rows sorted by group; every group has rows), its most frequent of
    the non-negative `values`, the first to appear among equals (`most_common` per group)."""
    size = int(values.max()) + 1
    pair, first, count = np.unique(group * size + values, return_index=True, return_counts=True)
    best = np.lexsort((first, -count, pair // size))
    pair = pair[best]
    lead = np.r_[True, pair[1:] // size != pair[:-1] // size]
    out = np.zeros(n, dtype=np.int64)
    out[pair[lead] // size] = pair[lead] % size
    return out


def weighted_mean(values: Floats, weights: Floats) -> float:
    """Mean of the non-NaN values weighted by `weights`; NaN when there is none."""
    ok = ~np.isnan(values) & ~np.isnan(weights)
    total = float(weights[ok].sum())
    return float((values[ok] * weights[ok]).sum() / total) if total > 0 else float("nan")


def none_if_nan(x: float) -> float | None:
    """`x`, or None for NaN (tables store missing as null, never NaN)."""
    return None if is_nan(x) else float(x)


def nanmax(x: Floats) -> float:
    """The largest value that is not NaN; NaN when there is none."""
    return float(np.nanmax(x)) if x.size and not np.isnan(x).all() else float("nan")


class LabelColumn:
    """Column `name` as strings, read per row on demand (what `strings` gives, without a
    Python string per row)."""

    def __init__(self, frame: pa.Table, name: str) -> None:
        self._codes, self._values = label_codes(frame, name)

    def __getitem__(self, row: int) -> str | None:
        return self._values[int(self._codes[row])]
