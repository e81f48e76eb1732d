"""`nvidia-smi --query-gpu=... --format=csv` sections of the nvidia_gpu_exporter captures.

Expected values were read by hand from the raw capture files (idle and load sections).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from nvsmi_captures import CAPTURE_DIR, CAPTURES, query_gpu_csv

from gpulens import catalog
from gpulens.collect.nvidia_smi import (
    QUERY_FIELDS,
    NvidiaSmiParseError,
    parse_query_csv,
    query_command,
)
from gpulens.collect.nvidia_smi.parse_csv import FIELDS, LABEL_FIELDS
from gpulens.model import Kind, Reading

MIB = 1024 * 1024
TS = 1_700_000_000_000_000_000
UUID0 = "GPU-00000000-0000-0000-0000-000000000000"


def _csv(shared: Path, key: str, state: str) -> str:
    return query_gpu_csv((shared / CAPTURE_DIR / CAPTURES[key]).read_text("utf-8"), state)


def _one(shared: Path, key: str, state: str) -> Reading:
    (reading,) = parse_query_csv(_csv(shared, key, state), CAPTURES[key], TS, "node1")
    return reading


# (capture, state) → values read from the raw file; None means "[N/A]" there (must be absent).
EXPECTED: dict[tuple[str, str], dict[str, float | None]] = {
    ("h100", "idle"): {
        "gpu_util_ratio": 0.0,
        "memory_used_bytes": 0.0,
        "power_watts": 69.85,
        "sm_clock_hertz": 345e6,
        "temperature_celsius": 41,
        "memory_temperature_celsius": 48,
        "clocks_event_reasons": 1,
        "fan_speed_ratio": None,
        "remapped_rows_correctable_total": 0,
        "row_remap_failure": 0,
    },
    ("h100", "load"): {
        "gpu_util_ratio": 1.0,
        "mem_copy_util_ratio": 0.11,
        "memory_total_bytes": 81559 * MIB,
        "memory_reserved_bytes": 479 * MIB,
        "memory_used_bytes": 19818 * MIB,
        "memory_free_bytes": 61263 * MIB,
        "power_watts": 631.95,
        "power_instant_watts": 625.68,
        "power_limit_watts": 700.0,
        "sm_clock_hertz": 1980e6,
        "memory_clock_hertz": 2619e6,
        "sm_clock_max_hertz": 1980e6,
        "memory_clock_max_hertz": 2619e6,
        "temperature_celsius": 59,
        "memory_temperature_celsius": 54,
        "pstate": 0,
        "clocks_event_reasons": 0,
        "throttle_power_ratio": 0,
        "power_violation_seconds_total": 0,
        "ecc_sbe_volatile_total": 0,
        "ecc_dbe_volatile_total": 0,
    },
    ("h100-mig", "idle"): {
        "gpu_util_ratio": None,
        "memory_used_bytes": 59 * MIB,
        "power_watts": 71.15,
        "clocks_event_reasons": 1,
    },
    ("h100-mig", "load"): {
        "gpu_util_ratio": None,
        "mem_copy_util_ratio": None,
        "enc_util_ratio": None,
        "memory_used_bytes": 11125 * MIB,
        "power_watts": 433.78,
        "sm_clock_hertz": 1980e6,
        "temperature_celsius": 53,
        "remapped_rows_correctable_total": None,
        "row_remap_failure": None,
    },
    ("h200", "idle"): {"gpu_util_ratio": 0.0, "power_watts": 77.71, "memory_used_bytes": 0.0},
    ("h200", "load"): {
        "gpu_util_ratio": 1.0,
        "mem_copy_util_ratio": 0.07,
        "memory_total_bytes": 143771 * MIB,
        "memory_used_bytes": 32362 * MIB,
        "power_watts": 627.40,
        "temperature_celsius": 52,
        "memory_temperature_celsius": 40,
        "memory_clock_hertz": 3201e6,
    },
    ("h200-mig", "idle"): {"gpu_util_ratio": None, "power_watts": 78.28},
    ("h200-mig", "load"): {
        "gpu_util_ratio": None,
        "memory_used_bytes": 16959 * MIB,
        "power_watts": 295.01,
        "sm_clock_hertz": 1980e6,
    },
    ("l40s", "idle"): {
        "gpu_util_ratio": 1.0,  # the duty cycle says 100 % on an "idle" card
        "mem_copy_util_ratio": 0.09,
        "power_watts": 144.97,
        "temperature_celsius": 63,
        "memory_temperature_celsius": None,  # GDDR6: N/A
        "sm_clock_hertz": 2520e6,
    },
    ("l40s", "load"): {
        "gpu_util_ratio": 0.09,
        "enc_util_ratio": 0.60,
        "dec_util_ratio": 0.0,
        "memory_used_bytes": 1235 * MIB,
        "power_watts": 110.23,
        "power_limit_watts": 350.0,
        "memory_clock_hertz": 9001e6,
    },
    ("rtx4080s", "idle"): {
        "fan_speed_ratio": 0.0,
        "pstate": 8,
        "mem_copy_util_ratio": 0.23,
        "power_watts": 26.20,
        "sm_clock_hertz": 210e6,
        "ecc_sbe_volatile_total": None,
    },
    ("rtx4080s", "load"): {
        "gpu_util_ratio": 0.07,
        "enc_util_ratio": 0.72,
        "memory_used_bytes": 1474 * MIB,
        "power_watts": 84.24,
        "power_limit_watts": 320.0,
        "sm_clock_hertz": 2805e6,
        "memory_clock_hertz": 11251e6,
        "pstate": 2,
    },
    ("rtx2080s", "idle"): {
        "fan_speed_ratio": 0.38,
        "pstate": 8,
        "power_watts": 39.17,  # power.draw.average is [N/A]; power.draw is not
        "memory_total_bytes": 8192 * MIB,
        "clocks_event_reasons": 1,
    },
    ("rtx2080s", "load"): {
        "gpu_util_ratio": 0.08,
        "mem_copy_util_ratio": 0.03,
        "enc_util_ratio": 1.0,
        "memory_used_bytes": 815 * MIB,
        "power_watts": 98.14,
        "power_limit_watts": 250.0,
        "sm_clock_hertz": 2070e6,
        "memory_clock_hertz": 7500e6,
        "sm_clock_max_hertz": 2145e6,
        "pstate": 2,
        "temperature_celsius": 38,
    },
}


@pytest.mark.parametrize(("key", "state"), sorted(EXPECTED))
def test_capture_values(shared: Path, key: str, state: str) -> None:
    reading = _one(shared, key, state)
    assert reading.kind is Kind.GPU
    assert reading.ts == TS
    assert reading.labels["gpu_uuid"] == UUID0
    assert reading.labels["gpu_index"] == "0"
    assert reading.labels["source"] == "nvidia_smi"
    for metric in reading.values:
        assert catalog.get(metric).kind is Kind.GPU
    for metric, want in EXPECTED[(key, state)].items():
        if want is None:
            assert metric not in reading.values, metric
        else:
            assert reading.values[metric] == pytest.approx(want), metric


def test_every_capture_is_covered() -> None:
    assert {key for key, _ in EXPECTED} == set(CAPTURES)


def test_models(shared: Path) -> None:
    assert _one(shared, "h200", "load").labels["gpu_model"] == "NVIDIA H200"
    assert _one(shared, "rtx2080s", "idle").labels["gpu_model"] == "NVIDIA GeForce RTX 2080 SUPER"


_UNIT_SUFFIX = re.compile(r" (W|MiB|MHz|%|us)$")


def _nounits(text: str) -> str:
    """What `--format=csv,nounits` prints: the same header, values without their unit."""
    lines = [line for line in text.splitlines() if line.strip()]
    rows = [", ".join(_UNIT_SUFFIX.sub("", c.strip()) for c in r.split(",")) for r in lines[1:]]
    return "\n".join([lines[0], *rows]) + "\n"


def _project(text: str, fields: list[str]) -> str:
    """Only `fields` (header names without units), in that order, like a narrower query."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = [c.strip() for c in lines[0].split(",")]
    names = [h.split(" [")[0] for h in header]
    picks = [names.index(f) for f in fields]
    out = []
    for line in lines:
        cells = [c.strip() for c in line.split(",")]
        out.append(", ".join(cells[i] for i in picks))
    return "\n".join(out)


@pytest.mark.parametrize("key", sorted(CAPTURES))
def test_nounits_gives_the_same_values(shared: Path, key: str) -> None:
    text = _csv(shared, key, "load")
    (with_units,) = parse_query_csv(text, "t", TS, "h")
    (without,) = parse_query_csv(_nounits(text), "t", TS, "h")
    assert dict(without.values) == pytest.approx(dict(with_units.values))
    assert dict(without.labels) == dict(with_units.labels)


def test_subset_in_any_order(shared: Path) -> None:
    text = _project(_csv(shared, "h100", "load"), ["power.draw", "uuid", "clocks.current.sm"])
    (reading,) = parse_query_csv(text, "t", TS, "h")
    assert reading.values == {"power_watts": pytest.approx(631.95), "sm_clock_hertz": 1980e6}
    assert reading.labels["gpu_uuid"] == UUID0
    assert reading.labels["gpu_index"] == "0"  # row order when `index` was not asked


def test_aliases_and_reason_columns_without_active_mask() -> None:
    text = (
        "index, clocks.sm [MHz], clocks.mem [MHz], clocks_throttle_reasons.sw_power_cap, "
        "clocks_throttle_reasons.hw_slowdown, some.future.field\n"
        "0, 1410, 1593, Active, Not Active, whatever\n"
        "1, 1410, 1593, Not Active, [Not Supported], 7\n"
    )
    first, second = parse_query_csv(text, "t", TS, "h")
    assert first.values["sm_clock_hertz"] == 1410e6
    assert first.values["memory_clock_hertz"] == 1593e6
    assert first.values["clocks_event_reasons"] == 0x4
    assert first.values["throttle_power_ratio"] == 1.0
    assert second.labels["gpu_index"] == "1"
    assert second.values["clocks_event_reasons"] == 0.0


def test_query_fields_are_all_understood() -> None:
    for field in QUERY_FIELDS:
        assert field in FIELDS or field in LABEL_FIELDS or field.endswith(".active"), field
    argv = query_command()
    assert argv[0] == "nvidia-smi" and argv[-1] == "--format=csv,nounits"
    assert argv[1] == "--query-gpu=" + ",".join(QUERY_FIELDS)


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("", 0, "empty output"),
        ("\n\n", 0, "empty output"),
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
            1,
            "CSV header",
        ),
        ("0, 100 %\n", 1, "CSV header"),
        ("index, utilization.gpu [%]\n0, 100 %, 3\n", 2, "columns"),
        ("index, utilization.gpu [%]\n0, 100 %\n1, 250 %\n", 3, "out of range"),
        ("index, power.draw [W]\n\n0, lots\n", 3, "expected a number"),
        ("index, pstate\n0, X9\n", 2, "performance state"),
        ("index, clocks_event_reasons.active\n0, 0xZZ\n", 2, "bitmask"),
    ],
)
def test_bad_csv_names_source_and_line(text: str, line: int, words: str) -> None:
    with pytest.raises(NvidiaSmiParseError) as info:
        parse_query_csv(text, "nvidia-smi --query-gpu=...", TS, "h")
    assert info.value.line == line
    assert words in str(info.value)
    assert "nvidia-smi --query-gpu=..." in str(info.value)


def test_truncated_capture(shared: Path) -> None:
    text = _csv(shared, "h100", "load").strip()
    with pytest.raises(NvidiaSmiParseError, match="columns"):
        parse_query_csv(text[: len(text) - 200], "t", TS, "h")


def test_reason_bits_match_the_catalog() -> None:
    from gpulens.collect.nvidia_smi.values import REASON_BITS

    assert set(REASON_BITS.values()) == set(catalog.CLOCK_EVENT_REASONS)
