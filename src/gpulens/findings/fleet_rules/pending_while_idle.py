"""pending_while_idle: jobs wait in one queue while GPUs sit idle in another (Helios, SC'21)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from gpulens.findings.model import Evidence, Finding, Impact, Severity
from gpulens.findings.runs import docs

if TYPE_CHECKING:
    from gpulens.findings.fleet import FleetContext

RULE_ID = "pending_while_idle"


def _iso(ts_s: int) -> str:
    return datetime.fromtimestamp(ts_s, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _known(x: float) -> float:
    """`x`, or 0 where unknown (NaN), for ranking only."""
    return 0.0 if math.isnan(x) else x


def check(ctx: FleetContext) -> list[Finding]:
    """One finding for the cluster when the share of steps with movable GPUs and the movable
    GPU-hours both reach their thresholds. Unknown pending demand (NaN: Kueue's workload
    counts, GPU series alone) raises nothing: the fleet output says it is unknown and why."""
    s, t = ctx.summary, ctx.thresholds
    if s is None or len(s.queues) < 2:
        return []
    share, hours = s.pending_while_idle_share, s.pending_while_idle_gpu_hours
    if not share >= t.pending_while_idle_share or hours < t.pending_while_idle_gpu_hours:
        return []
    severity = (
        Severity.CRITICAL
        if share >= t.critical_share
        else Severity.WARNING
        if share >= t.warning_share
        else Severity.INFO
    )
    waiting = sorted(s.queues, key=lambda q: -_known(q.waited_while_idle_gpu_hours))
    lending = sorted(s.queues, key=lambda q: -_known(q.idle_while_others_waited_gpu_hours))
    waiters = [q.name for q in waiting if q.waited_while_idle_gpu_hours > 0][:3]
    lenders = [q.name for q in lending if q.idle_while_others_waited_gpu_hours > 0][:3]
    return [
        Finding(
            rule_id=RULE_ID,
            severity=severity,
            subject={"queues_waiting": ",".join(waiters), "queues_idle": ",".join(lenders)},
            window=(s.start_s * 1_000_000_000, s.end_s * 1_000_000_000),
            summary=(
                f"in {share:.0%} of the {s.steps} steps of {s.step_s} s, jobs waited in one "
                f"queue while GPUs sat idle in another: {hours:.1f} GPU-hours could have "
                f"moved (mostly from {', '.join(waiters)} to {', '.join(lenders)})"
            ),
            evidence=(
                Evidence("pending_while_idle_share", share, t.pending_while_idle_share, ">="),
                Evidence(
                    "pending_while_idle_gpu_hours", hours, t.pending_while_idle_gpu_hours, ">="
                ),
                Evidence(
                    "peak_hour_gpu_hours",
                    s.peak_gpu_hours,
                    note=f"the hour from {_iso(s.peak_start_s)} with the most",
                ),
                Evidence("pooled_allocation", s.pooled_allocation, note="ratio of GPU-time"),
                Evidence("steps", float(s.steps), note=f"of {s.step_s} s each"),
            ),
            impact=Impact(wasted_gpu_hours=hours),
            recommendation=(
                f"Let {', '.join(waiters)} borrow idle GPUs of {', '.join(lenders)}: one "
                "shared partition with per-group QoS limits in Slurm (or a partition list "
                "per job, `--partition=a,b`), Kueue cohorts with borrowing, or KAI/Volcano "
                "over-quota sharing with preemption back to the owner."
            ),
            docs=docs(RULE_ID),
        )
    ]
