"""A job's training figures summed back from its app readings, and input_bound from them alone
(hand-built readings; the thresholds are the telemetry rule's)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from gpulens.analyze import training
from gpulens.analyze.efficiency import Thresholds
from gpulens.findings import app as app_findings
from gpulens.findings.context import FindingThresholds
from gpulens.findings.rules.input_bound import RULE_ID

S = 1_000_000_000


def _readings(rows: list[dict[str, object]]) -> pa.Table:
    return pa.Table.from_pylist(rows)


def _tracker_row(ts_s: float, steps: int, step_s: float, wait_s: float, job: str = "a") -> dict:
    return {
        "ts": int(ts_s * S),
        "job_id": job,
        "run_id": "r",
        "host": "h",
        "app_steps": float(steps),
        "app_step_seconds": step_s,
        "app_data_wait_seconds": wait_s,
        "app_data_wait_ratio": wait_s / step_s,
        "app_samples_per_second": 32 / step_s,
    }


def test_summary_weights_windows_by_their_steps_time() -> None:
    app = _readings([_tracker_row(5, 10, 0.1, 0.05), _tracker_row(10, 30, 0.2, 0.02)])
    [job] = training.summaries(app)
    assert job["steps"] == 40
    assert job["step_seconds"] == pytest.approx((10 * 0.1 + 30 * 0.2) / 40)
    # total wait over total step time, not the mean of the two ratios
    assert job["data_wait_ratio"] == pytest.approx((10 * 0.05 + 30 * 0.02) / 7.0)
    assert job["samples_per_second"] == pytest.approx(40 * 32 / 7.0)
    assert job["mfu"] is None and job["run_ids"] == ["r"]


def test_readings_without_steps_count_once_each() -> None:
    app = _readings(
        [
            {"ts": 1 * S, "job_id": "sim", "app_data_wait_ratio": 0.5},
            {"ts": 2 * S, "job_id": "sim", "app_data_wait_ratio": 0.1},
        ]
    )
    [job] = training.summaries(app)
    assert job["data_wait_ratio"] == pytest.approx(0.3) and job["steps"] is None


def _intervals(app: pa.Table) -> pa.Table:
    return training.wait_intervals(app, 60.0)


def test_input_bound_fires_on_a_starved_job_only() -> None:
    starved = [_tracker_row(60 * i + 5, 100, 0.5, 0.3, "starved") for i in range(3)]
    fed = [_tracker_row(60 * i + 5, 100, 0.5, 0.01, "fed") for i in range(3)]
    app = _readings(starved + fed)
    facts = {j["job_id"]: j for j in training.summaries(app)}
    found = app_findings.input_bound(_intervals(app), 60.0, facts)
    assert [f.subject["job_id"] for f in found] == ["starved"]
    [f] = found
    assert f.rule_id == RULE_ID and f.docs == "docs/findings/input_bound.md"
    wait = f.evidence[0]
    assert wait.metric == "data_wait" and wait.value == pytest.approx(0.6)
    assert wait.threshold == Thresholds().data_wait_high and wait.comparison == ">="
    assert "framework's timing" in wait.note
    assert f.window == (0, 180 * S)


def test_the_threshold_and_the_minimum_duration_are_the_telemetry_rules() -> None:
    edge = Thresholds().data_wait_high
    app = _readings([_tracker_row(5, 10, 1.0, edge), _tracker_row(65, 10, 1.0, edge - 0.01)])
    found = app_findings.input_bound(_intervals(app), 60.0)
    assert found == []  # the starved stretch neither lasts 10 min nor covers the job
    ft = FindingThresholds(min_duration_s=5.0)
    [f] = app_findings.input_bound(_intervals(app), 60.0, thresholds=ft)
    assert f.window == (0, 60 * S)
    assert app_findings.input_bound(_intervals(app), 60.0, states=Thresholds(data_wait_high=0.1))
