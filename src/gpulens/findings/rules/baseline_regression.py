"""baseline_regression: useful work dropped after a driver, CUDA or framework version change."""

from __future__ import annotations

import numpy as np

from gpulens.analyze.version_changes import compare_version_changes
from gpulens.findings.columns import ends, starts, strings
from gpulens.findings.context import Context
from gpulens.findings.model import Evidence, Finding, Severity
from gpulens.findings.runs import Run, finding, impact

RULE_ID = "baseline_regression"


def check(ctx: Context) -> list[Finding]:
    """One finding per (version change, workload) `compare_version_changes` calls a
    regression; needs the event table."""
    if ctx.events is None or ctx.events.num_rows == 0:
        return []
    s, t = ctx.baselines, ctx.thresholds
    table = compare_version_changes(ctx.frame, ctx.events, s)
    start, end = starts(ctx), ends(ctx)
    window = int(s.version_window_s * 1e9)
    host, gpu, job = (strings(ctx, c) for c in ("host", "gpu_uuid", "job_id"))
    useful = np.asarray(ctx.frame.column("useful_s").to_numpy(zero_copy_only=False), dtype=float)
    out = []
    for row in table.to_pylist():
        if not row["regression"]:
            continue
        ts = int(row["ts"])
        after = (start >= ts) & (start < ts + window)
        for col, want in ((host, row["host"]), (gpu, row["gpu_uuid"]), (job, row["job_id"])):
            if want is not None:
                after &= np.array([v == want for v in col], dtype=bool)
        rows = np.flatnonzero(after)
        if rows.size == 0:
            continue
        before_m, after_m = float(row["before_median"]), float(row["after_median"])
        drop = -float(row["relative_change"])
        # the useful work lost: what the rows would have done at the old median, per row
        lost = np.nan_to_num(useful[rows]) * (before_m / after_m - 1.0) if after_m > 0 else None
        cost = impact(ctx, rows, lost)
        run = Run(rows, ts, int(end[rows].max()), False)
        change = f"{row['event']} changed from {row['previous']} to {row['current']}"
        evidence = [
            Evidence(f"{row['metric']}_before", before_m, note=f"median, n={row['before_n']}"),
            Evidence(f"{row['metric']}_after", after_m, note=f"median, n={row['after_n']}"),
            Evidence("relative_change", -drop, -s.regression_drop, "<="),
            Evidence("p_value", float(row["p_value"]), s.alpha, "<", "Mann-Whitney, optimistic"),
        ]
        level = Severity.CRITICAL if drop >= t.regression_critical_drop else Severity.WARNING
        out.append(
            finding(
                ctx,
                RULE_ID,
                run,
                f"{row['metric']} fell {drop:.0%} ({before_m:.2f} → {after_m:.2f}) after {change}",
                evidence,
                f"Roll back to {row['previous']} (pin the version in the image or module) "
                f"while you confirm: profile one step before and after (`nsys profile` or "
                "`torch.profiler`) and compare kernel times; report the regression upstream "
                "with both profiles.",
                cost,
                level=level,
                labels={"workload": str(row["workload"]), "event": str(row["event"])},
            )
        )
    return out
