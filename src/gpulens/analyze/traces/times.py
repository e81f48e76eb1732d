"""Exact integer nanoseconds from Kineto's µs timestamps (pure).

Kineto writes `ts` / `dur` in µs with up to 3 decimals. Integers are multiplied by 1000. Floats
parsed by orjson are used while |value| < 2**42 µs (50 days: relative times), where
`rint(value * 1000)` is provably the exact ns (parse error + product rounding < 0.5 ns); up to
2**53 ns they are kept where a vectorised check shows the ns is the only one whose decimal text
parses to that float. Otherwise (absolute epoch µs like 1712195495519689.047, where float64 keeps
only ~0.25 µs) the numbers are read again from the JSON text: `numbers_in_text` finds them in
document order, `texts_to_ns` converts the text exactly, and the caller checks that they are the
same numbers (as floats) before using them. `rewrite_times` is the last resort: it rewrites the
text itself to integer ns for a re-parse.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from functools import cache
from typing import Any

import numpy as np

from gpulens.analyze.traces.model import Ints

EXACT_FLOAT_LIMIT_US = float(2**42)  # below this, rint(float_us * 1000) is the exact ns

_END_OF_NUMBER = rb"(?=\s*[,}\]])"
_NUMBER = rb"(-?\d[\d.eE+-]*)"


# The patterns are compiled on first use: most traces never need them, and compiling them all
# cost ~1.5 ms of every start-up.
@cache
def _key_number(key: bytes) -> re.Pattern[bytes]:
    return re.compile(rb'"' + key + rb'"\s*:\s*' + _NUMBER)


@cache
def _time_rewrites() -> tuple[tuple[re.Pattern[bytes], bytes], ...]:
    """Text rewrites of µs numbers to integer ns, most common forms first and without a Python
    call per number: "12" → "12000", "12.345" → "12345", "0.047" → "47"; anything else (more
    than 3 decimals, fewer than 3, exponents) goes through `decimal_to_ns` in `_time_other`'s
    pass. A `"ts"` inside a JSON string is written `\\"ts\\"` and cannot match."""
    return tuple(
        (re.compile(key + rb"(\s*:\s*)" + number + _END_OF_NUMBER), template)
        for key in (rb'"ts"', rb'"dur"')
        for number, template in (
            (rb"(-?[1-9]\d*)", rb"\g<0>000"),
            (rb"(-?[1-9]\d*)\.(\d{3})", key + rb"\1\2\3"),
            (rb"(-?)0\.(?:00(\d)|0(\d\d)|(\d{3}))", key + rb"\1\2\3\4\5"),
        )
    )


@cache
def _time_other() -> tuple[re.Pattern[bytes], ...]:
    return tuple(
        re.compile(key + rb"(\s*:\s*)(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)" + _END_OF_NUMBER)
        for key in (rb'"ts"', rb'"dur"')
    )


_ZERO, _NINE, _DOT, _MINUS = ord("0"), ord("9"), ord("."), ord("-")


def decimal_to_ns(text: bytes | str) -> int:
    """A decimal µs number written as text (`"1712195495519689.047"`) → exact integer ns.

    More than 3 decimals round half to even; exponents are allowed. Raises ValueError otherwise.
    """
    raw = text.decode() if isinstance(text, bytes) else text
    if "e" not in raw and "E" not in raw:
        neg = raw.startswith("-")
        whole, _, frac = raw.lstrip("-").partition(".")
        if whole.isdigit() and (frac == "" or frac.isdigit()) and len(frac) <= 3:
            ns = int(whole) * 1000 + (int(frac.ljust(3, "0")) if frac else 0)
            return -ns if neg else ns
    try:
        return int((Decimal(raw) * 1000).to_integral_value(ROUND_HALF_EVEN))
    except InvalidOperation:
        raise ValueError(f"not a decimal number: {raw!r}") from None


def to_ns(values: list[Any]) -> Ints | None:
    """µs numbers as parsed → exact int64 ns, or None when float64 cannot be trusted."""
    if not values:
        return np.zeros(0, dtype=np.int64)
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError, OverflowError):
        return None
    if arr.ndim != 1:  # lists, not numbers
        return None
    if arr.dtype.kind in "iu":
        if int(np.abs(arr).max()) >= 2**63 // 1000:
            return None
        return arr.astype(np.int64) * 1000
    if arr.dtype.kind != "f" or not np.isfinite(arr).all():
        return None
    with np.errstate(over="ignore"):  # beyond float64: infinite, and refused below
        ns = np.rint(arr * 1000.0)
    if float(np.abs(arr).max()) < EXACT_FLOAT_LIMIT_US:
        return ns.astype(np.int64)
    if float(np.abs(ns).max()) >= 2.0**53:
        return None
    # Larger values: keep `ns` only where it is provably the one integer ns whose decimal µs
    # text parses to this float (its neighbours parse to other floats); else read the text.
    ints = ns.astype(np.int64)
    unique = (ints / 1000.0 == arr) & ((ints - 1) / 1000.0 != arr) & ((ints + 1) / 1000.0 != arr)
    return ints if bool(unique.all()) else None


def ints_as_ns(values: list[Any]) -> Ints | None:
    """Numbers already in integer ns (after `rewrite_times`), or None if any is not an integer."""
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError, OverflowError):
        return None
    if arr.ndim != 1:
        return None
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    return arr.astype(np.int64) if arr.dtype.kind in "iu" else None


def numbers_in_text(text: bytes | memoryview, key: str) -> list[bytes]:
    """The number texts written after `"key":` in `text`, in document order."""
    return _key_number(key.encode()).findall(text)


def texts_to_ns(texts: list[bytes]) -> Ints:
    """Decimal µs texts → exact int64 ns, vectorised for `-?digits[.ddd]` (ValueError if bad)."""
    n = len(texts)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    raw = np.asarray(texts, dtype=np.bytes_)
    width = raw.dtype.itemsize
    u = raw.view(np.uint8).reshape(n, width)
    length = (u != 0).sum(axis=1)
    neg = u[:, 0] == _MINUS
    is_dot = u == _DOT
    has_dot = is_dot.any(axis=1)
    dot = np.where(has_dot, is_dot.argmax(axis=1), length)
    is_digit = (u >= _ZERO) & (u <= _NINE)
    digits = is_digit.sum(axis=1)
    frac = np.where(has_dot, length - dot - 1, 0)
    simple = (
        (digits + neg + has_dot == length) & (is_dot.sum(axis=1) <= 1) & (frac <= 3) & (digits > 0)
    )
    whole = digits - frac
    first = u[np.arange(n), neg.astype(np.intp)]
    simple &= (dot > neg) & ((whole <= 15) | ((whole == 16) & (first < _NINE)))  # no overflow
    value = np.zeros(n, dtype=np.int64)
    for j in range(width):
        col = u[:, j]
        d = is_digit[:, j]
        value = np.where(d, value * 10 + (col.astype(np.int64) - _ZERO), value)
    value *= 10 ** (3 - np.minimum(frac, 3))
    value = np.where(neg, -value, value)
    for i in np.flatnonzero(~simple).tolist():
        value[i] = decimal_to_ns(texts[i])
    return value


def rewrite_times(chunk: bytes) -> bytes:
    """`"ts": 1712195495519689.047` → `"ts": 1712195495519689047` (integer ns) in JSON text."""
    for pattern, template in _time_rewrites():
        chunk = pattern.sub(template, chunk)

    def other(m: re.Match[bytes]) -> bytes:
        number = m.group(2)
        if b"." not in number and b"e" not in number and b"E" not in number:  # done above
            return m.group(0)
        return m.group(0)[: m.start(2) - m.start(0)] + str(decimal_to_ns(number)).encode()

    for pattern in _time_other():
        chunk = pattern.sub(other, chunk)
    return chunk
