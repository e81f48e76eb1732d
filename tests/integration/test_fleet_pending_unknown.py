"""Pending GPU demand that no source gives is unknown, never 0, in every fleet format.

Three sources without pending demand in GPUs: a real Slurm node list (v0.0.44, no jobs), a
cluster sequence whose --map names no pending column, and the GPU series of a Prometheus
(backfilled with promtool, no Kueue, no scheduler). Each prints `null` in JSON and
"unknown (why)" in terminal text, Markdown and HTML, and raises no pending_while_idle finding.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from promdata import PROMETHEUS, PROMTOOL, ClusterSpec, Prometheus, backfill

RACK = "data/scheduler/rackslab_Slurm-web/tests/assets/slurmrestd/25.11/0.0.44"
FORMATS = ("terminal", "markdown", "html")


def fleet(*args: str) -> dict[str, str]:
    """`gpulens fleet ARGS --format F` for the four formats: format → its output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    out = {}
    for fmt in ("json", *FORMATS):
        proc = subprocess.run(
            [sys.executable, "-m", "gpulens", "fleet", *args, "--format", fmt],
            capture_output=True, text=True, timeout=300, env=env, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[fmt] = proc.stdout
    return out


def check_unknown(out: dict[str, str], why: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(out["json"])
    assert doc["pending_while_idle_share"] is None
    assert doc["pending_while_idle_gpu_hours"] is None
    assert doc["pending_gpu_hours"] is None
    assert doc["pending_while_idle_peak"]["gpu_hours"] is None
    assert why in doc["pending_unknown"]
    for q in doc["queues"]:
        assert q["pending_gpu_hours"] is None
        assert q["pending_while_idle_share"] is None
        assert q["waited_while_idle_gpu_hours"] is None
    assert not [f for f in doc["findings"] if f["rule_id"] == "pending_while_idle"]
    for fmt in FORMATS:
        text = out[fmt].replace("&#x27;", "'")
        assert "pending while idle: unknown (" in text, fmt
        assert why in text, fmt
        assert "pending while idle: 0" not in text, fmt
    return doc


def test_slurm_node_list_alone(shared: Path) -> None:
    out = fleet("--slurm", str(shared / RACK / "slurm-node-with-gpus-model-mixed.json"))
    doc = check_unknown(out, "Slurm node lists carry no pending jobs")
    [gpu] = doc["queues"]
    assert (gpu["name"], gpu["allocation"]) == ("gpu", 0.25)  # what is known stays known


def test_sequence_without_a_pending_column(tmp_path: Path) -> None:
    path = tmp_path / "train" / "seq.csv"
    path.parent.mkdir()
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["minute", "gpus", "busy"])
        w.writerows((1764374400 + 60 * i, 8, b) for i, b in enumerate((8, 4, 2, 6)))
    out = fleet(
        "--sequence", str(path), "--queue-from", "parent-dir",
        "--map", "time=minute,total=gpus,in_use=busy",
    )  # fmt: skip
    doc = check_unknown(out, "the cluster sequence has no pending demand")
    assert doc["pooled_allocation"] == pytest.approx(20 / 32)


@pytest.mark.slow
@pytest.mark.skipif(
    not (Path(PROMETHEUS).exists() and Path(PROMTOOL).exists()) and not os.environ.get("CI"),
    reason="needs Prometheus and promtool (Debian package `prometheus`; .ci/run installs it)",
)
def test_prometheus_gpu_series_alone(tmp_path: Path) -> None:
    spec = ClusterSpec(nodes=4, gpus=2, queues=2, days=2, scrape_s=900, gap_node=None)
    written = backfill(spec, tmp_path / "data", tmp_path)
    assert written > 10_000
    with Prometheus(tmp_path / "home", tmp_path / "data") as server:
        out = fleet(
            "--prometheus", server.url, "--since", "2026-10-01T00:00:00Z",
            "--until", "2026-10-03T00:00:00Z",
        )  # fmt: skip
    doc = check_unknown(out, "the GPU series say which GPUs are held, not how many wait")
    assert {q["name"] for q in doc["queues"]} == {"q0", "q1"}
    assert all(q["allocation"] is not None for q in doc["queues"])
