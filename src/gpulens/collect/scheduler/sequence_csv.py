"""A cluster sequence CSV: per step, a queue's total GPUs, GPUs in use and pending GPU demand.

One file per queue (the queue is the file's stem, or its parent directory with
``queue_from="parent-dir"``) or one file with a queue column (``queue_from="column:NAME"``, or
``--map queue=NAME``). Missing cells are no data, never 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from gpulens.cluster_schema import IN_USE, PENDING, QUEUE, SEQUENCE_SCHEMA, TOTAL, TS
from gpulens.collect.scheduler.colmap import SEQUENCE_ROLES, RoleMap, parse_role_map
from gpulens.collect.scheduler.csvfile import numbers, read_columns, seconds
from gpulens.collect.scheduler.errors import SchedulerInputError
from gpulens.errors import ConfigError

QUEUE_FROM = ("file", "parent-dir", "column:NAME")


def sequence_roles(maps: Sequence[str], queue_from: str | None) -> RoleMap:
    """The role map of ``--map`` and ``--queue-from`` (ConfigError on a bad one)."""
    roles = parse_role_map(maps, SEQUENCE_ROLES, ("time", "total", "in_use"))
    if queue_from and queue_from.startswith("column:"):
        name = queue_from.removeprefix("column:").strip()
        if not name:
            raise ConfigError("--queue-from column:NAME needs the column's name")
        if roles.column("queue") not in (None, name):
            raise ConfigError("--queue-from and --map queue= name different columns; give one")
        roles = RoleMap({**roles.roles, "queue": (name, None)})
    elif queue_from not in (None, "file", "parent-dir"):
        raise ConfigError(f"--queue-from {queue_from!r}: use one of {', '.join(QUEUE_FROM)}")
    return roles


def read_sequence(
    path: Path,
    roles: RoleMap,
    queue_from: str | None = None,
    header: Sequence[str] | None = None,
) -> pa.Table:
    """One sequence file as the long table of `gpulens.cluster_schema`."""
    source = str(path)
    table = read_columns(path, roles, header)
    ts = seconds(table, roles, "time", source)
    assert ts is not None  # a required role
    if np.isnan(ts).any():
        row = int(np.flatnonzero(np.isnan(ts))[0]) + 1
        raise SchedulerInputError(
            source, f"row {row} has no time", "Every row needs its step's time."
        )
    n = table.num_rows
    nan = np.full(n, np.nan)
    total = numbers(table, roles, "total", source)
    in_use = numbers(table, roles, "in_use", source)
    pending = numbers(table, roles, "pending", source)
    column = roles.column("queue")
    if column is not None:
        queue = table[column]
    else:
        name = path.parent.name if queue_from == "parent-dir" else path.stem
        queue = pa.array([name] * n, pa.string())
    return pa.table(
        {
            TS: np.floor(ts).astype(np.int64),
            QUEUE: queue,
            TOTAL: _masked(total if total is not None else nan),
            IN_USE: _masked(in_use if in_use is not None else nan),
            PENDING: _masked(pending if pending is not None else nan),
        },
        schema=SEQUENCE_SCHEMA,
    )


def _masked(values: np.ndarray) -> pa.Array:
    return pa.array(values, pa.float64(), mask=np.isnan(values))


def read_sequences(
    paths: Sequence[Path],
    roles: RoleMap,
    queue_from: str | None,
    header: Sequence[str] | None = None,
) -> pa.Table:
    """Several sequence files, one table (SchedulerInputError when two files would name the
    same queue)."""
    if roles.column("queue") is None:
        seen: dict[str, Path] = {}
        for path in paths:
            name = path.parent.name if queue_from == "parent-dir" else path.stem
            if name in seen:
                raise SchedulerInputError(
                    str(path),
                    f"it names queue {name!r}, as {seen[name]} does",
                    "Name the files after their queues, or pass --queue-from parent-dir or "
                    "--queue-from column:NAME.",
                )
            seen[name] = path
    return pa.concat_tables([read_sequence(p, roles, queue_from, header) for p in paths])
