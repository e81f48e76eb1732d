"""`gpulens fleet --forecast 7d --plans --quotas` on a three-week, two-queue history whose
pattern, movable batch hours and quota violations are known.

interactive (64 GPUs, quota 40): 48 in use on weekdays 09:00-18:00 UTC, 8 otherwise.
train (32 GPUs, quota 32, batch): 24 in use and 8 pending on weekdays 09:00-18:00, idle
otherwise. So in the 45 office hours a week: train is owed min(8, 32 - 24) = 8 GPUs while
interactive holds 8 over its quota (starvation and monopoly, 8 GPUs × 45 h a week); pooled
demand is 80 GPUs then, 8 otherwise; moving train's 32 GPUs out of office hours lowers the
peak to interactive's 48 (32 GPUs freed, 45 × 32 = 1,440 GPU-hours a week moved).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

MONDAY = datetime(2026, 10, 5, tzinfo=UTC)
DAYS = 21
STEP = timedelta(minutes=15)


def _office(t: datetime) -> bool:
    return t.weekday() < 5 and 9 <= t.hour < 18


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("plans")
    for queue, total in (("interactive", 64), ("train", 32)):
        (root / queue).mkdir()
        lines = ["time,total,busy,waiting"]
        t = MONDAY
        while t < MONDAY + timedelta(days=DAYS):
            office = _office(t)
            busy = (48 if office else 8) if queue == "interactive" else (24 if office else 0)
            waiting = 8 if (queue == "train" and office) else 0
            lines.append(f"{t:%Y-%m-%dT%H:%M:%SZ},{total},{busy},{waiting}")
            t += STEP
        (root / queue / "sequence.csv").write_text("\n".join(lines) + "\n")
    (root / "quotas.toml").write_text(
        '[quotas.interactive]\ngpus = 40\n\n[quotas.train]\ngpus = 32\nparent = "lab"\n'
    )
    return root


def fleet(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    env["COLUMNS"] = "400"
    base = [sys.executable, "-m", "gpulens", "fleet"]
    for q in ("interactive", "train"):
        base += ["--sequence", str(root / q / "sequence.csv")]
    base += ["--map", "time=time,total=total,in_use=busy,pending=waiting"]
    base += ["--queue-from", "parent-dir", "--quotas", str(root / "quotas.toml")]
    return subprocess.run(
        [*base, *args], capture_output=True, text=True, timeout=300, env=env, check=False
    )


def test_json_forecast_plans_and_quotas(history: Path) -> None:
    pytest.importorskip("statsmodels")
    proc = fleet(history, "--forecast", "7d", "--plans", "--batch-queue", "train",
                 "--format", "json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    f = doc["forecast"]
    assert f["horizon_s"] == 7 * 86400 and f["step_s"] == 3600 and len(f["points"]) == 168
    assert math.isfinite(f["test_mase"]) and math.isfinite(f["baseline_mase"])
    assert f["model"] in f["validation_mase"]
    for p in f["points"]:
        t = datetime.fromisoformat(p["t"].replace("Z", "+00:00"))
        truth = 80.0 if _office(t) else 8.0
        assert p["pooled"] == pytest.approx(truth, abs=2.0), p
        assert p["lo"] <= p["pooled"] <= p["hi"]
    assert datetime.fromisoformat(f["points"][0]["t"].replace("Z", "+00:00")) == MONDAY + timedelta(
        days=DAYS
    )
    queues = {q["name"]: q for q in f["queues"]}
    assert queues["train"]["points"][10 + 24]["demand"] == pytest.approx(32.0, abs=1.0)  # Tue 10:00

    o = doc["offpeak"]
    assert o["batch_queues"] == ["train"]
    assert o["peak_gpus"] == pytest.approx(80.0) and o["level_gpus"] == pytest.approx(48.0)
    assert o["peak_freed_gpus"] == pytest.approx(32.0)
    assert o["movable_gpu_hours_per_week"] == pytest.approx(45 * 32.0)
    assert o["heat_map"]["demand_gpus"][2][12] == pytest.approx(80.0)  # Wednesday noon
    assert o["heat_map"]["demand_gpus"][6][12] == pytest.approx(8.0)  # Sunday noon

    q = {row["name"]: row for row in doc["quotas"]["queues"]}
    weeks = DAYS / 7
    assert q["train"]["starved_gpu_hours"] == pytest.approx(8 * 45 * weeks)
    assert q["interactive"]["monopoly_gpu_hours"] == pytest.approx(8 * 45 * weeks)
    assert q["interactive"]["starved_gpu_hours"] == 0.0
    assert doc["quotas"]["fairness"]["jain_useful"] is None  # no GPU series
    rules = {x["rule_id"]: x for x in doc["findings"]}
    assert {"starvation", "monopoly"} <= set(rules)
    assert rules["starvation"]["subject"] == {"queue": "train"}


def test_terminal_markdown_html(history: Path) -> None:
    for fmt, marks in (
        ("terminal", ("off-peak plan", "quotas and fair share", "monopoly")),
        ("markdown", ("## Off-peak plan", "## Quotas and fair share", "## Consolidation plan")),
        ("html", ("<h2>Off-peak plan</h2>", "<h2>Quotas and fair share</h2>")),
    ):
        proc = fleet(history, "--plans", "--batch-queue", "train", "--format", fmt)
        assert proc.returncode == 0, proc.stderr
        for mark in marks:
            assert mark in proc.stdout, (fmt, mark)
        assert "1,440 GPU-h" in proc.stdout or "1440 GPU-h" in proc.stdout, fmt
    assert proc.stdout.rstrip().endswith("</html>")


def test_bad_horizon_and_unknown_batch_queue(history: Path) -> None:
    proc = fleet(history, "--forecast", "7 fortnights")
    assert proc.returncode == 2 and "--forecast '7 fortnights'" in proc.stderr
    proc = fleet(history, "--plans", "--batch-queue", "nightly")
    assert proc.returncode == 2 and "nightly" in proc.stderr
