"""The binding honours the NVML protocol: inventory, units, errors, processes."""

from __future__ import annotations

import pytest

from conftest import Bind, S
from gpulens.collect.nvml.binding import (
    CLOCK_MEM,
    CLOCK_SM,
    NvmlBinding,
    NvmlError,
    NvmlNotSupported,
)
from gpulens.collect.procs.identity import ProcessIdentity
from gpulens.collect.simulated import SCENARIOS, SimulatedFleet
from gpulens.model import PROCESS_IDENTITY_LABELS


def test_binding_is_an_nvml_binding(fleet: SimulatedFleet, bind: Bind) -> None:
    b, _ = bind(fleet, fleet.hosts[0], fleet.start_ns)
    assert isinstance(b, NvmlBinding)
    assert isinstance(fleet.identity(fleet.hosts[0]), ProcessIdentity)


def test_inventory_is_an_h100(fleet: SimulatedFleet, bind: Bind) -> None:
    b, _ = bind(fleet, fleet.hosts[0], fleet.start_ns)
    assert b.device_count() == 4
    info = b.device_info(2)
    assert info.index == 2 and info.uuid.startswith("GPU-")
    assert info.name == "NVIDIA H100 80GB HBM3"
    assert info.memory_total_bytes == 85_520_809_984
    assert info.power_limit_mw == 700_000
    assert (info.max_sm_clock_mhz, info.max_memory_clock_mhz) == (1980, 2619)
    assert b.mig_devices(2) == []
    uuids = {b.device_info(i).uuid for i in range(4)}
    assert len(uuids) == 4


def test_calls_before_init_and_unknown_devices_fail() -> None:
    from gpulens.clock import FakeClock

    fleet = SimulatedFleet(scenarios=["healthy_training"])
    b = fleet.binding(fleet.hosts[0], FakeClock())
    with pytest.raises(NvmlError):
        b.device_count()
    b.init()
    with pytest.raises(NvmlError):
        b.utilization("GPU-nope")
    with pytest.raises(NvmlError):
        b.device_info(4)
    uuid = b.device_info(0).uuid
    with pytest.raises(NvmlNotSupported):
        b.fan_speed_percent(uuid)


def test_units_are_nvml_units(fleet: SimulatedFleet, bind: Bind, truth: dict) -> None:
    job = truth["healthy_training"]
    b, _ = bind(fleet, job["host"], job["steady"][0] + 60 * S)
    uuid = job["gpu_uuids"][0]
    util = b.utilization(uuid)
    assert isinstance(util.gpu, int) and 90 <= util.gpu <= 100
    mem = b.memory_info(uuid)
    assert mem.total == mem.free + mem.used + (mem.reserved or 0)
    assert 400_000 < b.power_usage_mw(uuid) <= 700_000
    assert b.clock_mhz(uuid, CLOCK_MEM) == 2619
    assert b.clock_mhz(uuid, CLOCK_SM) % 15 == 0
    assert 0 <= b.performance_state(uuid) <= 15
    assert isinstance(b.total_energy_mj(uuid), int)
    assert b.xid_events() == []
    assert b.driver_version() and b.cuda_driver_version() >= 12000


def test_processes_and_identity(fleet: SimulatedFleet, bind: Bind, truth: dict) -> None:
    for scenario in SCENARIOS:
        job = truth[scenario]
        b, clock = bind(fleet, job["host"], job["steady"][0] + 30 * S)
        identity = fleet.identity(job["host"])
        for uuid, pid in zip(job["gpu_uuids"], job["pids"], strict=True):
            procs = b.process_utilization(uuid, 0)
            running = b.compute_processes(uuid)
            assert [p.pid for p in running] == [pid], scenario
            assert running[0].used_gpu_memory == b.memory_info(uuid).used
            labels = identity.identify(pid)
            assert set(labels) == set(PROCESS_IDENTITY_LABELS)
            assert labels["job_id"] == job["job_id"] and labels["engine"] == job["engine"]
            if scenario == "idle_allocated":
                assert procs == []
            else:
                assert [p.pid for p in procs] == [pid]
                assert 0 < procs[0].sm_util <= 100
                assert procs[0].timestamp_us == clock.now_ns() // 1000
    assert fleet.identity(fleet.hosts[0]).identify(1) == {}


def test_no_processes_before_the_job_starts(fleet: SimulatedFleet, bind: Bind, truth: dict) -> None:
    job = truth["eager_inference"]
    b, _ = bind(fleet, job["host"], job["start_ns"] - S)
    uuid = job["gpu_uuids"][0]
    assert b.compute_processes(uuid) == []
    assert b.utilization(uuid).gpu == 0
    assert b.clocks_event_reasons(uuid) & 0x1  # idle clocks


def test_gpm_can_be_switched_off(bind: Bind) -> None:
    fleet = SimulatedFleet(scenarios=["fp32_training"], gpm=False)
    b, _ = bind(fleet, fleet.hosts[0], fleet.start_ns)
    uuid = b.device_info(0).uuid
    assert b.gpm_supported(uuid) is False
    with pytest.raises(NvmlNotSupported):
        b.gpm_sample(uuid)
    assert "DCGM_FI_PROF_SM_ACTIVE" not in fleet.render_dcgm_exporter(
        fleet.hosts[0], fleet.start_ns
    )


def test_gpm_samples_must_be_in_order(fleet: SimulatedFleet, bind: Bind) -> None:
    b, clock = bind(fleet, fleet.hosts[0], fleet.start_ns + 600 * S)
    uuid = b.device_info(0).uuid
    first = b.gpm_sample(uuid)
    clock.advance(S)
    second = b.gpm_sample(uuid)
    with pytest.raises(NvmlError):
        b.gpm_metrics(second, first, [2])
    assert set(b.gpm_metrics(first, second, [2, 5, 999])) == {2, 5}
