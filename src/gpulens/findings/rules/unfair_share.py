"""unfair_share: a group holds far more than its GPU quota share, or dominates the fleet
(over half of its GPUs for a day; *monopoly* is the quota rule's word, fleet_rules/monopoly)."""

from __future__ import annotations

from gpulens.analyze.fairness import monopolies, shares
from gpulens.findings.columns import ends, starts
from gpulens.findings.context import Context
from gpulens.findings.model import Evidence, Finding, Impact, Severity
from gpulens.findings.runs import docs

RULE_ID = "unfair_share"


def check(ctx: Context) -> list[Finding]:
    """Groups (`thresholds.unfair_by`) over `unfair_over_quota` × their quota share, and
    monopolies (> `monopoly_share` of the GPUs for `monopoly_min_hours`)."""
    t = ctx.thresholds
    by = t.unfair_by
    if ctx.frame.num_rows == 0 or by not in ctx.frame.column_names:
        return []
    window = (int(starts(ctx).min()), int(ends(ctx).max()))
    out = []
    if ctx.quotas:
        summary = shares(ctx.frame, by, ctx.quotas, ctx.prices, ctx.region)
        for row in summary.table.to_pylist():
            ratio, share = row["allocation_over_quota"], row["allocation_share"]
            if ratio is None or share is None or ratio < t.unfair_over_quota:
                continue
            if share < t.unfair_min_share:
                continue
            over_h = row["allocated_gpu_hours"] * (1.0 - 1.0 / ratio)
            out.append(
                Finding(
                    rule_id=RULE_ID,
                    severity=Severity.WARNING,
                    subject={by: str(row[by])},
                    window=window,
                    summary=(
                        f"{by} {row[by]} held {share:.0%} of the allocated GPU time against a "
                        f"quota share of {row['quota_share']:.0%} ({ratio:.1f}x)"
                    ),
                    evidence=(
                        Evidence("allocation_over_quota", ratio, t.unfair_over_quota, ">="),
                        Evidence("allocation_share", share, t.unfair_min_share, ">="),
                        Evidence("quota_share", float(row["quota_share"])),
                        Evidence(
                            "useful_over_allocation", float(row["useful_over_allocation"] or 0)
                        ),
                        Evidence("gpu_hours_over_quota", over_h),
                    ),
                    impact=Impact(currency=ctx.prices.currency),
                    recommendation=(
                        f"Enforce the quota in the scheduler: Slurm fair-share or "
                        f"`GrpTRES=gres/gpu=<n>` on the account, Kubernetes ResourceQuota "
                        f"`requests.nvidia.com/gpu` or Kueue ClusterQueue nominal quota; "
                        f"{row[by]} used about {over_h:.1f} GPU-hours beyond its share."
                    ),
                    docs=docs(RULE_ID),
                )
            )
    for m in monopolies(ctx.frame, by, t.monopoly_share, t.monopoly_min_hours):
        out.append(
            Finding(
                rule_id=RULE_ID,
                severity=Severity.WARNING,
                subject={by: m.group},
                window=(m.start_ns, m.end_ns),
                summary=(
                    f"{by} {m.group} held {m.mean_share:.0%} of the GPUs (max {m.max_share:.0%}) "
                    f"for {m.hours:.0f} h in a row"
                ),
                evidence=(
                    Evidence("mean_share", m.mean_share, t.monopoly_share, ">"),
                    Evidence("hours", m.hours, t.monopoly_min_hours, ">="),
                ),
                impact=Impact(currency=ctx.prices.currency),
                recommendation=(
                    "Cap what one group can hold at once (Slurm `MaxTRESPerUser=gres/gpu=<n>`, "
                    "a Kubernetes ResourceQuota or Kueue cohort borrowing limits) and give "
                    "long jobs a time limit with checkpointing so others can run."
                ),
                docs=docs(RULE_ID),
            )
        )
    return out
