"""Time comes from the capture (issue 16 §1): nvidia-smi's XML `<timestamp>` and the
`timestamp` field of `--query-gpu` (local time without a zone, read in `--tz` or the
`ingest.timezone` setting, UTC by default), exposition sample timestamps; only a capture
without a time falls back to `--time`, then to the file's time, and the report says which."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from replay import CAPTURES, NS, T0, XML, config, ingest_and_report

from gpulens.app.analysis import report
from gpulens.app.ingest import ingest
from gpulens.errors import ConfigError
from gpulens.store import Store

A100 = f"{XML}/a100-sxm4-v12.xml"  # <timestamp>Fri Aug  4 11:44:30 2023</timestamp>
A100_AT = int(datetime(2023, 8, 4, 11, 44, 30, tzinfo=UTC).timestamp()) * NS
L40S = f"{CAPTURES}/linux-x86_64__nvidia-l40s__595.80.txt"  # 2026/07/03 08:33:38.737
L40S_AT = int(datetime(2026, 7, 3, 8, 33, 38, tzinfo=UTC).timestamp()) * NS + 737_000_000
L4_PAGE = (
    "data/telemetry/cncf_k8s-ai-conformance/v1.35/kops/tests/"
    "TestObservability_AcceleratorMetrics_ViaDCGM/output.prom"
)
T4_PAGE = "data/telemetry/cncf_k8s-ai-conformance/v1.35/rafay/accelator_metrics.prom"


def _gpu_times(data_dir: Path) -> set[int]:
    with Store(data_dir) as store:
        rows = store.query("SELECT DISTINCT epoch_ns(ts) AS t FROM gpu").to_pylist()
    return {r["t"] for r in rows}


def _window(doc: dict[str, object]) -> tuple[int, int]:
    t = doc["totals"]
    assert isinstance(t, dict)
    return int(t["start_ns"]), int(t["end_ns"])


def test_xml_timestamp_is_the_reading_time(shared: Path, tmp_path: Path) -> None:
    doc = ingest_and_report(tmp_path / "store", [shared / A100])
    assert _gpu_times(tmp_path / "store") == {A100_AT}
    lo, hi = _window(doc)
    assert lo <= A100_AT < hi and hi - lo <= 3600 * NS  # 2023-08-04, not the file's time
    notes = doc["notes"]
    assert isinstance(notes, list)
    assert any("nvidia-smi timestamps, local time read as UTC" in n for n in notes)


def test_tz_reads_nvidia_smi_local_time(shared: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gpulens", "ingest", str(shared / A100), "--tz",
         "Europe/Berlin", "--data-dir", str(tmp_path / "store")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert _gpu_times(tmp_path / "store") == {A100_AT - 2 * 3600 * NS}  # CEST is UTC+2
    view = report(config(tmp_path / "store"))
    assert any("read as Europe/Berlin" in n for n in view.notes)


def test_query_gpu_timestamp_column(shared: Path, tmp_path: Path) -> None:
    lines = (shared / L40S).read_text(encoding="utf-8").splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("timestamp,"))
    log = tmp_path / "query.csv"
    log.write_text("\n".join(lines[at : at + 2]) + "\n", encoding="utf-8")
    ingest(config(tmp_path / "s"), [log], None, "vm", None, tz="America/New_York")
    assert _gpu_times(tmp_path / "s") == {L40S_AT + 4 * 3600 * NS}  # EDT is UTC-4


def test_exposition_sample_timestamps(shared: Path, tmp_path: Path) -> None:
    ms = (T0 + 42 * NS) // 1_000_000
    text = (shared / L4_PAGE).read_text(encoding="utf-8")
    page = tmp_path / "stamped.prom"
    page.write_text(
        "\n".join(ln if ln.startswith("#") or not ln.strip() else f"{ln} {ms}"
                  for ln in text.splitlines()) + "\n",
        encoding="utf-8",
    )  # fmt: skip
    doc = ingest_and_report(tmp_path / "store", [page])
    assert _gpu_times(tmp_path / "store") == {ms * 1_000_000}
    notes = doc["notes"]
    assert isinstance(notes, list)
    assert any("sample timestamps" in n for n in notes)


@pytest.mark.parametrize("given", [True, False])
def test_no_time_in_the_capture_falls_back(shared: Path, tmp_path: Path, given: bool) -> None:
    page = tmp_path / "page.prom"
    page.write_bytes((shared / T4_PAGE).read_bytes())
    os.utime(page, ns=(T0, T0))
    cfg = config(tmp_path / "store")
    ingest(cfg, [page], None, "vm", T0 + 3600 * NS if given else None)
    assert _gpu_times(tmp_path / "store") == {T0 + 3600 * NS if given else T0}
    notes = report(cfg).notes
    said = "stamped with --time" if given else "stamped with the file's modification time"
    assert any(said in n for n in notes), notes


def test_unknown_time_zone_is_one_clear_error(shared: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown time zone 'Mars/Olympus'.*IANA"):
        ingest(config(tmp_path / "s"), [shared / A100], None, "vm", None, tz="Mars/Olympus")
