"""The dashboard in a real browser against a running demo agent: every page loads without a
console error and draws charts with data; the findings of the simulated scenarios are listed;
the engines are told apart; uploads work. Screenshots are kept as artifacts."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(  # never skipped in CI, where a missing install must fail
        not CHROMIUM.exists() and not os.environ.get("CI"),
        reason=f"no system Chromium at {CHROMIUM} (Debian `chromium`)",
    ),
]

#: the simulation's name for a finding → the rule that reports it
ALIASES = {"move_to_tensorrt": "engine_migration"}
CHARTS_HAVE_DATA = """() => {
  const charts = [...document.querySelectorAll('.chart')];
  return charts.length > 0 && charts.every(c => Array.isArray(c.data) && c.data.length > 0);
}"""
CHART_SIZES = """() => [...document.querySelectorAll('.chart')].map(c => ({
  id: c.id,
  traces: c.data.length,
  points: c.data.map(t => Math.max((t.x || []).length, (t.y || []).length, (t.z || []).length))
}))"""


class Tab:
    """One browser page that records console errors and uncaught exceptions."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))

    def open(self, url: str) -> Any:
        response = self.page.goto(url, wait_until="load")
        assert response is not None and response.status == 200, url
        return response


@pytest.fixture
def tab(browser: Any) -> Iterator[Tab]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        yield Tab(context.new_page())
    finally:
        context.close()


def _gpu(demo: Any) -> str:
    return str(httpx.get(f"{demo.url}/api/gpus", timeout=30).json()[0]["gpu_uuid"])


def _pages(demo: Any) -> dict[str, str]:
    return {
        "fleet": "/?range=1h",
        "gpus": "/gpus",
        "gpu": f"/gpus/{_gpu(demo)}?range=1h",
        "workloads": "/workloads?range=1h",
        "people": "/people?range=1h",
        "findings": "/findings?range=1h",
        "traces": "/traces?dir=0&name=step.json",
    }


def test_every_page_loads_and_every_chart_has_data(demo: Any, tab: Tab, artifacts: Path) -> None:
    for name, path in _pages(demo).items():
        tab.open(demo.url + path)
        if tab.page.locator(".chart").count():
            tab.page.wait_for_function(CHARTS_HAVE_DATA, timeout=30_000)
            for chart in tab.page.evaluate(CHART_SIZES):
                assert chart["traces"] > 0 and max(chart["points"]) > 0, (name, chart)
        tab.page.wait_for_selector("#now :is(.live, .muted)", timeout=15_000)
        tab.page.screenshot(path=str(artifacts / f"{name}.png"), full_page=True)
        assert tab.errors == [], (name, tab.errors)


def test_now_strip_is_live(demo: Any, tab: Tab) -> None:
    tab.open(f"{demo.url}/gpus")
    tab.page.wait_for_selector("#now .live", timeout=15_000)
    assert "GPUs" in tab.page.inner_text("#now")


def test_findings_page_lists_the_scenarios_findings(demo: Any, tab: Tab, artifacts: Path) -> None:
    expected = {
        ALIASES.get(f["rule_id"], f["rule_id"])
        for job in demo.ground_truth()
        for f in job["expected_findings"]
    }
    assert expected, "the demo's ground truth lists no findings"
    tab.open(f"{demo.url}/findings?range=1h")
    shown = set(tab.page.eval_on_selector_all(".finding", "els => els.map(e => e.dataset.rule)"))
    tab.page.screenshot(path=str(artifacts / "findings-scenarios.png"), full_page=True)
    assert expected <= shown, f"missing {sorted(expected - shown)}"
    link = tab.page.locator("a.chart-link").first
    link.click()
    tab.page.wait_for_function(CHARTS_HAVE_DATA, timeout=30_000)
    assert "/gpus/" in tab.page.url and "start_ns=" in tab.page.url
    assert tab.errors == []


def test_workloads_page_separates_the_engines(demo: Any, tab: Tab) -> None:
    tab.open(f"{demo.url}/workloads?range=1h")
    tab.page.wait_for_function(CHARTS_HAVE_DATA, timeout=30_000)
    names = tab.page.evaluate("() => document.getElementById('chart-stack').data.map(t => t.name)")
    assert any(n.startswith("pytorch") for n in names), names
    assert any(n.startswith("tensorrt") for n in names), names
    table = tab.page.inner_text("main table")
    assert "pytorch" in table and "tensorrt" in table


def test_heatmap_click_opens_the_gpu(demo: Any, tab: Tab) -> None:
    tab.open(f"{demo.url}/?range=1h")
    tab.page.wait_for_function(CHARTS_HAVE_DATA, timeout=30_000)
    box = tab.page.locator("#chart-heatmap .nsewdrag").first.bounding_box()
    assert box is not None
    tab.page.mouse.click(box["x"] + box["width"] * 0.9, box["y"] + 5)
    tab.page.wait_for_url("**/gpus/**", timeout=15_000)
    tab.page.wait_for_function(CHARTS_HAVE_DATA, timeout=30_000)
    assert tab.errors == []


def test_trace_upload(demo: Any, tab: Tab, artifacts: Path) -> None:
    tab.open(f"{demo.url}/traces")
    tab.page.set_input_files("#upload input[type=file]", str(demo.trace_dir / "step.json"))
    tab.page.click("#upload button")
    tab.page.wait_for_url("**/traces?upload=*", timeout=30_000)
    tab.page.wait_for_function(CHARTS_HAVE_DATA, timeout=30_000)
    assert "step.json" in tab.page.inner_text("main")
    tab.page.screenshot(path=str(artifacts / "trace-upload.png"), full_page=True)
    assert tab.errors == []
