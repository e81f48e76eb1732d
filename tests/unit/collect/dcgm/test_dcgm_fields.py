"""The committed field table agrees with NVIDIA's headers (4.5.3 and 4.6) and the catalog."""

from __future__ import annotations

from pathlib import Path

from dcgm_headers import HEADER_DIR, field_ids, names_by_id

from gpulens import catalog
from gpulens.collect.dcgm import fields


def test_table_matches_both_headers(shared: Path) -> None:
    ids = set(catalog.BY_DCGM_ID) | set(fields.LABEL_FIELD_IDS)
    expected = {name: fid for fid, names in names_by_id(shared, ids).items() for name in names}
    assert dict(fields.FIELD_IDS) == expected, (
        "fields.FIELD_IDS is out of date: run tests/unit/collect/dcgm/gen_dcgm_fields.py"
    )


def test_both_spellings_present(shared: Path) -> None:
    new = field_ids(shared / HEADER_DIR / "dcgm_fields.h")
    old = field_ids(shared / HEADER_DIR / "dcgm_fields.v4.5.3.h")
    for name, fid in (
        ("DCGM_FI_PROF_SM_ACTIVE", 1002),
        ("DCGM_FI_PROF_SM_UTIL_RATIO", 1002),
        ("DCGM_FI_DEV_GPU_UTIL", 203),
        ("DCGM_FI_DEV_GPU_UTIL_RATIO", 203),
        ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 112),
        ("DCGM_FI_DEV_POWER_USAGE", 155),
        ("DCGM_FI_DEV_BOARD_POWER_WATTS", 155),
    ):
        assert fields.FIELD_IDS[name] == fid
        assert new.get(name, old.get(name)) == fid
    assert "DCGM_FI_PROF_SM_UTIL_RATIO" not in old  # the 4.6 name is new in 4.6
    assert old["DCGM_FI_PROF_SM_ACTIVE"] == 1002  # primary define before the rename


def test_every_catalog_dcgm_metric_is_reachable_by_its_catalog_name() -> None:
    for fid, metric in catalog.BY_DCGM_ID.items():
        assert metric.dcgm_name is not None
        spec = fields.lookup(metric.dcgm_name)
        assert spec is not None and spec.field_id == fid and spec.metric == metric.name


def test_legacy_names_come_from_the_compat_csv(shared: Path) -> None:
    csv = shared / "data/telemetry/NVIDIA_dcgm-exporter/etc/1.x-compatibility-metrics.csv"
    text = csv.read_text(encoding="utf-8")
    for name in fields.LEGACY_NAMES:
        assert f"{name}," in text, name
    lowered = fields.lookup("dcgm_fi_prof_gr_engine_active")
    assert lowered is not None and lowered.metric == "graphics_active_ratio"


def test_label_fields_are_driver_version() -> None:
    assert fields.LABEL_FIELDS == {
        "DCGM_FI_DRIVER_VERSION": "driver_version",
        "DCGM_FI_SYSTEM_DRIVER_VERSION": "driver_version",
    }
