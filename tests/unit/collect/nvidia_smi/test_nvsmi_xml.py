"""`nvidia-smi -q -x` captures (Telegraf testdata, DTD v11/v12/v13) → readings.

Expected values were read by hand from the raw XML files, element by element.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from nvsmi_captures import XML_DIR, XML_FILES

from gpulens import catalog
from gpulens.collect.nvidia_smi import NvidiaSmiParseError, parse_nvsmi_xml
from gpulens.model import Kind, Reading

MIB = 1024 * 1024
TS = 1_700_000_000_000_000_000


def _load(shared: Path, name: str) -> list[Reading]:
    path = shared / XML_DIR / name
    return parse_nvsmi_xml(path.read_text(encoding="utf-8"), str(path), TS, "node1")


def _gpus(readings: list[Reading]) -> list[Reading]:
    return [r for r in readings if r.kind is Kind.GPU and "parent_uuid" not in r.labels]


@pytest.mark.parametrize("name", XML_FILES)
def test_every_capture_parses_with_catalog_names_only(shared: Path, name: str) -> None:
    readings = _load(shared, name)
    assert _gpus(readings), name
    for r in readings:
        assert r.ts == TS
        assert r.labels["host"] == "node1"
        assert r.labels["source"] == "nvidia_smi"
        for metric, value in r.values.items():
            assert catalog.get(metric).kind is r.kind
            assert value == value  # no NaN
    events = {r.labels["event"] for r in readings if r.kind is Kind.EVENT}
    assert events == {"driver_version", "cuda_driver_version"}


def test_a100_v12_mig(shared: Path) -> None:
    readings = _load(shared, "a100-sxm4-v12.xml")
    (gpu,) = _gpus(readings)
    assert gpu.labels["gpu_uuid"] == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert gpu.labels["gpu_model"] == "NVIDIA A100-SXM4-80GB"
    # <utilization> is all N/A with MIG on: absent, never 0.
    for metric in ("gpu_util_ratio", "mem_copy_util_ratio", "enc_util_ratio", "dec_util_ratio"):
        assert metric not in gpu.values
    assert "fan_speed_ratio" not in gpu.values  # <fan_speed>N/A
    assert "remapped_rows_correctable_total" not in gpu.values  # <remapped_rows>N/A
    v = gpu.values
    assert v["memory_total_bytes"] == 81920 * MIB
    assert v["memory_reserved_bytes"] == 869 * MIB
    assert v["memory_used_bytes"] == 50 * MIB
    assert v["memory_free_bytes"] == 80999 * MIB
    assert v["power_watts"] == pytest.approx(67.03)
    assert v["power_limit_watts"] == 500.0
    assert v["temperature_celsius"] == 27.0
    assert v["memory_temperature_celsius"] == 44.0
    assert v["pstate"] == 0.0
    assert v["sm_clock_hertz"] == 1275e6
    assert v["memory_clock_hertz"] == 1593e6
    assert v["sm_clock_max_hertz"] == 1410e6
    assert v["pcie_tx_bytes_per_second"] == 4000 * 1024
    assert v["pcie_rx_bytes_per_second"] == 0.0
    assert v["clocks_event_reasons"] == 0.0
    assert v["ecc_sbe_volatile_total"] == 0.0
    assert v["ecc_dbe_volatile_total"] == 0.0

    migs = [r for r in readings if "parent_uuid" in r.labels]
    assert [m.labels["mig_instance"] for m in migs] == ["3", "4", "5", "6"]
    for mig in migs:
        assert mig.kind is Kind.GPU
        assert mig.labels["parent_uuid"] == gpu.labels["gpu_uuid"]
        assert mig.labels["gpu_uuid"].startswith("MIG-GPU-513536b6")
        assert mig.labels["gpu_index"] == gpu.labels["gpu_index"]
        # v12 does not print the profile: told from 14 SMs, 19968 of 81920 MiB (issue 16)
        assert mig.labels["mig_profile"] == "1g.20gb"
        assert mig.values == {
            "memory_total_bytes": 19968 * MIB,
            "memory_reserved_bytes": 0.0,
            "memory_used_bytes": 12 * MIB,
            "memory_free_bytes": 19955 * MIB,
        }
    assert len({m.labels["gpu_uuid"] for m in migs}) == 4
    assert not [r for r in readings if r.kind is Kind.PROCESS]  # <processes />
    messages = {r.labels["message"] for r in readings if r.kind is Kind.EVENT}
    assert messages == {"NVIDIA driver 535.54.03", "CUDA 12.2"}


def test_a10g_v11_throttle_reasons_and_process(shared: Path) -> None:
    readings = _load(shared, "a10g.xml")
    (gpu,) = _gpus(readings)
    v = gpu.values
    assert gpu.labels["gpu_model"] == "NVIDIA A10G"
    assert gpu.labels["gpu_index"] == "0"
    assert v["gpu_util_ratio"] == 0.0  # a real "0 %"
    assert v["fan_speed_ratio"] == 0.0
    assert v["pstate"] == 8.0
    assert v["power_watts"] == pytest.approx(25.58)
    assert v["power_limit_watts"] == 300.0  # <enforced_power_limit>
    assert v["temperature_celsius"] == 17.0
    assert "memory_temperature_celsius" not in v  # <memory_temp>N/A (GDDR)
    assert v["memory_total_bytes"] == 23028 * MIB
    assert v["memory_clock_max_hertz"] == 6251e6
    # <clocks_throttle_reason_gpu_idle>Active: bit 0x1, no throttling.
    assert v["clocks_event_reasons"] == 1.0
    assert v["throttle_power_ratio"] == 0.0
    assert v["throttle_thermal_ratio"] == 0.0
    assert v["remapped_rows_correctable_total"] == 0.0
    assert v["row_remap_failure"] == 0.0
    (proc,) = [r for r in readings if r.kind is Kind.PROCESS]
    assert proc.labels["pid"] == "725"
    assert proc.labels["process_name"] == "/usr/lib/xorg/Xorg"
    assert proc.labels["gpu_uuid"] == "GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94"
    assert proc.values == {"process_memory_used_bytes": 22 * MIB}


def test_tesla_t4_v11(shared: Path) -> None:
    readings = _load(shared, "tesla-t4.xml")
    (gpu,) = _gpus(readings)
    v = gpu.values
    assert gpu.labels["gpu_model"] == "Tesla T4"
    assert "fan_speed_ratio" not in v  # passively cooled: <fan_speed>N/A
    assert v["power_watts"] == pytest.approx(26.78)
    assert v["power_limit_watts"] == 70.0
    assert v["sm_clock_hertz"] == 585e6
    assert v["memory_clock_hertz"] == 5000e6
    assert v["sm_clock_max_hertz"] == 1590e6
    assert v["temperature_celsius"] == 40.0
    assert v["memory_used_bytes"] == 1032 * MIB
    assert v["clocks_event_reasons"] == 0.0
    procs = {r.labels["pid"]: r for r in readings if r.kind is Kind.PROCESS}
    assert set(procs) == {"675", "5762"}
    assert procs["5762"].labels["process_name"] == "python"
    assert procs["5762"].values["process_memory_used_bytes"] == 1005 * MIB


def test_rtx_3080_v13(shared: Path) -> None:
    readings = _load(shared, "rtx-3080-v13.xml")
    (gpu,) = _gpus(readings)
    v = gpu.values
    assert gpu.labels["gpu_model"] == "NVIDIA GeForce RTX 3080"
    assert v["gpu_util_ratio"] == pytest.approx(0.65)
    assert v["mem_copy_util_ratio"] == pytest.approx(0.09)
    assert v["power_watts"] == pytest.approx(139.62)  # <average_power_draw>
    assert v["power_instant_watts"] == pytest.approx(142.33)
    assert v["power_limit_watts"] == 320.0  # <current_power_limit>
    assert v["pstate"] == 2.0
    assert v["sm_clock_hertz"] == 1950e6
    assert v["memory_clock_hertz"] == 9251e6
    assert v["memory_used_bytes"] == 9184 * MIB
    assert v["pcie_tx_bytes_per_second"] == 1066699 * 1024
    assert v["pcie_rx_bytes_per_second"] == 14742333 * 1024
    assert v["power_violation_seconds_total"] == 0.0
    # ECC is N/A on GeForce: absent, not 0.
    assert "ecc_sbe_volatile_total" not in v
    assert "ecc_dbe_volatile_total" not in v
    assert "memory_temperature_celsius" not in v


def test_rtx_4000_ada_v13(shared: Path) -> None:
    readings = _load(shared, "rtx-4000-sff-ada-v13.xml")
    (gpu,) = _gpus(readings)
    v = gpu.values
    assert gpu.labels["gpu_model"] == "NVIDIA RTX 4000 SFF Ada Generation"
    assert v["fan_speed_ratio"] == pytest.approx(0.30)
    assert v["mem_copy_util_ratio"] == pytest.approx(0.37)
    assert v["power_watts"] == pytest.approx(8.81)
    assert v["power_instant_watts"] == pytest.approx(8.44)
    assert v["power_limit_watts"] == 70.0
    assert v["sm_clock_max_hertz"] == 3105e6
    assert v["clocks_event_reasons"] == 1.0  # gpu_idle Active
    # <clocks_event_reasons_counters_sw_power_cap>4251825415 us
    assert v["power_violation_seconds_total"] == pytest.approx(4251.825415)
    assert v["remapped_rows_uncorrectable_total"] == 0.0
    # Ada prints only tlimit-relative thresholds: no absolute slowdown temperature.
    assert "slowdown_temperature_celsius" not in v
    procs = [r for r in readings if r.kind is Kind.PROCESS]
    assert [p.labels["pid"] for p in procs] == ["1842", "3190", "4937", "34626"]
    assert procs[3].labels["process_name"] == "/usr/lib/chromium/chromium"
    assert procs[3].values["process_memory_used_bytes"] == 183 * MIB


def test_throttle_flags_from_active_reasons() -> None:
    xml = """<?xml version="1.0" ?>
<nvidia_smi_log><driver_version>550.1</driver_version><cuda_version>N/A</cuda_version>
<gpu id="0"><product_name>X</product_name><uuid>GPU-x</uuid>
<clocks_event_reasons>
<clocks_event_reason_sw_power_cap>Active</clocks_event_reason_sw_power_cap>
<clocks_event_reason_sw_thermal_slowdown>Active</clocks_event_reason_sw_thermal_slowdown>
<clocks_event_reason_sync_boost>[Not Supported]</clocks_event_reason_sync_boost>
</clocks_event_reasons>
<processes><process_info><gpu_instance_id>7</gpu_instance_id><pid>9</pid>
<process_name>p</process_name><used_memory>N/A</used_memory></process_info></processes>
</gpu></nvidia_smi_log>"""
    readings = parse_nvsmi_xml(xml, "inline", TS, "h")
    gpu = readings[0]
    assert gpu.values == {
        "clocks_event_reasons": float(0x4 | 0x20),
        "throttle_power_ratio": 1.0,
        "throttle_thermal_ratio": 1.0,
    }
    proc = readings[1]
    assert proc.kind is Kind.PROCESS and proc.values == {}  # memory N/A: absent
    assert [r.labels["event"] for r in readings[2:]] == ["driver_version"]  # CUDA N/A


def test_energy_counter_when_present() -> None:
    xml = (
        "<nvidia_smi_log><gpu><uuid>GPU-e</uuid><gpu_power_readings>"
        "<total_energy_consumption>123456 mJ</total_energy_consumption>"
        "</gpu_power_readings></gpu></nvidia_smi_log>"
    )
    (gpu,) = parse_nvsmi_xml(xml, "inline", TS, "h")
    assert gpu.values == {"energy_joules": pytest.approx(123.456)}


@pytest.mark.parametrize(
    ("xml", "line", "words"),
    [
        ("<nvidia_smi_log>\n<gpu>\n<uuid>GPU-1</uuid>\n", 4, "not well-formed"),
        ("<other/>", 1, "root element"),
        ("", 1, "not well-formed"),
        ("<nvidia_smi_log>\n<gpu>\n</gpu>\n</nvidia_smi_log>", 2, "no <uuid>"),
        (
            "<nvidia_smi_log>\n<gpu><uuid>G</uuid>\n<fan_speed>250 %%</fan_speed>"
            "</gpu></nvidia_smi_log>",
            3,
            "fan_speed",
        ),
        (
            "<nvidia_smi_log><gpu><uuid>G</uuid>\n\n<utilization><gpu_util>140 %</gpu_util>"
            "</utilization></gpu></nvidia_smi_log>",
            3,
            "out of range",
        ),
        (
            "<nvidia_smi_log><gpu><uuid>G</uuid><clocks>\n<sm_clock>fast</sm_clock>"
            "</clocks></gpu></nvidia_smi_log>",
            2,
            "expected a number",
        ),
        (
            "<nvidia_smi_log><gpu><uuid>G</uuid><fb_memory_usage>\n<used>3 parsecs</used>"
            "</fb_memory_usage></gpu></nvidia_smi_log>",
            2,
            "unexpected unit",
        ),
    ],
)
def test_bad_xml_names_source_and_line(xml: str, line: int, words: str) -> None:
    with pytest.raises(NvidiaSmiParseError) as info:
        parse_nvsmi_xml(xml, "nvidia-smi -q -x", TS, "h")
    err = info.value
    assert err.source == "nvidia-smi -q -x"
    assert err.line == line
    assert words in str(err)
    assert "nvidia-smi -q -x" in str(err)


def test_truncated_capture_names_last_line(shared: Path) -> None:
    path = shared / XML_DIR / "tesla-t4.xml"
    text = path.read_text(encoding="utf-8")
    cut = text[: len(text) // 2]
    with pytest.raises(NvidiaSmiParseError) as info:
        parse_nvsmi_xml(cut, str(path), TS, "h")
    assert info.value.line == cut.count("\n") + 1
    assert str(path) in str(info.value)
