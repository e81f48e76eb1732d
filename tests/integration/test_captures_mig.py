"""MIG instances stay themselves (issue 16 §3), on a real A100 dump in MIG mode: every table
names a GPU unambiguously (host, index, a short UUID suffix where indices repeat, and
`MIG ... #<GPU instance>` under its parent), and the parent's figures are not counted twice
with its instances."""

from __future__ import annotations

from pathlib import Path

import pytest
from replay import NS, T0, XML, config, ingest_and_report, xml_series

from gpulens.app.analysis import report
from gpulens.present.reports.fleet import to_markdown, to_terminal

H = 3600.0
TIMES = [T0 + i * 60 * NS for i in range(4)]  # four dumps a minute apart: 240 s covered


def _store(shared: Path, tmp_path: Path, drop_mig: tuple[int, ...] = ()) -> list[Path]:
    files = xml_series(shared / XML / "a100-sxm4-v12.xml", TIMES, tmp_path / "a100", drop_mig)
    files += xml_series(shared / XML / "rtx-3080-v13.xml", TIMES, tmp_path / "rtx")
    return files  # both GPUs are index 0 of host "vm"


def test_every_gpu_has_its_own_name(shared: Path, tmp_path: Path) -> None:
    doc = ingest_and_report(tmp_path / "store", _store(shared, tmp_path))
    names = [g["name"] for g in doc["gpus"]]
    assert len(set(names)) == len(names) == 6, names
    parent = next(g for g in doc["gpus"] if g.get("mig_instances"))
    migs = [g["name"] for g in doc["gpus"] if g.get("parent_uuid")]
    assert migs == [f"{parent['name']} MIG 1g.20gb #{gi}" for gi in (3, 4, 5, 6)]
    assert parent["name"].startswith("vm/0 ·") and parent["name"].endswith("298")
    order = [g["name"] for g in doc["gpus"]]
    assert order.index(parent["name"]) + 1 == order.index(migs[0])  # instances under it
    cfg = config(tmp_path / "store")
    view = report(cfg)
    for text in (to_markdown(view), to_terminal(view)):
        for name in migs:
            assert name.removeprefix("vm/") in text


def test_parent_and_instances_never_counted_twice(shared: Path, tmp_path: Path) -> None:
    doc = ingest_and_report(tmp_path / "store", _store(shared, tmp_path))
    t = doc["totals"]
    assert t["gpus"] == 2 and t["mig_instances"] == 4
    parent = next(g for g in doc["gpus"] if g.get("mig_instances"))
    assert parent["gpu_hours"] == 0.0
    assert parent["memory_used_bytes_max"] is None  # its instances hold the memory
    migs = [g for g in doc["gpus"] if g.get("parent_uuid")]
    # four instances of unknown profile: 1/7 of the GPU each, over 240 s
    assert sum(g["gpu_hours"] for g in migs) == pytest.approx(4 / 7 * 240 / H)
    whole = next(g for g in doc["gpus"] if not g.get("parent_uuid") and not g.get("mig_instances"))
    assert whole["gpu_hours"] == pytest.approx(240 / H)
    assert t["gpu_hours"] == pytest.approx((1 + 4 / 7) * 240 / H)


def test_another_layout_two_instances(shared: Path, tmp_path: Path) -> None:
    doc = ingest_and_report(tmp_path / "store", _store(shared, tmp_path, drop_mig=(1, 3)))
    migs = [g["name"] for g in doc["gpus"] if g.get("parent_uuid")]
    assert [m.rsplit(" ", 2)[-2:] for m in migs] == [["1g.20gb", "#3"], ["1g.20gb", "#5"]]
    assert doc["totals"]["mig_instances"] == 2
