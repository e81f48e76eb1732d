"""Number tests every layer may use (no dependencies)."""

from __future__ import annotations


def is_nan(x: float | None) -> bool:
    """True when `x` is NaN (a Python or NumPy float), False for any other number and for None.

    Missing values travel as NaN in float arrays (nulls read from a table) and as None
    elsewhere; this tells NaN apart without raising on None, ints of any size or other types.
    It is the self-inequality test written once: NaN is the only value not equal to itself.
    """
    return x != x
