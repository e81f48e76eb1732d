"""On a real NVIDIA GPU: the real binding and the collector give sane readings.

Skipped cleanly (see tests/conftest.py) where no GPU and driver are present.
"""

from __future__ import annotations

import time

import pytest

from gpulens.catalog import METRICS
from gpulens.collect.nvml.collector import NvmlCollector
from gpulens.collect.nvml.pynvml_binding import PynvmlBinding
from gpulens.model import Kind

pytestmark = pytest.mark.gpu


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
    collector = NvmlCollector(PynvmlBinding(), host="gpu-test")
    try:
        first = collector.collect(time.time_ns())
        time.sleep(1.1)
        second = collector.collect(time.time_ns())
    finally:
        collector.close()
    gpus = [r for r in second if r.kind is Kind.GPU]
    assert gpus
    for r in first + second:
        for name, value in r.values.items():
            assert name in METRICS
            assert value == value  # no NaN
    for r in gpus:
        v = r.values
        assert 0 <= v.get("gpu_util_ratio", 0) <= 1
        assert v["memory_total_bytes"] > 0
        if "power_watts" in v:
            assert 5 < v["power_watts"] < 2000
        if "sm_clock_hertz" in v:
            assert 1e7 < v["sm_clock_hertz"] < 5e9
    caps = collector.capabilities()
    hopper = any(
        "H100" in r.labels.get("gpu_model", "") or "H200" in r.labels.get("gpu_model", "")
        for r in gpus
    )
    if hopper:
        # GPM gives profiling metrics from the second tick on.
        assert all("sm_active_ratio" in r.values for r in gpus), caps
        assert all(0 <= r.values["sm_active_ratio"] <= 1 for r in gpus)
