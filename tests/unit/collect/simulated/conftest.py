"""Shared fixtures for the simulated fleet tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gpulens.clock import FakeClock
from gpulens.collect.simulated import SimulatedBinding, SimulatedFleet

S = 1_000_000_000


@pytest.fixture(scope="module")
def fleet() -> SimulatedFleet:
    return SimulatedFleet(hosts=4, seed=7)  # 16 GPUs: all nine scenarios at full size


@pytest.fixture(scope="module")
def truth(fleet: SimulatedFleet) -> dict[str, dict[str, Any]]:
    """Ground truth by scenario (first job of each)."""
    out: dict[str, dict[str, Any]] = {}
    for entry in fleet.ground_truth():
        out.setdefault(entry["scenario"], entry)
    return out


Bind = Callable[[SimulatedFleet, str, int], tuple[SimulatedBinding, FakeClock]]


@pytest.fixture
def bind() -> Bind:
    """An initialised binding for (fleet, host) with a FakeClock at t_ns."""

    def make(fleet: SimulatedFleet, host: str, t_ns: int) -> tuple[SimulatedBinding, FakeClock]:
        clock = FakeClock(t_ns)
        binding = fleet.binding(host, clock)
        binding.init()
        return binding, clock

    return make


def gpm_window(b: SimulatedBinding, clock: FakeClock, uuid: str, seconds: int) -> dict[int, float]:
    """GPM metrics over the next `seconds` (advances the clock)."""
    first = b.gpm_sample(uuid)
    clock.advance(seconds * S)
    return dict(b.gpm_metrics(first, b.gpm_sample(uuid), [1, 2, 3, 5, 7, 10, 11, 12, 13, 60]))
