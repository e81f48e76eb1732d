from __future__ import annotations

import re
from pathlib import Path

from gpulens import catalog
from gpulens.model import Kind

UNIT_SUFFIXES = {
    "ratio": ("_ratio",),
    "bytes": ("_bytes", "_bytes_total"),
    "bytes/s": ("_bytes_per_second",),
    "W": ("_watts",),
    "J": ("_joules",),
    "Hz": ("_hertz",),
    "°C": ("_celsius",),
    "s": ("_seconds", "_seconds_total"),
}


def test_names_are_unique_snake_case_and_carry_their_unit() -> None:
    names = [m.name for m in catalog.ALL_METRICS]
    assert len(names) == len(set(names))
    for m in catalog.ALL_METRICS:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", m.name), m.name
        suffixes = UNIT_SUFFIXES.get(m.unit)
        if suffixes:
            assert m.name.endswith(suffixes), (m.name, m.unit)
        assert m.help and (m.help[0].isupper() or m.help[0].isdigit()), m.name
        assert m.resolution > 0


def test_counters_and_their_rates() -> None:
    for counter, gauge in catalog.rate_pairs().items():
        assert catalog.get(counter).type == "counter"
        assert catalog.get(gauge).type == "gauge"
        assert catalog.get(gauge).kind is catalog.get(counter).kind


def test_dcgm_field_ids_match_the_dcgm_header(shared: Path) -> None:
    """Every DCGM id in the catalog is defined in dcgm_fields.h under the name we record."""
    header = (shared / "data/telemetry/NVIDIA_DCGM/dcgmlib/dcgm_fields.h").read_text()
    old = (shared / "data/telemetry/NVIDIA_DCGM/dcgmlib/dcgm_fields.v4.5.3.h").read_text()
    ids: dict[str, int] = {}
    aliases: dict[str, str] = {}
    for text in (old, header):
        for name, value in re.findall(r"#define\s+(DCGM_FI_\w+)\s+(\w+)", text):
            if value.isdigit():
                ids.setdefault(name, int(value))
            else:
                aliases.setdefault(name, value)
    for name, target in aliases.items():
        seen = 0
        while target in aliases and seen < 5:
            target, seen = aliases[target], seen + 1
        if target in ids:
            ids.setdefault(name, ids[target])
    for m in catalog.ALL_METRICS:
        if m.dcgm is None:
            continue
        assert m.dcgm_name is not None, m.name
        assert ids.get(m.dcgm_name) == m.dcgm, (m.name, m.dcgm_name, m.dcgm)


def test_gpm_ids_map_to_profiling_metrics() -> None:
    assert catalog.BY_GPM_ID[2].name == "sm_active_ratio"
    assert catalog.BY_GPM_ID[5].name == "tensor_active_ratio"
    assert catalog.BY_GPM_ID[10].name == "dram_active_ratio"
    assert catalog.BY_DCGM_ID[1004].name == "tensor_active_ratio"
    assert catalog.BY_DCGM_ID[203].name == "gpu_util_ratio"


def test_every_kind_with_values_has_metrics() -> None:
    for kind in (Kind.GPU, Kind.PROCESS, Kind.HOST, Kind.APP):
        assert catalog.metrics_of(kind)
    assert catalog.metrics_of(Kind.EVENT) == ()


def test_clock_event_reason_names() -> None:
    assert catalog.reason_names(0x4 | 0x20) == ["sw_power_cap", "sw_thermal_slowdown"]
    assert catalog.reason_names(0) == []
    assert catalog.POWER_REASON_BITS & 0x4 and catalog.THERMAL_REASON_BITS & 0x40
