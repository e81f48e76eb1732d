"""The suite every Collector passes: name, readings shape, catalog values, idempotent close.

Add a factory to FACTORIES for each new collector: a callable taking the shared data folder and
returning (collector, the FakeClock to collect on).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from gpulens import catalog
from gpulens.clock import FakeClock
from gpulens.collect.base import Collector
from gpulens.collect.dcgm.collector import DcgmExporterCollector
from gpulens.collect.host.collector import HostCollector
from gpulens.collect.nvidia_smi import NvidiaSmiCollector
from gpulens.collect.nvml.collector import NvmlCollector
from gpulens.collect.simulated import SimulatedFleet
from gpulens.model import Kind, Reading

S = 10**9
TICKS = 40  # long enough for simulated jobs to start and GPM to have pairs

T0 = 1_764_374_400 * S


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


def _nvidia_smi(shared: Path, mode: str) -> tuple[Collector, FakeClock]:
    xml = shared / "data/telemetry/influxdata_telegraf/plugins/inputs/nvidia_smi/testdata"
    xml_text = (xml / "a100-sxm4-v12.xml").read_text()
    csv_text = (
        "index, uuid, name, utilization.gpu [%], memory.used [MiB], power.draw [W]\n"
        "0, GPU-00000000-0000-0000-0000-000000000000, NVIDIA H100 80GB HBM3, 100, 19818, 631.95\n"
    )

    def replay(argv: list[str]) -> str:
        return xml_text if "-x" in argv else csv_text

    collector = NvidiaSmiCollector("node-1", runner=replay, mode=mode)  # type: ignore[arg-type]
    return collector, FakeClock(T0)


def _dcgm_over_simulated_fleet() -> tuple[Collector, FakeClock]:
    """The simulated fleet rendered as a dcgm-exporter page, scraped and parsed back."""
    fleet = _fleet()
    clock = FakeClock(fleet.start_ns + 600 * S)
    host = fleet.hosts[0]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=fleet.render_dcgm_exporter(host, clock.now_ns()))

    collector = DcgmExporterCollector(
        ["http://node-1:9400/metrics"], transport=httpx.MockTransport(handler), clock=clock
    )
    return _Settled(collector), clock


class _Settled:
    """Waits (briefly, in wall time) for a background scrape before each collect."""

    def __init__(self, inner: DcgmExporterCollector) -> None:
        self.inner = inner
        self.name = inner.name

    def collect(self, now_ns: int) -> list[Reading]:
        deadline = time.monotonic() + 2.0
        while True:
            readings = list(self.inner.collect(now_ns))
            if readings or time.monotonic() > deadline:
                return readings
            time.sleep(0.005)

    def close(self) -> None:
        self.inner.close()


def _host() -> tuple[Collector, FakeClock]:
    import os

    return HostCollector("node-1", gpu_pids=lambda: [os.getpid()]), FakeClock(T0)


FACTORIES: dict[str, Callable[[Path], tuple[Collector, FakeClock]]] = {
    "nvml-sim": lambda _: _nvml_sim(),
    "nvml-sim-no-gpm": lambda _: _nvml_sim(gpm=False),
    "simulated_host": lambda _: _simulated_host(),
    "nvidia_smi-xml": lambda shared: _nvidia_smi(shared, "xml"),
    "nvidia_smi-csv": lambda shared: _nvidia_smi(shared, "csv"),
    "dcgm-over-sim": lambda _: _dcgm_over_simulated_fleet(),
    "host": lambda _: _host(),
}


@pytest.fixture(params=sorted(FACTORIES))
def made(request: pytest.FixtureRequest, shared: Path) -> tuple[Collector, FakeClock]:
    factory = FACTORIES[request.param]
    return factory(shared)


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
