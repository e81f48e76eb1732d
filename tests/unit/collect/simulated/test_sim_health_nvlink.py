"""The simulated binding's health counters, thresholds, live power limit and NVLink counters."""

from __future__ import annotations

import pytest

from conftest import Bind, S
from gpulens.clock import FakeClock
from gpulens.collect.nvml.binding import (
    ECC_CORRECTED,
    ECC_UNCORRECTED,
    TEMPERATURE_THRESHOLD_SHUTDOWN,
    TEMPERATURE_THRESHOLD_SLOWDOWN,
    NvmlNotSupported,
    RemappedRows,
)
from gpulens.collect.nvml.collector import NvmlCollector
from gpulens.collect.simulated import SimulatedFleet
from gpulens.model import Kind
from gpulens.pipeline.rates import RateStage


def test_health_values_are_real_zeros_and_thresholds(fleet: SimulatedFleet, bind: Bind) -> None:
    b, _ = bind(fleet, fleet.hosts[0], fleet.start_ns + 120 * S)
    uuid = b.device_info(0).uuid
    assert b.total_ecc_errors(uuid, ECC_CORRECTED) == 0
    assert b.total_ecc_errors(uuid, ECC_UNCORRECTED) == 0
    assert b.pcie_replay_counter(uuid) == 0
    assert b.remapped_rows(uuid) == RemappedRows(0, 0, pending=False, failure=False)
    assert b.temperature_threshold_c(uuid, TEMPERATURE_THRESHOLD_SLOWDOWN) == 87
    assert b.temperature_threshold_c(uuid, TEMPERATURE_THRESHOLD_SHUTDOWN) == 92
    assert b.enforced_power_limit_mw(uuid) == 700_000
    assert b.graphics_processes(uuid) == []
    assert b.decoder_utilization_percent(uuid) == 0
    with pytest.raises(NvmlNotSupported):
        b.encoder_utilization_percent(uuid)
    assert b.temperature_c(uuid) < b.memory_temperature_c(uuid) < 87


def test_nvlink_counters_are_monotone_and_some_gpu_talks(fleet: SimulatedFleet, bind: Bind) -> None:
    grew = False
    for host in fleet.hosts:
        b, clock = bind(fleet, host, fleet.start_ns + 600 * S)
        uuids = [b.device_info(i).uuid for i in range(b.device_count())]
        before = {u: b.nvlink_throughput_kib(u) for u in uuids}
        clock.advance(120 * S)
        for u in uuids:
            after = b.nvlink_throughput_kib(u)
            assert after.tx_kib >= before[u].tx_kib and after.rx_kib >= before[u].rx_kib
            grew = grew or after.tx_kib > before[u].tx_kib
    assert grew, "a multi-GPU job exchanges data over NVLink"


def test_new_values_depend_only_on_seed_and_time() -> None:
    t = SimulatedFleet(hosts=1, seed=3).start_ns + 300 * S

    def read(order: list[int]) -> dict[int, tuple[int, int, int]]:
        fleet = SimulatedFleet(hosts=1, seed=3)
        b = fleet.binding(fleet.hosts[0], FakeClock(t))
        b.init()
        out = {}
        for i in order:
            u = b.device_info(i).uuid
            kib = b.nvlink_throughput_kib(u)
            out[i] = (b.memory_temperature_c(u), kib.tx_kib, kib.rx_kib)
        return out

    assert read([0, 1, 2, 3]) == read([3, 2, 1, 0])


def _nvlink_rates(gpm: bool) -> dict[str, float]:
    fleet = SimulatedFleet(hosts=1, seed=0, gpm=gpm)
    clock = FakeClock(fleet.start_ns + 600 * S)
    host = fleet.hosts[0]
    collector = NvmlCollector(fleet.binding(host, clock), host, fleet.identity(host))
    stage = RateStage()
    sums: dict[str, list[float]] = {}
    for _ in range(60):
        for r in stage.process(collector.collect(clock.now_ns())):
            if r.kind is Kind.GPU and "nvlink_tx_bytes_per_second" in r.values:
                sums.setdefault(r.labels["gpu_uuid"], []).append(
                    r.values["nvlink_tx_bytes_per_second"]
                )
        clock.advance(S)
    return {uuid: sum(v) / len(v) for uuid, v in sums.items()}


def test_nvlink_rates_from_counters_match_gpm() -> None:
    with_gpm, without = _nvlink_rates(True), _nvlink_rates(False)
    assert set(with_gpm) == set(without)
    busy = [u for u, rate in with_gpm.items() if rate > 1e6]
    assert busy, "the training job on host 0 uses NVLink ten minutes in"
    for uuid in busy:
        assert without[uuid] == pytest.approx(with_gpm[uuid], rel=0.1)
