"""monopoly: a queue holds GPUs over its quota while another queue is starved."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpulens.findings.model import Evidence, Finding, Impact, Severity
from gpulens.findings.runs import docs

if TYPE_CHECKING:
    from gpulens.findings.fleet import FleetContext

RULE_ID = "monopoly"


def check(ctx: FleetContext) -> list[Finding]:
    """One finding per queue whose GPUs over quota kept at least `monopoly_gpu_hours` from
    starved queues."""
    r, t = ctx.quotas, ctx.thresholds
    if r is None:
        return []
    hours = r.step_s / 3600.0
    window = (r.start_s * 1_000_000_000, r.end_s * 1_000_000_000)
    starved = [q.name for q in sorted(r.queues, key=lambda q: -q.starved_gpu_hours)
               if q.starved_gpu_hours > 0]  # fmt: skip
    out = []
    for q in r.queues:
        if not q.monopoly_gpu_hours >= t.monopoly_gpu_hours:  # NaN: unknown, no finding
            continue
        share = q.monopoly_steps / max(1, r.steps)
        severity = Severity.WARNING if share >= t.warning_share else Severity.INFO
        victims = [s for s in starved if s != q.name][:3]
        limit = (
            f"a `borrowingLimit` on {q.quota.name}'s GPU quota"
            if q.quota.source.endswith("(Kueue ClusterQueue)")
            else f"a limit on {q.quota.name} (KAI `limit`, Volcano `capability`)"
        )
        out.append(
            Finding(
                rule_id=RULE_ID,
                severity=severity,
                subject={"queue": q.name, "starved": ",".join(victims)},
                window=window,
                summary=(
                    f"queue {q.name} held more than its quota of {q.quota.gpus:g} GPUs "
                    f"(peak {q.peak_in_use:g}) for {q.monopoly_steps * hours:.1f} h while "
                    f"{', '.join(victims)} waited under theirs: "
                    f"{q.monopoly_gpu_hours:.1f} GPU-hours"
                ),
                evidence=(
                    Evidence(
                        "monopoly_gpu_hours", q.monopoly_gpu_hours, t.monopoly_gpu_hours, ">="
                    ),
                    Evidence("monopoly_share", share, note="of the steps"),
                    Evidence("quota_gpus", q.quota.gpus, note=q.quota.source),
                    Evidence("peak_in_use_gpus", q.peak_in_use),
                    Evidence("over_quota_share", q.over_quota_share, note="of the steps"),
                ),
                impact=Impact(),
                recommendation=(
                    f"Let the owners take their GPUs back: a preemption policy that reclaims "
                    f"borrowed GPUs (Kueue `reclaimWithinCohort`, Volcano `reclaimable: true`, "
                    f"KAI over-quota reclaim), {limit}, and time limits with checkpointing on "
                    "jobs that run on borrowed GPUs."
                ),
                docs=docs(RULE_ID),
            )
        )
    return out
