"""`gpulens fleet` as a user runs it: a cluster sequence with --map, the real Slurm and
Kubernetes samples, and bad input (one line naming the file, the right exit code)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpulens.app.fleet import FleetSources, run_fleet
from gpulens.collect.scheduler.errors import SchedulerInputError
from gpulens.errors import ConfigError
from gpulens.present.reports.cluster import RENDERERS

RACK = "data/scheduler/rackslab_Slurm-web/tests/assets/slurmrestd"


def fleet(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    env["COLUMNS"] = "400"
    return subprocess.run(
        [sys.executable, "-m", "gpulens", "fleet", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def _json(sources: FleetSources) -> dict[str, Any]:
    """What `--format json` prints for these sources (in process)."""
    doc: dict[str, Any] = json.loads(RENDERERS["json"](run_fleet(sources)))
    return doc


@pytest.fixture
def sequence(tmp_path: Path) -> list[str]:
    """Two queues, four minutes: a (8 GPUs) waits while b (4 GPUs) idles, then the reverse."""
    data = {
        "a": [(8, 8, 2), (8, 8, 0), (8, 4, 0), (8, 4, 0)],
        "b": [(4, 0, 0), (4, 4, 0), (4, 4, 3), (4, 2, 0)],
    }
    paths = []
    for queue, rows in data.items():
        path = tmp_path / queue / "seq.csv"
        path.parent.mkdir()
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["minute", "gpus", "busy", "waiting"])
            w.writerows((1764374400 + 60 * i, *r) for i, r in enumerate(rows))
        paths += ["--sequence", str(path)]
    return paths


def test_sequence_json(sequence: list[str]) -> None:
    """`pooled_allocation`, the queues and pending-while-idle against figures done by hand."""
    result = fleet(
        *sequence,
        "--map", "time=minute,total=gpus,in_use=busy,pending=waiting",
        "--queue-from", "parent-dir",
        "--format", "json", "--per-step",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    steps = doc["per_step"]
    assert steps["in_use_gpus"] == [8, 12, 8, 6] and steps["total_gpus"] == [12] * 4
    assert steps["pending_while_idle_gpus"] == [2, 0, 3, 0]
    # by hand: in use 8+8+4+4 + 0+4+4+2 = 34 of 4×12 = 48 GPU-minutes
    assert doc["pooled_allocation"] == pytest.approx(34 / 48)
    # minute 0: a waits 2, b idles 4 → 2 move; minute 2: b waits 3, a idles 4 → 3 move
    assert doc["pending_while_idle_share"] == pytest.approx(0.5)
    assert doc["pending_while_idle_gpu_hours"] == pytest.approx(5 / 60)
    queues = {q["name"]: q for q in doc["queues"]}
    assert queues["a"]["gpus"] == 8 and queues["a"]["allocation"] == pytest.approx(24 / 32)
    assert queues["a"]["allocation_quartiles"] == pytest.approx([0.5, 0.75, 1.0])
    assert queues["b"]["allocation_quartiles"] == pytest.approx([0.375, 0.75, 1.0])
    assert queues["b"]["pending_while_idle_share"] == pytest.approx(0.25)
    assert doc["window"] == {
        "start": "2025-11-29T00:00:00Z",
        "end": "2025-11-29T00:04:00Z",
        "step_s": 60,
        "steps": 4,
    }


def test_a_glob_after_one_source_option(sequence: list[str]) -> None:
    """`--sequence a/seq.csv b/seq.csv` (as a shell glob expands) reads both files."""
    files = sequence[1::2]
    result = fleet(
        "--sequence", *files,
        "--map", "time=minute,total=gpus,in_use=busy,pending=waiting",
        "--queue-from", "parent-dir", "--format", "json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert [q["name"] for q in json.loads(result.stdout)["queues"]] == ["a", "b"]
    result = fleet(*files)
    assert result.returncode == 2 and "say which kind of source" in result.stderr


@pytest.mark.parametrize("fmt", ["terminal", "markdown", "html"])
def test_sequence_other_formats(sequence: list[str], fmt: str) -> None:
    """The same view in the other formats (rendered in process: the command is tested above)."""
    view = run_fleet(
        FleetSources(
            sequences=[Path(p) for p in sequence[1::2]],
            maps=["time=minute,total=gpus,in_use=busy,pending=waiting"],
            queue_from="parent-dir",
        )
    )
    text = RENDERERS[fmt](view)
    assert "pooled allocation: 71% of 0.8 GPU-h" in text
    assert "8 GPUs" in text and "50% / 75% / 100%" in text


def test_real_slurm_snapshot_with_nodes(shared: Path) -> None:
    """squeue (v0.0.44): job 5557 of jbeck runs on 4 GPUs (counted from gres, its TRES totals
    name none); the node list (gpu1, MIXED, 1 of 4 GPUs used) gives partition gpu its total
    and its allocation."""
    doc = _json(
        FleetSources(
            slurm=[
                shared / RACK / "25.11/0.0.44/slurm-job-gpus-running.json",
                shared / RACK / "25.11/0.0.44/slurm-node-with-gpus-model-mixed.json",
            ]
        )
    )
    [gpu] = doc["queues"]
    assert (gpu["name"], gpu["gpus"], gpu["allocation"]) == ("gpu", 4.0, 0.25)
    assert doc["gpus_held_by_user"] == [{"user": "jbeck", "gpus": 4.0}]
    assert doc["gpus_held_by_team"] == [{"team": "biology", "gpus": 4.0}]
    assert doc["nodes"] == [
        {"node": "gpu1", "state": "MIXED", "gpus": 4.0, "used_gpus": 1.0, "allocation": 0.25,
         "queues": ["gpu"]}
    ]  # fmt: skip
    assert any("Slurm squeue (v0.0.44)" in s for s in doc["sources"])
    [frag] = doc["fragmentation"]
    assert (frag["free_gpus"], frag["stranded_gpus"]) == (3.0, 0.0)


def test_real_sacct_history(shared: Path) -> None:
    """sacct (v0.0.41): job 10 held 4 GPUs for 30 s; capacity from --capacity."""
    sources = FleetSources(
        slurm=[shared / RACK / "24.05/0.0.41/slurmdb-job-gpus-completed.json"],
        capacity={"gpu": 8.0},
        step_s=10,
    )
    [gpu] = _json(sources)["queues"]
    assert gpu["in_use_gpu_hours"] == pytest.approx(4 * 30 / 3600)


def test_real_kubernetes_manifest(shared: Path) -> None:
    pod = shared / "data/scheduler/NVIDIA_KAI-Scheduler/examples/quickstart/pods/gpu-pod.yaml"
    doc = _json(FleetSources(k8s=[pod]))
    [queue] = doc["queues"]
    assert (queue["name"], queue["pending_gpu_hours"]) == ("default-queue", 1 / 60)
    assert queue["gpus"] is None  # no node list: total unknown, not 0
    assert any("total GPUs unknown" in n for n in doc["notes"])
    # --capacity gives the queue its GPUs: the pending pod's GPU then waits while 4 idle
    [queue] = _json(FleetSources(k8s=[pod], capacity={"default-queue": 4.0}))["queues"]
    assert (queue["gpus"], queue["allocation"]) == (4.0, 0.0)


def test_bad_input_is_one_line(sequence: list[str]) -> None:
    result = fleet(
        *sequence, "--queue-from", "parent-dir", "--map", "time=minute,total=gpus,in_use=used"
    )
    assert result.returncode == 4
    [line] = result.stderr.strip().splitlines()
    assert "seq.csv: no column 'used'" in line and "--map ROLE=COLUMN" in line
    files = [Path(p) for p in sequence[1::2]]
    with pytest.raises(ConfigError, match="--map needs in_use"):
        run_fleet(FleetSources(sequences=files, maps=["time=minute,total=gpus"]))
    with pytest.raises(ConfigError, match="needs a source"):
        run_fleet(FleetSources())


def test_commands_that_are_not_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--kubectl and --slurm-run without the command on PATH: one clear error."""
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SchedulerInputError, match="kubectl: it is not on PATH"):
        run_fleet(FleetSources(kubectl=True))
    with pytest.raises(SchedulerInputError, match="squeue: the command is not on PATH"):
        run_fleet(FleetSources(slurm_commands=["squeue"]))
