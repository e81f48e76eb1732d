"""The NaN test."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpulens.numbers import is_nan


@pytest.mark.parametrize(
    "x",
    [float("nan"), math.nan, -math.nan, math.inf - math.inf, np.float64("nan"), np.float32("nan")],
)
def test_nan_is_nan(x: float) -> None:
    assert is_nan(x)


@pytest.mark.parametrize(
    "x", [None, 0.0, -0.0, 1.5, math.inf, -math.inf, 0, 10**400, np.float64(2.0), np.float32(0.0)]
)
def test_everything_else_is_not(x: float | None) -> None:
    assert not is_nan(x)


def test_nulls_read_from_a_table_are_nan() -> None:
    values = np.array([1.0, None], dtype=np.float64).tolist()
    assert [is_nan(v) for v in values] == [False, True]
