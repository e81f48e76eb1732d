"""`gpulens report --plans [--forecast 7d]`: the fleet plans in the report, in all four formats.

- On a store (the simulated fleet, whose jobs' SM activity is known): the consolidation plan
  is the one `gpulens fleet --data-dir --plans` gives, it moves no busy job, and a forecast
  the two hours of history cannot support is a note, not a failed report.
- On Prometheus (a 30-day cluster backfilled with promtool, GPU states known by construction):
  the off-peak heat map is the GPUs held per weekday and hour that the construction rule
  gives, the forecast covers the next 7 days hourly, and the consolidation plan knows every
  job's memory (dcgm-exporter's FB_USED + FB_FREE, no FB_TOTAL) and moves only idle jobs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from promdata import PROMETHEUS, PROMTOOL, ClusterSpec, Prometheus, backfill

START_NS = 1_764_374_400 * 1_000_000_000
FORMATS = ("terminal", "markdown", "html")


def gpulens(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    proc = subprocess.run(
        [sys.executable, "-m", "gpulens", *args],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, simulated_store: Callable[..., Any]) -> Any:
    return simulated_store(
        tmp_path_factory.mktemp("report-plans"), START_NS, 2 * 3600, hosts=2, interval_s=30
    )


def test_report_plans_on_a_store(store: Any) -> None:
    data = ["--data-dir", str(store.data_dir)]
    doc = json.loads(gpulens("report", *data, "--plans", "--forecast", "7d", "--format", "json"))
    plans = doc["plans"]
    fleet = json.loads(gpulens("fleet", *data, "--plans", "--format", "json"))
    assert plans["consolidation"] == fleet["consolidation"]
    truth = {j["job_id"]: j for j in store.ground_truth()}
    moved = {job for m in plans["consolidation"]["moves"] for job in m["jobs"]}
    busy = {k for k, j in truth.items() if j["expected_levels"]["sm_active"] >= 0.7}
    assert moved and busy and not (moved & busy)
    assert plans["offpeak"]["peak_gpus"] <= len({g for j in truth.values() for g in j["gpu_uuids"]})
    assert "forecast" not in plans
    assert any(n.startswith("no forecast: ") for n in plans["plan_notes"])
    assert doc["totals"]["gpus"] == 8  # the report itself is unchanged by the plans
    for fmt in FORMATS:
        text = gpulens("report", *data, "--plans", "--format", fmt)
        assert "Plans" in text, fmt
        for section in ("off-peak plan", "consolidation plan"):
            assert section in text.lower(), (fmt, section)
    plain = gpulens("report", *data, "--format", "json")
    assert "plans" not in json.loads(plain)


def test_plans_are_for_a_fleet_report(store: Any) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    proc = subprocess.run(
        [sys.executable, "-m", "gpulens", "report", "--data-dir", str(store.data_dir),
         "--job", "x", "--plans"],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "--plans, --forecast and --batch-queue are for a fleet report" in proc.stderr


SPEC = ClusterSpec(nodes=4, gpus=2, queues=2, days=30, scrape_s=900, gap_node=None)


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("report-plans-prom")
    assert backfill(SPEC, home / "data", home) > 200_000
    with Prometheus(home, home / "data") as server:
        yield server.url


def _held_heat() -> list[list[float]]:
    """Mean GPUs held per weekday (Monday first) and hour UTC, from the construction rule."""
    sums = [[0.0] * 24 for _ in range(7)]
    counts = [[0] * 24 for _ in range(7)]
    for t in range(SPEC.start_s, SPEC.end_s, 3600):
        block = (t - SPEC.start_s) // SPEC.block_s
        held = sum(
            SPEC.state(n, g, block) != "free" for n in range(SPEC.nodes) for g in range(SPEC.gpus)
        )
        d = datetime.fromtimestamp(t, UTC)
        sums[d.weekday()][d.hour] += held
        counts[d.weekday()][d.hour] += 1
    return [
        [s / c for s, c in zip(srow, crow, strict=True)]
        for srow, crow in zip(sums, counts, strict=True)
    ]


@pytest.mark.slow
@pytest.mark.skipif(
    not (Path(PROMETHEUS).exists() and Path(PROMTOOL).exists()) and not os.environ.get("CI"),
    reason="needs Prometheus and promtool (Debian package `prometheus`; .ci/run installs it)",
)
def test_report_plans_on_prometheus(history: str, tmp_path: Path) -> None:
    window = ["--since", "2026-10-01T00:00:00Z", "--until", "2026-10-31T00:00:00Z"]
    base = ["report", "--prometheus", history, *window, "--data-dir", str(tmp_path / "unused")]
    doc = json.loads(gpulens(*base, "--plans", "--forecast", "7d", "--format", "json"))
    plans = doc["plans"]
    heat = plans["offpeak"]["heat_map"]["demand_gpus"]
    want = _held_heat()
    for day in range(7):
        assert heat[day] == pytest.approx(want[day], abs=1e-6), day
    forecast = plans["forecast"]
    assert forecast["horizon_s"] == 7 * 86400 and forecast["step_s"] == 3600
    assert len(forecast["points"]) == 168
    assert all(p["lo"] <= p["pooled"] <= p["hi"] for p in forecast["points"])
    assert forecast["model"] and forecast["test_mase"] is not None
    c = plans["consolidation"]
    jobs = {f"{n}-{g}-{b}": SPEC.state(n, g, b) for n in range(SPEC.nodes)
            for g in range(SPEC.gpus) for b in range(SPEC.blocks)
            if SPEC.state(n, g, b) != "free"}  # fmt: skip
    assert c["jobs_considered"] == len(jobs) and c["jobs_unknown"] == 0
    moved = {job for m in c["moves"] for job in m["jobs"]}
    assert moved and all(jobs[j] == "idle" for j in moved)
    for fmt in FORMATS:
        text = gpulens(*base, "--plans", "--format", fmt)
        assert "off-peak plan" in text.lower() and "consolidation plan" in text.lower(), fmt
