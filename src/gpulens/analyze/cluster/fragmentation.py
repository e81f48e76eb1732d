"""Fragmentation: free GPUs per node against the sizes of the pending jobs.

A pending job is *fragmented out* when the free GPUs of its queue add up to its size but no
single node has that many free, while a node of the queue is big enough when empty: the GPUs
exist, they are just spread. Nodes down, drained or failing are not free capacity; the free
GPUs of a node whose CPUs are all allocated (Slurm's ALLOCATED) cannot be scheduled either:
they are *stranded*.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from gpulens.cluster_schema import GPUS, JOB_ID, NODE_STATE, QUEUE, QUEUES, STATE, USED

UNAVAILABLE = ("DOWN", "DRAIN", "FAIL", "MAINT", "NOT_RESPONDING", "POWERED_DOWN", "RESERVED")


@dataclass(frozen=True, slots=True)
class QueueFragmentation:
    """One queue: free GPUs per usable node, the pending jobs' sizes, and those fragmented out."""

    queue: str
    nodes: int
    gpus: float
    free_gpus: float
    largest_free_block: float
    free_per_node: tuple[float, ...]
    pending_sizes: tuple[float, ...]
    fragmented_jobs: tuple[str, ...]
    fragmented_sizes: tuple[float, ...]
    fragmented_gpus: float
    stranded_gpus: float  # free GPUs on nodes with no CPU left


def usable(state: str) -> bool:
    """False for a node state that offers no capacity (down, drained, failing...)."""
    upper = state.upper()
    return not any(word in upper for word in UNAVAILABLE)


def _cpus_full(state: str) -> bool:
    return "ALLOCATED" in state.upper().split("+")


def fragmentation(nodes: pa.Table, jobs: pa.Table) -> list[QueueFragmentation]:
    """Per queue of the node table: free GPUs per node against its pending jobs."""
    node_rows = nodes.to_pylist()
    pending = [j for j in jobs.to_pylist() if str(j[STATE] or "").upper() == "PENDING"]
    queues = sorted({q for n in node_rows for q in str(n[QUEUES] or "").split(",") if q})
    out = []
    for queue in queues:
        mine = [
            n for n in node_rows if queue in str(n[QUEUES] or "").split(",") and (n[GPUS] or 0) > 0
        ]
        if not mine:
            continue
        ok = [n for n in mine if usable(str(n[NODE_STATE] or ""))]
        idle = np.array([max((n[GPUS] or 0) - (n[USED] or 0), 0.0) for n in ok], dtype=float)
        full = np.array([_cpus_full(str(n[NODE_STATE] or "")) for n in ok], dtype=bool)
        free = np.where(full, 0.0, idle)
        largest_node = max((float(n[GPUS] or 0) for n in ok), default=0.0)
        block = float(free.max()) if free.size else 0.0
        sizes = [j for j in pending if j[QUEUE] == queue and (j[GPUS] or 0) > 0]
        stuck = [j for j in sizes if block < j[GPUS] <= min(float(free.sum()), largest_node)]
        out.append(
            QueueFragmentation(
                queue=queue,
                nodes=len(mine),
                gpus=float(sum(n[GPUS] or 0 for n in mine)),
                free_gpus=float(free.sum()),
                largest_free_block=block,
                free_per_node=tuple(sorted(free.tolist(), reverse=True)),
                pending_sizes=tuple(float(j[GPUS]) for j in sizes),
                fragmented_jobs=tuple(str(j[JOB_ID]) for j in stuck),
                fragmented_sizes=tuple(float(j[GPUS]) for j in stuck),
                fragmented_gpus=float(sum(j[GPUS] for j in stuck)),
                stranded_gpus=float(idle[full].sum()) if idle.size else 0.0,
            )
        )
    return out
