"""`gpulens enforce`: warn, then act on, jobs holding GPUs idle (registered on the app by
cli.py). A dry run unless --no-dry-run; acting also needs `enforce.act_enabled`. The work is
app/enforce.py's; this module renders its outcomes (terminal lines or JSON)."""

from __future__ import annotations

import json
import shlex
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpulens.present.console import app, write_out

if TYPE_CHECKING:
    from gpulens.app.enforce import EnforceRun


class EnforceFormat(StrEnum):
    terminal = "terminal"
    json = "json"


def to_dict(run: EnforceRun) -> dict[str, Any]:
    """The JSON document: levels, mode, and `actions[]` (subject, idle_minutes, level,
    command, exempt, reason, and whether the command ran)."""
    from gpulens.app.enforce import iso, subject

    pol = run.policy
    return {
        "source": run.source,
        "now": iso(run.now_ns),
        "window": {"start": iso(run.start_ns), "end": iso(run.end_ns)},
        "warn_minutes": pol.warn_s / 60,
        "act_minutes": pol.act_s / 60,
        "dry_run": pol.dry_run,
        "act_enabled": pol.act_enabled,
        "audit_log": run.audit_log,
        "currency": run.currency,
        "actions": [
            {
                "subject": subject(o.action.spell),
                "idle_minutes": round(o.action.spell.idle_s / 60, 1),
                "idle_since": iso(o.action.spell.since_ns),
                "idle_at_least": o.action.spell.open_start,
                "gpus": o.action.spell.gpus,
                "idle_gpu_hours": round(o.gpu_hours, 2),
                "idle_cost": round(o.cost, 2),
                "level": o.action.level,
                "command": list(o.action.command) if o.action.command is not None else None,
                "exempt": o.action.exempt,
                "reason": o.action.reason,
                "ran": o.ran,
                "exit_code": o.exit_code,
            }
            for o in run.outcomes
        ],
        "notes": run.notes,
    }


def render_terminal(doc: dict[str, Any]) -> str:
    """One line per action, then the notes."""
    mode = "dry run" if doc["dry_run"] else "acting on" if doc["act_enabled"] else "warning only"
    lines = [
        f"gpulens enforce ({mode}): warn at {doc['warn_minutes']:g} min idle, act at "
        f"{doc['act_minutes']:g} min; audit log {doc['audit_log']}"
    ]
    if not doc["actions"]:
        lines.append("no job holds a GPU idle past the warning level")
    for a in doc["actions"]:
        s = a["subject"]
        if s["job"]:
            who = f"job {s['job']}"
        elif s["pod"]:
            who = f"pod {s['namespace']}/{s['pod']}"
        else:
            who = f"GPU {s['gpu']}"
        tag = "exempt" if a["exempt"] else a["level"].upper()
        ran = f" -> exit {a['exit_code']}" if a["ran"] else ""
        command = shlex.join(a["command"]) if a["command"] else "-"
        held = (
            f"{a['gpus']} GPU{'s' if a['gpus'] != 1 else ''}, {a['idle_gpu_hours']:.1f} GPU-h idle"
        )
        price = f"{a['idle_cost']:,.2f} {doc['currency']}"
        lines.append(
            f"{tag:6} {who} ({s['user'] or 'unknown user'} on {s['host'] or '?'}; {held}, "
            f"{price}): {a['reason']}; command: {command}{ran}"
        )
    lines += [f"note: {n}" for n in doc["notes"]]
    return "\n".join(lines) + "\n"


@app.command()
def enforce(
    prometheus: Annotated[
        str | None,
        typer.Option(help="Read GPU series from this Prometheus URL (default: prometheus.url)."),
    ] = None,
    data_dir: Annotated[
        str | None, typer.Option(help="Read this store instead of Prometheus.")
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            help="Say what would be done; record and run nothing. --no-dry-run records "
            "warnings, runs enforce.warn_command, and runs enforce.command when "
            "enforce.act_enabled is set."
        ),
    ] = True,
    slurm: Annotated[
        Path | None,
        typer.Option(help="squeue --json output: QoS, partition, and which jobs still run."),
    ] = None,
    squeue: Annotated[
        bool, typer.Option(help="Run squeue --json here for QoS, partition and job states.")
    ] = False,
    k8s: Annotated[
        list[Path] | None,
        typer.Option(help="kubectl get pods -A -o json (or yaml): act only on running pods."),
    ] = None,
    kubectl: Annotated[
        bool, typer.Option(help="Run kubectl get pods,nodes -A -o json here for pod states.")
    ] = False,
    node_queue: Annotated[
        list[str] | None,
        typer.Option(help="Partitions of hosts the series do not label: NODE=PARTITION,..."),
    ] = None,
    at: Annotated[
        str | None,
        typer.Option(help="Judge as of this time (ISO 8601 or 2h back) instead of now."),
    ] = None,
    format: Annotated[EnforceFormat, typer.Option(help="Output format.")] = (
        EnforceFormat.terminal
    ),
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file.")
    ] = None,
    config: Annotated[Path | None, typer.Option(help="TOML configuration file.")] = None,
) -> None:
    """Warn the holders of GPUs idle past findings.idle_allocated.warn_minutes; act on the
    warned ones idle past act_minutes (a dry run by default)."""
    import time

    from gpulens.app.enforce import enforce as run_enforce
    from gpulens.app.enforce import pod_states
    from gpulens.collect.scheduler.kubernetes import read_kubernetes, run_kubectl
    from gpulens.collect.scheduler.slurm_jobs import read_job_details, run_squeue
    from gpulens.config import load_config
    from gpulens.errors import ConfigError
    from gpulens.present.cli_fleet import parse_capacity_like
    from gpulens.present.timespec import parse_when

    if prometheus is not None and data_dir is not None:
        raise ConfigError("give --prometheus URL or --data-dir D, not both")
    if slurm is not None and squeue:
        raise ConfigError("give --slurm FILE or --squeue, not both")
    if k8s and kubectl:
        raise ConfigError("give --k8s FILE or --kubectl, not both")
    cfg = load_config(config, overrides={"data_dir": data_dir})
    url = None if data_dir is not None else prometheus or cfg.get("prometheus.url")
    now = time.time_ns()
    when = parse_when(at, now, "--at") if at is not None else now
    jobs = read_job_details(slurm) if slurm is not None else run_squeue() if squeue else None
    queues = parse_capacity_like(node_queue or [], "--node-queue", "NODE=PARTITION")
    cluster = read_kubernetes(*k8s) if k8s else run_kubectl() if kubectl else None
    pods = pod_states(cluster.jobs) if cluster is not None else None
    result = run_enforce(
        cfg,
        now_ns=when if when is not None else now,
        dry_run=dry_run,
        prometheus_url=url,
        jobs=jobs,
        node_queues=queues,
        pods=pods,
    )
    doc = to_dict(result)
    text = (
        json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
        if format is EnforceFormat.json
        else render_terminal(doc)
    )
    write_out(text, output)
