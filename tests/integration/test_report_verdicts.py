"""End to end: the report's per-job verdicts against their workload's baseline, on the simulated
fleet, with the expected values derived from the scenarios' ground truth.

The store holds two hours. In the first, one host runs only healthy training (4 GPUs, job
sim-1001). In the second, three hosts run healthy training (sim-1001 again), the DDP straggler
(sim-1002: the same workload type — same GPU model, engine, command, project and model size —
whose ranks wait for a clock-locked peer) and eager inference (sim-1003, a workload never seen
before). The report over the second hour learns the baselines from the first: the straggler
must be degraded, healthy training healthy, and the inference job unknown for want of
history. Generated once for the module through the real collector path (~15 s).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpulens.app.analysis import ReportView, analyse
from gpulens.app.generate import generate
from gpulens.collect.simulated import SimulatedFleet
from gpulens.config import load_config
from gpulens.present.reports.fleet import RENDERERS
from gpulens.store import Store

NS = 1_000_000_000
START = 1_764_374_400 * NS
HOUR = 3600 * NS
WINDOW = (START + HOUR, START + 2 * HOUR)
SECOND_HOUR = ["healthy_training", "straggler_ddp", "eager_inference"]

Fleet = tuple[Path, dict[str, dict[str, Any]]]


def _config(data_dir: Path, hosts: int, scenarios: list[str]) -> Any:
    return load_config(
        env={},
        overrides={
            "data_dir": str(data_dir),
            "host": "gen",
            "simulated.hosts": hosts,
            "simulated.gpus_per_host": 4,
            "simulated.scenarios": scenarios,
            "store.flush_seconds": 600.0,
        },
    )


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    data_dir = tmp_path_factory.mktemp("verdicts")
    generate(_config(data_dir, 1, ["healthy_training"]), START, START + HOUR, workers=2)
    cfg = _config(data_dir, 3, SECOND_HOUR)
    generate(cfg, *WINDOW, workers=2)
    truth = SimulatedFleet(
        hosts=3,
        gpus_per_host=4,
        seed=cfg.get("simulated.seed"),
        scenarios=SECOND_HOUR,
        start_ns=WINDOW[0],
    ).ground_truth()
    return data_dir, {j["scenario"]: j for j in truth if j["job_id"]}


@pytest.fixture(scope="module")
def view(fleet: Fleet) -> ReportView:
    with Store(fleet[0]) as store:
        return analyse(store, *WINDOW)


def _useful(levels: dict[str, float]) -> float:
    """The useful-work ratio of a GPU at full clock: its busiest math pipe (efficiency.py)."""
    return max(levels["tensor_active"], levels["fp32_active"])


def _expected(jobs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    healthy, straggler = jobs["healthy_training"], jobs["straggler_ddp"]
    baseline = _useful(healthy["expected_levels"])
    # The straggler's ranks that wait (comm_bound, full clock) are most of its GPUs, so the
    # median over its intervals is their level.
    waiting = [g for g in straggler["gpus"] if g["expected_state"] == "comm_bound"]
    assert len(waiting) > len(straggler["gpus"]) / 2
    value = _useful(waiting[0]["expected_levels"])
    # The history is one steady job, far steadier than the 2 % floor of the robust scale
    # (analyze/baselines.py: 1.4826 × max(MAD, 0.01, 0.02 × median)).
    scale = 1.4826 * max(0.01, 0.02 * baseline)
    return {"baseline": baseline, "value": value, "z": (value - baseline) / scale}


def test_unhealthy_job_is_degraded_and_healthy_one_is_not(view: ReportView, fleet: Fleet) -> None:
    _, jobs = fleet
    got = {j["job_id"]: j for j in view.jobs}
    healthy, straggler = jobs["healthy_training"], jobs["straggler_ddp"]
    inference = jobs["eager_inference"]
    assert healthy["expected_findings"] == [] and straggler["expected_findings"]
    assert got[healthy["job_id"]]["verdict"] == "healthy"
    assert got[straggler["job_id"]]["verdict"] == "degraded"
    assert got[inference["job_id"]]["verdict"] == "unknown"
    assert "no earlier history" in got[inference["job_id"]]["reason"]
    assert view.jobs[0]["job_id"] == straggler["job_id"]  # degraded first

    want = _expected(jobs)
    e = got[straggler["job_id"]]["evidence"]
    assert (e["metric"], e["unit"], e["baseline"]) == ("useful_ratio", "ratio", "history")
    assert e["value"] == pytest.approx(want["value"], rel=0.02)
    assert e["baseline_median"] == pytest.approx(want["baseline"], rel=0.02)
    assert e["median_z"] == pytest.approx(want["z"], abs=0.5)
    assert e["anomalous_share"] == 1.0
    h = got[healthy["job_id"]]["evidence"]
    assert h["value"] == pytest.approx(want["baseline"], rel=0.02)
    assert abs(h["median_z"]) < 1
    # both training jobs are one workload type, learned from the first hour
    assert got[straggler["job_id"]]["workload"] == got[healthy["job_id"]]["workload"]
    assert view.baseline["history_start_ns"] == START
    assert view.baseline["history_end_ns"] == WINDOW[0]
    assert view.baseline["verdicts"] == {"degraded": 1, "healthy": 1, "unknown": 1}


def test_jobs_carry_their_memory_peak(view: ReportView, fleet: Fleet) -> None:
    data_dir, jobs = fleet
    with Store(data_dir) as store:
        for job in jobs.values():
            uuids = ", ".join(f"'{u}'" for u in job["gpu_uuids"])
            peak = store.query(
                f"SELECT max(memory_used_bytes) AS m FROM gpu WHERE gpu_uuid IN ({uuids}) "
                f"AND epoch_ns(ts) >= {WINDOW[0]} AND epoch_ns(ts) < {WINDOW[1]}"
            ).column("m")[0]
            row = next(j for j in view.jobs if j["job_id"] == job["job_id"])
            assert row["peak_used_bytes"] == pytest.approx(peak.as_py(), rel=1e-3)
            assert row["gpus"] == len(job["gpu_uuids"])
            assert row["headroom_bytes"] == pytest.approx(
                row["memory_total_bytes"] - row["peak_used_bytes"]
            )


def test_every_format_shows_the_verdicts(view: ReportView, fleet: Fleet) -> None:
    straggler = fleet[1]["straggler_ddp"]["job_id"]
    doc = json.loads(RENDERERS["json"](view))
    (row,) = [j for j in doc["jobs"] if j["job_id"] == straggler]
    assert row["verdict"] == "degraded"
    assert {"metric", "unit", "value", "baseline_median", "median_z", "baseline"} <= set(
        row["evidence"]
    )
    assert doc["baseline"]["verdicts"]["degraded"] == 1
    for fmt in ("terminal", "markdown", "html"):
        text = RENDERERS[fmt](view)
        rows = text.split("<tr>") if fmt == "html" else text.splitlines()
        line = next(r for r in rows if straggler in r and "degraded" in r and "%" in r)
        assert "useful work" in line and "baseline" in line, fmt
        assert "1 degraded, 1 healthy, 1 unknown" in text, fmt


def test_a_job_report_learns_from_the_workloads_history(fleet: Fleet) -> None:
    straggler = fleet[1]["straggler_ddp"]["job_id"]
    with Store(fleet[0]) as store:
        view = analyse(store, *WINDOW, scope={"job_id": straggler})
    (row,) = view.jobs
    assert row["job_id"] == straggler and row["verdict"] == "degraded"
    assert row["evidence"]["baseline"] == "history"
