"""`gpulens fleet --data-dir --plans`: the consolidation plan from a simulated fleet's GPU
series, whose jobs' SM activity is known (the simulator's ground truth)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

START_NS = 1_764_374_400 * 1_000_000_000


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, simulated_store: Callable[..., Any]) -> Any:
    return simulated_store(
        tmp_path_factory.mktemp("plans-store"), START_NS, 2 * 3600, hosts=2, interval_s=30
    )


def test_job_loads_match_the_simulated_levels(store: Any) -> None:
    from gpulens.app.fleet_usage import usage
    from gpulens.config import load_config

    cfg = load_config(None, overrides={"data_dir": str(store.data_dir)})
    view = usage(cfg, {})
    assert view is not None
    loads = {j.job: j for j in view.job_loads}
    truth = {j["job_id"]: j for j in store.ground_truth()}
    assert set(loads) == set(truth)
    for job_id, job in truth.items():
        load = loads[job_id]
        assert load.gpus == len(job["gpu_uuids"])
        # the mean over the run includes the warm-up, so it sits at or under the steady level
        steady = job["expected_levels"]["sm_active"]
        assert load.sm_active <= steady + 0.05, job_id
        assert load.sm_active >= steady * 0.7 - 0.02, job_id
        assert 0 < load.memory_used_bytes <= load.memory_total_bytes


def test_consolidation_plan_moves_only_under_used_jobs(store: Any) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    result = subprocess.run(
        [sys.executable, "-m", "gpulens", "fleet", "--data-dir", str(store.data_dir),
         "--plans", "--format", "json"],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)["consolidation"]
    truth = {j["job_id"]: j for j in store.ground_truth()}
    assert plan["jobs_considered"] == len(truth) and plan["jobs_unknown"] == 0
    moved = {job for m in plan["moves"] for job in m["jobs"]}
    busy = {k for k, j in truth.items() if j["expected_levels"]["sm_active"] >= 0.7}
    assert busy and not (moved & busy)
    # the eager inference server (one GPU, SM active 0.30) fits a MIG slice
    eager = next(k for k, j in truth.items() if j["scenario"] == "eager_inference")
    (move,) = [m for m in plan["moves"] if eager in m["jobs"]]
    assert move["kind"] == "mig" and move["gpus_freed"] > 0
    assert 0 < move["memory_headroom"] < 1 and move["risk"] in ("low", "medium", "high")
    assert plan["gpus_freed"] == pytest.approx(sum(m["gpus_freed"] for m in plan["moves"]))
