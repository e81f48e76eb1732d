"""Runs a framework's training script in a fresh interpreter and checks what its gpulens
callback stored and what `gpulens report` makes of it (the integration tests' shared part)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpulens.store import Store

ROOT = Path(__file__).resolve().parents[2]


def run_script(code: str, data_dir: Path, env: dict[str, str] | None = None) -> str:
    """Run `code` with the store path as argv[1], offline; its stdout."""
    environ = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(env or {})}
    environ.pop("GPULENS_DISABLE", None)
    out = subprocess.run(
        [sys.executable, "-c", code, str(data_dir)],
        capture_output=True, text=True, timeout=240, cwd=ROOT, env=environ,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def stored(data_dir: Path, job: str) -> list[dict[str, Any]]:
    """The job's app readings, oldest first."""
    with Store(data_dir) as store:
        table = store.query(
            "SELECT * EXCLUDE (ts), epoch_ns(ts) AS ts FROM app WHERE job_id = $job ORDER BY ts",
            {"job": job},
        )
    return [{k: v for k, v in row.items() if v is not None} for row in table.to_pylist()]


def report(data_dir: Path, job: str) -> dict[str, Any]:
    """`gpulens report --job JOB --format json` over the store (the CLI, in this process)."""
    from typer.testing import CliRunner

    from gpulens.present.cli import app

    args = ["report", "--data-dir", str(data_dir), "--job", job, "--format", "json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output[-3000:]
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def check(data_dir: Path, job: str, source: str, steps: int) -> dict[str, Any]:
    """The readings carry the job, run and source and add up to `steps`; the report's training
    section agrees. Returns the report's entry for the job."""
    rows = stored(data_dir, job)
    assert rows, "no app readings stored"
    assert {r["source"] for r in rows} == {source}
    assert len({r["run_id"] for r in rows}) == 1 and {r["pid"] for r in rows}
    assert sum(r["app_steps"] for r in rows) == steps
    assert all(0 <= r["app_data_wait_ratio"] <= 1 and r["app_step_seconds"] > 0 for r in rows)
    doc = report(data_dir, job)
    [entry] = doc["training"]
    assert entry["job_id"] == job and entry["steps"] == steps
    assert entry["step_seconds"] > 0 and entry["data_wait_ratio"] is not None
    assert entry["telemetry"] is False  # no GPU here: the framework's timing alone
    return entry
