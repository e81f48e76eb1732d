"""A job log CSV: per job its submit, start and end times, GPUs, queue and user.

`read_job_log` gives the job table of `gpulens.cluster_schema`; the analysis turns it into
per-step allocation and pending demand per queue (analyze/cluster/timeline.py). An empty
start is a job that never ran; an empty end one still running. ``gpus=COLUMN:percent`` reads
a share of one GPU in % (the Alibaba PAI trace's ``plan_gpu``) and ``count=COLUMN``
multiplies by the instances.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from gpulens.cluster_schema import (
    END,
    GPUS,
    JOB_ID,
    JOB_SCHEMA,
    NODES,
    QUEUE,
    START,
    STATE,
    SUBMIT,
    TEAM,
    USER,
)
from gpulens.collect.scheduler.colmap import JOB_ROLES, RoleMap, parse_role_map
from gpulens.collect.scheduler.csvfile import MAP_FIX, numbers, read_columns, seconds
from gpulens.collect.scheduler.errors import SchedulerInputError


def job_roles(maps: Sequence[str]) -> RoleMap:
    """The role map of a job log's ``--map`` (ConfigError on a bad one)."""
    return parse_role_map(maps, JOB_ROLES, ("start", "end", "gpus", "queue"))


def read_job_log(path: Path, roles: RoleMap, header: Sequence[str] | None = None) -> pa.Table:
    """One job log as the job table (`header`: column names of a file without a header row)."""
    source = str(path)
    table = read_columns(path, roles, header)
    n = table.num_rows
    nan = np.full(n, np.nan)
    submit = seconds(table, roles, "submit", source)
    start = seconds(table, roles, "start", source)
    end = seconds(table, roles, "end", source)
    gpus = numbers(table, roles, "gpus", source)
    count = numbers(table, roles, "count", source)
    assert start is not None and end is not None and gpus is not None  # required roles
    if count is not None:
        gpus = gpus * np.where(np.isnan(count), 1.0, count)
    bad = ~np.isnan(start) & ~np.isnan(end) & (end < start)
    if bad.any():
        row = int(np.flatnonzero(bad)[0]) + 1
        raise SchedulerInputError(source, f"row {row} ends before it starts", MAP_FIX)

    def text(role: str) -> pa.Array:
        column = roles.column(role)
        return table[column] if column else pa.nulls(n, pa.string())

    def masked(values: np.ndarray) -> pa.Array:
        return pa.array(values, pa.float64(), mask=np.isnan(values))

    return pa.table(
        {
            JOB_ID: text("job"),
            QUEUE: text("queue"),
            USER: text("user"),
            TEAM: text("team"),
            STATE: text("state"),
            GPUS: masked(gpus),
            SUBMIT: masked(submit if submit is not None else nan),
            START: masked(start),
            END: masked(end),
            NODES: pa.nulls(n, pa.string()),
        },
        schema=JOB_SCHEMA,
    )


def read_job_logs(
    paths: Sequence[Path], roles: RoleMap, header: Sequence[str] | None = None
) -> pa.Table:
    """Several job logs, one job table."""
    return pa.concat_tables([read_job_log(p, roles, header) for p in paths])
