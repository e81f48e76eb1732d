"""NvmlCollector on the simulated fleet: the same code path real GPUs take."""

from __future__ import annotations

import math

import pytest

from gpulens import catalog
from gpulens.clock import FakeClock
from gpulens.collect.nvml.collector import NvmlCollector
from gpulens.collect.simulated import SimulatedFleet
from gpulens.model import Kind, Reading
from gpulens.pipeline.rates import RateStage

S = 10**9


def _setup(gpm: bool = True) -> tuple[SimulatedFleet, FakeClock, NvmlCollector]:
    fleet = SimulatedFleet(hosts=1, gpus_per_host=4, seed=0, gpm=gpm)
    clock = FakeClock(fleet.start_ns)
    host = fleet.hosts[0]
    collector = NvmlCollector(fleet.binding(host, clock), host, fleet.identity(host))
    return fleet, clock, collector


def _run(clock: FakeClock, collector: NvmlCollector, ticks: int) -> list[list[Reading]]:
    out = []
    for _ in range(ticks):
        out.append(collector.collect(clock.now_ns()))
        clock.advance(S)
    return out


def test_gpm_absent_on_first_tick_present_after() -> None:
    _, clock, collector = _setup()
    first, second = _run(clock, collector, 2)
    gpus_first = [r for r in first if r.kind is Kind.GPU]
    gpus_second = [r for r in second if r.kind is Kind.GPU]
    assert len(gpus_first) == len(gpus_second) == 4
    assert all("sm_active_ratio" not in r.values for r in gpus_first)
    assert all("tensor_active_ratio" in r.values for r in gpus_second)
    assert all(0.0 <= r.values["sm_active_ratio"] <= 1.0 for r in gpus_second)


def test_gpu_readings_have_labels_and_catalog_values() -> None:
    _, clock, collector = _setup()
    for batch in _run(clock, collector, 5):
        for reading in batch:
            for name, value in reading.values.items():
                assert name in catalog.METRICS, name
                assert math.isfinite(value), (name, value)
            if reading.kind is Kind.GPU:
                assert reading.labels["host"] == "sim-node-0"
                assert reading.labels["gpu_uuid"].startswith("GPU-")
                assert reading.labels["gpu_index"] in {"0", "1", "2", "3"}
                assert reading.labels["gpu_model"]
    assert collector.errors == {}


def test_process_readings_carry_identity_labels() -> None:
    _, clock, collector = _setup()
    procs = [r for batch in _run(clock, collector, 60) for r in batch if r.kind is Kind.PROCESS]
    assert procs, "the simulated jobs start within the first minute"
    for reading in procs:
        assert reading.labels["pid"].isdigit()
        assert reading.labels["user"] and reading.labels["job_id"]
        assert reading.labels["gpu_uuid"].startswith("GPU-")
        assert "process_memory_used_bytes" in reading.values
    busy = [r for r in procs if r.values.get("process_sm_util_ratio", 0.0) > 0.0]
    assert busy, "a training job shows some per-process SM time share"


def test_version_events_once_at_start() -> None:
    _, clock, collector = _setup()
    batches = _run(clock, collector, 3)
    names = [r.label("event") for r in batches[0] if r.kind is Kind.EVENT]
    assert {"driver_version", "nvml_version", "cuda_driver_version"} <= set(names)
    assert not [r for r in batches[1] + batches[2] if r.label("event") == "driver_version"]


def test_without_gpm_profiling_metrics_are_absent_not_zero() -> None:
    _, clock, collector = _setup(gpm=False)
    last = _run(clock, collector, 3)[-1]
    gpus = [r for r in last if r.kind is Kind.GPU]
    assert gpus
    assert all("sm_active_ratio" not in r.values for r in gpus)
    assert all("gpu_util_ratio" in r.values for r in gpus)
    caps = collector.capabilities()
    assert all(c["gpm"] is False for c in caps.values())


def test_energy_rate_tracks_power() -> None:
    _, clock, collector = _setup()
    stage = RateStage()
    pairs = []
    for batch in _run(clock, collector, 120):
        for r in stage.process(batch):
            if r.kind is Kind.GPU and "energy_watts" in r.values:
                pairs.append((r.values["energy_watts"], r.values["power_watts"]))
    assert len(pairs) > 100
    mean_energy_w = sum(e for e, _ in pairs) / len(pairs)
    mean_power_w = sum(p for _, p in pairs) / len(pairs)
    assert mean_energy_w == pytest.approx(mean_power_w, rel=0.1)


def test_health_thermal_and_nvlink_values_on_the_sim() -> None:
    _, clock, collector = _setup()
    last = _run(clock, collector, 3)[-1]
    gpus = [r for r in last if r.kind is Kind.GPU]
    for r in gpus:
        v = r.values
        assert v["slowdown_temperature_celsius"] == 87.0
        assert v["temperature_celsius"] < v["memory_temperature_celsius"]
        assert v["power_limit_watts"] == 700.0
        assert v["ecc_sbe_volatile_total"] == v["ecc_dbe_volatile_total"] == 0.0
        assert v["pcie_replay_total"] == 0.0 and v["row_remap_failure"] == 0.0
        assert v["nvlink_tx_bytes_total"] >= 0.0 and v["dec_util_ratio"] == 0.0
        assert "enc_util_ratio" not in v  # an H100 has no NVENC
    caps = collector.capabilities()
    assert all(c["encoder"] is False and c["nvlink_counters"] is True for c in caps.values())
    assert collector.errors == {}
