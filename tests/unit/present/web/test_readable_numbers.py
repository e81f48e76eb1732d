"""Figures people read carry units and few digits (present/format.py): the fleet report, the
trace report over a real two-rank trace, and the dashboard's findings page never show an
exponent (`1.3e+09`), a raw count with thousands separators (`64,424,509,440`) or a number of
more than four significant digits; JSON keeps the raw values."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from gpulens.app.analysis import ReportView, analyse
from gpulens.present.format import metric_value, unit_of
from gpulens.present.reports.fleet import RENDERERS
from gpulens.present.reports.trace import run_trace
from gpulens.store import Store

from .conftest import NS, SPAN_S, START
from .helpers import TestClient

TRACE_PAIR = "data/traces/HolisticTraceAnalysis/tests/data/trace_filter"
MAX_DIGITS = 4

# numbers standing on their own: not part of an identifier (GPU-e587a412-0489-18e9, sim-1001,
# rank_0, #1b9e5a) nor the minutes of a time (00:04)
_EXPONENT = re.compile(r"(?<![\w.:#/-])\d+(?:\.\d+)?[eE][-+]?\d+(?![\w-])")
_SEPARATED = re.compile(r"\d{1,3}(?:,\d{3}){2,}")
_NUMBER = re.compile(r"(?<![\w.:#/-])\d[\d,]*(?:\.\d+)?(?![\w])")


def _visible(page: str) -> str:
    """The text of an HTML page a person sees (hover titles included), without style, script
    and tags."""
    page = re.sub(r"<(style|script)\b.*?</\1>", " ", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def _significant(token: str) -> int:
    return len(token.replace(",", "").replace(".", "").lstrip("0"))


def unreadable(text: str) -> list[str]:
    """The spots of `text` (with some context) that show a number raw."""
    bad = [*_EXPONENT.finditer(text), *_SEPARATED.finditer(text)]
    bad += [m for m in _NUMBER.finditer(text) if _significant(m.group()) > MAX_DIGITS]
    return [text[max(0, m.start() - 40) : m.end() + 20] for m in bad]


def test_the_scan_catches_raw_numbers() -> None:
    assert len(unreadable("held 64,424,509,440 bytes")) == 2  # separators, 11 digits
    assert len(unreadable("1.261e+05 launches/s")) == 1
    assert len(unreadable("126.04 ms")) == 1
    assert unreadable("0.000323 s, ratio 0.3537") == []  # 3 and 4 significant digits
    fine = "64.4 GB for 1 h 58 min at 46.9 k launches/s on GPU-e587-18e9-07344f, 2025-11-29 00:04"
    assert unreadable(fine) == []


@pytest.fixture(scope="module")
def report(store_dir: Path) -> ReportView:
    with Store(store_dir) as store:
        return analyse(store, START, START + SPAN_S * NS)


@pytest.mark.parametrize("fmt", ["terminal", "markdown", "html"])
def test_fleet_report_shows_readable_numbers(report: ReportView, fmt: str) -> None:
    assert report.findings, "the simulated store should give findings to show"
    text = RENDERERS[fmt](report)
    assert unreadable(_visible(text) if fmt == "html" else text) == []


def test_fleet_report_json_keeps_raw_values(report: ReportView) -> None:
    doc = json.loads(RENDERERS["json"](report))
    raw = [(e["metric"], e["value"]) for f in doc["findings"] for e in f["evidence"]]
    assert raw and all(isinstance(v, int | float) for _, v in raw)
    assert raw == [(e.metric, e.value) for f in report.findings for e in f.evidence]
    markdown = RENDERERS["markdown"](report)
    for f in report.findings:  # the same values, in their units, in the text
        for e in f.evidence:
            assert f"- evidence: {e.metric} = {metric_value(e.metric, e.value)}" in markdown
    units = {unit_of(e.metric) for f in report.findings for e in f.evidence}
    assert "ratio" in units and len(units - {"ratio", ""}) >= 1, units  # ratios and another


@pytest.mark.parametrize("fmt", ["terminal", "markdown", "html"])
def test_trace_report_shows_readable_numbers(shared: Path, fmt: str) -> None:
    text = run_trace([shared / TRACE_PAIR], fmt)
    assert "rank 1" in text
    assert unreadable(_visible(text) if fmt == "html" else text) == []


def test_dashboard_findings_page_shows_readable_numbers(client: TestClient) -> None:
    page = client.get("/findings?range=1h")
    assert page.status_code == 200
    assert 'class="finding' in page.text
    assert unreadable(_visible(page.text)) == []
    api = client.get("/api/findings?range=1h").json()
    values = [e["value"] for f in api["findings"] for e in f["evidence"]]
    assert values and all(v is None or isinstance(v, int | float) for v in values)


PAGES = ["/", "/gpus", "/workloads", "/people", "/traces?dir=0&name=run1.json"]


@pytest.mark.parametrize("path", [*PAGES, "/traces?dir=0&name=job"])
def test_every_dashboard_page_shows_readable_numbers(client: TestClient, path: str) -> None:
    page = client.get(path + ("&" if "?" in path else "?") + "range=1h")
    assert page.status_code == 200
    assert unreadable(_visible(page.text)) == []
