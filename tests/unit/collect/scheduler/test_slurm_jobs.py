"""squeue --json's per-job QoS, partition, user and state (what `gpulens enforce` exempts on),
read from real Slurm JSON of several data_parser versions (shared scheduler data, section 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpulens.collect.scheduler.errors import SchedulerInputError
from gpulens.collect.scheduler.slurm_jobs import parse_job_details, read_job_details

SLURM_WEB = "data/scheduler/rackslab_Slurm-web/tests/assets/slurmrestd"


def test_v0044_running_gpu_job(shared: Path) -> None:
    jobs = read_job_details(shared / f"{SLURM_WEB}/25.11/0.0.44/slurm-job-gpus-running.json")
    job = jobs["5557"]
    assert (job.state, job.user, job.partition, job.qos) == ("RUNNING", "jbeck", "gpu", "normal")
    assert job.running


def test_v0042_queue_of_many_states(shared: Path) -> None:
    path = shared / f"{SLURM_WEB}/24.11/0.0.42/slurm-jobs.json"
    doc = json.loads(path.read_text())
    jobs = read_job_details(path)
    assert {j["job_id"] for j in doc["jobs"]} <= {int(k) for k in jobs if "_" not in k}
    states = {j.state for j in jobs.values()}
    assert {"RUNNING", "PENDING", "COMPLETED"} <= states
    running = [j for j in jobs.values() if j.running]
    assert len({j.job_id for j in running}) == 7
    assert jobs["6355"].partition == "ia" and jobs["6355"].user == "progers"


def test_v0041_pending_job_is_not_running(shared: Path) -> None:
    jobs = read_job_details(shared / f"{SLURM_WEB}/24.05/0.0.41/slurm-job-gpus-pending.json")
    assert jobs["2"].state == "PENDING" and not jobs["2"].running and jobs["2"].qos == "normal"


def test_v0037_flat_and_wrapped_shapes(shared: Path) -> None:
    path = (
        shared
        / "data/scheduler/rivosinc_prometheus-slurm-exporter/exporter/fixtures/squeue_out.json"
    )
    jobs = read_job_details(path)
    doc = json.loads(path.read_text())
    for raw in doc["jobs"]:
        job = jobs[str(raw["job_id"])]
        state = raw["job_state"]
        assert job.state == (state[0] if isinstance(state, list) else state)
        assert job.partition == (raw.get("partition") or None)


def test_not_squeue(tmp_path: Path) -> None:
    with pytest.raises(SchedulerInputError, match="no 'jobs' list"):
        parse_job_details({"nodes": []}, "sinfo.json")
    bad = tmp_path / "x.json"
    bad.write_text("{")
    with pytest.raises(SchedulerInputError, match="not JSON"):
        read_job_details(bad)
