"""The `gpulens` command end to end, as a user runs it (a real subprocess, a real store)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

GPULENS = [sys.executable, "-m", "gpulens"]


def run(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    full_env.update(env or {})
    full_env["COLUMNS"] = "200"
    return subprocess.run(
        [*GPULENS, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        check=False,
    )


@pytest.fixture(scope="module")
def demo_store(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    data = tmp_path_factory.mktemp("demo")
    result = run("demo", "--duration", "600", "--speed", "0", "--data-dir", str(data))
    return data, result


def test_demo_runs_the_fleet_and_summarises(
    demo_store: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    data, result = demo_store
    assert result.returncode == 0, result.stderr
    assert "600 ticks" in result.stdout
    assert "duty cycle versus useful work" in result.stdout
    truth = json.loads((data / "ground_truth.json").read_text())
    assert {job["scenario"] for job in truth} >= {"healthy_training", "idle_allocated"}
    assert list((data / "gpu").glob("date=*/*.parquet"))


def test_query_formats(demo_store: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    data, _ = demo_store
    sql = "SELECT count(DISTINCT gpu_uuid) AS gpus, count(*) AS n FROM gpu"
    as_json = run("query", sql, "--data-dir", str(data), "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    truth = json.loads((data / "ground_truth.json").read_text())
    gpus = len({uuid for job in truth for uuid in job["gpu_uuids"]})
    assert gpus == 12  # the demo's default fleet: 3 hosts × 4 GPUs
    rows = json.loads(as_json.stdout)
    assert rows[0]["gpus"] == gpus
    assert rows[0]["n"] == gpus * 600
    as_csv = run("query", sql, "--data-dir", str(data), "--format", "csv")
    assert as_csv.stdout.splitlines() == ["gpus,n", f"{gpus},{gpus * 600}"]
    as_table = run("query", sql, "--data-dir", str(data))
    assert "gpus" in as_table.stdout and str(gpus * 600) in as_table.stdout


def test_query_joins_useful_work_to_identity(
    demo_store: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    data, _ = demo_store
    sql = (
        "SELECT p.engine, avg(g.gpu_util_ratio) duty, avg(g.sm_active_ratio) sm FROM gpu g "
        "JOIN process p ON g.gpu_uuid = p.gpu_uuid AND g.ts = p.ts GROUP BY 1 ORDER BY 1"
    )
    result = run("query", sql, "--data-dir", str(data), "--format", "json")
    assert result.returncode == 0, result.stderr
    engines = {row["engine"]: row for row in json.loads(result.stdout)}
    assert {"pytorch", "tensorrt"} <= set(engines)


def test_bad_sql_is_one_line_and_an_exit_code(
    demo_store: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    data, _ = demo_store
    result = run("query", "SELEC nonsense", "--data-dir", str(data))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "SELEC" in result.stderr or "syntax" in result.stderr.lower()


def test_bad_config_names_the_key(tmp_path: Path) -> None:
    cfg = tmp_path / "gpulens.toml"
    cfg.write_text("[collect]\ninterval_seconds = 0.001\n")
    result = run("record", "--config", str(cfg), "--duration", "1")
    assert result.returncode == 2
    assert "collect.interval_seconds" in result.stderr and "0.001" in result.stderr
    assert "Traceback" not in result.stderr
    debug = run("--debug", "record", "--config", str(cfg), "--duration", "1")
    assert "Traceback" in debug.stderr


def test_unknown_scenario_lists_the_valid_ones(tmp_path: Path) -> None:
    result = run(
        "demo",
        "--duration",
        "5",
        "--speed",
        "0",
        "--scenario",
        "bogus",
        "--data-dir",
        str(tmp_path),
    )
    assert result.returncode == 2
    assert "bogus" in result.stderr and "idle_allocated" in result.stderr


def test_record_runs_in_real_time_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    cfg = tmp_path / "gpulens.toml"
    cfg.write_text(
        f'data_dir = "{tmp_path / "store"}"\n[collect]\ninterval_seconds = 0.2\n'
        'collectors = ["simulated"]\n[store]\nflush_seconds = 60\n'
        "[simulated]\nhosts = 1\ngpus_per_host = 2\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    proc = subprocess.Popen(
        [*GPULENS, "record", "--config", str(cfg)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(4)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    # The buffer (flush interval 60 s) was flushed on the way out: nothing recorded is lost.
    result = run(
        "query",
        "SELECT count(*) n FROM gpu",
        "--data-dir",
        str(tmp_path / "store"),
        "--format",
        "json",
    )
    assert json.loads(result.stdout)[0]["n"] >= 2 * 5


def test_doctor_explains_each_source() -> None:
    result = run("doctor")
    assert result.returncode == 0, result.stderr
    assert "simulated" in result.stdout and "nvml" in result.stdout
