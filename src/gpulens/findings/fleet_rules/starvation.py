"""starvation: a queue's jobs wait while it holds fewer GPUs than its quota."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpulens.findings.model import Evidence, Finding, Impact, Severity
from gpulens.findings.runs import docs

if TYPE_CHECKING:
    from gpulens.findings.fleet import FleetContext

RULE_ID = "starvation"


def check(ctx: FleetContext) -> list[Finding]:
    """One finding per queue owed at least `starved_gpu_hours` GPU-hours under its quota."""
    r, t = ctx.quotas, ctx.thresholds
    if r is None:
        return []
    hours = r.step_s / 3600.0
    window = (r.start_s * 1_000_000_000, r.end_s * 1_000_000_000)
    takers = sorted(
        (q for q in r.queues if q.monopoly_gpu_hours > 0), key=lambda q: -q.monopoly_gpu_hours
    )
    out = []
    for q in r.queues:
        if not q.starved_gpu_hours >= t.starved_gpu_hours:  # NaN: unknown, no finding
            continue
        share = q.starved_steps / max(1, r.steps)
        severity = Severity.WARNING if share >= t.warning_share else Severity.INFO
        others = [o.name for o in takers if o.name != q.name][:3]
        held = f"; {', '.join(others)} held GPUs over quota meanwhile" if others else ""
        borrow = _reclaim(q.quota.name, q.quota.source, q.quota.parent)
        out.append(
            Finding(
                rule_id=RULE_ID,
                severity=severity,
                subject={"queue": q.name},
                window=window,
                summary=(
                    f"queue {q.name} had jobs pending while under its quota of "
                    f"{q.quota.gpus:g} GPUs for {q.starved_steps * hours:.1f} h: "
                    f"{q.starved_gpu_hours:.1f} GPU-hours owed and not given{held}"
                ),
                evidence=(
                    Evidence("starved_gpu_hours", q.starved_gpu_hours, t.starved_gpu_hours, ">="),
                    Evidence("starved_share", share, note="of the steps"),
                    Evidence("quota_gpus", q.quota.gpus, note=q.quota.source),
                    Evidence("mean_in_use_gpus", q.mean_in_use),
                    Evidence("usage_over_quota", q.usage_over_quota, note="GPU-hours ratio"),
                ),
                impact=Impact(),
                recommendation=(
                    f"{borrow}. If nothing held GPUs over quota, the quota promises more "
                    "than the cluster has: lower the quotas or add capacity (see the forecast)."
                ),
                docs=docs(RULE_ID),
            )
        )
    return out


def _reclaim(name: str, source: str, parent: str) -> str:
    """How to let `name` take back its quota, in the words of the scheduler it came from."""
    if source.endswith("(Kueue ClusterQueue)"):
        if parent:
            return (
                f"Kueue: give {name} `preemption.reclaimWithinCohort: Any` (or LowerPriority) "
                f"so it takes back what cohort {parent} borrowed, and set `borrowingLimit` on "
                "the borrowers"
            )
        return f"Kueue: put {name} in a cohort (`cohortName`) with `reclaimWithinCohort`"
    if source.endswith("(KAI Queue)"):
        return (
            f"KAI: keep {name}'s `gpu.quota` as its deserved share under parent "
            f"{parent or '(none)'}, and reclaim over-quota GPUs (lower `overQuotaWeight` or a "
            "`limit` on the borrowers)"
        )
    if source.endswith("(Volcano Queue)"):
        return (
            f"Volcano: set `reclaimable: true` on the queues that borrow from {name}, and a "
            f"`guarantee` or `deserved` for {name} that the reclaim action honours"
        )
    return (
        f"enforce {name}'s quota with a reclaim: a Kueue cohort with `reclaimWithinCohort`, a "
        "KAI parent queue with over-quota reclaim, or Volcano `reclaimable` queues"
    )
