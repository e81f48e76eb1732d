"""Timestamp and number parsing of the CSV importer, fuzzed with hypothesis."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulens.collect.csv_import import CsvImportError
from gpulens.collect.csv_import.values import (
    Where,
    guess_epoch_unit,
    parse_numbers,
    parse_timestamps,
)

W = Where("t.csv", "when", 1)
SCALE = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}


@given(st.integers(min_value=-(10**9), max_value=4 * 10**9), st.sampled_from(["s", "ms", "us"]))
def test_integer_epochs_convert_exactly(value: int, unit: str) -> None:
    ns, used = parse_timestamps(pa.array([str(value)]), unit, W)
    assert used == unit
    assert int(ns[0]) == value * SCALE[unit]


@given(
    st.integers(min_value=0, max_value=4_000_000_000),
    st.text(alphabet="0123456789", min_size=0, max_size=12),
    st.booleans(),
)
def test_decimal_seconds_are_exact_to_the_nanosecond(whole: int, frac: str, negative: bool) -> None:
    text = f"{'-' if negative else ''}{whole}.{frac}"
    ns, _ = parse_timestamps(pa.array([text]), "s", W)
    expected = int(
        (Decimal(f"{whole}.{frac or '0'}") * 10**9).to_integral_value(rounding="ROUND_DOWN")
    )
    assert int(ns[0]) == (-expected if negative else expected)


@given(st.floats(min_value=1e8, max_value=4e9, allow_nan=False))
def test_exponent_notation_goes_through_float(value: float) -> None:
    ns, _ = parse_timestamps(pa.array([f"{value:e}"]), "s", W)
    assert abs(int(ns[0]) - float(f"{value:e}") * 1e9) <= 1e9 * 1e-15 * value + 1


@given(
    st.datetimes(
        min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.none()
    ),
    st.sampled_from([None, 0, 2, -5, 9]),
    st.sampled_from(["T", " "]),
)
def test_iso_round_trips(moment: datetime, offset_h: int | None, sep: str) -> None:
    text = moment.isoformat(sep=sep)
    if offset_h is None:
        expected = moment.replace(tzinfo=UTC)
    else:
        zone = "Z" if offset_h == 0 else f"{offset_h:+03d}:00"
        text += zone
        expected = moment.replace(tzinfo=UTC) - timedelta(hours=offset_h)
    ns, used = parse_timestamps(pa.array([text]), "auto", W)
    assert used == "iso"
    delta = expected - datetime(1970, 1, 1, tzinfo=UTC)
    want = (delta.days * 86400 + delta.seconds) * 10**9 + delta.microseconds * 1000
    assert int(ns[0]) == want


@given(st.integers(min_value=1_000_000_000, max_value=3_000_000_000), st.sampled_from(list(SCALE)))
def test_auto_unit_from_magnitude(seconds: int, unit: str) -> None:
    raw = seconds * (10**9 // SCALE[unit])
    ns, used = parse_timestamps(pa.array([str(raw)]), "auto", W)
    assert used == unit
    assert int(ns[0]) == seconds * 10**9


@given(st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.none()), max_size=30))
@settings(max_examples=200)
def test_numbers_round_trip_and_non_finite_is_missing(values: list[float | None]) -> None:
    text = pa.array([None if v is None else repr(v) for v in values], type=pa.string())
    out = parse_numbers(text, W)
    for v, got in zip(values, out, strict=True):
        if v is None or not math.isfinite(v):
            assert np.isnan(got)
        else:
            assert got == v


@given(st.text(min_size=1, max_size=12))
def test_garbage_numbers_raise_one_typed_error(junk: str) -> None:
    try:
        float(junk.strip())
        return  # a number Python reads too; parse_numbers may accept it
    except ValueError:
        pass
    with pytest.raises(CsvImportError):
        parse_numbers(pa.array(["1", junk.strip() or "x"]), W)


def test_errors_name_row_and_column() -> None:
    with pytest.raises(CsvImportError) as err:
        parse_numbers(pa.array(["1", "2", "abc"]), Where("f.csv", "util", 10))
    assert (err.value.row, err.value.column, err.value.source) == (12, "util", "f.csv")
    assert "'abc'" in str(err.value) and "line 13" in str(err.value)


@pytest.mark.parametrize(
    ("values", "unit", "problem"),
    [
        (["1", ""], "s", "empty"),
        (["1", "x"], "s", "'x'"),
        (["1", "x"], "auto", "'x'"),
        (["99999999999999999999"], "ns", "too large"),
        (["2026-13-45T00:00:00Z"], "auto", "ISO 8601"),
        (["1e300"], "s", "usable"),
    ],
)
def test_bad_timestamps(values: list[str], unit: str, problem: str) -> None:
    with pytest.raises(CsvImportError, match=problem):
        parse_timestamps(pa.array(values), unit, W)


def test_guess_epoch_unit_boundaries() -> None:
    assert [guess_epoch_unit(x) for x in (1.7e9, 1.7e12, 1.7e15, 1.7e18)] == ["s", "ms", "us", "ns"]
