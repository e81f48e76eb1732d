"""NvmlCollector error paths the simulated fleet does not produce, on a small fake binding."""

from __future__ import annotations

import pytest
from nvml_fake import FakeBinding, info

from gpulens.collect.nvml.binding import (
    NvmlError,
    NvmlGpuLost,
    NvmlLibraryMissing,
    NvmlNotSupported,
    ProcessInfo,
    ProcessUtilSample,
    XidEvent,
)
from gpulens.collect.nvml.collector import NvmlCollector
from gpulens.errors import CollectError, SourceUnavailable
from gpulens.model import Kind, Reading

T0 = 1_764_000_000 * 10**9
S = 10**9


def _gpu(readings: list[Reading], uuid: str) -> Reading:
    (reading,) = [r for r in readings if r.kind is Kind.GPU and r.label("gpu_uuid") == uuid]
    return reading


def _events(readings: list[Reading], name: str) -> list[Reading]:
    return [r for r in readings if r.kind is Kind.EVENT and r.label("event") == name]


def test_library_missing_raises_source_unavailable_with_install_hint() -> None:
    binding = FakeBinding(init_error=NvmlLibraryMissing("libnvidia-ml.so.1: not found"))
    with pytest.raises(SourceUnavailable) as err:
        NvmlCollector(binding, "h")
    message = str(err.value)
    assert "pip install nvidia-ml-py" in message
    assert "NVIDIA driver" in message
    assert "libnvidia-ml.so.1" in message


def test_other_init_error_is_source_unavailable_too() -> None:
    with pytest.raises(SourceUnavailable, match="nvidia-smi"):
        NvmlCollector(FakeBinding(init_error=NvmlError("driver not loaded", code=9)), "h")


def test_not_supported_turns_capability_off_and_metric_absent() -> None:
    binding = FakeBinding(
        fail={("GPU-0000", "fan_speed_percent"): NvmlNotSupported("passive cooling")}
    )
    collector = NvmlCollector(binding, "h")
    for tick in range(3):
        out = collector.collect(T0 + tick * S)
        assert "fan_speed_ratio" not in _gpu(out, "GPU-0000").values
        assert _gpu(out, "GPU-0001").values["fan_speed_ratio"] == 0.35
    assert binding.calls[("GPU-0000", "fan_speed_percent")] == 1  # never asked again
    caps = collector.capabilities()
    assert caps["GPU-0000"]["fan"] is False
    assert caps["GPU-0001"]["fan"] is True
    assert collector.errors == {}


def test_gpm_not_supported_means_no_profiling_metrics_and_pcie_from_nvml() -> None:
    binding = FakeBinding(gpm=False)
    collector = NvmlCollector(binding, "h")
    collector.collect(T0)
    values = _gpu(collector.collect(T0 + S), "GPU-0000").values
    assert "sm_active_ratio" not in values and "tensor_active_ratio" not in values
    assert values["pcie_rx_bytes_per_second"] == 1000 * 1024
    assert collector.capabilities()["GPU-0000"]["gpm"] is False
    assert binding.calls[("GPU-0000", "gpm_sample")] == 0


def test_gpm_first_sample_rule_and_pcie_preference() -> None:
    binding = FakeBinding()
    collector = NvmlCollector(binding, "h")
    first = _gpu(collector.collect(T0), "GPU-0000").values
    assert "sm_active_ratio" not in first
    assert first["pcie_rx_bytes_per_second"] == 1000 * 1024  # NVML snapshot until GPM has a pair
    second = _gpu(collector.collect(T0 + S), "GPU-0000").values
    assert second["sm_active_ratio"] == 0.55
    assert second["tensor_active_ratio"] == pytest.approx(0.14)
    assert second["pcie_rx_bytes_per_second"] == 200 * 1024 * 1024  # GPM MiB/s wins
    caps = collector.capabilities()["GPU-0000"]
    assert caps["tensor_active_ratio"] is True
    assert caps["sm_occupancy_ratio"] is False  # this GPU's GPM left it out


def test_gpu_lost_on_one_device_others_keep_reporting() -> None:
    binding = FakeBinding()
    collector = NvmlCollector(binding, "h")
    collector.collect(T0)
    binding.fail[("GPU-0001", "memory_info")] = NvmlGpuLost("GPU is lost")
    out = collector.collect(T0 + S)
    lost = _events(out, "gpu_lost")
    assert len(lost) == 1
    assert lost[0].label("gpu_uuid") == "GPU-0001"
    assert "GPU is lost" in lost[0].label("message")
    assert [r.label("gpu_uuid") for r in out if r.kind is Kind.GPU] == ["GPU-0000"]
    calls_before = sum(n for (uuid, _), n in binding.calls.items() if uuid == "GPU-0001")
    later = collector.collect(T0 + 2 * S)
    assert [r.label("gpu_uuid") for r in later if r.kind is Kind.GPU] == ["GPU-0000"]
    assert _events(later, "gpu_lost") == []
    assert sum(n for (uuid, _), n in binding.calls.items() if uuid == "GPU-0001") == calls_before
    assert collector.lost == ["GPU-0001"]


def test_energy_counter_missing_falls_back_to_power_integral() -> None:
    binding = FakeBinding(
        fail={("*", "total_energy_mj"): NvmlNotSupported("pre-Volta")}, power_mw=300_000
    )
    collector = NvmlCollector(binding, "h")
    first = collector.collect(T0)
    assert "energy_joules" not in _gpu(first, "GPU-0000").values  # no interval yet, never 0
    assert len(_events(first, "energy_method")) == 2  # once per device
    binding.power_mw = 500_000
    second = collector.collect(T0 + 2 * S)
    assert _gpu(second, "GPU-0000").values["energy_joules"] == pytest.approx(800.0)  # trapezoid
    third = collector.collect(T0 + 3 * S)
    assert _gpu(third, "GPU-0000").values["energy_joules"] == pytest.approx(1300.0)
    assert _events(second + third, "energy_method") == []
    caps = collector.capabilities()["GPU-0000"]
    assert caps["energy_counter"] is False
    assert caps["energy_power_integral"] is True


def test_energy_counter_used_when_present() -> None:
    collector = NvmlCollector(FakeBinding(), "h")
    values = _gpu(collector.collect(T0), "GPU-0000").values
    assert values["energy_joules"] == 1000.0
    assert collector.capabilities()["GPU-0000"]["energy_power_integral"] is False


def test_transient_error_leaves_metric_out_and_is_counted() -> None:
    binding = FakeBinding(fail={("GPU-0000", "power_usage_mw"): NvmlError("timeout", code=10)})
    collector = NvmlCollector(binding, "h")
    out = collector.collect(T0)
    assert "power_watts" not in _gpu(out, "GPU-0000").values
    assert _gpu(out, "GPU-0001").values["power_watts"] == 350.0
    assert collector.errors == {"power": 1}
    assert collector.call_errors() == {("power", "timeout"): 1}
    del binding.fail[("GPU-0000", "power_usage_mw")]
    assert _gpu(collector.collect(T0 + S), "GPU-0000").values["power_watts"] == 350.0
    assert collector.capabilities()["GPU-0000"]["power"] is True


def test_every_call_failing_raises_collect_error() -> None:
    binding = FakeBinding()
    collector = NvmlCollector(binding, "h")
    collector.collect(T0)  # versions reported, then every call breaks
    methods = ["utilization", "memory_info", "power_usage_mw", "total_energy_mj",
               "temperature_c", "fan_speed_percent", "clock_mhz", "clocks_event_reasons",
               "performance_state", "pcie_throughput_kbps", "violation_time_ns",
               "compute_processes", "gpm_sample", "xid_events", "encoder_utilization_percent",
               "decoder_utilization_percent", "memory_temperature_c", "temperature_threshold_c",
               "enforced_power_limit_mw", "total_ecc_errors", "pcie_replay_counter",
               "remapped_rows", "nvlink_throughput_kib", "graphics_processes"]  # fmt: skip
    binding.fail = {("*", m): NvmlError("unknown error", code=999) for m in methods}
    with pytest.raises(CollectError, match="no call"):
        collector.collect(T0 + S)


def test_process_readings_with_identity_and_util() -> None:
    binding = FakeBinding()
    binding.processes["GPU-0000"] = [ProcessInfo(41, 2**30), ProcessInfo(42, None)]
    binding.samples["GPU-0000"] = [
        ProcessUtilSample(41, timestamp_us=5_000, sm_util=80, mem_util=30),
        ProcessUtilSample(41, timestamp_us=6_000, sm_util=90, mem_util=35),
    ]

    class Identity:
        def identify(self, pid: int) -> dict[str, str]:
            return {"user": f"u{pid}", "job_id": "j1", "host": "spoof"}

    collector = NvmlCollector(binding, "h", Identity())
    procs = [r for r in collector.collect(T0) if r.kind is Kind.PROCESS]
    by_pid = {r.label("pid"): r for r in procs}
    assert set(by_pid) == {"41", "42"}
    busy, idle = by_pid["41"], by_pid["42"]
    assert busy.labels["user"] == "u41" and busy.labels["job_id"] == "j1"
    assert busy.labels["host"] == "h"  # the identity resolver cannot overwrite device labels
    assert busy.labels["gpu_uuid"] == "GPU-0000" and busy.labels["gpu_index"] == "0"
    assert busy.values["process_memory_used_bytes"] == 2**30
    assert busy.values["process_sm_util_ratio"] == 0.9
    assert "process_memory_used_bytes" not in idle.values
    assert idle.values["process_sm_util_ratio"] == 0.0  # no sample in the window = idle
    collector.collect(T0 + S)
    assert binding.since[-1] == ("GPU-0000", 6_000)  # last seen timestamp is passed back


def test_process_utilization_not_supported_leaves_util_absent() -> None:
    binding = FakeBinding(fail={("*", "process_utilization"): NvmlNotSupported("MIG")})
    binding.processes["GPU-0000"] = [ProcessInfo(41, 2**30)]
    collector = NvmlCollector(binding, "h")
    (proc,) = [r for r in collector.collect(T0) if r.kind is Kind.PROCESS]
    assert set(proc.values) == {"process_memory_used_bytes"}
    assert collector.capabilities()["GPU-0000"]["process_utilization"] is False


def test_mig_instances_get_parent_labels_and_own_processes() -> None:
    parent = info(0, mig_mode=True)
    mig = info(0, uuid="MIG-1", parent_uuid="GPU-0000", gpu_instance_id=1,
               compute_instance_id=0, mig_profile="3g.40gb")  # fmt: skip
    binding = FakeBinding(devices=[parent], migs={0: [mig]})
    binding.processes["GPU-0000"] = [ProcessInfo(7, 1)]
    binding.processes["MIG-1"] = [ProcessInfo(7, 1)]
    collector = NvmlCollector(binding, "h")
    out = collector.collect(T0)
    mig_reading = _gpu(out, "MIG-1")
    assert mig_reading.labels["parent_uuid"] == "GPU-0000"
    assert mig_reading.labels["mig_profile"] == "3g.40gb"
    assert mig_reading.labels["mig_instance"] == "1"
    procs = [r for r in out if r.kind is Kind.PROCESS]
    assert [r.label("gpu_uuid") for r in procs] == ["MIG-1"]  # not double counted on parent


def test_xid_event_and_xid_last() -> None:
    binding = FakeBinding(xids=[XidEvent("GPU-0001", 48, timestamp_us=T0 // 1000 - 500)])
    collector = NvmlCollector(binding, "h")
    out = collector.collect(T0)
    (xid,) = _events(out, "xid")
    assert xid.label("gpu_uuid") == "GPU-0001"
    assert xid.ts == T0 - 500_000
    assert _gpu(out, "GPU-0001").values["xid_last"] == 48.0
    assert "xid_last" not in _gpu(out, "GPU-0000").values
    later = collector.collect(T0 + S)
    assert _gpu(later, "GPU-0001").values["xid_last"] == 48.0  # a gauge: last value stays


def test_xid_not_supported_is_a_capability() -> None:
    binding = FakeBinding(fail={("*", "xid_events"): NvmlNotSupported("no events")})
    collector = NvmlCollector(binding, "h")
    collector.collect(T0)
    collector.collect(T0 + S)
    assert binding.calls[("*", "xid_events")] == 1
    assert collector.capabilities()["GPU-0000"]["xid_events"] is False


def test_version_events_at_start_and_on_change() -> None:
    binding = FakeBinding()
    collector = NvmlCollector(binding, "h", version_check_s=60)
    first = collector.collect(T0)
    names = [r.label("event") for r in first if r.kind is Kind.EVENT]
    assert names == ["driver_version", "nvml_version", "cuda_driver_version"]
    assert _events(first, "cuda_driver_version")[0].label("message") == "CUDA 12.4"
    binding.driver = "560.28.03"
    assert _events(collector.collect(T0 + 30 * S), "driver_version") == []  # not checked yet
    changed = _events(collector.collect(T0 + 60 * S), "driver_version")
    assert len(changed) == 1
    assert "550.54.15 to 560.28.03" in changed[0].label("message")


def test_close_is_idempotent_and_collect_after_close_fails_clearly() -> None:
    binding = FakeBinding()
    collector = NvmlCollector(binding, "h")
    collector.close()
    collector.close()
    assert binding.shutdowns == 1
    with pytest.raises(CollectError, match="closed"):
        collector.collect(T0)


def test_readings_share_labels_and_use_catalog_units() -> None:
    collector = NvmlCollector(FakeBinding(), "h")
    values = _gpu(collector.collect(T0), "GPU-0000").values
    assert values["power_watts"] == 350.0
    assert values["sm_clock_hertz"] == 1.755e9
    assert values["sm_clock_max_hertz"] == 1.98e9
    assert values["power_limit_watts"] == 700.0
    assert values["throttle_power_ratio"] == 1.0
    assert values["power_violation_seconds_total"] == 5.0
    assert values["memory_reserved_bytes"] == 2**30


def test_failed_calls_are_counted_per_call_and_nvml_error_name() -> None:
    binding = FakeBinding(
        fail={
            ("GPU-0000", "power_usage_mw"): NvmlError("Timeout", code=10),
            ("GPU-0001", "power_usage_mw"): NvmlError("Unknown Error", code=999),
            ("GPU-0001", "memory_info"): NvmlError("Unknown Error", code=999),
            ("GPU-0000", "temperature_c"): NvmlError("odd", code=4242),
            ("GPU-0000", "fan_speed_percent"): NvmlNotSupported("passive cooling", code=3),
        }
    )
    collector = NvmlCollector(binding, "h")
    for tick in range(3):
        collector.collect(T0 + tick * S)
    assert collector.call_errors() == {
        ("power", "timeout"): 3,
        ("power", "unknown"): 3,
        ("memory", "unknown"): 3,
        ("temperature", "other"): 3,  # a code NVML may add later: bounded label values
    }  # not supported is an event and a capability off, not an error count
