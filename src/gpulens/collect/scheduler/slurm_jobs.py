"""Per-job facts of ``squeue --json`` (or slurmrestd ``/slurm/v0.0.4x/jobs``) that the job
table leaves out: QoS, partition, user, account and state, by job id (pure parse;
`read_job_details` and `run_squeue` fetch). `gpulens enforce` reads its exemptions by QoS and
partition here, and acts only on jobs squeue says are running.

Every data_parser version from v0.0.37 to v0.0.44: the state is a string or a list, the user
`user_name` (or `user`). Array jobs are also listed under ``<array_job_id>_<task id>``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulens.collect.scheduler.errors import SchedulerInputError
from gpulens.collect.scheduler.slurm import job_state, number

FIX = "Pass the output of `squeue --json` (Slurm 21.08+)"


@dataclass(frozen=True, slots=True)
class JobDetails:
    """What squeue says of one job."""

    job_id: str
    state: str
    user: str | None
    partition: str | None
    qos: str | None
    account: str | None

    @property
    def running(self) -> bool:
        return self.state == "RUNNING"


def _text(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def parse_job_details(doc: Any, source: str) -> dict[str, JobDetails]:
    """Job id → `JobDetails` of one decoded squeue document (array tasks also under
    ``<array id>_<task id>``)."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("jobs"), list):
        raise SchedulerInputError(source, "it has no 'jobs' list", FIX + ".")
    out: dict[str, JobDetails] = {}
    for job in doc["jobs"]:
        if not isinstance(job, Mapping) or job.get("job_id") is None:
            continue
        job_id = str(job["job_id"])
        details = JobDetails(
            job_id=job_id,
            state=job_state(job.get("job_state", job.get("state"))),
            user=_text(job.get("user_name", job.get("user"))),
            partition=_text(job.get("partition")),
            qos=_text(job.get("qos")),
            account=_text(job.get("account")),
        )
        out[job_id] = details
        array_id, task = number(job.get("array_job_id")), number(job.get("array_task_id"))
        if array_id and task is not None:
            out.setdefault(f"{int(array_id)}_{int(task)}", details)
    return out


def read_job_details(path: Path) -> dict[str, JobDetails]:
    """`parse_job_details` of a JSON file."""
    try:
        doc = json.loads(path.read_bytes())
    except OSError as exc:
        raise SchedulerInputError(str(path), f"not readable ({exc})", FIX + ".") from None
    except ValueError as exc:
        raise SchedulerInputError(str(path), f"not JSON ({exc})", FIX + ".") from None
    return parse_job_details(doc, str(path))


def run_squeue(timeout_s: float = 60.0) -> dict[str, JobDetails]:
    """Run ``squeue --json`` here and parse it."""
    binary = shutil.which("squeue")
    if binary is None:
        raise SchedulerInputError(
            "squeue", "the command is not on PATH", "Run it on a Slurm login node or pass a file."
        )
    try:
        done = subprocess.run(
            [binary, "--json"], capture_output=True, timeout=timeout_s, check=True
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise SchedulerInputError("squeue --json", f"it failed ({exc})", FIX + ".") from None
    try:
        doc = json.loads(done.stdout)
    except ValueError as exc:
        raise SchedulerInputError(
            "squeue --json", f"its output is not JSON ({exc})", FIX + "."
        ) from None
    return parse_job_details(doc, "squeue --json")
