"""One job's record from the real Slurm JSON of the shared data (data_parser v0.0.37 to
v0.0.44, sacct and squeue shapes) and from a Kubernetes pod; the expected values are the
records' own fields (time.start/end, nodes, gres_detail, submit_line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpulens.collect.scheduler.errors import SchedulerInputError
from gpulens.collect.scheduler.job_lookup import (
    JobNotFound,
    expand_hostlist,
    find_job,
    read_job,
    run_job_lookup,
)

SLURM = "data/scheduler/rackslab_Slurm-web/tests/assets/slurmrestd"


@pytest.mark.parametrize(
    ("name", "job", "state", "start", "end", "nodes", "gpus", "indices", "user", "account"),
    [
        # sacct shape, no GPU in TRES: the count is the submit line's --gpus 4
        ("24.05/0.0.41/slurmdb-job-gpus-completed.json", "10", "COMPLETED", 1762529655,
         1762529685, ("gpu1",), 4.0, {}, "acuevas", "acoustic"),
        ("25.11/0.0.44/slurmdb-job-gpus-completed.json", "5141", "COMPLETED", 1762784359,
         1762784390, ("gpu1",), 4.0, {}, "acuevas", "acoustic"),
        # running: time.end 0, no end
        ("25.05/0.0.43/slurmdb-job-gpus-running.json", "4751", "RUNNING", 1762789170, None,
         ("gpu1",), 4.0, {}, "jbeck", "biology"),
        # squeue shape: a running job's end_time is its time limit, not an end
        ("24.05/0.0.41/slurm-job-gpus-running.json", "9", "RUNNING", 1762529652, None,
         ("gpu1",), 4.0, {"gpu1": (0, 1, 2, 3)}, "dperez", None),
        ("25.11/0.0.44/slurm-job-gpus-multi-nodes.json", "5679", "RUNNING", 1762788040, None,
         ("gpu1", "gpu2"), 8.0, {"gpu1": (0, 1, 2, 3), "gpu2": (0, 1, 2, 3)}, "dperez", None),
        ("25.11/0.0.44/slurm-job-gpus-multi-types.json", "4716", "RUNNING", 1762783613, None,
         ("gpu1",), 1.0, {"gpu1": (0,)}, "acuevas", "acoustic"),
        # a hostlist range, no GPU
        ("24.11/0.0.42/slurm-jobs.json", "6365", "RUNNING", 1762788837, None,
         ("cn1", "cn2", "cn3"), 0.0, {}, "jbeck", "biology"),
        ("25.11/0.0.44/slurmdb-job-gpus-pending.json", "4965", "PENDING", None, None, (), 4.0,
         {}, "jwilson", None),
    ],
)  # fmt: skip
def test_slurm_records(
    shared: Path,
    name: str,
    job: str,
    state: str,
    start: float | None,
    end: float | None,
    nodes: tuple[str, ...],
    gpus: float,
    indices: dict[str, tuple[int, ...]],
    user: str,
    account: str | None,
) -> None:
    got = read_job(shared / SLURM / name, job)
    assert (got.job_id, got.state, got.start_s, got.end_s) == (job, state, start, end)
    assert (got.nodes, got.gpus, dict(got.gpu_indices)) == (nodes, gpus, indices)
    assert got.user == user
    if account is not None:
        assert got.team == account
    assert got.partition and got.qos == "normal"


def test_old_sacct_without_end_ends_at_start_plus_elapsed(shared: Path) -> None:
    path = shared / "data/scheduler/mila-iqia_clockwork/slurm_state_test/files/sacct_1"
    doc = json.loads(path.read_bytes())
    raw = doc["jobs"][0]["time"]
    got = read_job(path, "10")
    assert got.state == "NODE_FAIL" and raw["end"] == 0
    assert got.end_s == raw["start"] + raw["elapsed"]
    assert (got.gpus, got.nodes, got.team) == (1.0, ("cdr1",), "def-cerise-rrg")
    requeued = read_job(path, "20")
    assert (requeued.start_s, requeued.end_s) == (1680127992, 1680215981)


def test_unknown_job_is_one_clear_error(shared: Path) -> None:
    path = shared / SLURM / "24.11/0.0.42/slurm-jobs.json"
    with pytest.raises(JobNotFound, match=r"job '1' is not in .*slurm-jobs\.json"):
        read_job(path, "1")
    with pytest.raises(SchedulerInputError, match="not readable"):
        read_job(path.with_name("missing.json"), "1")


def test_array_tasks_answer_to_their_array_id(shared: Path) -> None:
    """An array task is asked for as ARRAYID_TASK (sacct and squeue shapes)."""

    def load(name: str) -> dict:
        return dict(json.loads((shared / SLURM / "25.11/0.0.44" / name).read_bytes()))

    sacct = load("slurmdb-job-gpus-completed.json")
    sacct["jobs"][0]["array"].update(job_id=5140, task_id={"set": True, "number": 3})
    assert find_job([sacct], "5140_3", "sacct").job_id == "5141"
    squeue = load("slurm-job-gpus-running.json")
    squeue["jobs"][0]["array_job_id"]["number"] = 5550
    squeue["jobs"][0]["array_task_id"] = {"set": True, "infinite": False, "number": 0}
    assert find_job([squeue], "5550_0", "squeue").job_id == "5557"
    with pytest.raises(JobNotFound):  # no array: array_job_id 0
        find_job([load("slurm-job-gpus-running.json")], "0_0", "squeue")


def test_hostlists() -> None:
    assert expand_hostlist("gpu[1-2]") == ["gpu1", "gpu2"]
    assert expand_hostlist("cn[01-03,7],gpu1") == ["cn01", "cn02", "cn03", "cn7", "gpu1"]
    assert expand_hostlist("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    with pytest.raises(ValueError, match="hostlist"):
        expand_hostlist("gpu[a-b]")


def test_pod_from_the_real_manifest_with_its_status(shared: Path) -> None:
    """KAI's GPU pod manifest, as the API returns it once it ran: node, start, finish."""
    yaml = pytest.importorskip("yaml")
    path = shared / "data/scheduler/NVIDIA_KAI-Scheduler/examples/quickstart/pods/gpu-pod.yaml"
    pod = yaml.safe_load(path.read_text())
    assert find_job([pod], "default/gpu-pod", "manifest").start_s is None  # never ran
    pod["spec"]["nodeName"] = "node-a"
    pod["status"] = {
        "phase": "Succeeded",
        "startTime": "2026-11-30T10:00:00Z",
        "containerStatuses": [
            {"state": {"terminated": {"finishedAt": "2026-11-30T12:30:00Z", "exitCode": 0}}}
        ],
    }
    got = find_job([{"kind": "List", "items": [pod]}], "gpu-pod", "pods.json")
    assert got.job_id == "default/gpu-pod"
    assert (got.state, got.nodes, got.gpus) == ("COMPLETED", ("node-a",), 1.0)
    assert got.end_s is not None and got.start_s is not None
    assert got.end_s - got.start_s == 2.5 * 3600


def test_lookup_command_not_on_path_says_what_to_do() -> None:
    with pytest.raises(SchedulerInputError, match="--sacct FILE"):
        run_job_lookup("no-such-sacct-binary --json --jobs {job}", "5")


def test_bad_records_and_commands_are_one_clear_error() -> None:
    # a hostlist or a GPU index that is not one, and unbalanced quotes in --job-lookup
    for nodes, gres in (("gpu[1-x]", "gpu:2(IDX:0-1)"), ("gpu1", "gpu:2(IDX:-1)")):
        doc = {"jobs": [{"job_id": 7, "job_state": "RUNNING", "start_time": 100,
                         "nodes": nodes, "gres_detail": [gres]}]}  # fmt: skip
        with pytest.raises(SchedulerInputError, match=r"cannot read jobs.json: job 7: not a"):
            find_job([doc], "7", "jobs.json")
    with pytest.raises(SchedulerInputError, match="the job lookup command: No closing"):
        run_job_lookup("sacct --json --jobs '{job}", "5")
