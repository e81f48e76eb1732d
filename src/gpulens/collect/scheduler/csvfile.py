"""Reading the mapped columns of a scheduler CSV (a cluster sequence or a job log)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from gpulens.collect.csv_import.errors import CsvImportError
from gpulens.collect.csv_import.values import Where, parse_numbers, parse_timestamps
from gpulens.collect.scheduler.colmap import RoleMap
from gpulens.collect.scheduler.errors import SchedulerInputError

MAP_FIX = "Fix the file or the column mapping (--map ROLE=COLUMN; see docs/fleet.md)."


def read_columns(
    path: Path, roles: RoleMap, header: Sequence[str] | None = None, delimiter: str = ","
) -> pa.Table:
    """The mapped columns of `path`, typed by pyarrow's inference (numbers, ISO 8601 times) or
    text (SchedulerInputError names a missing column). `header`: the column names of a file
    without a header row."""
    wanted = list(dict.fromkeys(col for col, _ in roles.roles.values()))
    read = pacsv.ReadOptions(column_names=list(header) if header else None)
    try:
        with pacsv.open_csv(
            path, read_options=read, parse_options=pacsv.ParseOptions(delimiter=delimiter)
        ) as r:
            names = r.schema.names
    except (OSError, pa.ArrowInvalid) as exc:
        raise SchedulerInputError(str(path), f"not a readable CSV ({exc})", MAP_FIX) from None
    missing = [c for c in wanted if c not in names]
    if missing:
        raise SchedulerInputError(
            str(path),
            f"no column {', '.join(map(repr, missing))} (it has {', '.join(names[:20])})",
            MAP_FIX,
        )
    try:
        return pacsv.read_csv(
            path,
            read_options=read,
            parse_options=pacsv.ParseOptions(delimiter=delimiter),
            convert_options=pacsv.ConvertOptions(include_columns=wanted),
        )
    except (OSError, pa.ArrowInvalid) as exc:
        raise SchedulerInputError(str(path), f"not a readable CSV ({exc})", MAP_FIX) from None


def numbers(table: pa.Table, roles: RoleMap, role: str, source: str) -> np.ndarray | None:
    """The role's column as float64 in base units (NaN where empty); None when not mapped."""
    column = roles.column(role)
    if column is None:
        return None
    arr = table[column]
    if (
        pa.types.is_integer(arr.type)
        or pa.types.is_floating(arr.type)
        or pa.types.is_null(arr.type)
    ):
        values = np.array(arr.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=float)
        values[~np.isfinite(values)] = np.nan
        factor = roles.factor(role)
        return values if factor == 1.0 else values * factor
    try:
        values = parse_numbers(arr, Where(source, column))
    except CsvImportError as exc:
        raise SchedulerInputError(source, exc.detail + f" (column {column!r})", MAP_FIX) from None
    factor = roles.factor(role)
    return values if factor == 1.0 else values * factor


def seconds(table: pa.Table, roles: RoleMap, role: str, source: str) -> np.ndarray | None:
    """The role's column as float64 epoch seconds (NaN where empty); None when not mapped."""
    column = roles.column(role)
    if column is None:
        return None
    arr = table[column]
    if pa.types.is_timestamp(arr.type):
        ns = pc.cast(arr, pa.timestamp("ns", arr.type.tz)).cast(pa.int64())
        return np.asarray(ns.to_numpy(zero_copy_only=False), dtype=np.float64) / 1e9
    if pa.types.is_null(arr.type):
        return np.full(len(arr), np.nan)
    if not pa.types.is_string(arr.type):
        arr = arr.cast(pa.string())
    stripped = pc.utf8_trim_whitespace(arr.combine_chunks())
    valid = np.asarray(pc.fill_null(pc.utf8_length(stripped), 0).to_numpy()) > 0
    out = np.full(len(stripped), np.nan)
    if not valid.any():
        return out
    try:
        ns, _ = parse_timestamps(
            stripped.filter(pa.array(valid)), roles.unit(role) or "auto", Where(source, column)
        )
    except CsvImportError as exc:
        raise SchedulerInputError(source, exc.detail + f" (column {column!r})", MAP_FIX) from None
    out[valid] = ns / 1e9
    return out
