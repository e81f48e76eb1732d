"""`gpulens enforce`: warn the holders of GPUs idle past the warning level, act on those idle
past the act level that were warned (analyze/escalation.py decides; this module reads, runs
and records).

1. The levels are the idle ladder's (`findings.idle_allocated.warn_minutes` and
   `act_minutes`, `session.idle_ladder_s`): the same setting drives the idle_allocated
   finding, the `gpulens rules` alert and this command.
2. The last act level + 20 min of telemetry is read at a 120 s step (a busy burst inside a
   step still lifts its mean above idle), from a site's Prometheus
   (`app.prometheus.pulled`, downsampled on the server) or from the store, and classified with
   the report's states (`analyze.efficiency.classify`): idle_allocated is the same state the
   finding counts.
3. Partitions come from the series (`partition`/`queue` labels: node → queue), or from
   squeue; QoS and the job's state from squeue (`--slurm FILE` or `--squeue`). With squeue,
   only running jobs are warned or acted on; with Kubernetes' pods (`--k8s FILE` or
   `--kubectl`), only running pods.
4. Commands run without a shell (`subprocess.run` of an argument list): a label value is one
   argument's text, never shell syntax. Each warning and action is appended to the audit log.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from gpulens.analyze.efficiency import classify
from gpulens.analyze.escalation import (
    Action,
    Exemptions,
    IdleSpell,
    Policy,
    decide,
    history,
    idle_spells,
)
from gpulens.app import prometheus, session
from gpulens.app.enforce_audit import AuditLog, audit_path
from gpulens.collect.scheduler.slurm_jobs import JobDetails
from gpulens.config import Config
from gpulens.store.frames import gpu_intervals

NS = 1_000_000_000
STEP_S = 120.0
#: telemetry read beyond the act level, so a spell that reached it is seen whole
LOOKBACK_MARGIN_S = 1200.0
#: newer data than this is needed to call anything idle now
STALE_S = 300.0


@dataclass(frozen=True, slots=True)
class Outcome:
    """One decision and what came of it (`ran`, `exit_code`, `output`: the command's last
    lines when it ran), and the price of the spell: `gpu_hours` held idle (GPUs × idle time)
    and their `cost` at the `cost.*` GPU-hour prices."""

    action: Action
    ran: bool = False
    exit_code: int | None = None
    output: str = ""
    gpu_hours: float = 0.0
    cost: float = 0.0


@dataclass
class EnforceRun:
    """What one `gpulens enforce` run saw, decided and did."""

    source: str
    now_ns: int
    start_ns: int
    end_ns: int
    policy: Policy
    audit_log: str
    outcomes: list[Outcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    currency: str = "USD"


def policy(cfg: Config, dry_run: bool) -> Policy:
    """The ladder, commands and exemptions of `cfg`."""
    _info, warn, act = session.idle_ladder_s(cfg)
    return Policy(
        warn_s=warn,
        act_s=act,
        command=str(cfg.get("enforce.command")),
        warn_command=cfg.get("enforce.warn_command"),
        act_enabled=bool(cfg.get("enforce.act_enabled")),
        dry_run=dry_run,
        exemptions=Exemptions(
            users=frozenset(cfg.get("enforce.exempt_users")),
            qos=frozenset(cfg.get("enforce.exempt_qos")),
            partitions=frozenset(cfg.get("enforce.exempt_partitions")),
            namespaces=frozenset(cfg.get("enforce.exempt_namespaces")),
        ),
    )


def _frame(cfg: Config, start_ns: int, end_ns: int) -> pa.Table:
    store = session.open_store(cfg.data_dir)
    try:
        max_gap = float(cfg.get("analysis.max_gap_seconds")) or None
        return gpu_intervals(store, STEP_S, start_ns, end_ns, max_gap_s=max_gap)
    finally:
        store.close()


def enforce(
    cfg: Config,
    *,
    now_ns: int,
    dry_run: bool = True,
    prometheus_url: str | None = None,
    jobs: Mapping[str, JobDetails] | None = None,
    node_queues: Mapping[str, str] | None = None,
    pods: Mapping[str, str] | None = None,
) -> EnforceRun:
    """One enforcement pass over the telemetry of Prometheus (`prometheus_url`) or, without
    it, of the store of `cfg`; `jobs`: squeue's view of the jobs, `pods`: Kubernetes' view of
    the pods (``namespace/name`` → state, `pod_states`) (None: not known)."""
    pol = policy(cfg, dry_run)
    log = AuditLog(audit_path(cfg))
    start_ns = now_ns - round((pol.act_s + LOOKBACK_MARGIN_S) * NS)
    queues = dict(node_queues or {})
    notes: list[str] = []
    states = session.analysis_settings(cfg)["states"]
    if prometheus_url is not None:
        with prometheus.pulled(cfg, prometheus_url, start_ns / NS, now_ns / NS, STEP_S) as got:
            frame = _frame(got.cfg, start_ns, now_ns)
            queues = {**got.prom.tables.node_queues, **queues}
            notes += got.notes
            source = prometheus_url
    else:
        frame = _frame(cfg, start_ns, now_ns)
        source = str(cfg.get("data_dir"))
    run = EnforceRun(source, now_ns, start_ns, now_ns, pol, str(log.path), notes=notes)
    if frame.num_rows == 0:
        run.notes.append("no GPU telemetry in the window: nothing to enforce")
        return run
    classified = classify(frame, states)
    spells = idle_spells(classified)
    data_end = max((s.until_ns for s in spells), default=now_ns)
    if spells and now_ns - data_end > STALE_S * NS:
        run.notes.append(
            f"the newest telemetry is {(now_ns - data_end) / 60e9:.0f} min old: nothing is known "
            "to be idle now, so nothing is warned or acted on"
        )
        return run
    spells = _with_scheduler(spells, jobs, queues, run.notes)
    if pods is not None:
        spells = _running_pods(spells, pods, run.notes)
    past = history(log.read())
    if log.skipped:
        run.notes.append(f"{log.skipped} unreadable line(s) in the audit log were skipped")
    timeout = float(cfg.get("enforce.command_timeout_seconds"))
    prices = session.prices(cfg)
    run.currency = prices.currency
    for action in decide(spells, past, pol, now_ns):
        outcome = _execute(action, timeout) if action.run else Outcome(action)
        spell = action.spell
        hours = spell.gpus * spell.idle_s / 3600
        model = (spell.labels.get("gpu_model") or "").split(",")[0] or None
        outcome = replace(outcome, gpu_hours=hours, cost=hours * prices.gpu_hour_price(model))
        if action.record:
            log.append(record(outcome, now_ns))
        run.outcomes.append(outcome)
    return run


def _with_scheduler(
    spells: list[IdleSpell],
    jobs: Mapping[str, JobDetails] | None,
    node_queues: Mapping[str, str],
    notes: list[str],
) -> list[IdleSpell]:
    """The spells with partition and QoS labels; with squeue's view, only running jobs."""
    out, not_running = [], []
    for spell in spells:
        labels = dict(spell.labels)
        job_id = labels.get("job_id")
        details = jobs.get(job_id) if jobs is not None and job_id else None
        if jobs is not None and job_id and (details is None or not details.running):
            not_running.append(job_id)
            continue
        if details is not None:
            for label, value in (
                ("partition", details.partition),
                ("qos", details.qos),
                ("user", details.user),
            ):
                if value:
                    labels[label] = value
        if "partition" not in labels:
            parts = sorted(
                {node_queues[h] for h in labels.get("host", "").split(",") if h in node_queues}
            )
            if parts:
                labels["partition"] = ",".join(parts)
        out.append(replace(spell, labels=labels))
    if not_running:
        notes.append(
            f"{len(not_running)} idle job(s) not running in squeue were left alone: "
            + ", ".join(sorted(not_running)[:10])
        )
    return out


def pod_states(jobs: pa.Table) -> dict[str, str]:
    """``namespace/name`` → state (RUNNING, PENDING, COMPLETED, FAILED...) of the job table of
    a Kubernetes dump (`collect.scheduler.kubernetes`)."""
    ids, states = jobs["job_id"].to_pylist(), jobs["state"].to_pylist()
    return {str(i): str(s or "") for i, s in zip(ids, states, strict=True) if i}


def _running_pods(
    spells: list[IdleSpell], pods: Mapping[str, str], notes: list[str]
) -> list[IdleSpell]:
    """The spells less the pods Kubernetes does not show running (ended, or not listed)."""
    out, gone = [], []
    for spell in spells:
        pod, namespace = spell.labels.get("pod"), spell.labels.get("namespace")
        name = f"{namespace}/{pod}" if pod and namespace else None
        if name is not None and "," not in name and pods.get(name) != "RUNNING":
            gone.append(name)
            continue
        out.append(spell)
    if gone:
        notes.append(
            f"{len(gone)} idle pod(s) not running in Kubernetes were left alone: "
            + ", ".join(sorted(gone)[:10])
        )
    return out


def _execute(action: Action, timeout_s: float) -> Outcome:
    """Run the action's command (an argument list, no shell)."""
    assert action.command is not None
    try:
        done = subprocess.run(
            list(action.command),
            shell=False,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except FileNotFoundError:
        return Outcome(action, True, 127, f"{action.command[0]}: command not found")
    except subprocess.TimeoutExpired:
        return Outcome(action, True, None, f"stopped after {timeout_s:g} s")
    except OSError as exc:
        return Outcome(action, True, None, f"{action.command[0]}: {exc.strerror}")
    text = (done.stdout + done.stderr).strip()
    return Outcome(action, True, done.returncode, text[-500:])


def subject(spell: IdleSpell) -> dict[str, str | None]:
    """The subject of an action: job, pod, namespace, user, gpu, host, partition, qos."""
    labels = spell.labels
    return {
        "job": labels.get("job_id"),
        "pod": labels.get("pod"),
        "namespace": labels.get("namespace"),
        "user": labels.get("user"),
        "gpu": labels.get("gpu_uuid"),
        "host": labels.get("host"),
        "partition": labels.get("partition"),
        "qos": labels.get("qos"),
    }


def iso(ns: int) -> str:
    """UTC ISO 8601 to the second."""
    return datetime.fromtimestamp(ns / NS, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def record(outcome: Outcome, now_ns: int) -> dict[str, Any]:
    """The audit log's line for an outcome."""
    a = outcome.action
    return {
        "ts": iso(now_ns),
        "ts_ns": now_ns,
        "level": a.level,
        "key": a.spell.key,
        "subject": subject(a.spell),
        "idle_minutes": round(a.spell.idle_s / 60, 1),
        "idle_since": iso(a.spell.since_ns),
        "idle_gpu_hours": round(outcome.gpu_hours, 2),
        "command": list(a.command) if a.command is not None else None,
        "ran": outcome.ran,
        "exit_code": outcome.exit_code,
        "output": outcome.output,
        "reason": a.reason,
    }


__all__ = [
    "EnforceRun",
    "Outcome",
    "enforce",
    "iso",
    "pod_states",
    "policy",
    "record",
    "subject",
]
