"""A sample stands for the time it covers, no more (issue 16 §2), on real captures: a lone
dcgm-exporter page is a snapshot (no GPU-hours, no cost); a folder of periodic nvidia-smi
XML dumps and a `--query-gpu ... -l 5` log are series whose readings each cover the time to
the next one, capped at twice the sampling interval; the rest of a gap is no data."""

from __future__ import annotations

from pathlib import Path

import pytest
from replay import CAPTURES, NS, T0, XML, ingest_and_report, query_gpu_log, xml_series

from gpulens.app.gpus import SNAPSHOT_NOTE

H = 3600.0
IDLE_T4_PAGE = "data/telemetry/cncf_k8s-ai-conformance/v1.35/rafay/accelator_metrics.prom"
L40S = f"{CAPTURES}/linux-x86_64__nvidia-l40s__595.80.txt"


def test_one_dcgm_exporter_page_is_a_snapshot(shared: Path, tmp_path: Path) -> None:
    doc = ingest_and_report(tmp_path / "store", [shared / IDLE_T4_PAGE])
    t = doc["totals"]
    assert t["gpus"] == 1
    assert t["gpu_hours"] == 0.0 and t["total_cost"] == 0.0 and t["cost"] == 0.0
    assert t["no_data_gpu_hours"] == 0.0
    assert SNAPSHOT_NOTE in doc["notes"]
    assert doc["gpus"][0]["snapshot"] is True
    assert doc["gpus"][0]["mean_duty"] is not None  # the state at that instant is still shown
    assert all(f["rule_id"] == "snapshot_state" for f in doc["findings"])


@pytest.mark.parametrize(("spacing_s", "dumps"), [(5, 13), (60, 10)])
def test_periodic_xml_dumps_cover_their_spacing(
    shared: Path, tmp_path: Path, spacing_s: int, dumps: int
) -> None:
    times = [T0 + 17 * NS + i * spacing_s * NS for i in range(dumps)]
    files = xml_series(shared / XML / "rtx-3080-v13.xml", times, tmp_path / "dumps")
    doc = ingest_and_report(tmp_path / "store", files)
    t = doc["totals"]
    # each dump covers the time to the next; the last one its sampling interval
    assert t["gpu_hours"] == pytest.approx(dumps * spacing_s / H)
    assert t["no_data_gpu_hours"] == 0.0
    assert SNAPSHOT_NOTE not in doc["notes"]
    assert doc["gpus"][0]["snapshot"] is False


def test_irregular_dumps_with_a_gap_count_no_data(shared: Path, tmp_path: Path) -> None:
    offsets = [0, 5, 10, 15, 20, 300, 305, 310]  # 5 s spacing, then a 280 s gap
    files = xml_series(shared / XML / "a10g.xml", [T0 + s * NS for s in offsets], tmp_path / "d")
    doc = ingest_and_report(tmp_path / "store", files)
    t = doc["totals"]
    # 4 × 5 s, then the gap: 10 s covered (the cap, 2 × 5 s) and 270 s without data, then
    # 2 × 5 s and the last dump's 5 s
    assert t["gpu_hours"] == pytest.approx(45 / H)
    assert t["no_data_gpu_hours"] == pytest.approx(270 / H)
    assert t["allocated_gpu_hours"] + t["idle_unallocated_gpu_hours"] == pytest.approx(45 / H)
    assert any("without data" in n for n in doc["notes"])


def test_query_gpu_log_every_5s_is_a_series(shared: Path, tmp_path: Path) -> None:
    times = [T0 + 3 * NS + i * 5 * NS for i in range(20)]
    log = query_gpu_log(shared / L40S, times, tmp_path / "l40s.csv")
    doc = ingest_and_report(tmp_path / "store", [log])
    t = doc["totals"]
    assert t["gpus"] == 1
    assert t["gpu_hours"] == pytest.approx(20 * 5 / H)
    assert t["no_data_gpu_hours"] == 0.0
    assert doc["totals"]["start_ns"] <= times[0] < times[-1] < doc["totals"]["end_ns"]
