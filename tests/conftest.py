"""Shared test fixtures: the location of ../shared data, the GPU marker, the check that two
loaded traces hold the same columns, and a store the simulated fleet was generated into."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from gpulens.config import Config

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

    from gpulens.analyze.traces.record import record_fields

    for table in ("events", "flows"):
        x, y = getattr(a, table), getattr(b, table)
        for key in record_fields(type(x)):
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


@dataclass(frozen=True, slots=True)
class SimulatedStore:
    """A store the simulated fleet that starts at `start_ns` was generated into."""

    data_dir: Path
    config: Config
    start_ns: int

    def ground_truth(self) -> list[dict[str, Any]]:
        """The simulated fleet's ground truth (its jobs, scenarios and expected findings)."""
        from gpulens.app import session

        return session.simulated_fleet(self.config, self.start_ns).ground_truth()


def _simulate(
    data_dir: Path,
    start_ns: int,
    span_s: int,
    *,
    hosts: int = 1,
    gpus_per_host: int = 4,
    scenarios: list[str] | None = None,
    interval_s: float | None = None,
    flush_s: float = 600.0,
    seed: int | None = None,
    workers: int = 1,
) -> SimulatedStore:
    from gpulens.app.generate import generate
    from gpulens.config import load_config

    optional = {
        "simulated.scenarios": scenarios,
        "collect.interval_seconds": interval_s,
        "simulated.seed": seed,
    }  # left out when None: the configuration's defaults
    overrides = {
        "data_dir": str(data_dir),
        "host": "gen",
        "simulated.hosts": hosts,
        "simulated.gpus_per_host": gpus_per_host,
        "store.flush_seconds": flush_s,
        **{key: value for key, value in optional.items() if value is not None},
    }
    cfg = load_config(env={}, overrides=overrides)
    generate(cfg, start_ns, start_ns + span_s * 1_000_000_000, workers=workers)
    return SimulatedStore(Path(data_dir), cfg, start_ns)


@pytest.fixture(scope="session")
def simulated_store() -> Callable[..., SimulatedStore]:
    """`simulated_store(data_dir, start_ns, span_s, hosts=1, gpus_per_host=4, scenarios=None,
    interval_s=None, flush_s=600.0, seed=None, workers=1)` generates `span_s` seconds of the
    simulated fleet (host "gen") into `data_dir` and returns a `SimulatedStore`."""
    return _simulate


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
