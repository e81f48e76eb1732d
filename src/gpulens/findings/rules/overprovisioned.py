"""overprovisioned: "GPU too powerful" (jobstats): little activity, little memory, for long."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from gpulens.analyze.memory import overprovisioned as judge
from gpulens.findings.columns import ends, equals, in_states, starts
from gpulens.findings.context import Context
from gpulens.findings.model import Evidence, Finding, Severity
from gpulens.findings.runs import Run, finding, gb, hours, impact

RULE_ID = "overprovisioned"


def table(ctx: Context) -> pa.Table:
    """`analyze.memory.overprovisioned` of the frame (or the context's own table), once."""
    if ctx.overprovisioned is not None:
        return ctx.overprovisioned
    return ctx.cached("overprovisioned", lambda: judge(ctx.frame, ctx.memory))


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def check(ctx: Context) -> list[Finding]:
    """One finding per job judged over-provisioned, with the MIG profile or smaller GPU."""
    s = ctx.memory
    steady = ~in_states(ctx, "warmup")
    out = []
    for row in table(ctx).to_pylist():
        if not row["overprovisioned"]:
            continue
        rows = np.flatnonzero(steady & equals(ctx, "job_id", row["job_id"]))
        if rows.size == 0:
            continue
        run = Run(rows, int(starts(ctx)[rows].min()), int(ends(ctx)[rows].max()), True)
        keep = float(row["mig_compute_fraction"] or 0.0)  # the share the job still needs
        allocated = np.nan_to_num(
            np.asarray(ctx.frame.column("allocated_s").to_numpy(zero_copy_only=False))[rows]
        )
        cost = impact(ctx, rows, allocated * (1.0 - keep))
        activity = float(row["mean_activity"] or 0.0)
        peak_mem = float(row["peak_memory_bytes"] or 0.0)
        evidence = [
            Evidence(
                f"mean_{row['activity_basis'] or 'activity'}",
                activity,
                s.overprovisioned_max_activity,
                "<=",
                "jobstats: GPU too powerful",
            ),
            Evidence("peak_memory_bytes", peak_mem, s.overprovisioned_max_memory_bytes, "<="),
            Evidence(
                "duration_s", float(row["duration_s"]), s.overprovisioned_min_duration_s, ">="
            ),
        ]
        how = ""
        if row["mig_profile"]:
            how = (
                f" In Kubernetes request `nvidia.com/mig-{row['mig_profile']}: 1`; in Slurm "
                f"`--gres=gpu:{row['mig_profile']}:1` (the admin enables MIG on some GPUs)."
            )
        out.append(
            finding(
                ctx,
                RULE_ID,
                run,
                f"a whole {row['gpu_model']} for {hours(float(row['duration_s']))} at mean "
                f"activity {activity:.2f} and {gb(peak_mem)} peak memory",
                evidence,
                f"{_sentence(str(row['suggestion'] or ''))}.{how}",
                cost,
                level=Severity.WARNING if cost.wasted_gpu_hours >= 1.0 else Severity.INFO,
            )
        )
    return out
