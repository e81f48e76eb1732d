"""Consolidation plan: under-used jobs that could take a MIG slice, share a GPU, or pack onto
fewer nodes, the GPUs that frees, and the risk of each move.

Input is one `JobLoad` per job and GPU size: its mean SM activity (useful work, 0..1) and its
peak memory per GPU. Moves are proposed in order of isolation:

1. **MIG slice** — a one-GPU job whose peak memory fits a slice with `headroom` to spare and
   whose SM activity stays under `slice_busy` of the slice's compute. The slices are the
   A100/H100/H200 profiles as fractions of the GPU (compute sevenths, memory eighths: 1g, 2g,
   3g, 4g). Frees 1 − compute/7 of a GPU.
2. **Share a GPU** — the remaining one-GPU jobs under `share_sm` SM activity, packed first-fit
   decreasing so that on each GPU Σ SM activity ≤ `share_busy` and Σ peak memory ≤
   (1 − `headroom`) of the memory. Frees (jobs − GPUs used).
3. **Fewer nodes** — per queue, nodes partly allocated: their used GPUs packed first-fit
   decreasing (a node's jobs move together) onto as few of them as hold them. Frees the whole
   nodes emptied.

Risk per move: memory headroom (1 − memory used ÷ memory available after the move) and
interference (Σ SM activity on the shared GPU or the slice's compute share used); a move with
headroom under 20 % or interference over 0.6 is "high".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# (compute sevenths, memory eighths) of the MIG profiles of A100/H100/H200
MIG_PROFILES: tuple[tuple[int, int], ...] = ((1, 1), (2, 2), (3, 4), (4, 4))
GIB = 1024**3


@dataclass(frozen=True, slots=True)
class JobLoad:
    """One job: its GPUs, mean SM activity (NaN: unknown), peak memory used per GPU and the
    memory of one of its GPUs (bytes), node and queue."""

    job: str
    gpus: float
    sm_active: float
    memory_used_bytes: float
    memory_total_bytes: float
    node: str = ""
    queue: str = ""


@dataclass(frozen=True, slots=True)
class Move:
    """`kind`: mig, share or pack; the jobs (or nodes) moved, `target` (a MIG profile, a
    shared GPU's number, or the nodes kept), GPUs freed, memory headroom, interference,
    risk."""

    kind: str
    jobs: tuple[str, ...]
    target: str
    gpus_freed: float
    memory_headroom: float
    interference: float
    risk: str


@dataclass(frozen=True, slots=True)
class ConsolidationPlan:
    moves: tuple[Move, ...]
    gpus_freed: float
    jobs_considered: int
    jobs_unknown: int  # without SM activity or memory: left out, not counted as idle


def _risk(headroom: float, interference: float) -> str:
    if headroom < 0.2 or interference > 0.6:
        return "high"
    if headroom < 0.4 or interference > 0.4:
        return "medium"
    return "low"


def _profile_name(compute: int, memory: int, total_bytes: float) -> str:
    return f"{compute}g.{math.floor(memory * total_bytes / 8 / 1e9)}gb"


def _mig(job: JobLoad, headroom: float, slice_busy: float) -> Move | None:
    for compute, memory in MIG_PROFILES:
        room = memory / 8 * job.memory_total_bytes
        busy = job.sm_active / (compute / 7)
        if job.memory_used_bytes <= (1 - headroom) * room and busy <= slice_busy:
            head = 1 - job.memory_used_bytes / room
            return Move(
                kind="mig",
                jobs=(job.job,),
                target=_profile_name(compute, memory, job.memory_total_bytes),
                gpus_freed=1 - compute / 7,
                memory_headroom=head,
                interference=busy,
                risk=_risk(head, busy),
            )
    return None


def _share(
    jobs: Sequence[JobLoad], headroom: float, share_busy: float, first_index: int
) -> list[Move]:
    """First-fit decreasing by SM activity onto shared GPUs (same memory size per bin)."""
    bins: list[list[JobLoad]] = []
    for job in sorted(jobs, key=lambda j: (-j.sm_active, -j.memory_used_bytes)):
        for b in bins:
            sm = sum(j.sm_active for j in b) + job.sm_active
            mem = sum(j.memory_used_bytes for j in b) + job.memory_used_bytes
            if (
                b[0].memory_total_bytes == job.memory_total_bytes
                and sm <= share_busy
                and mem <= (1 - headroom) * job.memory_total_bytes
            ):
                b.append(job)
                break
        else:
            bins.append([job])
    moves = []
    for i, b in enumerate(bins):
        if len(b) < 2:
            continue
        mem = sum(j.memory_used_bytes for j in b)
        sm = sum(j.sm_active for j in b)
        head = 1 - mem / b[0].memory_total_bytes
        moves.append(
            Move(
                kind="share",
                jobs=tuple(j.job for j in b),
                target=f"shared GPU {first_index + i + 1}",
                gpus_freed=float(len(b) - 1),
                memory_headroom=head,
                interference=sm,
                risk=_risk(head, sm),
            )
        )
    return moves


def pack_nodes(nodes: Iterable[tuple[str, str, float, float]]) -> list[Move]:
    """(node, queue, GPUs, used) → per queue, the partly used nodes whose work fits on fewer
    of them (first-fit decreasing of each node's used GPUs, nodes of one size)."""
    by_queue: dict[tuple[str, float], list[tuple[str, float]]] = {}
    for node, queue, gpus, used in nodes:
        if 0 < used < gpus:
            by_queue.setdefault((queue, gpus), []).append((node, used))
    moves = []
    for (queue, gpus), parts in sorted(by_queue.items()):
        kept: list[list[tuple[str, float]]] = []
        for node, used in sorted(parts, key=lambda p: -p[1]):
            for b in kept:
                if sum(u for _, u in b) + used <= gpus:
                    b.append((node, used))
                    break
            else:
                kept.append([(node, used)])
        freed = len(parts) - len(kept)
        if freed <= 0:
            continue
        moved = [n for b in kept for n, _ in b[1:]]
        moves.append(
            Move(
                kind="pack",
                jobs=tuple(moved),
                target=f"{queue}: " + ",".join(b[0][0] for b in kept),
                gpus_freed=float(freed * gpus),
                memory_headroom=float("nan"),
                interference=float("nan"),
                risk="medium",  # jobs restart elsewhere: needs checkpointing
            )
        )
    return moves


def consolidation_plan(
    jobs: Sequence[JobLoad],
    nodes: Iterable[tuple[str, str, float, float]] = (),
    headroom: float = 0.1,
    slice_busy: float = 0.6,
    share_sm: float = 0.3,
    share_busy: float = 0.7,
) -> ConsolidationPlan:
    """The plan for `jobs` (and the node packing of `nodes`: node, queue, GPUs, used)."""
    known = [
        j
        for j in jobs
        if not (math.isnan(j.sm_active) or math.isnan(j.memory_used_bytes))
        and j.memory_total_bytes > 0
    ]
    moves: list[Move] = []
    sharers: list[JobLoad] = []
    for job in sorted(known, key=lambda j: j.job):
        if job.gpus != 1:
            continue
        mig = _mig(job, headroom, slice_busy)
        if mig is not None:
            moves.append(mig)
        elif job.sm_active <= share_sm:
            sharers.append(job)
    moves.extend(_share(sharers, headroom, share_busy, 0))
    moves.extend(pack_nodes(nodes))
    return ConsolidationPlan(
        moves=tuple(moves),
        gpus_freed=float(sum(m.gpus_freed for m in moves)),
        jobs_considered=len(known),
        jobs_unknown=len(jobs) - len(known),
    )


def job_loads(frame: pa.Table) -> list[JobLoad]:
    """One `JobLoad` per job of an interval frame (`job_id`, `gpu_uuid`, `sm_active`,
    `memory_used_bytes`, `memory_total_bytes`, `covered_s`; `host`, `queue` when present):
    its GPUs (distinct GPUs seen), SM activity averaged over the time covered, peak memory.
    Grouped in Arrow (a row per interval of a month of a large fleet is millions of rows)."""
    cols = set(frame.column_names)
    need = {"job_id", "gpu_uuid", "sm_active", "memory_used_bytes", "memory_total_bytes"}
    if frame.num_rows == 0 or not need <= cols:
        return []
    t = frame.filter(pc.is_valid(frame["job_id"]))
    if t.num_rows == 0:
        return []
    n = t.num_rows
    weight = (
        pc.fill_null(pc.cast(t["covered_s"], pa.float64()), 0.0)
        if "covered_s" in cols
        else pa.array(np.zeros(n))
    )
    sm = pc.cast(t["sm_active"], pa.float64())
    counted = pc.and_(pc.is_valid(sm), pc.greater(weight, 0.0))
    counted = pc.fill_null(counted, False)

    def text(name: str) -> pa.ChunkedArray | pa.Array:
        if name not in cols:
            return pa.array([""] * n, pa.string())
        return pc.fill_null(pc.cast(t[name], pa.string()), "")

    table = pa.table(
        {
            "job": pc.cast(t["job_id"], pa.string()),
            "gpu": pc.cast(t["gpu_uuid"], pa.string()),
            "smw": pc.if_else(counted, pc.multiply(sm, weight), 0.0),
            "w": pc.if_else(counted, weight, 0.0),
            "mem": pc.cast(t["memory_used_bytes"], pa.float64()),
            "total": pc.cast(t["memory_total_bytes"], pa.float64()),
            "host": text("host"),
            "queue": text("queue"),
        }
    )
    grouped = table.group_by("job", use_threads=False).aggregate(
        [
            ("gpu", "count_distinct"),
            ("smw", "sum"),
            ("w", "sum"),
            ("mem", "max"),
            ("total", "max"),
            ("host", "first"),
            ("queue", "first"),
        ]
    )
    out = []
    for row in grouped.to_pylist():
        w = row["w_sum"] or 0.0
        out.append(
            JobLoad(
                job=str(row["job"]),
                gpus=float(row["gpu_count_distinct"]),
                sm_active=(row["smw_sum"] or 0.0) / w if w > 0 else math.nan,
                memory_used_bytes=math.nan if row["mem_max"] is None else float(row["mem_max"]),
                memory_total_bytes=0.0 if row["total_max"] is None else float(row["total_max"]),
                node=str(row["host_first"] or ""),
                queue=str(row["queue_first"] or ""),
            )
        )
    return sorted(out, key=lambda j: j.job)
