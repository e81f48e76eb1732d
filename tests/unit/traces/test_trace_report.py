"""`run_trace`: the JSON schema, the text renderers, the HTML timeline, --compare."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from gpulens.errors import TraceFormatError
from gpulens.present.reports.trace import run_trace

from .scenarios import every_cause, rank


def test_json_schema(write_trace: Callable[..., Path]) -> None:
    doc = json.loads(run_trace([write_trace(every_cause())], "json"))
    assert set(doc) >= {"schema_version", "ranks", "cluster", "findings", "compare"}
    (r,) = doc["ranks"]
    assert set(r) >= {
        "rank",
        "file",
        "device",
        "temporal",
        "idle_by_stream",
        "device_idle_us",
        "idle_causes",
        "kernel_classes",
        "steps",
    }
    assert set(r["temporal"]) == {"kernel_time_us", "idle_us", "compute_us", "non_compute_us"}
    assert set(r["idle_by_stream"][0]) == {"stream", "host_wait_us", "kernel_wait_us", "other_us"}
    assert r["device_idle_us"] == 368
    assert r["idle_causes"]["causes"]["data_loader"]["idle_us"] == 110
    assert r["idle_causes"]["causes"]["data_loader"]["examples"][0]["offset_us"] == 20
    assert [s["step"] for s in r["steps"]] == [1, 2]
    assert [f["rule_id"] for f in doc["findings"]][:2] == ["cpu_bound", "input_bound"]
    assert doc["cluster"]["ranks"] == 1


def test_directory_of_ranks_and_formats(write_trace: Callable[..., Path], tmp_path: Path) -> None:
    write_trace(rank(100, 100, 0), "rank0.json")
    folder = write_trace(rank(190, 10, 1), "rank1.json").parent
    doc = json.loads(run_trace([folder], "json"))
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert doc["cluster"]["straggler"] == 1
    assert [r["rank"] for r in doc["cluster"]["per_rank"]] == [0, 1]
    text = run_trace([folder], "terminal")
    assert "straggler: rank 1" in text and "Idle gaps by cause" in text
    md = run_trace([folder], "markdown")
    assert md.startswith("# Trace analysis: 2 ranks") and "| rank |" in md
    out = tmp_path / "report.html"
    page = run_trace([folder], "html", out)
    assert out.read_text(encoding="utf-8") == page
    assert "<svg" in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")


def test_html_timeline_colours_gaps(write_trace: Callable[..., Path]) -> None:
    page = run_trace([write_trace(every_cause())], "html")
    assert "data_loader: 110 µs at +20 µs" in page  # from the trace's first event


def test_compare(write_trace: Callable[..., Path]) -> None:
    before = write_trace(every_cause(), "before.json")
    after = write_trace(rank(100, 20, 0), "after.json")
    doc = json.loads(run_trace([after], "json", compare=[before]))
    cmp = doc["compare"]
    (row,) = cmp["ranks"]
    figure = row["figures"]["idle_data_loader_us"]
    assert (figure["before"], figure["after"], figure["delta"]) == (110, 0, -110)
    assert "input_bound" in cmp["findings_resolved"]
    assert "Before / after" in run_trace([after], "terminal", compare=[before])


def test_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown format"):
        run_trace([tmp_path], "pdf")
    with pytest.raises(TraceFormatError, match="no trace files"):
        run_trace([tmp_path], "json")
