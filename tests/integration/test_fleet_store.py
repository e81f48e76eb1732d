"""`gpulens fleet --data-dir`: the store's GPU readings per queue (allocation against duty
cycle and useful work) and the idle-allocated inventory, on a simulated fleet whose notebook
scenario holds a GPU idle."""

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
        tmp_path_factory.mktemp("fleet-store"), START_NS, 2 * 3600, hosts=2, interval_s=30
    )


def test_usage_per_queue_and_idle_inventory(store: Any) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    result = subprocess.run(
        [sys.executable, "-m", "gpulens", "fleet", "--data-dir", str(store.data_dir),
         "--node-queue", "sim-node-0=train", "--format", "json"],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["queues"] == [] and doc["pooled_allocation"] is None  # no scheduler source
    usage = doc["usage"]
    by_queue = {r["queue"]: r for r in usage["by_queue"]}
    assert set(by_queue) == {"train", "(no queue)"}
    # 2 hosts × 4 GPUs × 2 h: each host's GPUs in its own group, every GPU-hour once
    assert by_queue["train"]["gpus"] == 4 == by_queue["(no queue)"]["gpus"]
    total = sum(r["gpu_hours"] for r in usage["by_queue"])
    assert total == pytest.approx(8 * 2, rel=0.02)
    for row in usage["by_queue"]:
        assert 0 <= row["allocation"] <= 1 and 0 <= row["mean_sm_active"] <= row["mean_duty"]
    assert sum(r["gpu_hours"] for r in usage["by_team"]) == pytest.approx(total)
    idle = usage["idle_allocated"]
    assert idle and all(f["rule_id"] == "idle_allocated" for f in idle)
    truth = {
        job["job_id"]
        for job in store.ground_truth()
        if any(f["rule_id"] == "idle_allocated" for f in job["expected_findings"])
    }
    assert truth and truth <= {f["subject"].get("job_id") for f in idle}
    assert all(f["impact"]["cost"] > 0 for f in idle)
    assert any("(no queue)" in n for n in doc["notes"])
