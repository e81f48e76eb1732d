"""parse_exposition on real dcgm-exporter pages (read in place from ../shared) and on edits.

Expected values were read off the raw files by eye, in DCGM units, and are converted here.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gpulens import catalog
from gpulens.collect.dcgm.parse import DcgmParseError, ParseResult, parse_exposition
from gpulens.errors import CollectError
from gpulens.model import Kind, Reading

MIB = 1024 * 1024
TS = 1_764_000_000_000_000_000
CNCF = "data/telemetry/cncf_k8s-ai-conformance"
T4_LOAD = f"{CNCF}/v1.35/ericsson-ccd/accelerator_metrics.prom"
T4_IDLE = f"{CNCF}/v1.35/rafay/accelator_metrics.prom"
L4 = f"{CNCF}/v1.35/kops/tests/TestObservability_AcceleratorMetrics_ViaDCGM/output.prom"
VGPU = f"{CNCF}/v1.35/vks/accelerator_metrics.prom"

# Per file: labels, values (DCGM units already converted), metrics that must be absent.
EXPECTED: dict[str, tuple[dict[str, str], dict[str, float], set[str]]] = {
    T4_LOAD: (
        {
            "host": "cp-bm14r7",
            "gpu_uuid": "GPU-6d5c0ac5-74d7-3130-46f1-e93ed57f469a",
            "gpu_index": "0",
            "gpu_model": "Tesla T4",
            "pci_bus_id": "00000000:37:00.0",
        },
        {
            "sm_clock_hertz": 660e6,
            "memory_clock_hertz": 5000e6,
            "temperature_celsius": 74,
            "power_watts": 68.244,
            "energy_joules": 15152422938 / 1000,
            "pcie_replay_total": 0,
            "gpu_util_ratio": 0.91,
            "mem_copy_util_ratio": 0.73,
            "enc_util_ratio": 0,
            "dec_util_ratio": 0,
            "memory_free_bytes": 9791 * MIB,
            "memory_used_bytes": 5120 * MIB,
            "memory_reserved_bytes": 447 * MIB,
            "graphics_active_ratio": 0.156205,
            "tensor_active_ratio": 0.005822,
            "dram_active_ratio": 0.092781,
            "pcie_tx_bytes_per_second": 4791810,
            "pcie_rx_bytes_per_second": 6935930,
        },
        {"power_limit_watts", "sm_active_ratio", "memory_temperature_celsius"},
    ),
    T4_IDLE: (
        {"host": "ip-10-200-3-41", "gpu_model": "Tesla T4", "gpu_index": "0"},
        {
            "gpu_util_ratio": 0,
            "memory_free_bytes": 14912 * MIB,
            "memory_used_bytes": 0,
            "memory_reserved_bytes": 447 * MIB,
            "temperature_celsius": 24,
            "power_watts": 14.512,
            "energy_joules": 48287.135,
            "sm_clock_hertz": 300e6,
            "memory_clock_hertz": 405e6,
            "pcie_tx_bytes_per_second": 29285,
            "pcie_rx_bytes_per_second": 30378,
            "enc_util_ratio": 0,
            "dec_util_ratio": 0,
            "graphics_active_ratio": 0,
            "tensor_active_ratio": 0,
            "dram_active_ratio": 0.000001,
        },
        {"mem_copy_util_ratio", "memory_temperature_celsius"},
    ),
    L4: (
        {
            "host": "i-030791dc5a37cd257",
            "gpu_model": "NVIDIA L4",
            "gpu_uuid": "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c",
        },
        {
            "sm_clock_hertz": 210e6,
            "memory_clock_hertz": 405e6,
            "temperature_celsius": 31,
            "power_watts": 16.365,
            "energy_joules": 4742.776,
            "pcie_replay_total": 0,
            "gpu_util_ratio": 0,
            "mem_copy_util_ratio": 0,
            "memory_free_bytes": 22563 * MIB,
            "memory_used_bytes": 0,
            "memory_reserved_bytes": 470 * MIB,
            "remapped_rows_uncorrectable_total": 0,
            "remapped_rows_correctable_total": 0,
            "row_remap_failure": 0,
            "graphics_active_ratio": 0,
            "tensor_active_ratio": 0,
            "dram_active_ratio": 0,
            "pcie_tx_bytes_per_second": 112603,
            "pcie_rx_bytes_per_second": 17544,
        },
        {"memory_temperature_celsius"},
    ),
    VGPU: (
        {"host": "test-ai-1-node-pool-40c-d5ds8-br9r6-9tb2c", "gpu_model": "GRID A100-40C"},
        {
            "sm_clock_hertz": 1410e6,
            "memory_clock_hertz": 1215e6,
            "gpu_util_ratio": 0,
            "mem_copy_util_ratio": 0,
            "memory_free_bytes": 37739 * MIB,
            "memory_used_bytes": 0,
            "memory_reserved_bytes": 3220 * MIB,
        },
        {
            "power_watts",
            "energy_joules",
            "temperature_celsius",
            "graphics_active_ratio",
            "tensor_active_ratio",
            "dram_active_ratio",
            "pcie_tx_bytes_per_second",
        },
    ),
}
DRIVERS = {T4_LOAD: "590.48.01", T4_IDLE: "580.105.08", L4: "580.105.08", VGPU: "580.126.09"}


def _pages(shared: Path) -> list[str]:
    roots = [shared / CNCF, shared / "data/telemetry/NVIDIA_dcgm-exporter"]
    found = {
        str(p.relative_to(shared))
        for root in roots
        for pattern in ("*.prom", "*.metrics", "*.txt")
        for p in root.rglob(pattern)
    }
    return sorted(found)


def _parse(shared: Path, rel: str) -> ParseResult:
    path = shared / rel
    return parse_exposition(path.read_text(encoding="utf-8"), str(path), TS)


def _gpus(result: ParseResult) -> list[Reading]:
    return [r for r in result.readings if r.kind is Kind.GPU]


def _t4(shared: Path) -> str:
    return (shared / T4_LOAD).read_text(encoding="utf-8")


def test_every_real_page_has_expectations(shared: Path) -> None:
    assert set(_pages(shared)) == set(EXPECTED)


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_real_page(shared: Path, rel: str) -> None:
    labels, values, absent = EXPECTED[rel]
    result = _parse(shared, rel)
    (gpu,) = _gpus(result)
    assert gpu.ts == TS
    for key, want in labels.items():
        assert gpu.labels[key] == want
    for name, want in values.items():
        assert name in catalog.METRICS
        assert gpu.values[name] == pytest.approx(want, rel=1e-9, abs=1e-12), name
    for name in absent:
        assert name not in gpu.values, name
    assert set(gpu.values) <= set(catalog.METRICS)
    (drv,) = [r for r in result.readings if r.kind is Kind.EVENT]
    assert drv.labels["event"] == "driver_version"
    assert drv.labels["driver_version"] == DRIVERS[rel]
    assert drv.labels["host"] == labels["host"]


def test_t4_under_load_is_busy_by_duty_cycle_and_idle_by_work(shared: Path) -> None:
    (gpu,) = _gpus(_parse(shared, T4_LOAD))
    v = gpu.values
    assert v["gpu_util_ratio"] == pytest.approx(0.91)
    assert v["graphics_active_ratio"] == pytest.approx(0.156, abs=1e-3)
    assert v["tensor_active_ratio"] == pytest.approx(0.0058, abs=1e-4)
    assert v["power_watts"] == pytest.approx(68.2, abs=0.05)
    assert v["sm_clock_hertz"] == 6.6e8
    assert "power_limit_watts" not in v  # the capture has no ENFORCED_POWER_LIMIT series


def test_t4_counts_unmapped_vgpu_license_field(shared: Path) -> None:
    result = _parse(shared, T4_LOAD)
    assert result.skipped == {"unknown_field": 1, "unsupported": 1}


def test_l4_page_holds_two_identical_scrapes(shared: Path) -> None:
    text = (shared / L4).read_text(encoding="utf-8")
    marker = "# HELP DCGM_FI_DEV_SM_CLOCK"
    second = text.index(marker, text.index(marker) + 1)
    first_page, second_page = text[:second], text[second:]
    a = _gpus(parse_exposition(first_page, "l4-1", TS))
    b = _gpus(parse_exposition(second_page, "l4-2", TS + 30 * 10**9))
    assert len(a) == len(b) == 1
    assert a[0].values == b[0].values and a[0].labels == b[0].labels
    assert b[0].ts == TS + 30 * 10**9
    whole = _parse(shared, L4)
    (gpu,) = _gpus(whole)
    assert gpu.values == a[0].values
    # 23 series per scrape: 21 mapped + VGPU_LICENSE_STATUS + MEMORY_TEMP (0 on GDDR).
    assert whole.skipped == {"unknown_field": 2, "unsupported": 2, "duplicate": 21}


def test_vgpu_page_has_no_profiling_power_or_temperature(shared: Path) -> None:
    (gpu,) = _gpus(_parse(shared, VGPU))
    assert not any(k.endswith("_active_ratio") for k in gpu.values)
    assert "power_watts" not in gpu.values and "temperature_celsius" not in gpu.values


@pytest.mark.parametrize("label", ["Hostname", "hostname"])
def test_hostname_label_in_both_casings(shared: Path, label: str) -> None:
    text = _t4(shared).replace("Hostname=", f"{label}=")
    (gpu,) = _gpus(parse_exposition(text, "t4", TS, default_host="fallback"))
    assert gpu.labels["host"] == "cp-bm14r7"


def test_default_host_when_no_hostname_label(shared: Path) -> None:
    text = _t4(shared).replace(',Hostname="cp-bm14r7"', "")
    (gpu,) = _gpus(parse_exposition(text, "t4", TS, default_host="node7"))
    assert gpu.labels["host"] == "node7"
    (gpu,) = _gpus(parse_exposition(text, "t4", TS))
    assert "host" not in gpu.labels


def test_dcgm_46_names_and_old_namespace_labels(shared: Path) -> None:
    text = (
        _t4(shared)
        .replace("DCGM_FI_DEV_GPU_UTIL{", "DCGM_FI_DEV_GPU_UTIL_RATIO{")
        .replace("DCGM_FI_PROF_GR_ENGINE_ACTIVE{", "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO{")
        .replace("DCGM_FI_DEV_POWER_USAGE{", "DCGM_FI_DEV_BOARD_POWER_WATTS{")
        .replace("UUID=", "uuid=")
        .replace("modelName=", "model_name=")
        .replace("DCGM_FI_DRIVER_VERSION=", "DCGM_FI_SYSTEM_DRIVER_VERSION=")
    )
    result = parse_exposition(text, "t4-46", TS)
    (gpu,) = _gpus(result)
    assert gpu.values["gpu_util_ratio"] == pytest.approx(0.91)
    assert gpu.values["graphics_active_ratio"] == pytest.approx(0.156205)
    assert gpu.values["power_watts"] == pytest.approx(68.244)
    assert gpu.labels["gpu_uuid"] == "GPU-6d5c0ac5-74d7-3130-46f1-e93ed57f469a"
    assert gpu.labels["gpu_model"] == "Tesla T4"
    assert any(r.label("driver_version") == "590.48.01" for r in result.readings)


LABELS = 'gpu="0",UUID="GPU-x",modelName="NVIDIA A100",Hostname="n1"'


def _line(name: str, value: str, labels: str = LABELS) -> str:
    return f"{name}{{{labels}}} {value}\n"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DCGM_FI_DEV_MEMORY_TEMP", "9223372036854775794"),  # INT64 NOT_SUPPORTED
        ("DCGM_FI_DEV_GPU_TEMP", "9223372036854775792"),  # INT64 BLANK
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "9223372036854775795"),  # counter, blank
        ("DCGM_FI_DEV_SM_CLOCK", "2147483632"),  # INT32 BLANK on an int gauge
        ("DCGM_FI_DEV_SM_CLOCK", "2147483634"),
        ("DCGM_FI_PROF_SM_ACTIVE", "140737488355328.000000"),  # FP64 BLANK
        ("DCGM_FI_DEV_POWER_USAGE", "140737488355330"),
        ("DCGM_FI_DEV_PSTATE", "32"),  # unknown pstate
    ],
)
def test_sentinels_are_dropped_not_zero(name: str, value: str) -> None:
    text = _line("DCGM_FI_DEV_GPU_UTIL", "50") + _line(name, value)
    result = parse_exposition(text, "s", TS)
    (gpu,) = _gpus(result)
    assert gpu.values == {"gpu_util_ratio": 0.5}
    assert result.skipped == {"sentinel": 1}


def test_large_counters_are_not_sentinels() -> None:
    text = _line("DCGM_FI_DEV_POWER_VIOLATION", "150000000000000") + _line(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "2147483640"
    )
    (gpu,) = _gpus(parse_exposition(text, "s", TS))
    assert gpu.values["power_violation_seconds_total"] == pytest.approx(150000.0)
    assert gpu.values["energy_joules"] == pytest.approx(2147483.640)


def test_byte_rates_in_the_int32_window_are_values() -> None:
    (gpu,) = _gpus(parse_exposition(_line("DCGM_FI_PROF_PCIE_RX_BYTES", "2147483640"), "s", TS))
    assert gpu.values["pcie_rx_bytes_per_second"] == 2147483640


def test_nan_and_text_values_are_rejected_per_line() -> None:
    text = (
        _line("DCGM_FI_DEV_GPU_UTIL", "7")
        + _line("DCGM_FI_PROF_SM_ACTIVE", "NaN")
        + _line("DCGM_FI_PROF_DRAM_ACTIVE", "+Inf")
        + _line("DCGM_FI_DEV_FB_USED", "ERROR - FAILED TO CONVERT TO STRING")
    )
    result = parse_exposition(text, "s", TS)
    (gpu,) = _gpus(result)
    assert gpu.values == {"gpu_util_ratio": 0.07}
    assert result.skipped == {"nan": 2, "non_numeric": 1}


def test_units_of_the_remaining_fields() -> None:
    text = "".join(
        _line(n, v)
        for n, v in (
            ("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "70.000000"),
            ("DCGM_FI_DEV_THERMAL_VIOLATION", "2500000000"),
            ("DCGM_FI_DEV_MAX_SM_CLOCK", "1590"),
            ("DCGM_FI_DEV_FB_TOTAL", "15360"),
            ("DCGM_FI_DEV_FAN_SPEED", "40"),
            ("DCGM_FI_PROF_NVLINK_TX_BYTES", "1000"),
            ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "4"),
            ("DCGM_FI_DEV_XID_ERRORS", "79"),
        )
    )
    (gpu,) = _gpus(parse_exposition(text, "s", TS))
    assert gpu.values == {
        "power_limit_watts": 70.0,
        "thermal_violation_seconds_total": 2.5,
        "sm_clock_max_hertz": 1590e6,
        "memory_total_bytes": 15360 * MIB,
        "fan_speed_ratio": 0.4,
        "nvlink_tx_bytes_per_second": 1000,
        "clocks_event_reasons": 4,
        "throttle_power_ratio": 1.0,
        "throttle_thermal_ratio": 0.0,
        "xid_last": 79,
    }


def test_mig_instances_are_their_own_entities() -> None:
    base = 'gpu="0",UUID="GPU-a800",modelName="NVIDIA A800",Hostname="n1"'
    text = "".join(
        _line("DCGM_FI_DEV_FB_FREE", free, f'{base},GPU_I_PROFILE="2g.20gb",GPU_I_ID="{gi}"')
        for gi, free in (("1", "19957"), ("5", "100"))
    ) + _line("DCGM_FI_DEV_GPU_UTIL", "3", base)
    gpus = _gpus(parse_exposition(text, "mig", TS))
    assert len(gpus) == 3
    mig = {g.labels.get("mig_instance"): g for g in gpus}
    assert mig["1"].labels["gpu_uuid"] == "GPU-a800/gi1"
    assert mig["1"].labels["parent_uuid"] == "GPU-a800"
    assert mig["1"].labels["mig_profile"] == "2g.20gb"
    assert mig["1"].labels["gpu_index"] == "0"
    assert mig["1"].values == {"memory_free_bytes": 19957 * MIB}
    assert mig["5"].labels["gpu_uuid"] == "GPU-a800/gi5"
    assert mig[None].labels["gpu_uuid"] == "GPU-a800"
    assert "parent_uuid" not in mig[None].labels


def test_pod_and_job_labels_go_on_the_gpu_reading() -> None:
    pod = f'{LABELS},pod="train-0",namespace="ml",container="trainer",hpc_job="42"'
    text = _line("DCGM_FI_DEV_GPU_UTIL", "90", pod) + _line("DCGM_FI_PROF_SM_ACTIVE", "0.4", pod)
    result = parse_exposition(text, "k8s", TS)
    (gpu,) = result.readings[:1]
    assert len(_gpus(result)) == 1
    assert gpu.labels["pod"] == "train-0"
    assert gpu.labels["namespace"] == "ml"
    assert gpu.labels["container"] == "trainer"
    assert gpu.labels["job_id"] == "42"
    assert gpu.values == {"gpu_util_ratio": 0.9, "sm_active_ratio": 0.4}


def test_exported_and_old_pod_label_names() -> None:
    relabelled = f'{LABELS},pod="dcgm-exporter-x",exported_pod="train-0",exported_namespace="ml"'
    old = f'{LABELS},pod_name="p",pod_namespace="ns",container_name="c"'
    (a,) = _gpus(parse_exposition(_line("DCGM_FI_DEV_GPU_UTIL", "1", relabelled), "s", TS))
    (b,) = _gpus(parse_exposition(_line("DCGM_FI_DEV_GPU_UTIL", "1", old), "s", TS))
    assert (a.labels["pod"], a.labels["namespace"]) == ("train-0", "ml")
    assert (b.labels["pod"], b.labels["namespace"], b.labels["container"]) == ("p", "ns", "c")


def test_series_of_two_pods_sharing_a_gpu_are_two_readings() -> None:
    text = _line("DCGM_FI_DEV_GPU_UTIL", "10", f'{LABELS},pod="a"') + _line(
        "DCGM_FI_DEV_GPU_UTIL", "10", f'{LABELS},pod="b"'
    )
    assert sorted(g.labels["pod"] for g in _gpus(parse_exposition(text, "s", TS))) == ["a", "b"]


def test_xid_labels_do_not_split_the_entity() -> None:
    text = _line("DCGM_FI_DEV_GPU_UTIL", "10") + _line(
        "DCGM_FI_DEV_XID_ERRORS", "31", f'{LABELS},err_code="31",err_msg="MMU fault"'
    )
    (gpu,) = _gpus(parse_exposition(text, "s", TS))
    assert gpu.values == {"gpu_util_ratio": 0.1, "xid_last": 31}


def test_series_without_a_gpu_and_exporter_families_are_counted() -> None:
    text = (
        _line("DCGM_FI_DEV_GPU_UTIL", "10")
        + _line("DCGM_FI_DEV_GPU_TEMP", "40", 'nvswitch="0",Hostname="n1"')
        + _line("DCGM_EXP_XID_ERRORS_COUNT", "1", f'{LABELS},xid="31"')
        + "go_goroutines 12\n"
    )
    result = parse_exposition(text, "s", TS)
    assert len(_gpus(result)) == 1
    assert result.skipped == {"no_gpu": 1, "unknown_field": 2}


def test_escaped_label_values_and_timestamps() -> None:
    labels = r'gpu="0",UUID="GPU-x",modelName="Tesla \"T4\" \\ x"'
    (gpu,) = _gpus(
        parse_exposition(_line("DCGM_FI_DEV_GPU_UTIL", "5 1700000000000", labels), "s", TS)
    )
    assert gpu.labels["gpu_model"] == 'Tesla "T4" \\ x'
    assert gpu.ts == TS


def test_empty_and_comment_only_pages_are_empty() -> None:
    assert parse_exposition("", "s", TS).readings == []
    assert parse_exposition("# HELP x y\n# TYPE x gauge\n\n", "s", TS).readings == []


@pytest.mark.parametrize(
    ("text", "line_no"),
    [
        ("<html><body>404</body></html>\n", 1),
        ('DCGM_FI_DEV_GPU_UTIL{gpu="0"} 1\nDCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-', 2),
        ('DCGM_FI_DEV_GPU_UTIL{gpu="0"} 1\nDCGM_FI_DEV_FB_USED{gpu="0"}\n', 2),
        ("# TYPE 9bad gauge\n", 1),
        ("# TYPE DCGM_FI_DEV_GPU_UTIL\n", 1),
        ('\n\nDCGM_FI_DEV_GPU_UTIL{gpu="0"} 1 2 3 x\n', 3),
        ('DCGM_FI_DEV_GPU_UTIL{gpu="0",gpu="1"} 1\n', 1),
        ("404 page not found\n", 1),
        ('{"status": "error"}\n', 1),
    ],
)
def test_bad_pages_raise_one_typed_error_naming_source_and_line(text: str, line_no: int) -> None:
    with pytest.raises(DcgmParseError) as info:
        parse_exposition(text, "http://n1:9400/metrics", TS)
    err = info.value
    assert isinstance(err, CollectError)
    assert err.line_no == line_no
    assert "http://n1:9400/metrics" in str(err) and f"line {line_no}" in str(err)
    assert "dcgm-exporter" in str(err)


def test_truncated_real_page_names_the_line(shared: Path) -> None:
    text = _t4(shared)
    cut = text.index('UUID="GPU-', text.index("DCGM_FI_DEV_GPU_UTIL")) + 8
    with pytest.raises(DcgmParseError) as info:
        parse_exposition(text[:cut], "t4", TS)
    assert info.value.line_no == 8  # GPU_UTIL is the 8th line of the capture


def test_values_are_finite_floats(shared: Path) -> None:
    for rel in EXPECTED:
        for r in _gpus(_parse(shared, rel)):
            assert all(isinstance(v, float) and math.isfinite(v) for v in r.values.values())
