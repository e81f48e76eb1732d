"""input_bound: the GPU waits for data (host CPU saturated, data wait high, SM swinging)."""

from __future__ import annotations

import numpy as np

from gpulens.findings.columns import floats, in_states
from gpulens.findings.context import Context
from gpulens.findings.model import Evidence, Finding, which_held
from gpulens.findings.runs import finding, hours, mean, qualifying
from gpulens.numbers import is_nan

RULE_ID = "input_bound"


def check(ctx: Context) -> list[Finding]:
    """Runs of `input_bound` intervals, with the input pipeline's numbers and DataLoader fixes."""
    th = ctx.states
    waiting = floats(ctx, "data_wait")  # the data wait where reported, else the host CPU
    starved = np.where(np.isnan(waiting), floats(ctx, "host_cpu"), waiting)
    out = []
    for run in qualifying(ctx, RULE_ID, in_states(ctx, RULE_ID), signal=starved):
        sm = mean(ctx, "sm_active", run)
        wait, cpu = mean(ctx, "data_wait", run), mean(ctx, "host_cpu", run)
        iowait = mean(ctx, "host_iowait", run)
        swing = mean(ctx, "sm_active_max", run) - mean(ctx, "sm_active_min", run)
        # the state's activity: SM active, else graphics-engine active, else duty cycle
        act, act_name = sm, "sm_active"
        for name in ("graphics_active", "duty"):
            if is_nan(act):
                act, act_name = mean(ctx, name, run), name
        # starved: the data wait where reported, else a saturated host CPU with gaps (SM
        # swinging, or a duty cycle below busy)
        gaps = [
            Evidence("sm_active_swing", swing, th.sm_swing, ">=", "max - min within an interval")
        ]
        if act_name != "duty":
            duty = mean(ctx, "duty", run)
            gaps.append(Evidence("duty", duty, th.duty_busy, "<", "gaps between kernels"))
        evidence = [
            *which_held(
                Evidence(act_name, act, th.sm_good, "<", "DCGM: >= 0.8 needed for good use")
            ),
            *which_held(
                Evidence(
                    "data_wait", wait, th.data_wait_high, ">=", "share of the step spent waiting"
                ),
                Evidence("host_cpu", cpu, th.host_cpu_saturated, ">=", "host CPU busy ratio"),
            ),
            Evidence("host_iowait", iowait),
            *which_held(*gaps),
        ]
        fix = advice(cpu, iowait, th.host_cpu_saturated)
        what = f"data wait {wait:.0%}" if not is_nan(wait) else f"host CPU {cpu:.0%}"
        out.append(
            finding(
                ctx,
                RULE_ID,
                run,
                f"input-bound for {hours(run.duration_s)}: SM active {sm:.2f} with {what}",
                evidence,
                fix,
                level=ctx.thresholds.level(RULE_ID, run.duration_s),
            )
        )
    return out


def advice(cpu: float, iowait: float, cpu_saturated: float) -> str:
    """The fix for an input-bound job: DataLoader settings, then what the host CPU and I/O wait
    (NaN when unmeasured) say about whether more workers can help."""
    loader = (
        "Feed the GPU faster: `DataLoader(num_workers=<CPU cores per GPU>, pin_memory=True, "
        "persistent_workers=True, prefetch_factor=4)` and `.to(device, non_blocking=True)`."
    )
    if not is_nan(cpu) and cpu >= cpu_saturated:
        more = (
            f" The host CPU is already {cpu:.0%} busy, so more workers will not help alone: "
            "decode and augment on the GPU (NVIDIA DALI, torchvision.io.decode_jpeg on "
            "device), store pre-processed data (WebDataset shards, smaller images) or ask "
            "for more CPU cores per GPU."
        )
    else:
        more = " The host CPU has room, so raising `num_workers` is the first step."
    if not is_nan(iowait) and iowait >= 0.1:
        more += f" I/O wait is {iowait:.0%}: cache the dataset on local NVMe."
    return loader + more
