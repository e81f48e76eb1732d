"""A scheduler snapshot (jobs now, nodes now) → one step of the cluster sequence, and the
GPUs held per user or queue.

Pending is the GPUs of pending jobs per queue. With a node table, the total and in-use GPUs are
those of the queue's usable nodes (what the nodes say is allocated); without one, in use is
the GPUs of running jobs and the total is unknown. A node in several partitions counts in each
of them. Queues with no GPU at all (CPU partitions) are left out.
"""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa

from gpulens.analyze.cluster.fragmentation import usable
from gpulens.cluster_schema import (
    GPUS,
    IN_USE,
    NODE_STATE,
    PENDING,
    QUEUE,
    QUEUES,
    SEQUENCE_SCHEMA,
    STATE,
    TOTAL,
    TS,
    USED,
)

RUNNING = frozenset({"RUNNING", "COMPLETING", "CONFIGURING"})


def snapshot_sequence(jobs: pa.Table, nodes: pa.Table | None, ts_s: int) -> pa.Table:
    """One row per queue (from the jobs and the nodes) at `ts_s`."""
    in_use: dict[str, float] = defaultdict(float)
    pending: dict[str, float] = defaultdict(float)
    for job in jobs.select([QUEUE, STATE, GPUS]).to_pylist():
        queue, state, gpus = job[QUEUE] or "(none)", str(job[STATE] or "").upper(), job[GPUS]
        if state in RUNNING:
            in_use[queue] += gpus or 0.0
        elif state == "PENDING":
            pending[queue] += gpus or 0.0
    totals: dict[str, float] = defaultdict(float)
    if nodes is not None:
        in_use = defaultdict(float)
        for node in nodes.select([NODE_STATE, GPUS, USED, QUEUES]).to_pylist():
            if not usable(str(node[NODE_STATE] or "")):
                continue
            for queue in str(node[QUEUES] or "").split(","):
                if queue:
                    totals[queue] += node[GPUS] or 0.0
                    in_use[queue] += node[USED] or 0.0
    names = sorted(
        n for n in set(in_use) | set(pending) | set(totals) if in_use[n] or pending[n] or totals[n]
    )
    return pa.table(
        {
            TS: [ts_s] * len(names),
            QUEUE: names,
            TOTAL: [totals[n] if nodes is not None else None for n in names],
            IN_USE: [in_use[n] for n in names],
            PENDING: [pending[n] for n in names],
        },
        schema=SEQUENCE_SCHEMA,
    )


def gpus_by(jobs: pa.Table, key: str) -> dict[str, float]:
    """GPUs held by running jobs, per value of `key` (user, queue), largest first."""
    held: dict[str, float] = defaultdict(float)
    for job in jobs.select([key, STATE, GPUS]).to_pylist():
        if str(job[STATE] or "").upper() in RUNNING:
            held[str(job[key] or "(none)")] += job[GPUS] or 0.0
    return dict(sorted(((k, v) for k, v in held.items() if v > 0), key=lambda kv: -kv[1]))
