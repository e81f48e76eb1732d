"""Cluster sequence CSVs and job logs: the --map roles, queues from file, directory or column,
a PAI-layout job log read with the trace's own header file, and the errors."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from gpulens.collect.scheduler.errors import SchedulerInputError
from gpulens.collect.scheduler.joblog import job_roles, read_job_log
from gpulens.collect.scheduler.sequence_csv import read_sequences, sequence_roles
from gpulens.errors import ConfigError

MAP = ["time=minute,total=gpus,in_use=busy,pending=waiting"]


def _write(path: Path, rows: list[list[object]], header: list[str] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        if header:
            w.writerow(header)
        w.writerows(rows)
    return path


def test_one_file_per_queue_from_parent_dirs(tmp_path: Path) -> None:
    head = ["minute", "gpus", "busy", "waiting"]
    a = _write(tmp_path / "a/seq.csv", [["2025-11-29T00:00:00Z", 8, 6, ""]], head)
    b = _write(tmp_path / "b/seq.csv", [["2025-11-29T00:00:00Z", 4, 4, 2]], head)
    table = read_sequences([a, b], sequence_roles(MAP, "parent-dir"), "parent-dir")
    assert table.to_pylist() == [
        {"ts_s": 1764374400, "queue": "a", "total_gpus": 8.0, "in_use_gpus": 6.0,
         "pending_gpus": None},
        {"ts_s": 1764374400, "queue": "b", "total_gpus": 4.0, "in_use_gpus": 4.0,
         "pending_gpus": 2.0},
    ]  # fmt: skip
    with pytest.raises(SchedulerInputError, match=r"b/seq\.csv.*queue 'seq'.*parent-dir"):
        read_sequences([a, b], sequence_roles(MAP, None), None)


def test_a_queue_column(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "all.csv",
        [[1764374400, "x", 8, 1, 0], [1764374400, "y", 2, 2, 1]],
        ["minute", "vc", "gpus", "busy", "waiting"],
    )
    roles = sequence_roles(MAP, "column:vc")
    table = read_sequences([path], roles, "column:vc")
    assert table["queue"].to_pylist() == ["x", "y"]
    assert table["ts_s"].to_pylist() == [1764374400] * 2


def test_map_errors_name_the_role() -> None:
    with pytest.raises(ConfigError, match=r"unknown role 'inuse' \(did you mean in_use\?\)"):
        sequence_roles(["time=t,total=g,inuse=u"], None)
    with pytest.raises(ConfigError, match=r"--map needs in_use"):
        sequence_roles(["time=t,total=g"], None)
    with pytest.raises(ConfigError, match=r"--queue-from 'dir'"):
        sequence_roles(MAP, "dir")


def test_a_missing_column_names_the_file_and_column(tmp_path: Path) -> None:
    path = _write(tmp_path / "q.csv", [[1, 2, 3]], ["minute", "gpus", "used"])
    with pytest.raises(SchedulerInputError, match=r"q\.csv: no column 'busy', 'waiting'"):
        read_sequences([path], sequence_roles(MAP, None), None)


def test_a_bad_number_names_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "q.csv", [[1764374400, "eight", 3, 0]], ["minute", "gpus", "busy",
                                                                       "waiting"])  # fmt: skip
    with pytest.raises(SchedulerInputError, match=r"q\.csv: 'eight' is not a number"):
        read_sequences([path], sequence_roles(MAP, None), None)


def test_a_pai_layout_job_log_with_the_trace_header(shared: Path, tmp_path: Path) -> None:
    """The Alibaba PAI 2020 task table has no header row; its column names ship apart, and
    plan_gpu is in % of one GPU per instance."""
    pai = shared / "data/clusters/alibaba-pai-gpu-v2020"
    header = (pai / "pai_task_table.header").read_text().strip().split(",")
    rows = [
        ["j1", "worker", 2, "Terminated", 100, 700, 600, 29.3, 50, "V100"],
        ["j2", "tensorflow", 1, "Running", 400, "", 400, 29.3, 100, "T4"],
        ["j3", "ps", 1, "Failed", "", "", 100, 10, "", "MISC"],
    ]
    path = _write(tmp_path / "pai_task_table.csv", rows)
    roles = job_roles(
        ["start=start_time,end=end_time,gpus=plan_gpu:percent,count=inst_num,"
         "queue=gpu_type,job=job_name,state=status"]
    )  # fmt: skip
    jobs = read_job_log(path, roles, header).to_pylist()
    assert [(j["job_id"], j["queue"], j["gpus"]) for j in jobs] == [
        ("j1", "V100", 1.0),
        ("j2", "T4", 1.0),
        ("j3", "MISC", None),
    ]
    assert (jobs[0]["start_s"], jobs[0]["end_s"]) == (100.0, 700.0)
    assert jobs[1]["end_s"] is None and jobs[2]["start_s"] is None


def test_a_job_that_ends_before_it_starts(tmp_path: Path) -> None:
    path = _write(tmp_path / "log.csv", [[10, 5, 1, "q"]], ["s", "e", "g", "q"])
    with pytest.raises(SchedulerInputError, match=r"log\.csv: row 1 ends before it starts"):
        read_job_log(path, job_roles(["start=s,end=e,gpus=g,queue=q"]))
