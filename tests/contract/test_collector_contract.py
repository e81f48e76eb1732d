"""The suite every Collector passes: name, readings shape, catalog values, idempotent close.

Add a factory to FACTORIES for each new collector: a callable taking a FakeClock and returning
(collector, list of times to collect at).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from gpulens import catalog
from gpulens.clock import FakeClock
from gpulens.collect.base import Collector
from gpulens.collect.nvml.collector import NvmlCollector
from gpulens.collect.simulated import SimulatedFleet
from gpulens.model import Kind, Reading

S = 10**9
TICKS = 40  # long enough for simulated jobs to start and GPM to have pairs

Factory = Callable[[], tuple[Collector, FakeClock]]


def _fleet(gpm: bool = True) -> SimulatedFleet:
    return SimulatedFleet(hosts=1, gpus_per_host=4, seed=0, gpm=gpm)


def _nvml_sim(gpm: bool = True) -> tuple[Collector, FakeClock]:
    fleet = _fleet(gpm)
    clock = FakeClock(fleet.start_ns)
    host = fleet.hosts[0]
    return NvmlCollector(fleet.binding(host, clock), host, fleet.identity(host)), clock


def _simulated_host() -> tuple[Collector, FakeClock]:
    fleet = _fleet()
    return fleet.host_collector(fleet.hosts[0]), FakeClock(fleet.start_ns)


FACTORIES: dict[str, Factory] = {
    "nvml-sim": _nvml_sim,
    "nvml-sim-no-gpm": lambda: _nvml_sim(gpm=False),
    "simulated_host": _simulated_host,
}


@pytest.fixture(params=sorted(FACTORIES))
def made(request: pytest.FixtureRequest) -> tuple[Collector, FakeClock]:
    factory = FACTORIES[request.param]
    return factory()


def _collect_all(collector: Collector, clock: FakeClock) -> list[Reading]:
    out: list[Reading] = []
    for _ in range(TICKS):
        out.extend(collector.collect(clock.now_ns()))
        clock.advance(S)
    return out


def test_is_a_collector_with_a_name(made: tuple[Collector, FakeClock]) -> None:
    collector, _ = made
    assert isinstance(collector, Collector)
    assert isinstance(collector.name, str) and collector.name
    assert collector.name == collector.name.strip().lower()


def test_readings_have_the_right_shape(made: tuple[Collector, FakeClock]) -> None:
    collector, clock = made
    readings = _collect_all(collector, clock)
    assert readings, "a collector on a working source yields readings"
    for r in readings:
        assert isinstance(r, Reading)
        assert isinstance(r.kind, Kind)
        assert isinstance(r.ts, int) and not isinstance(r.ts, bool)
        for key, value in r.labels.items():
            assert isinstance(key, str) and isinstance(value, str), (key, value)


def test_values_are_finite_catalog_metrics(made: tuple[Collector, FakeClock]) -> None:
    collector, clock = made
    for r in _collect_all(collector, clock):
        for name, value in r.values.items():
            assert name in catalog.METRICS, f"{name!r} is not a catalog metric"
            assert isinstance(value, float), (name, type(value))
            assert not math.isnan(value) and math.isfinite(value), (name, value)
        if r.kind is Kind.EVENT:
            assert r.label("event") and r.label("message")


def test_timestamps_are_the_collect_time_or_earlier(made: tuple[Collector, FakeClock]) -> None:
    collector, clock = made
    now = clock.now_ns()
    for r in collector.collect(now):
        assert r.ts <= now


def test_close_is_idempotent(made: tuple[Collector, FakeClock]) -> None:
    collector, clock = made
    collector.collect(clock.now_ns())
    collector.close()
    collector.close()
