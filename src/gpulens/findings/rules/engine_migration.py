"""engine_migration: eager inference stuck memory-bound or hollow-busy; move it to TensorRT.

When the workload's jobs were served through gpulens.torch.inference on eager and on an
optimised engine with the same model (`ctx.latency`), the gain is the measured ratio of their
median latencies, and the evidence says so; else `recommend_engine_migration`'s (a measured
telemetry ratio, or the estimate from the activity gap or precision).
"""

from __future__ import annotations

import numpy as np

from gpulens.analyze.engines import recommend_engine_migration
from gpulens.analyze.inference import measured_gain
from gpulens.findings.columns import ends, equals, in_states, starts
from gpulens.findings.context import Context
from gpulens.findings.inference import latency_evidence
from gpulens.findings.model import Evidence, Finding
from gpulens.findings.runs import Run, finding, impact

RULE_ID = "engine_migration"


def check(ctx: Context) -> list[Finding]:
    """One finding per native-engine workload `recommend_engine_migration` flags."""
    s = ctx.engines
    table = ctx.cached("engine_migration", lambda: recommend_engine_migration(ctx.frame, s))
    steady = ~in_states(ctx, "warmup")
    allocated = np.nan_to_num(
        np.asarray(ctx.frame.column("allocated_s").to_numpy(zero_copy_only=False), dtype=float)
    )
    out = []
    for row in table.to_pylist():
        mine = equals(ctx, "engine", row["engine"]) & equals(
            ctx, "process_name", row["process_name"]
        )
        rows = np.flatnonzero(mine & steady)
        if rows.size == 0:
            continue
        jobs = [j.strip() for j in str(row["jobs"] or "").split(",") if j.strip()]
        latency = measured_gain([dict(r) for r in ctx.latency], jobs) if ctx.latency else None
        if latency is not None:
            row.update(expected_gain=latency[0], gain_basis=latency[1], target_engine=latency[2])
            row.update(gain_kind="measured latency")
            row["gpu_hours_saved"] = row["gpu_hours"] * max(0.0, 1.0 - 1.0 / latency[0])
        gain = float(row["expected_gain"])
        saved = 1.0 - 1.0 / gain if gain > 1 else 0.0
        run = Run(rows, int(starts(ctx)[rows].min()), int(ends(ctx)[rows].max()), True)
        labels: dict[str, str] = {"model": str(row["model"])} if row["model"] else {}
        evidence = [
            Evidence(
                "state_share",
                float(row["state_share"]),
                s.min_state_share,
                ">=",
                f"share of GPU time {row['dominant_state']}",
            ),
            # context: what an optimised engine would change, not conditions of the rule
            Evidence(
                "sm_active",
                float(row["sm_active"] or float("nan")),
                note=f"an optimised engine reaches about {s.target_sm_active:.2f}",
            ),
            Evidence("dram_active", float(row["dram_active"] or float("nan"))),
        ]
        if latency is not None:
            evidence += latency_evidence(latency[3], latency[4], gain, latency[1])
        else:
            evidence.append(Evidence("expected_gain", gain, note=str(row["gain_basis"])))
        out.append(
            finding(
                ctx,
                RULE_ID,
                run,
                f"{row['engine']} ({row['process_name']}) is {row['dominant_state']} "
                f"{float(row['state_share']):.0%} of the time: about {gain:.1f}x expected on "
                f"{row['target_engine']} ({row['gain_kind']})",
                evidence,
                f"Move this workload off eager {row['engine']}: {row['recommendation']}. "
                f"Expected gain {gain:.1f}x ({row['gain_basis']}), about "
                f"{float(row['gpu_hours_saved']):.1f} of {float(row['gpu_hours']):.1f} "
                "GPU-hours saved at the same load.",
                impact(ctx, rows, allocated[rows] * saved),
                labels=labels,
            )
        )
    return out
