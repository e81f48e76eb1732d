"""The dcgm-exporter exposition parses and says what the binding says, in DCGM units."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import Bind, S
from gpulens import catalog
from gpulens.collect.nvml.binding import (
    CLOCK_SM,
    PCIE_RX,
    PERF_POLICY_POWER,
    PERF_POLICY_THERMAL,
)
from gpulens.collect.simulated import SimulatedFleet

_GPM = {m.dcgm_name: m.gpm for m in catalog.GPU_METRICS if m.gpm and m.dcgm_name}


def _samples(text: str) -> dict[tuple[str, str], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name.removesuffix("_total"), sample.labels["UUID"])] = sample.value
    return out


@pytest.mark.parametrize("offset_s", [5, 400, 7200])
def test_exposition_matches_the_binding(fleet: SimulatedFleet, bind: Bind, offset_s: int) -> None:
    for host in fleet.hosts:
        now = fleet.start_ns + offset_s * S
        values = _samples(fleet.render_dcgm_exporter(host, now))
        b, clock = bind(fleet, host, now - S)
        for i in range(b.device_count()):
            uuid = b.device_info(i).uuid
            clock.set(now - S)
            first = b.gpm_sample(uuid)
            clock.set(now)
            gpm = b.gpm_metrics(first, b.gpm_sample(uuid), list(_GPM.values()))
            for dcgm, metric_id in _GPM.items():
                if metric_id in gpm:
                    expected = gpm[metric_id]
                    if dcgm.endswith("_BYTES"):  # MiB/s in GPM, bytes/s in DCGM
                        assert values[(dcgm, uuid)] == pytest.approx(expected * 2**20, abs=1)
                    else:  # percent in GPM, ratio in DCGM
                        assert values[(dcgm, uuid)] == pytest.approx(expected / 100, abs=1e-6)
            util, mem = b.utilization(uuid), b.memory_info(uuid)
            assert values[("DCGM_FI_DEV_GPU_UTIL", uuid)] == util.gpu
            assert values[("DCGM_FI_DEV_MEM_COPY_UTIL", uuid)] == util.memory
            assert values[("DCGM_FI_DEV_FB_USED", uuid)] == mem.used // 2**20
            assert values[("DCGM_FI_DEV_FB_FREE", uuid)] == mem.free // 2**20
            assert values[("DCGM_FI_DEV_POWER_USAGE", uuid)] == pytest.approx(
                b.power_usage_mw(uuid) / 1000, abs=1e-3
            )
            assert values[("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", uuid)] == b.total_energy_mj(uuid)
            assert values[("DCGM_FI_DEV_SM_CLOCK", uuid)] == b.clock_mhz(uuid, CLOCK_SM)
            assert values[("DCGM_FI_DEV_GPU_TEMP", uuid)] == b.temperature_c(uuid)
            assert values[("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", uuid)] == (
                b.clocks_event_reasons(uuid)
            )
            assert values[("DCGM_FI_DEV_POWER_VIOLATION", uuid)] == b.violation_time_ns(
                uuid, PERF_POLICY_POWER
            )
            assert values[("DCGM_FI_DEV_THERMAL_VIOLATION", uuid)] == b.violation_time_ns(
                uuid, PERF_POLICY_THERMAL
            )
            rx_kbps = b.pcie_throughput_kbps(uuid, PCIE_RX)
            assert values[("DCGM_FI_PROF_PCIE_RX_BYTES", uuid)] // 1024 == pytest.approx(
                rx_kbps, abs=1
            )


def test_exposition_has_help_type_and_kubernetes_labels(fleet: SimulatedFleet) -> None:
    truth = next(e for e in fleet.ground_truth() if e["scenario"] == "tensorrt_inference")
    text = fleet.render_dcgm_exporter(truth["host"], truth["steady"][0])
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].type == "counter"
    assert families["DCGM_FI_PROF_SM_ACTIVE"].type == "gauge"
    assert "# HELP DCGM_FI_DEV_GPU_UTIL" in text
    sample = next(
        s
        for s in families["DCGM_FI_PROF_SM_ACTIVE"].samples
        if s.labels["UUID"] == truth["gpu_uuids"][0]
    )
    assert sample.labels["pod"] == truth["pod"]
    assert sample.labels["namespace"] == truth["namespace"]
    assert sample.labels["container"] == truth["container"]
    assert sample.labels["modelName"] == "NVIDIA H100 80GB HBM3"
    assert sample.labels["Hostname"] == truth["host"]
    assert sample.labels["device"] == f"nvidia{truth['gpu_indices'][0]}"
    assert 0.0 <= sample.value <= 1.0
    unallocated = next(e for e in fleet.ground_truth() if e["scenario"] == "idle_unallocated")
    text = fleet.render_dcgm_exporter(unallocated["host"], truth["steady"][0])
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.labels["UUID"] == unallocated["gpu_uuids"][0]:
                assert "pod" not in s.labels
