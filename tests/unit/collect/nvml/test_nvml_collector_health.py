"""Health, power-limit, video-engine, NVLink and graphics-process paths on the fake binding."""

from __future__ import annotations

import pytest
from nvml_fake import FakeBinding

from gpulens.collect.nvml.binding import NvmlError, NvmlNotSupported, ProcessInfo
from gpulens.collect.nvml.collector import NvmlCollector
from gpulens.model import Kind, Reading
from gpulens.pipeline.rates import RateStage

T0 = 1_764_000_000 * 10**9
S = 10**9


def _gpu(readings: list[Reading], uuid: str = "GPU-0000") -> Reading:
    (reading,) = [r for r in readings if r.kind is Kind.GPU and r.label("gpu_uuid") == uuid]
    return reading


def _procs(readings: list[Reading]) -> dict[str, Reading]:
    return {r.label("pid"): r for r in readings if r.kind is Kind.PROCESS}


def test_new_gpu_metrics_in_base_units() -> None:
    values = _gpu(NvmlCollector(FakeBinding(), "h").collect(T0)).values
    assert values["enc_util_ratio"] == 0.67
    assert values["dec_util_ratio"] == 0.05
    assert values["memory_temperature_celsius"] == 70.0
    assert values["slowdown_temperature_celsius"] == 87.0
    assert values["power_limit_watts"] == 700.0
    assert values["ecc_sbe_volatile_total"] == 3.0
    assert values["ecc_dbe_volatile_total"] == 0.0  # a real zero: ECC on, no errors
    assert values["pcie_replay_total"] == 12.0
    assert values["remapped_rows_correctable_total"] == 2.0
    assert values["remapped_rows_uncorrectable_total"] == 0.0
    assert values["row_remap_pending"] == 1.0 and values["row_remap_failure"] == 0.0
    assert values["nvlink_tx_bytes_total"] == 1_000 * 1024
    assert values["nvlink_rx_bytes_total"] == 2_000 * 1024


NEW_CAPABILITIES = [
    ("encoder_utilization_percent", "encoder", ["enc_util_ratio"]),
    ("decoder_utilization_percent", "decoder", ["dec_util_ratio"]),
    ("memory_temperature_c", "memory_temperature", ["memory_temperature_celsius"]),
    ("temperature_threshold_c", "slowdown_temperature", ["slowdown_temperature_celsius"]),
    ("total_ecc_errors", "ecc_corrected", ["ecc_sbe_volatile_total"]),
    ("pcie_replay_counter", "pcie_replay", ["pcie_replay_total"]),
    ("remapped_rows", "remapped_rows", ["remapped_rows_correctable_total", "row_remap_pending"]),
    ("nvlink_throughput_kib", "nvlink_counters", ["nvlink_tx_bytes_total"]),
]


@pytest.mark.parametrize(("method", "cap", "metrics"), NEW_CAPABILITIES)
def test_not_supported_is_absent_never_zero(method: str, cap: str, metrics: list[str]) -> None:
    binding = FakeBinding(fail={("GPU-0000", method): NvmlNotSupported("no")})
    collector = NvmlCollector(binding, "h")
    for tick in range(3):
        out = collector.collect(T0 + tick * S)
        for metric in metrics:
            assert metric not in _gpu(out).values
            assert metric in _gpu(out, "GPU-0001").values
    calls = 2 if method == "total_ecc_errors" else 1  # corrected and uncorrected: two calls
    assert binding.calls[("GPU-0000", method)] == calls  # switched off for good
    assert collector.capabilities()["GPU-0000"][cap] is False
    assert collector.errors == {}


def test_slowdown_threshold_is_read_once_and_kept() -> None:
    binding = FakeBinding()
    collector = NvmlCollector(binding, "h")
    for tick in range(4):
        values = _gpu(collector.collect(T0 + tick * S)).values
        assert values["slowdown_temperature_celsius"] == 87.0
    assert binding.calls[("GPU-0000", "temperature_threshold_c")] == 1


def test_slowdown_threshold_retried_after_a_transient_error() -> None:
    binding = FakeBinding(fail={("GPU-0000", "temperature_threshold_c"): NvmlError("busy", 10)})
    collector = NvmlCollector(binding, "h")
    assert "slowdown_temperature_celsius" not in _gpu(collector.collect(T0)).values
    del binding.fail[("GPU-0000", "temperature_threshold_c")]
    assert _gpu(collector.collect(T0 + S)).values["slowdown_temperature_celsius"] == 87.0
    assert collector.errors == {"slowdown_temperature": 1}


def test_enforced_power_limit_is_live() -> None:
    binding = FakeBinding()
    collector = NvmlCollector(binding, "h")
    assert _gpu(collector.collect(T0)).values["power_limit_watts"] == 700.0
    binding.power_limit_mw = 450_000  # `nvidia-smi -pl 450` while recording
    assert _gpu(collector.collect(T0 + S)).values["power_limit_watts"] == 450.0


def test_power_limit_transient_error_is_absent_not_stale() -> None:
    binding = FakeBinding(fail={("GPU-0000", "enforced_power_limit_mw"): NvmlError("busy", 10)})
    values = _gpu(NvmlCollector(binding, "h").collect(T0)).values
    assert "power_limit_watts" not in values


def test_power_limit_not_supported_falls_back_to_inventory_value() -> None:
    binding = FakeBinding(fail={("*", "enforced_power_limit_mw"): NvmlNotSupported("no")})
    collector = NvmlCollector(binding, "h")
    collector.collect(T0)
    assert _gpu(collector.collect(T0 + S)).values["power_limit_watts"] == 700.0


def test_memory_temperature_zero_on_gddr_is_absent() -> None:
    binding = FakeBinding()
    binding.memory_temperature_c = lambda uuid: 0  # type: ignore[method-assign]
    assert "memory_temperature_celsius" not in _gpu(NvmlCollector(binding, "h").collect(T0)).values


def test_nvlink_rates_from_counters_without_gpm() -> None:
    binding = FakeBinding()  # its GPM gives no NVLink metrics
    collector, stage = NvmlCollector(binding, "h"), RateStage()
    first = _gpu(stage.process(collector.collect(T0)))
    assert "nvlink_tx_bytes_per_second" not in first.values  # first-sample rule
    binding.nvlink_kib = (1_000 + 4 * 1024, 2_000 + 2 * 1024)
    second = _gpu(stage.process(collector.collect(T0 + 2 * S)))
    assert second.values["nvlink_tx_bytes_per_second"] == pytest.approx(2 * 2**20)
    assert second.values["nvlink_rx_bytes_per_second"] == pytest.approx(2**20)


def test_gpm_nvlink_gauge_is_not_overwritten_by_the_counter_rate() -> None:
    binding = FakeBinding()
    base = binding.gpm_metrics

    def with_nvlink(first: object, second: object, ids: object) -> dict[int, float]:
        return {**base(first, second, ids), 61: 7.0, 60: 3.0}  # type: ignore[arg-type]

    binding.gpm_metrics = with_nvlink  # type: ignore[assignment]
    collector, stage = NvmlCollector(binding, "h"), RateStage()
    stage.process(collector.collect(T0))
    binding.nvlink_kib = (10**9, 10**9)
    values = _gpu(stage.process(collector.collect(T0 + S))).values
    assert values["nvlink_tx_bytes_per_second"] == 7.0 * 2**20
    assert values["nvlink_rx_bytes_per_second"] == 3.0 * 2**20


def test_graphics_processes_are_merged_with_compute_per_pid() -> None:
    binding = FakeBinding()
    binding.processes["GPU-0000"] = [ProcessInfo(41, 2**30)]
    binding.graphics["GPU-0000"] = [ProcessInfo(41, 2**31), ProcessInfo(43, None)]
    procs = _procs(NvmlCollector(binding, "h").collect(T0))
    assert set(procs) == {"41", "43"}
    assert procs["41"].values["process_memory_used_bytes"] == 2**31  # larger, not the sum
    assert "process_memory_used_bytes" not in procs["43"].values


def test_graphics_not_supported_keeps_compute_processes() -> None:
    binding = FakeBinding(fail={("*", "graphics_processes"): NvmlNotSupported("headless")})
    binding.processes["GPU-0000"] = [ProcessInfo(41, 2**30)]
    collector = NvmlCollector(binding, "h")
    for tick in range(2):
        assert set(_procs(collector.collect(T0 + tick * S))) == {"41"}
    assert binding.calls[("GPU-0000", "graphics_processes")] == 1
    assert collector.capabilities()["GPU-0000"]["graphics_processes"] is False


def test_compute_not_supported_keeps_graphics_processes() -> None:
    binding = FakeBinding(fail={("*", "compute_processes"): NvmlNotSupported("no")})
    binding.graphics["GPU-0000"] = [ProcessInfo(44, 2**20)]
    collector = NvmlCollector(binding, "h")
    collector.collect(T0)
    assert set(_procs(collector.collect(T0 + S))) == {"44"}
    assert collector.capabilities()["GPU-0000"]["processes"] is False


def test_one_process_list_failing_transiently_still_reports_the_other() -> None:
    binding = FakeBinding(fail={("*", "graphics_processes"): NvmlError("busy", 10)})
    binding.processes["GPU-0000"] = [ProcessInfo(41, 2**30)]
    collector = NvmlCollector(binding, "h")
    assert set(_procs(collector.collect(T0))) == {"41"}
    assert collector.errors["graphics_processes"] == 2  # both GPUs
