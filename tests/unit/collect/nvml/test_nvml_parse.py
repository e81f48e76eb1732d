"""NVML units → catalog values: every conversion, and what is dropped instead of becoming 0."""

from __future__ import annotations

import math

import pytest

from gpulens import catalog
from gpulens.collect.nvml import parse
from gpulens.collect.nvml.binding import (
    DeviceInfo,
    MemoryInfo,
    ProcessInfo,
    ProcessUtilSample,
    Utilization,
)
from gpulens.model import Kind

MIB = 1024 * 1024


def _info(**kw: object) -> DeviceInfo:
    fields: dict[str, object] = {
        "index": 3,
        "uuid": "GPU-abc",
        "name": "NVIDIA A100-SXM4-80GB",
        "pci_bus_id": "0000:07:00.0",
        "memory_total_bytes": 80 * 2**30,
        "power_limit_mw": 400_000,
        "max_sm_clock_mhz": 1410,
        "max_memory_clock_mhz": 1593,
        "architecture": "ampere",
        "compute_capability": (8, 0),
    }
    fields.update(kw)
    return DeviceInfo(**fields)  # type: ignore[arg-type]


def test_utilization_percent_becomes_ratio() -> None:
    assert parse.utilization_values(Utilization(gpu=95, memory=40)) == {
        "gpu_util_ratio": 0.95,
        "mem_copy_util_ratio": 0.40,
    }


def test_utilization_zero_is_a_real_zero_but_negative_is_dropped() -> None:
    assert parse.utilization_values(Utilization(gpu=0, memory=-1)) == {"gpu_util_ratio": 0.0}


def test_memory_v2_has_reserved_v1_does_not() -> None:
    v2 = parse.memory_values(MemoryInfo(total=100, free=30, used=60, reserved=10))
    assert v2 == {
        "memory_total_bytes": 100.0,
        "memory_free_bytes": 30.0,
        "memory_used_bytes": 60.0,
        "memory_reserved_bytes": 10.0,
    }
    v1 = parse.memory_values(MemoryInfo(total=100, free=30, used=70))
    assert "memory_reserved_bytes" not in v1
    assert v1["memory_used_bytes"] == 70.0


@pytest.mark.parametrize(
    ("func", "raw", "expected"),
    [
        (parse.power_watts, 312_456, 312.456),
        (parse.power_watts, 0, 0.0),
        (parse.energy_joules, 123_456_789, 123_456.789),
        (parse.temperature_celsius, 67, 67.0),
        (parse.fan_speed_ratio, 35, 0.35),
        (parse.fan_speed_ratio, 104, 1.04),
        (parse.clock_hertz, 1410, 1.41e9),
        (parse.pcie_bytes_per_second, 1000, 1_024_000.0),
        (parse.violation_seconds, 2_500_000_000, 2.5),
    ],
)
def test_scalar_units(func: object, raw: float, expected: float) -> None:
    assert callable(func)
    assert func(raw) == pytest.approx(expected)


@pytest.mark.parametrize(
    "func",
    [
        parse.power_watts,
        parse.energy_joules,
        parse.temperature_celsius,
        parse.fan_speed_ratio,
        parse.clock_hertz,
        parse.pcie_bytes_per_second,
        parse.violation_seconds,
    ],
)
@pytest.mark.parametrize("bad", [-1, math.nan, math.inf])
def test_unusable_values_are_dropped_not_zeroed(func: object, bad: float) -> None:
    assert callable(func)
    assert func(bad) is None


def test_zero_clock_means_unknown() -> None:
    assert parse.clock_hertz(0) is None
    assert parse.clock_hertz(None) is None


def test_pstate_range() -> None:
    assert parse.pstate(0) == 0.0
    assert parse.pstate(8) == 8.0
    assert parse.pstate(32) is None  # NVML_PSTATE_UNKNOWN
    assert parse.pstate(-1) is None


def test_static_values_from_device_info() -> None:
    assert parse.static_values(_info()) == {
        "sm_clock_max_hertz": 1.41e9,
        "memory_clock_max_hertz": 1.593e9,
        "power_limit_watts": 400.0,
    }
    assert parse.static_values(_info(max_sm_clock_mhz=None, power_limit_mw=None)) == {
        "memory_clock_max_hertz": 1.593e9
    }


@pytest.mark.parametrize(
    ("mask", "power", "thermal", "names"),
    [
        (0x000, 0.0, 0.0, []),
        (0x001, 0.0, 0.0, ["gpu_idle"]),
        (0x004, 1.0, 0.0, ["sw_power_cap"]),
        (0x008, 1.0, 0.0, ["hw_slowdown"]),
        (0x080, 1.0, 0.0, ["hw_power_brake_slowdown"]),
        (0x020, 0.0, 1.0, ["sw_thermal_slowdown"]),
        (0x044, 1.0, 1.0, ["sw_power_cap", "hw_thermal_slowdown"]),
        (0x100, 0.0, 0.0, ["display_clock_setting"]),
    ],
)
def test_clock_event_reasons(mask: int, power: float, thermal: float, names: list[str]) -> None:
    values = parse.clock_event_values(mask)
    assert values == {
        "clocks_event_reasons": float(mask),
        "throttle_power_ratio": power,
        "throttle_thermal_ratio": thermal,
    }
    assert parse.clock_event_names(mask) == names


def test_clock_event_negative_mask_is_dropped() -> None:
    assert parse.clock_event_values(-1) == {}


def test_gpm_ids_map_to_catalog_with_units() -> None:
    values = parse.gpm_values({1: 97.0, 2: 50.0, 5: 14.0, 10: 80.0, 20: 10.0, 21: 2.5, 61: 1.0})
    assert values == {
        "graphics_active_ratio": pytest.approx(0.97),
        "sm_active_ratio": 0.5,
        "tensor_active_ratio": pytest.approx(0.14),
        "dram_active_ratio": 0.8,
        "pcie_tx_bytes_per_second": 10.0 * MIB,
        "pcie_rx_bytes_per_second": 2.5 * MIB,
        "nvlink_tx_bytes_per_second": 1.0 * MIB,
    }


def test_gpm_every_catalog_id_is_known() -> None:
    values = parse.gpm_values(dict.fromkeys(parse.GPM_METRIC_IDS, 1.0))
    assert set(values) == {m.name for m in catalog.BY_GPM_ID.values()}
    assert set(parse.GPM_METRIC_NAMES) == set(values)


def test_gpm_drops_unknown_ids_and_bad_values_and_caps_ratios() -> None:
    values = parse.gpm_values({999: 5.0, 2: math.nan, 5: -3.0, 10: 100.4, 20: math.inf})
    assert values == {"dram_active_ratio": 1.0}


def test_latest_sample_per_pid_wins() -> None:
    samples = [
        ProcessUtilSample(pid=1, timestamp_us=10, sm_util=5, mem_util=1),
        ProcessUtilSample(pid=1, timestamp_us=30, sm_util=50, mem_util=10),
        ProcessUtilSample(pid=1, timestamp_us=20, sm_util=7, mem_util=2),
        ProcessUtilSample(pid=2, timestamp_us=15, sm_util=3, mem_util=0),
    ]
    latest = parse.latest_samples(samples)
    assert latest[1].sm_util == 50
    assert latest[2].sm_util == 3


def test_process_util_sample_to_ratios() -> None:
    sample = ProcessUtilSample(pid=1, timestamp_us=1, sm_util=80, mem_util=20, enc_util=5)
    assert parse.process_util_values(sample) == {
        "process_sm_util_ratio": 0.8,
        "process_mem_util_ratio": 0.2,
        "process_enc_util_ratio": 0.05,
        "process_dec_util_ratio": 0.0,
    }


def test_process_without_sample_is_idle_per_nvml_semantics() -> None:
    values = parse.process_util_values(None)
    assert values == {
        "process_sm_util_ratio": 0.0,
        "process_mem_util_ratio": 0.0,
        "process_enc_util_ratio": 0.0,
        "process_dec_util_ratio": 0.0,
    }
    values["process_sm_util_ratio"] = 1.0  # a fresh dict each time, not shared state
    assert parse.process_util_values(None)["process_sm_util_ratio"] == 0.0


def test_process_memory_absent_when_unknown() -> None:
    assert parse.process_memory_values(ProcessInfo(pid=1, used_gpu_memory=None)) == {}
    assert parse.process_memory_values(ProcessInfo(pid=1, used_gpu_memory=2**30)) == {
        "process_memory_used_bytes": float(2**30)
    }


@pytest.mark.parametrize(("encoded", "text"), [(12040, "12.4"), (11080, "11.8"), (13000, "13.0")])
def test_cuda_version(encoded: int, text: str) -> None:
    assert parse.cuda_version(encoded) == text


def test_device_labels_whole_gpu() -> None:
    assert parse.device_labels("node1", _info()) == {
        "host": "node1",
        "gpu_uuid": "GPU-abc",
        "gpu_index": "3",
        "gpu_model": "NVIDIA A100-SXM4-80GB",
    }


def test_device_labels_mig_instance_carries_parent() -> None:
    mig = _info(
        index=0,
        uuid="MIG-xyz",
        parent_uuid="GPU-abc",
        gpu_instance_id=7,
        compute_instance_id=0,
        mig_profile="1g.10gb",
    )
    labels = parse.device_labels("node1", mig, parent_index=3)
    assert labels["gpu_index"] == "3"
    assert labels["mig_instance"] == "7"
    assert labels["mig_profile"] == "1g.10gb"
    assert labels["parent_uuid"] == "GPU-abc"


def test_version_events_at_start_and_on_change_only() -> None:
    labels = {"host": "h", "source": "nvml"}
    first = parse.version_events(
        5, {"driver_version": "550.54.15", "cuda_driver_version": "12.4"}, None, labels
    )
    assert [(r.kind, r.label("event")) for r in first] == [
        (Kind.EVENT, "driver_version"),
        (Kind.EVENT, "cuda_driver_version"),
    ]
    assert first[0].label("message") == "NVIDIA driver 550.54.15"
    assert first[0].label("host") == "h"
    same = parse.version_events(6, {"driver_version": "550.54.15"}, {"driver_version": "550.54.15"},
                                labels)  # fmt: skip
    assert same == []
    changed = parse.version_events(
        7, {"driver_version": "560.28.03"}, {"driver_version": "550.54.15"}, labels
    )
    assert changed[0].label("message") == "NVIDIA driver changed from 550.54.15 to 560.28.03"
    assert changed[0].ts == 7


def test_event_builders_name_the_gpu() -> None:
    labels = {"host": "h", "gpu_uuid": "GPU-1", "gpu_index": "1"}
    lost = parse.gpu_lost_event(1, labels, "GPU is lost")
    assert lost.label("event") == "gpu_lost"
    assert "GPU-1" in lost.label("message") and "index 1" in lost.label("message")
    assert parse.xid_event(2, 79, "GPU-1", labels).label("message") == "XID 79 on GPU GPU-1"
    assert "integrated from power_watts" in parse.energy_method_event(3, labels).label("message")


def test_capability_metrics_are_catalog_names() -> None:
    for metrics in parse.CAPABILITY_METRICS.values():
        for name in metrics:
            assert name in catalog.METRICS, name


def test_integer_inputs_give_float_outputs() -> None:
    outputs = [
        parse.power_watts(1),
        parse.energy_joules(1),
        parse.temperature_celsius(1),
        parse.fan_speed_ratio(1),
        parse.clock_hertz(1),
        parse.pcie_bytes_per_second(1),
        parse.violation_seconds(1),
        parse.pstate(1),
        *parse.utilization_values(Utilization(1, 1)).values(),
        *parse.memory_values(MemoryInfo(1, 1, 1, 1)).values(),
        *parse.gpm_values({2: 1, 20: 1}).values(),
        *parse.clock_event_values(4).values(),
        *parse.process_util_values(ProcessUtilSample(1, 1, 1, 1, 1, 1)).values(),
        *parse.process_memory_values(ProcessInfo(1, 1)).values(),
    ]
    assert all(type(v) is float for v in outputs), outputs
