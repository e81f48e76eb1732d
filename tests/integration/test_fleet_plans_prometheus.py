"""`gpulens fleet --prometheus --forecast 7d --plans --quotas` on the 30-day cluster of
tests/promdata.py, backfilled into Debian's Prometheus, whose every GPU state is known by
construction: the heat map, the off-peak plan, the quota use and the consolidation plan are
checked against that rule; the forecast's test-window error is reported beside seasonal
naive's.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from promdata import PROMETHEUS, PROMTOOL, ClusterSpec, Prometheus, backfill

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (Path(PROMETHEUS).exists() and Path(PROMTOOL).exists()) and not os.environ.get("CI"),
        reason="needs Prometheus and promtool (Debian package `prometheus`; .ci/run installs it)",
    ),
]
SPEC = ClusterSpec()
SINCE, UNTIL = "2026-10-01T00:00:00Z", "2026-10-31T00:00:00Z"


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    pytest.importorskip("statsmodels")
    home = tmp_path_factory.mktemp("prom-plans")
    backfill(SPEC, home / "data", home)
    (home / "quotas.toml").write_text("[quotas.q0]\ngpus = 2\n\n[quotas.q1]\ngpus = 2\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    with Prometheus(home, home / "data") as server:
        proc = subprocess.run(
            [sys.executable, "-m", "gpulens", "fleet", "--prometheus", server.url,
             "--since", SINCE, "--until", UNTIL, "--forecast", "7d", "--plans",
             "--batch-queue", "q1", "--quotas", str(home / "quotas.toml"), "--format", "json",
             "--data-dir", str(home / "unused")],
            capture_output=True, text=True, env=env, timeout=600, check=False,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    yield json.loads(proc.stdout)


def held(queue: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per hour: GPUs held and GPUs reporting (of `queue`, or all), from the spec's rule."""
    hours = SPEC.blocks * SPEC.block_s // 3600
    h, r = np.zeros(hours), np.zeros(hours)
    per = SPEC.block_s // 3600
    for node in range(SPEC.nodes):
        if queue is not None and SPEC.queue(node) != queue:
            continue
        for block in range(SPEC.blocks):
            if SPEC.observed(node, block):
                busy = sum(SPEC.state(node, g, block) != "free" for g in range(SPEC.gpus))
                h[block * per : (block + 1) * per] += busy
                r[block * per : (block + 1) * per] += SPEC.gpus
    return h, r


def test_heat_map_and_off_peak_plan(doc: dict[str, Any]) -> None:
    o = doc["offpeak"]
    pooled, _ = held()
    batch, _ = held("q1")
    weekday0 = datetime.fromtimestamp(SPEC.start_s, UTC).weekday()
    how = (np.arange(pooled.size) + weekday0 * 24) % 168
    d = np.bincount(how, pooled, 168) / np.bincount(how, minlength=168)
    b = np.bincount(how, batch, 168) / np.bincount(how, minlength=168)
    heat = np.array(o["heat_map"]["demand_gpus"], dtype=float).reshape(-1)
    assert np.allclose(heat, d, atol=1e-6)
    assert o["peak_gpus"] == pytest.approx(d.max())
    level = o["level_gpus"]
    need = lambda x: np.minimum(b, np.maximum(d - x, 0)).sum()  # noqa: E731
    room = lambda x: np.maximum(x - d, 0).sum()  # noqa: E731
    assert need(level) <= room(level) + 1e-3  # the level is reachable
    lower = level - 0.01
    assert lower < (d - b).max() or need(lower) > room(lower)  # and no lower one is
    assert o["movable_gpu_hours_per_week"] == pytest.approx(need(level), abs=1e-3)


def test_quota_use_from_the_gpu_series(doc: dict[str, Any]) -> None:
    q = {row["name"]: row for row in doc["quotas"]["queues"]}
    for queue in ("q0", "q1"):
        h, r = held(queue)
        seen = r > 0
        assert q[queue]["usage_over_quota"] == pytest.approx(h[seen].sum() / (2 * seen.sum()))
        assert q[queue]["peak_in_use_gpus"] == h[seen].max()
        # GPU series carry no pending jobs: starvation and monopoly are unknown, not 0
        assert q[queue]["starved_gpu_hours"] is None and q[queue]["monopoly_gpu_hours"] is None
        assert q[queue]["useful_gpu_hours"] > 0
    fair = doc["quotas"]["fairness"]
    assert 0.5 <= fair["jain_allocation"] <= 1 and 0.5 <= fair["jain_useful"] <= 1
    assert any("starvation and monopoly are unknown" in n for n in doc["notes"])
    assert not {f["rule_id"] for f in doc["findings"]} & {"starvation", "monopoly"}


def test_consolidation_counts_every_job_and_says_what_it_lacks(doc: dict[str, Any]) -> None:
    plan = doc["consolidation"]
    jobs = {
        f"{n}-{g}-{b}"
        for n in range(SPEC.nodes)
        for g in range(SPEC.gpus)
        for b in range(SPEC.blocks)
        if SPEC.observed(n, b) and SPEC.state(n, g, b) != "free"
    }
    # the backfilled series give FB_USED and FB_FREE, not the memory size the moves need:
    # every held block's job is counted, none is moved blind
    assert plan["jobs_considered"] + plan["jobs_unknown"] == len(jobs)
    if plan["jobs_unknown"]:
        assert plan["moves"] == []
        assert any(f"{len(jobs)} jobs lack" in n for n in doc["plan_notes"])
    else:  # a mapping that derives the size: exactly the idle jobs move, to a 3g slice
        idle = {j for j in jobs if SPEC.state(*map(int, j.split("-"))) == "idle"}
        assert {job for m in plan["moves"] for job in m["jobs"]} == idle


def test_forecast_is_reported_with_its_baseline(doc: dict[str, Any]) -> None:
    f = doc["forecast"]
    assert len(f["points"]) == 168 and f["step_s"] == 3600
    assert math.isfinite(f["test_mase"]) and math.isfinite(f["baseline_mase"])
    assert {q["name"] for q in f["queues"]} == {"q0", "q1"}
    print(f"promdata cluster: {f['model']} test MASE {f['test_mase']:.3f}, "
          f"{f['baseline']} {f['baseline_mase']:.3f}")  # fmt: skip
