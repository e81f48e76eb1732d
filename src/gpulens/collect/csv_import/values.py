"""Pure, columnar conversion of CSV text columns: numbers and timestamps.

Every function takes a pyarrow string array (nulls where the CSV cell was empty or a null
token) and returns numpy arrays; nothing runs per row except locating the first bad value once
a conversion has failed. Errors are `CsvImportError`s naming the source, row and column.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.collect.csv_import.errors import CsvImportError

_FLOAT_RE = r"^[+-]?((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|inf|infinity|nan)$"
_DECIMAL_RE = r"^[+-]?\d+(\.\d*)?$"
# a time of day followed by a zone: Z or +HH[:MM] / -HH[:MM]
_ZONE_RE = r":\d\d(\.\d+)?(Z|[+-]\d\d(:?\d\d)?)$"
_DIGITS = {"s": 9, "ms": 6, "us": 3, "ns": 0}
INT64_MAX = np.iinfo(np.int64).max


class Where:
    """Where a column comes from, for error messages: source, column, first row number."""

    __slots__ = ("column", "first_row", "source")

    def __init__(self, source: str, column: str, first_row: int = 1) -> None:
        self.source = source
        self.column = column
        self.first_row = first_row

    def error(self, detail: str, index: int = -1) -> CsvImportError:
        row = self.first_row + index if index >= 0 else 0
        return CsvImportError(self.source, detail, row=row, column=self.column)


def _text(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Trimmed strings, blank → null."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if not pa.types.is_string(arr.type):
        arr = arr.cast(pa.string())
    trimmed = pc.utf8_trim_whitespace(arr)
    blank = pc.equal(pc.utf8_length(trimmed), 0)
    return pc.if_else(blank, pa.scalar(None, pa.string()), trimmed)


def _first_false(mask: pa.Array) -> int:
    """Index of the first False (nulls count as True), or -1."""
    flags = np.asarray(mask.fill_null(True).to_numpy(zero_copy_only=False), dtype=bool)
    bad = np.flatnonzero(~flags)
    return int(bad[0]) if bad.size else -1


def _value_at(arr: pa.Array, index: int) -> str:
    value = arr[index].as_py()
    return repr(value if value is None or len(value) <= 60 else value[:60] + "...")


def parse_numbers(arr: pa.Array | pa.ChunkedArray, where: Where) -> np.ndarray:
    """Float64 values; NaN where the cell is empty, a null token, NaN or infinite."""
    text = _text(arr)
    try:
        values = pc.cast(text, pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        index = _first_false(pc.match_substring_regex(text, _FLOAT_RE, ignore_case=True))
        shown = _value_at(text, index) if index >= 0 else "a value"
        raise where.error(f"{shown} is not a number", index) from None
    out = np.array(values.fill_null(np.nan).to_numpy(zero_copy_only=False), dtype=np.float64)
    out[~np.isfinite(out)] = np.nan
    return out


def guess_epoch_unit(magnitude: float) -> str:
    """The epoch unit a number of this size is in: s up to ~5138 AD, then ms, us, ns."""
    if magnitude < 1e11:
        return "s"
    if magnitude < 1e14:
        return "ms"
    if magnitude < 1e17:
        return "us"
    return "ns"


def parse_timestamps(
    arr: pa.Array | pa.ChunkedArray, unit: str, where: Where
) -> tuple[np.ndarray, str]:
    """Int64 UTC nanoseconds and the unit used (``auto`` resolved to s/ms/us/ns or iso).

    Numbers are epoch times in `unit`; plain decimals convert exactly (digits beyond 1 ns are
    truncated), exponent notation through float64. ISO 8601 text is UTC unless it carries a
    zone (``Z``, ``+02:00``). A missing timestamp is an error.
    """
    text = _text(arr)
    if text.null_count:
        index = _first_false(pc.is_valid(text))
        raise where.error("the timestamp is empty", index)
    if len(text) == 0:
        return np.zeros(0, dtype=np.int64), unit
    if unit == "iso":
        return _iso(text, where), unit
    numeric = pc.match_substring_regex(text, _FLOAT_RE, ignore_case=True)
    if unit == "auto":
        if not numeric[0].as_py():
            return _iso(text, where), "iso"
        floats = parse_numbers(text, where)
        finite = floats[np.isfinite(floats)]
        unit = guess_epoch_unit(float(np.max(np.abs(finite))) if finite.size else 0.0)
    return _epoch(text, numeric, unit, where), unit


def _epoch(text: pa.Array, numeric: pa.Array, unit: str, where: Where) -> np.ndarray:
    index = _first_false(numeric)
    if index >= 0:
        raise where.error(f"{_value_at(text, index)} is not an epoch time in {unit}", index)
    if pc.all(pc.match_substring_regex(text, _DECIMAL_RE)).as_py():
        return _exact_decimal(text, unit, where)
    floats = parse_numbers(text, where)
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = floats * float(10 ** _DIGITS[unit])
    bad = ~np.isfinite(scaled) | (np.abs(scaled) >= 9.2e18)
    if bad.any():
        index = int(np.flatnonzero(bad)[0])
        raise where.error(f"{_value_at(text, index)} is not a usable epoch time in {unit}", index)
    return np.round(scaled).astype(np.int64)


def _exact_decimal(text: pa.Array, unit: str, where: Where) -> np.ndarray:
    """Plain decimal strings → ns with integer arithmetic (no float rounding)."""
    digits = _DIGITS[unit]
    negative = np.asarray(pc.starts_with(text, "-").to_numpy(zero_copy_only=False), dtype=bool)
    unsigned = pc.utf8_ltrim(text, characters="+-")
    whole = pc.replace_substring_regex(unsigned, r"\..*$", "")
    lengths = np.asarray(pc.utf8_length(whole).to_numpy(zero_copy_only=False))
    too_long = np.flatnonzero(lengths > 19)
    ints = np.zeros(len(text), dtype=np.int64)
    if not too_long.size:
        try:
            ints = np.asarray(pc.cast(whole, pa.int64()).to_numpy(zero_copy_only=False))
        except pa.ArrowInvalid:
            too_long = np.flatnonzero(lengths >= 19)
    if not too_long.size:
        too_long = np.flatnonzero(ints > INT64_MAX // 10**digits - 1)
    if too_long.size:
        index = int(too_long[0])
        shown = _value_at(text, index)
        raise where.error(f"{shown} is too large for an epoch time in {unit}", index)
    total = ints * np.int64(10**digits)
    if digits:
        frac = pc.replace_substring_regex(unsigned, r"^\d*\.?", "")
        frac = pc.utf8_rpad(pc.utf8_slice_codeunits(frac, 0, digits), width=digits, padding="0")
        total = total + np.asarray(
            pc.cast(frac, pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64
        )
    return np.where(negative, -total, total).astype(np.int64)


def _iso(text: pa.Array, where: Where) -> np.ndarray:
    zoned = np.asarray(
        pc.match_substring_regex(text, _ZONE_RE).to_numpy(zero_copy_only=False), dtype=bool
    )
    out = np.zeros(len(text), dtype=np.int64)
    for mask, target in ((zoned, pa.timestamp("ns", tz="UTC")), (~zoned, pa.timestamp("ns"))):
        if not mask.any():
            continue
        part = text if mask.all() else text.filter(pa.array(mask))
        try:
            stamps = pc.cast(part, target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            index = _locate_iso(text, mask, target)
            shown = _value_at(text, index) if index >= 0 else "a timestamp"
            raise where.error(
                f"{shown} is not an ISO 8601 time (such as 2026-11-29T14:00:00Z) "
                "or an epoch number",
                index,
            ) from None
        out[mask] = np.asarray(stamps.cast(pa.int64()).to_numpy(zero_copy_only=False))
    return out


def _locate_iso(text: pa.Array, mask: np.ndarray, target: pa.DataType) -> int:
    """The first row of `mask` whose text does not cast (error path only)."""
    for index in np.flatnonzero(mask):
        try:
            pc.cast(text.slice(int(index), 1), target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return int(index)
    return -1
