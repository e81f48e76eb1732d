"""`distinct` gives np.unique's values without importing numpy.ma."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from gpulens.analyze.traces.arrays import distinct


@pytest.mark.parametrize("size", [0, 1, 2, 7, 1000])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.intp])
def test_distinct_equals_numpy_unique(size: int, dtype: type[np.generic]) -> None:
    values = np.random.default_rng(size).integers(-5, 9, size=size).astype(dtype)
    got = distinct(values)
    assert got.dtype == values.dtype
    assert np.array_equal(got, np.unique(values))


def test_distinct_flattens_as_unique_does() -> None:
    grid = np.array([[3, 1], [3, 2]])
    assert distinct(grid).tolist() == [1, 2, 3]


def test_distinct_leaves_numpy_ma_unimported() -> None:
    code = (
        "import sys, numpy as np\n"
        "from gpulens.analyze.traces.arrays import distinct\n"
        "distinct(np.array([3, 1, 3]))\n"
        "print('numpy.ma' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
