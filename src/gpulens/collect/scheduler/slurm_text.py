"""Plain-text Slurm output with GPUs: ``sinfo`` node lines and ``sacct --format=AllocGRES``
lines (pure parse), for sites without ``--json`` (Slurm before 21.08).

Read by the shape of each line, whatever the ``-O``/``--Format`` column order:

- node lines: ``sinfo -N -O NodeHost,Gres,GresUsed,StateLong`` and wider layouts (memory,
  ``CPUsState`` A/I/O/T, ``Partition`` last): the first field is the node, the first gres
  field (``gpu:a100:4(S:0-1)``, ``(null)``) its GPUs, the second the GPUs in use, a word such
  as ``mixed`` or ``drained*`` its state; a node listed once per partition is one node;
- aggregated lines (``sinfo -h --Format="Nodes: ,Gres: ,GresUsed:"``): a leading node count
  multiplies the gres fields;
- job lines (``sacct -a -X --format=AllocGRES --state=RUNNING --noheader --parsable2``): one
  gres field per running job.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from gpulens.cluster_schema import (
    GPUS,
    JOB_ID,
    JOB_SCHEMA,
    NODE,
    NODE_SCHEMA,
    NODE_STATE,
    QUEUES,
    STATE,
    USED,
)
from gpulens.collect.scheduler.gres import gres_gpus

STATES = frozenset(
    [
        "allocated",
        "alloc",
        "mixed",
        "mix",
        "idle",
        "drained",
        "drain",
        "draining",
        "drng",
        "down",
        "fail",
        "failing",
        "maint",
        "reserved",
        "resv",
        "completing",
        "comp",
        "planned",
        "inval",
        "future",
        "power_down",
        "powered_down",
        "powering_up",
        "unknown",
    ]
)
_GRES = re.compile(r"^(gpu:[:\w.()\-,/]*|\(null\))$")
WHOLE = "(all nodes)"  # the queue of node lines that name no partition
_CPUS = re.compile(r"^\d+/\d+/\d+/\d+$")


def _state(token: str) -> str | None:
    word = token.lower().rstrip("*~#!%$@^-+")
    return word.upper() if word in STATES else None


def _node_line(tokens: list[str]) -> dict[str, Any] | None:
    gres = [t for t in tokens[1:] if _GRES.match(t)]
    if not gres:
        return None
    state = next((s for t in tokens[1:] if (s := _state(t))), "")
    rest = [t for t in tokens[1:] if not _GRES.match(t) and not _state(t)]
    rest = [t for t in rest if not t.isdigit() and not _CPUS.match(t)]
    total = gres_gpus(gres[0]) if gres[0] != "(null)" else None
    used = gres_gpus(gres[1]) if len(gres) > 1 and gres[1] != "(null)" else None
    count = int(tokens[0]) if tokens[0].isdigit() else 1
    return {
        NODE: f"{count} nodes" if tokens[0].isdigit() else tokens[0],
        NODE_STATE: state,
        GPUS: total * count if total is not None else None,
        USED: used * count if used is not None else None,
        QUEUES: rest[-1] if rest else WHOLE,
    }


def parse_slurm_text(lines: Iterable[str]) -> tuple[pa.Table, pa.Table]:
    """(jobs, nodes) of plain-text sinfo or sacct output; both empty when no line has a gres
    field."""
    nodes: dict[tuple[str, str], dict[str, Any]] = {}
    jobs: list[dict[str, Any]] = []
    for raw in lines:
        tokens = raw.split()
        if not tokens or tokens[0].startswith("#"):
            continue
        if len(tokens) == 1 and _GRES.match(tokens[0]):
            jobs.append({JOB_ID: str(len(jobs) + 1), STATE: "RUNNING",
                         GPUS: gres_gpus(tokens[0]) or 0.0})  # fmt: skip
            continue
        row = _node_line(tokens)
        if row is None:
            continue
        key = (row[NODE], row[NODE_STATE]) if row[NODE].endswith(" nodes") else (row[NODE], "")
        if key in nodes and not row[NODE].endswith(" nodes"):
            known = nodes[key]
            parts = [p for p in (known[QUEUES], row[QUEUES]) if p]
            known[QUEUES] = ",".join(dict.fromkeys(",".join(parts).split(","))) if parts else ""
            continue
        if key in nodes:  # aggregated lines of one state: add up
            nodes[key][GPUS] = (nodes[key][GPUS] or 0) + (row[GPUS] or 0)
            nodes[key][USED] = (nodes[key][USED] or 0) + (row[USED] or 0)
            continue
        nodes[key] = row
    return (
        pa.Table.from_pylist(jobs, schema=JOB_SCHEMA),
        pa.Table.from_pylist(list(nodes.values()), schema=NODE_SCHEMA),
    )
