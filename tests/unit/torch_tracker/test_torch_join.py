"""The join key: GPULENS_JOB in a process's environment is its job for the agent's attribution
(read from the real /proc), and the tracker's job and labels agree with it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpulens.collect.procs.attribution import ProcAttribution
from gpulens.collect.procs.parse import environ_labels
from gpulens.torch import run as tracker


def test_the_agent_reads_gpulens_job_from_a_real_process() -> None:
    env = {"PATH": "/usr/bin:/bin", "GPULENS_JOB": "resnet-a"}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    try:
        deadline = time.monotonic() + 10
        labels: dict[str, str] = {}
        while time.monotonic() < deadline and "job_id" not in labels:
            labels = dict(ProcAttribution(Path("/proc")).identify(child.pid))
            time.sleep(0.05)
        assert labels.get("job_id") == "resnet-a"
    finally:
        child.kill()
        child.wait()


def test_precedence_of_the_declared_job() -> None:
    explicit, slurm = environ_labels({"GPULENS_JOB": "a", "SLURM_JOB_ID": "7"})
    assert explicit == {"job_id": "a"} and slurm["job_id"] == "7"
    explicit, _ = environ_labels({"GPULENS_JOB": "a", "GPULENS_LABELS": "job_id=b"})
    assert explicit["job_id"] == "b"  # GPULENS_LABELS names everything, the job included
    assert environ_labels({"GPULENS_JOB": "  "})[0] == {}


def test_the_tracker_takes_its_job_as_the_agent_would() -> None:
    assert tracker.default_job({"GPULENS_JOB": "bert-b", "SLURM_JOB_ID": "9"}) == "bert-b"
    assert tracker.default_job({"SLURM_JOB_ID": "9"}) == "9"
    assert tracker.default_job({"SLURM_ARRAY_JOB_ID": "8", "SLURM_ARRAY_TASK_ID": "2"}) == "8_2"


def test_start_environment_not_os_environ() -> None:
    """What the agent sees is the environment the process started with."""
    code = (
        "import os, time; os.environ['GPULENS_JOB'] = 'late'; print('ready', flush=True); "
        "time.sleep(30)"
    )
    env = {"PATH": "/usr/bin:/bin", "GPULENS_JOB": "early"}
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"ready"
        assert tracker.start_environ_job(child.pid) == "early"
    finally:
        child.kill()
        child.wait()
    assert tracker.start_environ_job(2**22 + 7) is None  # no such process: None, no error


def test_readings_carry_the_job_and_process(tmp_path: Path) -> None:
    import os

    from gpulens.store import Store

    with tracker.Run("join-me", tmp_path, run_id="r1", labels={"team": "vision"}) as run:
        for _ in range(3):
            run.step(samples=4)
    with Store(tmp_path) as store:
        rows = store.query("SELECT job_id, run_id, pid, host, source, team FROM app").to_pylist()
    assert rows and {r["job_id"] for r in rows} == {"join-me"}
    assert rows[0]["run_id"] == "r1" and rows[0]["pid"] == str(os.getpid())
    assert rows[0]["source"] == "gpulens.torch" and rows[0]["team"] == "vision"


@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
def test_disable_values(value: str) -> None:
    assert tracker.disabled({"GPULENS_DISABLE": value})
    assert not tracker.disabled({"GPULENS_DISABLE": "0"}) and not tracker.disabled({})
