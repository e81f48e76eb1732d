"""Slurm JSON: ``squeue --json`` / ``sacct --json`` / ``sinfo --json`` (and slurmrestd's
``/slurm/v0.0.4x/jobs|nodes`` and ``/slurmdb/v0.0.4x/jobs``), every data_parser version from
openapi v0.0.37 to v0.0.44 (pure parse; `read_slurm` and `run_slurm` fetch).

Versions differ in small ways, all handled here: states are a string or a list; numbers are
plain or wrapped as ``{"set", "infinite", "number"}``; the squeue shape has ``job_state`` and
``*_time`` fields, the accounting (sacct) shape ``state.current`` and ``time.{submission,
start, end}``. GPU counts: see gres.py (the TRES totals alone may count 0 GPUs).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from gpulens.cluster_schema import (
    END,
    GPUS,
    JOB_ID,
    JOB_SCHEMA,
    NODE,
    NODE_SCHEMA,
    NODE_STATE,
    NODES,
    QUEUE,
    QUEUES,
    START,
    STATE,
    SUBMIT,
    TEAM,
    USED,
    USER,
)
from gpulens.collect.scheduler.errors import SchedulerInputError
from gpulens.collect.scheduler.gres import gres_gpus, submit_line_gpus, tres_gpus
from gpulens.collect.scheduler.slurm_text import parse_slurm_text

FIX = "Pass the output of `squeue --json`, `sacct --json` or `sinfo --json` (Slurm 21.08+)"


@dataclass(frozen=True, slots=True)
class SlurmState:
    """What one Slurm JSON document holds: jobs, nodes, whether the jobs are accounting
    records (sacct: a history) or a queue snapshot (squeue), and the snapshot time if known."""

    jobs: pa.Table
    nodes: pa.Table
    accounting: bool
    data_parser: str
    snapshot_s: int | None


def number(value: Any) -> float | None:
    """A Slurm number, plain or ``{"set": true, "number": n}``; None when unset or infinite."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def epoch_seconds(value: Any) -> float | None:
    """A Slurm time field (epoch seconds, or `{set, number}`) as seconds; None when unset (0)."""
    t = number(value)
    return t if t is not None and t > 0 else None


def job_state(value: Any) -> str:
    """A job's state as one name: the first of a list, or of `{current: [...]}`."""
    if isinstance(value, Mapping):
        value = value.get("current")
    if isinstance(value, list):
        return str(value[0]) if value else ""
    return str(value or "")


def _tres_list_gpus(entries: Any) -> float | None:
    if not isinstance(entries, list):
        return None
    counts = [
        float(e.get("count") or 0)
        for e in entries
        if isinstance(e, Mapping) and e.get("type") == "gres" and str(e.get("name", "")) == "gpu"
    ]
    return sum(counts) if counts else None


def job_gpus(job: Mapping[str, Any]) -> float:
    """The GPUs a job holds (running) or asks for (pending); 0 when it names none."""
    nodes = number(job.get("node_count")) or 1.0
    raw = job.get("tres")
    tres: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    candidates = (
        tres_gpus(str(job.get("tres_alloc_str") or "")),
        tres_gpus(str(job.get("tres_req_str") or "")),
        _tres_list_gpus(tres.get("allocated")),
        _tres_list_gpus(tres.get("requested")),
        _gres_detail(job.get("gres_detail")),
        gres_gpus(str(job.get("tres_per_job") or "")),
        _per_node(job, nodes),
        submit_line_gpus(str(job.get("submit_line") or ""), nodes),
    )
    return next((c for c in candidates if c), 0.0)


def _gres_detail(detail: Any) -> float | None:
    if not isinstance(detail, list) or not detail:
        return None
    counts = [gres_gpus(str(d)) for d in detail]
    found = [c for c in counts if c is not None]
    return sum(found) if found else None


def _per_node(job: Mapping[str, Any], nodes: float) -> float | None:
    per_node = gres_gpus(str(job.get("tres_per_node") or ""))
    return per_node * nodes if per_node is not None else None


def _job_row(job: Mapping[str, Any]) -> dict[str, Any]:
    accounting = isinstance(job.get("state"), Mapping)
    raw = job.get("time")
    times: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    state = job_state(job.get("state") if accounting else job.get("job_state"))
    if accounting:
        submit, start, end = times.get("submission"), times.get("start"), times.get("end")
    else:  # squeue: a pending job's start and end, a running job's end, are only forecasts
        submit, start, end = job.get("submit_time"), job.get("start_time"), job.get("end_time")
        start = None if state == "PENDING" else start
        end = None if state in ("PENDING", "RUNNING") else end
    user = job.get("user_name") if "user_name" in job else job.get("user")
    nodes = str(job.get("nodes") or "")
    return {
        JOB_ID: str(job.get("job_id", "")),
        QUEUE: str(job.get("partition") or "") or None,
        USER: str(user) if user else None,
        TEAM: str(job.get("account") or "") or None,
        STATE: state,
        GPUS: job_gpus(job),
        SUBMIT: epoch_seconds(submit),
        START: epoch_seconds(start),
        END: epoch_seconds(end),
        NODES: None if nodes in ("", "None assigned") else nodes,
    }


def _first(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)


def _node_row(node: Mapping[str, Any]) -> dict[str, Any]:
    state = node.get("state")
    states = state if isinstance(state, list) else [state] if state else []
    partitions = node.get("partitions")
    return {
        NODE: str(node.get("name") or node.get("hostname") or ""),
        NODE_STATE: "+".join(str(s) for s in states),
        GPUS: _first(
            gres_gpus(str(node.get("gres") or "")), tres_gpus(str(node.get("tres") or ""))
        ),
        USED: _first(
            gres_gpus(str(node.get("gres_used") or "")),
            tres_gpus(str(node.get("tres_used") or "")),
        ),
        QUEUES: ",".join(str(p) for p in partitions) if isinstance(partitions, list) else "",
    }


def data_parser(doc: Mapping[str, Any]) -> str:
    """``v0.0.44`` and the like, from ``meta.plugin`` (``""`` when the document has none)."""
    meta = doc.get("meta")
    plugin = meta.get("plugin", {}) if isinstance(meta, Mapping) else {}
    name = str(plugin.get("data_parser") or plugin.get("type") or "").rsplit("/", 1)[-1]
    version = name.removeprefix("db").lstrip("v")
    return f"v{version}" if version else ""


def parse_slurm(doc: Any, source: str) -> SlurmState:
    """The jobs and nodes of one decoded Slurm JSON document."""
    if not isinstance(doc, Mapping) or not ({"jobs", "nodes"} & set(doc)):
        raise SchedulerInputError(source, "it has neither 'jobs' nor 'nodes'", FIX + ".")
    jobs = doc.get("jobs") or []
    nodes = doc.get("nodes") or []
    if not isinstance(jobs, list) or not isinstance(nodes, list):
        raise SchedulerInputError(source, "'jobs' or 'nodes' is not a list", FIX + ".")
    rows = [_job_row(j) for j in jobs if isinstance(j, Mapping)]
    accounting = any(isinstance(j.get("state"), Mapping) for j in jobs if isinstance(j, Mapping))
    return SlurmState(
        jobs=pa.Table.from_pylist(rows, schema=JOB_SCHEMA),
        nodes=pa.Table.from_pylist(
            [_node_row(n) for n in nodes if isinstance(n, Mapping)], schema=NODE_SCHEMA
        ),
        accounting=accounting,
        data_parser=data_parser(doc),
        snapshot_s=int(t) if (t := epoch_seconds(doc.get("last_update"))) else None,
    )


def read_slurm(path: Path) -> SlurmState:
    """`parse_slurm` of a JSON file, or `parse_slurm_text` of plain sinfo/sacct output."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SchedulerInputError(str(path), f"not readable ({exc})", FIX + ".") from None
    try:
        doc = json.loads(data)
    except ValueError as exc:
        if data.lstrip()[:1] in (b"{", b"["):
            raise SchedulerInputError(str(path), f"not readable JSON ({exc})", FIX + ".") from None
        jobs, nodes = parse_slurm_text(data.decode("utf-8", "replace").splitlines())
        if jobs.num_rows == 0 and nodes.num_rows == 0:
            raise SchedulerInputError(
                str(path),
                "neither JSON nor sinfo/sacct text with a gres column",
                FIX + ", or sinfo -N -O NodeHost,Gres,GresUsed,StateLong,Partition.",
            ) from None
        return SlurmState(jobs, nodes, accounting=False, data_parser="text", snapshot_s=None)
    return parse_slurm(doc, str(path))


def run_slurm(command: str, timeout_s: float = 60.0) -> SlurmState:
    """Run ``squeue --json``, ``sacct --json`` or ``sinfo --json`` here and parse it."""
    binary = shutil.which(command)
    if binary is None:
        raise SchedulerInputError(
            command, "the command is not on PATH", "Run it on a Slurm login node or pass a file."
        )
    args = [binary, "--json"] + (["--allusers"] if command == "sacct" else [])
    try:
        done = subprocess.run(args, capture_output=True, timeout=timeout_s, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        raise SchedulerInputError(command, f"it failed ({exc})", FIX + ".") from None
    try:
        doc = json.loads(done.stdout)
    except ValueError as exc:
        raise SchedulerInputError(command, f"its output is not JSON ({exc})", FIX + ".") from None
    return parse_slurm(doc, f"{command} --json")
