"""idle_allocated: a job holds GPU memory while its GPUs do no work. Its ladder (config
`findings.idle_allocated.*_minutes`): info from 10 min, warning from 60 min, critical from
120 min (jobstats: 60 min warns, 120 min is actionable)."""

from __future__ import annotations

import numpy as np

from gpulens.findings.columns import floats, in_states
from gpulens.findings.context import Context
from gpulens.findings.model import Evidence, Finding, which_held
from gpulens.findings.runs import finding, gb, hours, mean, peak, qualifying

RULE_ID = "idle_allocated"


def check(ctx: Context) -> list[Finding]:
    """Runs of `idle_allocated` intervals lasting `idle_info_s`, at the ladder's severity."""
    t = ctx.thresholds
    need = t.duration_for(RULE_ID)
    act = np.fmax(floats(ctx, "duty"), floats(ctx, "sm_active"))
    out = []
    # with the idle share of the state-change intervals, read from the activity
    for run in qualifying(ctx, RULE_ID, in_states(ctx, RULE_ID), need, act):
        rows = run.rows
        activity = mean(ctx, act, run)
        held = np.fmax(
            peak(ctx, "memory_used_bytes", rows), peak(ctx, "process_memory_bytes", rows)
        )
        level = t.level(RULE_ID, run.duration_s)
        evidence = [
            Evidence("activity", activity, ctx.states.idle_activity, "<=", "max(duty, SM active)"),
            *which_held(Evidence("duty", mean(ctx, "duty", run), t.util_red, "<", "jobstats red")),
            # held: more than the driver's memory in use, or a process on the GPU
            *which_held(
                Evidence("memory_held_bytes", held, ctx.states.idle_memory_bytes, ">"),
                Evidence("processes", peak(ctx, "processes", rows), 0.0, ">"),
            ),
            Evidence("idle_seconds", run.duration_s, need, ">=", "long enough to report")
            if run.duration_s >= need
            else Evidence("idle_seconds", run.duration_s, note="all the frame shows of it"),
        ]
        out.append(
            finding(
                ctx,
                RULE_ID,
                run,
                f"GPU held idle for {hours(run.duration_s)}: activity {activity:.2f} while "
                f"holding {gb(held)}",
                evidence,
                f"Release the GPU when it is not computing: end the idle session or job (it held "
                f"{gb(held)} for {hours(run.duration_s)} at activity {activity:.2f}). For "
                "notebooks turn on the idle culler (JupyterHub `cull_idle_timeout`, or "
                "`c.MappingKernelManager.cull_idle_timeout = 1800`); for batch and interactive "
                f"jobs set an idle timeout that reclaims a GPU left at 0 % for "
                f"{t.idle_warn_s / 60:.0f} min.",
                level=level,
            )
        )
    return out
