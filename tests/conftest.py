"""Shared test fixtures: the location of ../shared data, the GPU marker, and the check that two
loaded traces hold the same columns."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def shared_dir() -> Path:
    """../shared beside the repository, or GPULENS_SHARED when set."""
    override = os.environ.get("GPULENS_SHARED")
    return Path(override) if override else REPO_ROOT.parent / "shared"


@pytest.fixture(scope="session")
def shared() -> Path:
    path = shared_dir()
    if not (path / "data").is_dir():
        pytest.fail(
            f"shared data not found at {path}: put the shared folder beside the repository "
            "or set GPULENS_SHARED"
        )
    return path


def _assert_same_trace(a: Any, b: Any) -> None:
    """Two loaded `Trace`s hold equal columns (dtype and values), string tables and names."""
    import numpy as np

    for table in ("events", "flows"):
        x, y = getattr(a, table), getattr(b, table)
        for key in type(x).__struct_fields__:
            left, right = getattr(x, key), getattr(y, key)
            assert left.dtype == right.dtype, (table, key)
            assert np.array_equal(left, right, equal_nan=left.dtype.kind == "f"), (table, key)
    assert (a.names, a.categories, a.metadata) == (b.names, b.categories, b.metadata)
    assert (a.process_names, a.thread_names) == (b.process_names, b.thread_names)
    assert (a.rank, a.raw_event_count) == (b.rank, b.raw_event_count)


@pytest.fixture(scope="session")
def same_trace() -> Callable[[Any, Any], None]:
    """`same_trace(a, b)` asserts that two loaded traces are equal, column for column."""
    return _assert_same_trace


def _has_gpu() -> bool:
    try:
        import pynvml  # the nvidia-ml-py distribution

        pynvml.nvmlInit()
        try:
            return bool(pynvml.nvmlDeviceGetCount() > 0)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not any(item.get_closest_marker("gpu") for item in items):
        return
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with a working driver (NVML)")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)
