"""The dashboard's view models agree with the report over the same window and step."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulens.app.analysis import analyse
from gpulens.present.dashboard import (
    Settings,
    analyse_window,
    findings_page,
    fleet_page,
    people_page,
    resolve,
    workloads_page,
)
from gpulens.store import Store

KEYS = ("gpus", "allocated_gpu_hours", "useful_gpu_hours", "wasted_gpu_hours", "total_cost",
        "energy_kwh", "co2e_kg")  # fmt: skip


def test_fleet_and_findings_match_the_report(store_dir: Path) -> None:
    with Store(store_dir) as store:
        window = resolve(store.time_bounds()[1], "1h")
        analysed = analyse_window(store, window, Settings())
        report = analyse(store, window.start_ns, window.end_ns, step_s=float(window.step_s))
    page = fleet_page(analysed)
    for key in KEYS:
        assert page.totals[key] == pytest.approx(report.totals[key]), key
    by_cause = {(c["cause"], c["kind"]): c["gpu_hours"] for c in report.waste_by_cause}
    assert {(c["cause"], c["kind"]): c["gpu_hours"] for c in page.waste_by_cause} == (
        pytest.approx(by_cause)
    )
    found = findings_page(analysed, limit=10_000)
    assert sorted((f.rule_id, f.start_ns) for f in found.findings) == sorted(
        (f.rule_id, f.window[0]) for f in report.findings
    )


def test_heatmap_and_timeline_cover_every_interval(store_dir: Path) -> None:
    with Store(store_dir) as store:
        window = resolve(store.time_bounds()[1], "1h")
        analysed = analyse_window(store, window, Settings())
    page = fleet_page(analysed)
    frame = analysed.frame
    cells = sum(v is not None for row in page.heatmap.useful for v in row)
    assert cells == frame.num_rows
    allocated_h = sum(v or 0.0 for v in page.timeline.allocated) * window.step_s / 3600
    assert allocated_h == pytest.approx(page.totals["allocated_gpu_hours"])


def test_workloads_and_cards_add_up(store_dir: Path) -> None:
    with Store(store_dir) as store:
        window = resolve(store.time_bounds()[1], "1h")
        analysed = analyse_window(store, window, Settings())
    fleet = fleet_page(analysed)
    engines = workloads_page(analysed).engines
    assert sum(e["gpu_hours"] for e in engines) == pytest.approx(fleet.totals["gpu_hours"])
    people = people_page(analysed, by="user")
    jobs_h = sum(c.figures["allocated_gpu_hours"] for c in people.jobs)
    assert jobs_h == pytest.approx(fleet.totals["allocated_gpu_hours"])
    with_findings = {c.name for c in people.jobs if c.findings}
    assert with_findings, "no job card lists a finding"
