"""On a real NVIDIA GPU: the real binding and the collector give sane readings.

Skipped cleanly (see tests/conftest.py) where no GPU and driver are present. torch is
optional: only the test that needs a CUDA process of its own imports it, lazily.
"""

from __future__ import annotations

import os
import time

import pytest

from gpulens import catalog
from gpulens.catalog import METRICS
from gpulens.collect.nvml.collector import NvmlCollector
from gpulens.collect.nvml.pynvml_binding import PynvmlBinding
from gpulens.model import Kind, Reading

pytestmark = pytest.mark.gpu

GPM_MODELS = ("H100", "H200", "GH200", "H800", "H20", "B200", "B100", "GB200")


def _ticks(n: int, pause_s: float = 1.1) -> tuple[NvmlCollector, list[list[Reading]]]:
    collector = NvmlCollector(PynvmlBinding(), host="gpu-test")
    batches = []
    try:
        for i in range(n):
            if i:
                time.sleep(pause_s)
            batches.append(collector.collect(time.time_ns()))
    finally:
        collector.close()
    return collector, batches


def _gpus(batch: list[Reading]) -> list[Reading]:
    return [r for r in batch if r.kind is Kind.GPU]


def test_inventory_is_complete() -> None:
    b = PynvmlBinding()
    b.init()
    try:
        count = b.device_count()
        assert count >= 1
        for i in range(count):
            info = b.device_info(i)
            assert info.uuid.startswith(("GPU-", "MIG-"))
            assert info.memory_total_bytes > 1e9
            assert info.max_sm_clock_mhz is None or 500 <= info.max_sm_clock_mhz <= 4000
        assert b.driver_version()
        assert b.cuda_driver_version() >= 10000
    finally:
        b.shutdown()


def test_collector_reads_every_gpu_in_base_units() -> None:
    collector, (first, second) = _ticks(2)
    gpus = _gpus(second)
    assert gpus
    for r in first + second:
        for name, value in r.values.items():
            assert name in METRICS
            assert value == value  # no NaN
    for r in gpus:
        v = r.values
        assert v["memory_total_bytes"] > 0
        if "power_watts" in v:
            assert 5 < v["power_watts"] < 2000
        if "power_limit_watts" in v:
            assert 50 < v["power_limit_watts"] < 2000
        if "sm_clock_hertz" in v:
            assert 1e7 < v["sm_clock_hertz"] < 5e9
        if "temperature_celsius" in v and "slowdown_temperature_celsius" in v:
            assert v["temperature_celsius"] < v["slowdown_temperature_celsius"] < 130
        if "memory_temperature_celsius" in v:
            assert 5 < v["memory_temperature_celsius"] < 130
    print("capabilities:", collector.capabilities())


def test_ratios_are_within_0_and_1() -> None:
    _, batches = _ticks(3)
    ratios = {m.name for m in catalog.ALL_METRICS if m.unit == "ratio"} - {"fan_speed_ratio"}
    seen = 0
    for batch in batches:
        for r in batch:
            for name, value in r.values.items():
                if name in ratios:
                    seen += 1
                    assert 0.0 <= value <= 1.0, (name, value, dict(r.labels))
    assert seen > 0


def test_energy_counter_is_monotone() -> None:
    _, batches = _ticks(4, pause_s=0.5)
    series: dict[str, list[float]] = {}
    for batch in batches:
        for r in _gpus(batch):
            if "energy_joules" in r.values:
                series.setdefault(r.labels["gpu_uuid"], []).append(r.values["energy_joules"])
    if not series:
        pytest.skip("no GPU here has an energy counter (needs Volta or newer)")
    for uuid, values in series.items():
        assert values == sorted(values), (uuid, values)


def test_no_call_fails_transiently() -> None:
    collector, _ = _ticks(3)
    assert collector.errors == {}, collector.errors


def test_gpm_values_on_hopper_from_the_second_tick() -> None:
    _, (first, second) = _ticks(2)
    whole = [r for r in _gpus(second) if "parent_uuid" not in r.labels]
    hopper = [r for r in whole if any(m in r.labels.get("gpu_model", "") for m in GPM_MODELS)]
    if not hopper:
        pytest.skip("no Hopper or newer GPU here (GPM needs one)")
    assert all("sm_active_ratio" not in r.values for r in _gpus(first))  # first-sample rule
    for r in hopper:
        for name in ("sm_active_ratio", "tensor_active_ratio", "dram_active_ratio"):
            assert name in r.values, (name, r.labels["gpu_model"], sorted(r.values))
            assert 0.0 <= r.values[name] <= 1.0


def test_own_cuda_process_is_listed_with_pid_and_memory() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    from gpulens.collect.procs.attribution import ProcAttribution

    attribution = ProcAttribution()
    if not attribution.sees_host_pids:
        pytest.skip(f"NVML reports host PIDs, this process cannot see them: "
                    f"{attribution.namespace.reason}")  # fmt: skip
    block = torch.ones((64, 2**20), device="cuda:0")  # 256 MiB
    torch.cuda.synchronize()
    collector = NvmlCollector(PynvmlBinding(), host="gpu-test", identity=attribution)
    try:
        readings = collector.collect(time.time_ns())
    finally:
        collector.close()
    mine = [
        r for r in readings if r.kind is Kind.PROCESS and r.labels.get("pid") == str(os.getpid())
    ]
    pids = sorted({r.labels.get("pid", "") for r in readings if r.kind is Kind.PROCESS})
    assert mine, f"pid {os.getpid()} not among the GPU processes {pids}"
    assert mine[0].values.get("process_memory_used_bytes", 0) >= block.numel() * 4
    assert mine[0].labels.get("user")  # attribution resolved it
    del block
