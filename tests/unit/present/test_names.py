"""GPU names on real captures: the A100 dump in MIG mode and the RTX 3080 dump, both index 0
of one host: every name differs, instances read `MIG <profile> #<GPU instance>` under their
parent."""

from __future__ import annotations

from pathlib import Path

from gpulens.collect.nvidia_smi import parse_nvsmi_xml
from gpulens.model import Kind
from gpulens.present.names import gpu_names, gpu_order

XML = "data/telemetry/influxdata_telegraf/plugins/inputs/nvidia_smi/testdata"


def _labels(shared: Path, name: str) -> list[dict[str, str]]:
    text = (shared / XML / name).read_text(encoding="utf-8")
    return [dict(r.labels) for r in parse_nvsmi_xml(text, name, 0, "vm") if r.kind is Kind.GPU]


def test_mig_instances_under_their_parent(shared: Path) -> None:
    rows = _labels(shared, "a100-sxm4-v12.xml")
    assert gpu_names(rows) == ["vm/0", *(f"vm/0 MIG 1g.20gb #{gi}" for gi in (3, 4, 5, 6))]


def test_repeated_indices_get_a_uuid_suffix(shared: Path) -> None:
    rows = _labels(shared, "rtx-3080-v13.xml") + _labels(shared, "a100-sxm4-v12.xml")
    rows.sort(key=gpu_order)
    names = gpu_names(rows)
    assert len(set(names)) == len(names)
    assert names[0].startswith("vm/0 ·") and names[0].split("·")[1] in rows[0]["gpu_uuid"]
    parent = next(n for n, r in zip(names, rows, strict=True) if r["gpu_uuid"].endswith("298"))
    assert parent == "vm/0 ·298"
    migs = [f"{parent} MIG 1g.20gb #{gi}" for gi in (3, 4, 5, 6)]
    assert [n for n in names if "MIG" in n] == migs


def test_a_profile_is_named(shared: Path) -> None:
    rows = _labels(shared, "a100-sxm4-v12.xml")
    rows[1]["mig_profile"] = "3g.40gb"  # as dcgm-exporter's GPU_I_PROFILE names it
    assert gpu_names(rows)[1] == "vm/0 MIG 3g.40gb #3"
    assert gpu_names(rows[1:2]) == ["vm/0 MIG 3g.40gb #3"]  # without its parent's row
    del rows[2]["mig_profile"]
    assert gpu_names(rows)[2] == "vm/0 MIG #4"  # a profile nobody named
