"""hollow_busy: the duty cycle says busy, the SMs say otherwise (tiny kernels, launch-bound)."""

from __future__ import annotations

import numpy as np

from gpulens.findings.advice import batch_advice, engine_of, optimised
from gpulens.findings.columns import floats, in_states
from gpulens.findings.context import Context
from gpulens.findings.model import Evidence, Finding, which_held
from gpulens.findings.runs import finding, hours, mean, qualifying
from gpulens.numbers import is_nan

RULE_ID = "hollow_busy"


def check(ctx: Context) -> list[Finding]:
    """Runs of `hollow_busy` intervals."""
    th = ctx.states
    # what sets the state apart: a busy duty cycle, SMs (else graphics engine) not
    sms = floats(ctx, "sm_active")
    hollow = floats(ctx, "duty") - np.where(np.isnan(sms), floats(ctx, "graphics_active"), sms)
    out = []
    for run in qualifying(ctx, RULE_ID, in_states(ctx, RULE_ID), signal=hollow):
        rows = run.rows
        duty = mean(ctx, "duty", run)
        sm = mean(ctx, "sm_active", run)
        sm_name = "sm_active"
        if is_nan(sm):
            sm, sm_name = mean(ctx, "graphics_active", run), "graphics_active"
        launches = mean(ctx, "kernel_launches_per_s", run)
        engine = engine_of(ctx, rows)
        evidence = [
            Evidence("duty", duty, th.duty_busy, ">=", "nvidia-smi GPU-Util"),
            *which_held(
                Evidence(sm_name, sm, th.sm_low, "<", "DCGM: < 0.5 is likely ineffective use")
            ),
            Evidence("tensor_active", mean(ctx, "tensor_active", run)),
            Evidence("kernel_launches_per_s", launches),
        ]
        if optimised(ctx, engine):
            fix = "Batch more requests per forward pass (dynamic batching) to fill the SMs."
        else:
            fix = (
                "Remove launch overhead: capture the step in CUDA graphs "
                '(`torch.compile(mode="reduce-overhead")`) or, for inference, build a TensorRT '
                "engine with FP16 (see engine_migration)."
            )
        out.append(
            finding(
                ctx,
                RULE_ID,
                run,
                f"duty cycle {duty:.0%} but {sm_name.replace('_', ' ')} {sm:.0%} for "
                f"{hours(run.duration_s)}: kernels too small or launches too sparse",
                evidence,
                f"The GPU reports {duty:.0%} busy while only {sm:.0%} of its SMs work. "
                f"{batch_advice(ctx, rows)} {fix}",
                level=ctx.thresholds.level(RULE_ID, run.duration_s),
            )
        )
    return out
