"""A scheduler snapshot (jobs now, nodes now) → one step of the cluster sequence, and the
GPUs held per user or queue.

In use is the GPUs of running jobs per queue; pending is the GPUs of pending jobs; the total
is the GPUs of the queue's usable nodes when the node table is given (unknown otherwise). A
node in several partitions counts in each of them.
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
        for node in nodes.select([NODE_STATE, GPUS, QUEUES]).to_pylist():
            if not usable(str(node[NODE_STATE] or "")):
                continue
            for queue in str(node[QUEUES] or "").split(","):
                if queue:
                    totals[queue] += node[GPUS] or 0.0
    names = sorted(set(in_use) | set(pending) | set(totals))
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
    return dict(sorted(held.items(), key=lambda kv: -kv[1]))
