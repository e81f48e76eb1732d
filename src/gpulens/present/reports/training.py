"""The report's training section: each job's figures from the framework's own timing
(gpulens.torch and its callbacks), as (measure, value) rows with their units."""

from __future__ import annotations

import html
from typing import Any

from gpulens.present import format as human
from gpulens.present.reports.markup import html_table, md_table, num

TITLE = "Training: the framework's own timing"


def _rate(x: float | None, unit: str) -> str:
    return "-" if x is None else f"{num(x)} {unit}"


def _flops(x: float | None, per: str) -> str:
    if x is None:
        return "-"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{num(x / scale)} {prefix}FLOP{per}"
    return f"{num(x)} FLOP{per}"


def _gb(x: float | None) -> str:
    return "-" if x is None else f"{num(x / 1e9)} GB"


def _mfu(job: dict[str, Any]) -> str:
    if job.get("mfu") is not None:
        peak = _flops(job.get("peak_flops_per_second"), "/s")
        precision = ", ".join(job.get("precisions") or []) or "?"
        return f"{human.percent(job['mfu'])} of {peak} ({precision} peak)"
    if job.get("flops_per_second") is not None:
        return "- (no datasheet peak for this device and precision)"
    return "-"


def measures(job: dict[str, Any]) -> list[tuple[str, str]]:
    """One job's (measure, value) rows."""
    wait = job.get("data_wait_ratio")
    wait_s = job.get("data_wait_seconds")
    phases = [job.get(k) for k in ("forward_seconds", "backward_seconds", "optimizer_seconds")]
    return [
        ("runs", ", ".join(job.get("run_ids") or []) or "-"),
        ("device", ", ".join(job.get("gpu_models") or job.get("devices") or []) or "-"),
        ("steps", num(job.get("steps"))),
        ("step time", human.duration(job.get("step_seconds"))),
        (
            "data wait",
            "-"
            if wait is None
            else human.percent(wait)
            + ("" if wait_s is None else f" of step time ({human.duration(wait_s)} per step)"),
        ),
        ("throughput", _rate(job.get("samples_per_second"), "samples/s")),
        ("tokens", _rate(job.get("tokens_per_second"), "tokens/s")),
        (
            "forward / backward / optimizer",
            " / ".join(human.duration(p) for p in phases) if any(phases) else "-",
        ),
        ("model FLOPs", _flops(job.get("step_flops"), " per step")),
        ("achieved", _flops(job.get("flops_per_second"), "/s")),
        ("MFU", _mfu(job)),
        ("memory max allocated", _gb(job.get("memory_max_allocated_bytes"))),
        ("memory reserved (unused)", _reserved(job)),
        ("DataLoader workers", _workers(job)),
        ("GPU telemetry", "joined on the job" if job.get("telemetry") else "none for this job"),
    ]


def _reserved(job: dict[str, Any]) -> str:
    reserved = job.get("memory_reserved_bytes")
    if reserved is None:
        return "-"
    return f"{_gb(reserved)} ({_gb(job.get('memory_fragmentation_bytes'))} unused)"


def _workers(job: dict[str, Any]) -> str:
    workers = job.get("loader_workers")
    if workers is None:
        return "-"
    cpu = job.get("loader_cpu_ratio")
    busy = "" if cpu is None else f", each {human.percent(cpu)} of a core busy"
    return f"{num(workers)}{busy}"


def terminal_lines(training: list[dict[str, Any]]) -> list[str]:
    if not training:
        return []
    lines = [TITLE]
    for job in training:
        lines.append(f"  {job['job_id']}")
        lines += [f"      {k:<31} {v}" for k, v in measures(job) if v != "-"]
    return [*lines, ""]


def markdown_lines(training: list[dict[str, Any]]) -> list[str]:
    if not training:
        return []
    lines = [f"## {TITLE}", ""]
    for job in training:
        lines += [f"### {job['job_id']}", ""]
        lines += md_table(["measure", "value"], [[k, v] for k, v in measures(job)])
    return lines


def html_parts(training: list[dict[str, Any]]) -> list[str]:
    if not training:
        return []
    out = [f"<h2>{html.escape(TITLE)}</h2>"]
    for job in training:
        out += [
            f"<h3>{html.escape(str(job['job_id']))}</h3>",
            html_table(["measure", "value"], [[k, v] for k, v in measures(job)]),
        ]
    return out
